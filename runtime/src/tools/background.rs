//! Background shell tasks started with `run_in_background` (placeholder until
//! the background-task tools land).

/// The background shell tasks of one session.
#[derive(Debug, Default)]
pub struct BackgroundTasks {}

impl BackgroundTasks {
    /// An empty task table.
    pub fn new() -> Self {
        Self::default()
    }
}
