//! SSE parsing benchmark (placeholder).
fn main() {}
