//! The permission engine (placeholder until it lands).
