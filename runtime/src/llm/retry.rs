//! Retry policy (placeholder).
