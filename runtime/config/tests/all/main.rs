//! The integration tests of troupe-config, gathered in one test binary.

mod config_documented_keys;
mod config_load;
mod config_spec_example;
