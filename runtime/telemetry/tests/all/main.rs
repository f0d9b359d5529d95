//! The integration tests of troupe-telemetry, gathered in one test binary.

mod telemetry_otlp;
mod telemetry_support;
mod telemetry_tree;
mod test_helpers_feature;
