//! The integration tests of troupe-checkpoint, gathered in one test binary:
//! real git, temporary directories, no network.

mod checkpoint_bounds;
mod checkpoint_patches;
mod checkpoint_restore;
mod checkpoint_skips;
mod checkpoint_support;
mod checkpoint_user_git;
