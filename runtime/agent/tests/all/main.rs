//! The integration tests of troupe-agent, gathered in one test binary.

mod history_repair_props;
mod purity;
