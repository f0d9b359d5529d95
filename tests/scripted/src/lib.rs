//! The scripted model server (placeholder).
