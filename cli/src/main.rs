//! The `troupe` command.

fn main() {}
