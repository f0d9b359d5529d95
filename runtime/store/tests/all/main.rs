//! The integration tests of troupe-store, gathered in one test binary.

mod store_durability;
mod store_failures;
mod store_records;
mod store_rewind;
mod store_support;
