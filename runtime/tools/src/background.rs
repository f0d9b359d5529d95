//! Background shell tasks of one session (SPEC §4): `bash` with
//! `run_in_background` starts a command the same way as a foreground one (own
//! process group, reduced environment, stdin from /dev/null) but with no
//! timeout, and returns a task id at once. The task's whole output goes to a log
//! file in the spill directory as it arrives; readers get the tail within the
//! output limits. Killing a task stops its whole group (SIGTERM, SIGKILL after
//! 2 s). [`BackgroundTasks::shutdown`] stops every running task gracefully;
//! dropping the table SIGKILLs whatever still runs, so no task outlives its
//! session.
//!
//! The tools over this table (`task_output`, `task_list`, `task_kill`) live in
//! `tasks`; this module owns the processes only.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::output::{OutputCollector, OutputLimits, RenderedOutput, spill_file_name};
use troupe_process::os_sandbox::CommandSandbox;
use troupe_process::{Ending, KillOutcome, ProcessError, ProcessGroup};

/// Prefix of task ids (`task_1`) and of their log files.
const TASK_PREFIX: &str = "task";

/// Status of a background task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskStatus {
    /// Still running.
    Running,
    /// Exited by itself with this code.
    Exited(i32),
    /// Stopped by `task_kill` or shutdown; `forced` when SIGKILL was needed.
    Killed {
        /// True when the group outlived SIGTERM's grace period.
        forced: bool,
    },
    /// Ended by a signal it did not get from us.
    Signalled(i32),
    /// Its exit status could not be collected.
    Unknown,
}

impl TaskStatus {
    /// True while the task runs.
    pub fn is_running(&self) -> bool {
        matches!(self, TaskStatus::Running)
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TaskStatus::Running => f.write_str("running"),
            TaskStatus::Exited(code) => write!(f, "exited {code}"),
            TaskStatus::Killed { forced: false } => f.write_str("killed"),
            TaskStatus::Killed { forced: true } => {
                f.write_str("killed (SIGKILL after the grace period)")
            }
            TaskStatus::Signalled(signal) => write!(f, "killed by signal {signal}"),
            TaskStatus::Unknown => f.write_str("ended (exit status unknown)"),
        }
    }
}

/// A task as `task_list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskInfo {
    /// Task id (`task_1`).
    pub id: String,
    /// The command line.
    pub command: String,
    /// Current status.
    pub status: TaskStatus,
    /// Time since it started.
    pub elapsed: Duration,
}

/// A task's status and output so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSnapshot {
    /// What `task_list` shows.
    pub info: TaskInfo,
    /// The output, tail-limited, with the log file named when truncated.
    pub output: RenderedOutput,
    /// Bytes of output so far.
    pub output_bytes: u64,
}

#[derive(Debug)]
struct Task {
    id: String,
    command: String,
    started: Instant,
    group: Arc<ProcessGroup>,
    cancel: CancellationToken,
    state: Mutex<TaskState>,
    done: watch::Sender<bool>,
}

#[derive(Debug)]
struct TaskState {
    status: TaskStatus,
    output: OutputCollector,
}

impl Task {
    fn state(&self) -> MutexGuard<'_, TaskState> {
        // A panic while holding the lock cannot leave the state inconsistent
        // (every update is a single assignment or push): keep using it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn info(&self) -> TaskInfo {
        TaskInfo {
            id: self.id.clone(),
            command: self.command.clone(),
            status: self.state().status.clone(),
            elapsed: self.started.elapsed(),
        }
    }

    async fn wait_done(&self) -> TaskStatus {
        let mut done = self.done.subscribe();
        // `wait_for` fails only when the sender is gone, and `self` owns it.
        let _ = done.wait_for(|finished| *finished).await;
        self.state().status.clone()
    }
}

#[derive(Debug, Default)]
struct Table {
    next_id: u64,
    tasks: Vec<Arc<Task>>,
}

/// The background shell tasks of one session.
#[derive(Debug, Default)]
pub struct BackgroundTasks {
    table: Mutex<Table>,
}

impl BackgroundTasks {
    /// An empty task table.
    pub fn new() -> Self {
        Self::default()
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        // Updates are single pushes: a poisoned table is still consistent.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn find(&self, id: &str) -> Option<Arc<Task>> {
        self.table().tasks.iter().find(|t| t.id == id).cloned()
    }

    /// Starts `bash -c COMMAND` in `cwd` with exactly `env`, confined by
    /// `sandbox`, as a background task whose log goes to `spill_dir`; returns
    /// its id. Needs a Tokio runtime.
    pub fn start(
        &self,
        command: &str,
        cwd: &Path,
        env: &[(String, String)],
        spill_dir: &Path,
        sandbox: &CommandSandbox,
    ) -> Result<String, ProcessError> {
        let mut shell = troupe_process::spawn_shell_confined(command, cwd, env, sandbox)?;
        let (id, task) = {
            let mut table = self.table();
            table.next_id += 1;
            let id = format!("{TASK_PREFIX}_{}", table.next_id);
            // The start time keeps log names unique across resumed sessions.
            let stamp = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or_default();
            let log = spill_dir.join(spill_file_name(TASK_PREFIX, &format!("{id}-{stamp}")));
            let (done, _) = watch::channel(false);
            let task = Arc::new(Task {
                id: id.clone(),
                command: command.to_string(),
                started: Instant::now(),
                group: Arc::clone(&shell.group),
                cancel: CancellationToken::new(),
                state: Mutex::new(TaskState {
                    status: TaskStatus::Running,
                    output: OutputCollector::eager(log, OutputLimits::COMMAND),
                }),
                done,
            });
            table.tasks.push(Arc::clone(&task));
            (id, task)
        };
        tracing::debug!(task = %id, pgid = task.group.id(), "background task started");
        tokio::spawn(async move {
            let outcome = troupe_process::drive(&mut shell, None, &task.cancel, |chunk| {
                task.state().output.push(chunk);
            })
            .await;
            let status = match (outcome.ending, outcome.status) {
                (Ending::Cancelled, _) => TaskStatus::Killed {
                    forced: outcome.stopped == Some(KillOutcome::Killed),
                },
                (_, Some(status)) => match (status.code(), status.signal()) {
                    (Some(code), _) => TaskStatus::Exited(code),
                    (None, Some(signal)) => TaskStatus::Signalled(signal),
                    (None, None) => TaskStatus::Unknown,
                },
                (_, None) => TaskStatus::Unknown,
            };
            let set_aside = shell.group.set_aside_created_protected();
            {
                let mut state = task.state();
                for done in set_aside {
                    let note = format!("\n[{}]\n", done.note("task"));
                    state.output.push(note.as_bytes());
                }
                state.output.flush();
                state.status = status;
            }
            tracing::debug!(task = %task.id, "background task ended");
            task.done.send_replace(true);
        });
        Ok(id)
    }

    /// Status and output so far of task `id`.
    pub fn snapshot(&self, id: &str) -> Option<TaskSnapshot> {
        let task = self.find(id)?;
        let info = task.info();
        let state = task.state();
        Some(TaskSnapshot {
            info,
            output: state.output.render(),
            output_bytes: state.output.total_bytes(),
        })
    }

    /// Every task, oldest first.
    pub fn list(&self) -> Vec<TaskInfo> {
        let tasks: Vec<Arc<Task>> = self.table().tasks.clone();
        tasks.iter().map(|t| t.info()).collect()
    }

    /// Ids of every task, oldest first.
    pub fn ids(&self) -> Vec<String> {
        self.table().tasks.iter().map(|t| t.id.clone()).collect()
    }

    /// Stops task `id` (its whole group: SIGTERM, SIGKILL after 2 s) and
    /// returns its final status; a task that already ended keeps its status.
    /// `None` for an unknown id.
    pub async fn kill(&self, id: &str) -> Option<TaskStatus> {
        let task = self.find(id)?;
        task.cancel.cancel();
        Some(task.wait_done().await)
    }

    /// Waits until task `id` ends and returns its status.
    pub async fn wait(&self, id: &str) -> Option<TaskStatus> {
        let task = self.find(id)?;
        Some(task.wait_done().await)
    }

    /// Stops every running task gracefully and waits for them.
    pub async fn shutdown(&self) {
        let tasks: Vec<Arc<Task>> = self.table().tasks.clone();
        for task in &tasks {
            task.cancel.cancel();
        }
        for task in &tasks {
            task.wait_done().await;
        }
    }
}

impl Drop for BackgroundTasks {
    fn drop(&mut self) {
        let table = self.table.get_mut().unwrap_or_else(PoisonError::into_inner);
        for task in &table.tasks {
            task.cancel.cancel();
            if task.group.has_live_members() {
                tracing::debug!(task = %task.id, "killing background task of a dropped session");
                task.group.kill_now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_texts() {
        assert_eq!(TaskStatus::Running.to_string(), "running");
        assert_eq!(TaskStatus::Exited(2).to_string(), "exited 2");
        assert_eq!(TaskStatus::Killed { forced: false }.to_string(), "killed");
        assert_eq!(TaskStatus::Signalled(9).to_string(), "killed by signal 9");
    }

    #[tokio::test]
    async fn task_runs_reports_and_is_listed() {
        let dir = tempfile::tempdir().unwrap();
        let tasks = BackgroundTasks::new();
        let id = tasks
            .start(
                "echo hi; exit 4",
                dir.path(),
                &[],
                &dir.path().join("spill"),
                &CommandSandbox::off(),
            )
            .unwrap();
        assert_eq!(id, "task_1");
        assert_eq!(tasks.wait(&id).await, Some(TaskStatus::Exited(4)));
        let snap = tasks.snapshot(&id).unwrap();
        assert_eq!(snap.output.text, "hi\n");
        assert_eq!(tasks.list()[0].command, "echo hi; exit 4");
        assert!(tasks.snapshot("task_9").is_none());
        assert!(tasks.kill("task_9").await.is_none());
    }

    #[tokio::test]
    async fn kill_stops_the_group() {
        let dir = tempfile::tempdir().unwrap();
        let tasks = BackgroundTasks::new();
        let id = tasks
            .start(
                "sleep 300 & sleep 300",
                dir.path(),
                &[],
                dir.path(),
                &CommandSandbox::off(),
            )
            .unwrap();
        let pgid = tasks.find(&id).unwrap().group.id();
        assert_eq!(
            tasks.kill(&id).await,
            Some(TaskStatus::Killed { forced: false })
        );
        assert!(!troupe_process::group_has_live_members(pgid as libc::pid_t));
        // Killing again keeps the status.
        assert_eq!(
            tasks.kill(&id).await,
            Some(TaskStatus::Killed { forced: false })
        );
    }
}
