//! The integration tests of troupe-permissions, gathered in one test binary.

mod security_permissions;
