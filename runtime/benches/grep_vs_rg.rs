//! Benchmark: the grep tool against the ripgrep binary.
fn main() {}
