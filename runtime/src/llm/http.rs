//! Shared HTTP plumbing of the adapters (placeholder).
