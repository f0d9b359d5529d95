//! The daemon's HTTP API (`troupe serve`) as types: the body of every
//! request a client sends and of every answer the daemon gives, which the
//! daemon reads and writes and its client (the `troupe` command) writes and
//! reads, so both sides speak one description of the wire.
//!
//! The API is versioned by its path: every endpoint but the health check
//! lies below [`PATH_PREFIX`] (`/v1`), and a change that old clients could
//! not read would come under a new prefix. The bodies carry no version of
//! their own.
//!
//! Readers tolerate fields they do not know, so a newer peer may add some;
//! optional fields are read as absent whether they are missing or `null`.
//! (The daemon is stricter with the requests that start or steer runs: it
//! refuses fields it does not know rather than ignore what a client asked
//! for.) Timestamps are RFC 3339 text, as in the events; every event of a
//! run's stream is a [`RunEvent`](crate::events::RunEvent). The fields of
//! the daemon's answers are declared in alphabetical order, the order it has
//! always written them in.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

use crate::events::{ApprovalOutcome, RunStatus};
use crate::model::Message;
use crate::permission::PermissionMode;
use crate::task_plan::TaskStep;

/// The path every versioned endpoint lies below (`/v1/runs`, …).
pub const PATH_PREFIX: &str = "/v1";

/// The health check's path; the one endpoint that needs no token.
pub const HEALTH_PATH: &str = "/healthz";

/// `GET /healthz`: the daemon is up, and how busy it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// The daemon's process id.
    pub pid: u32,
    /// Runs in progress; `null` when the runtime could not say.
    #[serde(default)]
    pub runs_in_progress: Option<usize>,
    /// Sessions whose history is held in memory; `null` when the runtime
    /// could not say.
    #[serde(default)]
    pub sessions_in_memory: Option<usize>,
    /// Always `ok`.
    pub status: String,
    /// The daemon's version.
    pub version: String,
}

/// What `GET /v1/daemon` answers: the daemon itself and the settings it runs
/// with (`troupe daemon status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonStatus {
    /// Its process id.
    pub pid: u32,
    /// Its version.
    pub version: String,
    /// The TCP address it listens on.
    pub addr: String,
    /// Its Unix socket, when it has one.
    #[serde(default)]
    pub socket: Option<String>,
    /// The data directory it owns.
    pub data_dir: String,
    /// When it started (RFC 3339).
    pub started: String,
    /// Seconds since it started.
    pub uptime_secs: u64,
    /// Runs in progress; `null` when the runtime could not say.
    #[serde(default)]
    pub runs_in_progress: Option<usize>,
    /// Clients holding a connection open (event streams, open chats).
    pub open_clients: usize,
    /// It exits after this many seconds with nothing to do; `null`: never.
    #[serde(default)]
    pub idle_exit_secs: Option<u64>,
    /// Where it exports spans (OTLP); `null`: nowhere but the local span
    /// store.
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
    /// Its log filter (`TROUPE_LOG`).
    pub log_filter: String,
    /// Further host names requests may use (`--allow-host`).
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Why the daemon before this one ended, when it ended because a store
    /// write hung (one sentence); `null` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_stall: Option<String>,
    /// The cluster it is a node of (`troupe serve --cluster`); absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterConnection>,
}

/// A node's link to its cluster, in [`DaemonStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConnection {
    /// The node's name.
    pub node: String,
    /// The NATS server's URL, its secret masked.
    pub url: String,
    /// Whether the node is connected to the server now (`false` while its
    /// client reconnects: new runs are refused with 503 meanwhile).
    pub connected: bool,
}

/// `POST /v1/runs`: a run to start. The configuration is read for `cwd` with
/// the environment in `env`, so the run behaves as it would embedded in the
/// client's shell, whichever shell started the daemon; without `env`, with
/// the daemon's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRequest {
    /// The task.
    pub prompt: String,
    /// Continue this session (an id or a unique prefix) instead of starting
    /// a new one.
    #[serde(default)]
    pub session_id: Option<String>,
    /// The working directory (absolute): the project the run works on.
    pub cwd: PathBuf,
    /// When continuing a session, work in the session's own directory if it
    /// still exists, and in `cwd` only otherwise (as `troupe run --session`
    /// without `--cwd` does).
    #[serde(default)]
    pub keep_session_cwd: bool,
    /// The permission mode (`default`, `accept-edits`, `plan`, `bypass`);
    /// the configured one when absent.
    #[serde(default, deserialize_with = "permission_mode")]
    pub mode: Option<PermissionMode>,
    /// The provider entry; the configured one when absent.
    #[serde(default)]
    pub provider: Option<String>,
    /// The model id; the configured one when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// Limits for this run.
    #[serde(default)]
    pub limits: RunLimits,
    /// The client's environment variables (provider keys and endpoints,
    /// `HOME`, `XDG_CONFIG_HOME`, what commands inherit).
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// Someone answers approvals through the API; without, the agent is
    /// told nobody can approve and a call that needs approval is denied.
    #[serde(default)]
    pub interactive: bool,
    /// A git repository (`https://`, `ssh://`, `user@host:path`, or
    /// `file://` where the node allows it) that the node running the run
    /// checks out at `revision` into a workspace of its own, which is then
    /// the run's working directory instead of `cwd`.
    #[serde(default)]
    pub repository: Option<String>,
    /// The branch, tag or commit of `repository` to check out.
    #[serde(default)]
    pub revision: Option<String>,
}

/// The limits a client may set on a run; each falls back to the
/// configuration when absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLimits {
    /// The turn limit.
    #[serde(default)]
    pub max_turns: Option<u32>,
    /// The token budget.
    #[serde(default)]
    pub budget_tokens: Option<u64>,
    /// The wall-clock limit in seconds.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// Reads a permission mode by its command-line name, saying which names
/// there are when it is none of them.
fn permission_mode<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<PermissionMode>, D::Error> {
    let Some(name) = Option::<String>::deserialize(deserializer)? else {
        return Ok(None);
    };
    PermissionMode::parse(&name).map(Some).ok_or_else(|| {
        D::Error::custom(format!(
            "unknown mode {name:?} (expected default, accept-edits, plan or bypass)"
        ))
    })
}

/// The answer to `POST /v1/runs` (`201`): the run started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCreated {
    /// The run.
    pub run_id: String,
    /// The session it works in.
    pub session_id: String,
    /// Start-up warnings the run's configuration produced (the lines
    /// `troupe run` prints before a run).
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// Where a run stands: in progress, or how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// In progress (or its process died and nobody has marked it yet).
    Running,
    /// The model finished its answer.
    Finished,
    /// A limit stopped the run.
    Stopped,
    /// Someone cancelled the run.
    Cancelled,
    /// A provider or runtime error ended the run.
    Error,
    /// The process died while the run was active.
    Interrupted,
}

impl From<RunStatus> for RunState {
    fn from(status: RunStatus) -> Self {
        match status {
            RunStatus::Finished => Self::Finished,
            RunStatus::Stopped => Self::Stopped,
            RunStatus::Cancelled => Self::Cancelled,
            RunStatus::Error => Self::Error,
            RunStatus::Interrupted => Self::Interrupted,
        }
    }
}

/// One run as `GET /v1/runs` lists it and `GET /v1/runs/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSummary {
    /// Its agents, shown for one run while it is in progress; absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<AgentSummary>>,
    /// When it ended (RFC 3339); `null` while it runs.
    #[serde(default)]
    pub ended: Option<String>,
    /// The cluster node that runs it; absent when the daemon is not part of
    /// a cluster (and while a queued run waits for a node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The prompt as submitted.
    pub prompt: String,
    /// The run id.
    pub run_id: String,
    /// The session it belongs to.
    pub session_id: String,
    /// When it started (RFC 3339).
    pub started: String,
    /// Running, or how it ended.
    pub status: RunState,
    /// The stop reason once ended (`end_turn`, `max_turns`, …); `null`
    /// before.
    #[serde(default)]
    pub stop_reason: Option<String>,
}

/// `GET /v1/cluster`: the cluster a daemon belongs to, its nodes and its
/// runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// The node that answered.
    pub node: String,
    /// The NATS server it is connected to (credentials masked).
    pub url: String,
    /// The nodes with a record, by name.
    pub nodes: Vec<ClusterNode>,
    /// Every run of the cluster, newest first.
    pub runs: Vec<RunSummary>,
}

/// One node as `GET /v1/cluster` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterNode {
    /// Its name.
    pub node: String,
    /// The most runs it runs at once.
    pub capacity: u32,
    /// The runs it runs now.
    pub running: Vec<String>,
    /// It takes no new runs.
    pub draining: bool,
    /// Its last heartbeat (RFC 3339).
    pub heartbeat: String,
    /// Its last heartbeat is older than the lease.
    pub stale: bool,
    /// Where its API listens.
    pub addr: String,
}

/// One agent of a run in progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentSummary {
    /// Messages in its history.
    pub history_len: usize,
    /// Where it sits in the run's agent tree (`main`, `main/explorer-1`).
    pub path: String,
    /// Approval ids waiting for an answer.
    #[serde(default)]
    pub pending_approvals: Vec<String>,
    /// What it is doing: `idle`, `saving`, `compacting`, `streaming`,
    /// `executing`, `awaiting_approval`, `hooking`, `cancelling`, `done`.
    pub phase: String,
    /// Turns taken.
    pub turns: u32,
}

/// `GET /v1/runs`: every run, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunList {
    /// The runs.
    pub runs: Vec<RunSummary>,
}

/// The answer to `POST /v1/runs/{id}/cancel`: the run is being cancelled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCancelling {
    /// Always `true`.
    pub cancelling: bool,
    /// The run.
    pub run_id: String,
}

/// `POST /v1/runs/{id}/approvals/{approval_id}`: the answer to an
/// `approval_requested` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalAnswer {
    /// `allow`, `allow_always` (also read as `allow-always`), `deny` or
    /// `cancel`.
    #[serde(deserialize_with = "approval_outcome")]
    pub outcome: ApprovalOutcome,
    /// Why it was denied, passed to the model; for a server's question, the
    /// field values as a JSON object in text.
    #[serde(default)]
    pub reason: Option<String>,
}

/// Reads an approval outcome in either spelling the command line accepts,
/// saying which outcomes there are when it is none of them.
fn approval_outcome<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<ApprovalOutcome, D::Error> {
    let name = String::deserialize(deserializer)?;
    ApprovalOutcome::parse(&name).ok_or_else(|| {
        D::Error::custom(format!(
            "outcome {name:?}: expected allow, allow_always, deny or cancel"
        ))
    })
}

/// The answer to `POST /v1/runs/{id}/approvals/{approval_id}`: the answer
/// reached the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalAnswered {
    /// The approval answered.
    pub approval_id: String,
    /// The outcome given.
    pub outcome: ApprovalOutcome,
}

/// `POST /v1/runs/{id}/messages`: text the person wrote while the run works,
/// for its main agent's next model call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunMessage {
    /// What the person wrote (not blank).
    pub text: String,
}

/// The answer to `POST /v1/runs/{id}/messages` (`202`): the run took the
/// text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageQueued {
    /// Always `true`.
    pub queued: bool,
    /// The run.
    pub run_id: String,
}

/// A session's fork base: the session holding the beginning it shares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionFork {
    /// How many of its messages the fork shares.
    pub len: u64,
    /// The session holding the shared beginning.
    pub session: String,
}

/// One stored session as `GET /v1/sessions` lists it (the fields of
/// `troupe sessions list --json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSummary {
    /// Where a child session's agent sits in its run's agent tree; `null`
    /// for a top-level session.
    #[serde(default)]
    pub agent_path: Option<String>,
    /// When the session was created (RFC 3339).
    pub created: String,
    /// The working directory.
    pub cwd: PathBuf,
    /// For a fork: the session and length its history begins with.
    #[serde(default)]
    pub fork_of: Option<SessionFork>,
    /// The session id.
    pub id: String,
    /// Messages in the full history.
    pub message_count: u64,
    /// The model id.
    pub model: String,
    /// The parent session of a sub-agent's or a fork's transcript; `null`
    /// for a top-level session.
    #[serde(default)]
    pub parent: Option<String>,
    /// The provider name.
    pub provider: String,
    /// The run that created a child session; `null` for a top-level
    /// session.
    #[serde(default)]
    pub run_id: Option<String>,
    /// The first user message, shortened; empty until there is one.
    pub title: String,
    /// When a message was last written (RFC 3339).
    pub updated: String,
}

/// `GET /v1/sessions`: the stored sessions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionList {
    /// The sessions.
    pub sessions: Vec<SessionSummary>,
}

/// `GET /v1/sessions/{id}`: one session, its runs and its conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionDetail {
    /// The conversation as the model sees it.
    pub messages: Vec<Message>,
    /// Its runs.
    pub runs: Vec<RunSummary>,
    /// The session.
    pub session: SessionSummary,
}

/// `GET /v1/sessions/{id}/plan`: the task plans of a session's agents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionPlans {
    /// Each agent's plan: the session's own agent first, then its
    /// sub-agents (breadth first, oldest first); agents that made no plan
    /// are left out.
    pub plans: Vec<AgentPlan>,
    /// The session.
    pub session_id: String,
}

/// One agent's task plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentPlan {
    /// Where the agent sits in its run's tree (`main`, `main/explorer-1`).
    pub agent_path: String,
    /// Why the plan is as it is, when the model said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
    /// The steps, in order.
    pub plan: Vec<TaskStep>,
    /// The session holding the agent's transcript.
    pub session_id: String,
}

/// The answer to `DELETE /v1/sessions/{id}`: the session and its child
/// sessions are gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRemoved {
    /// Every session removed: it and its child sessions.
    #[serde(default)]
    pub removed: Vec<String>,
    /// The session removed (the whole id).
    pub session_id: String,
    /// What `troupe sessions rm` prints.
    pub text: String,
}

/// `POST /v1/sessions/{id}/rewind`: go back to the end of the session's
/// run `to` (1-based, in start order); the conversation, the files, or both
/// (both when neither flag is given).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RewindSession {
    /// The run whose end the session goes back to.
    pub to: u64,
    /// Cut the conversation back.
    #[serde(default = "yes")]
    pub conversation: bool,
    /// Restore the files.
    #[serde(default = "yes")]
    pub code: bool,
    /// Restore over files changed outside Troupe since the last checkpoint.
    #[serde(default)]
    pub force: bool,
}

/// The default of a flag that is on unless it is turned off.
fn yes() -> bool {
    true
}

/// The answer to `POST /v1/sessions/{id}/rewind`: what was done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRewound {
    /// The session (the whole id; it keeps it).
    pub session_id: String,
    /// The run it went back to.
    pub to_run: u64,
    /// The branch session keeping the conversation from before, when the
    /// conversation was cut.
    #[serde(default)]
    pub branch: Option<String>,
    /// How many messages were removed.
    #[serde(default)]
    pub removed_messages: u64,
    /// The runs undone (moved to the branch), oldest first.
    #[serde(default)]
    pub undone_runs: Vec<String>,
    /// What `troupe rewind` prints.
    pub text: String,
}

/// `POST /v1/sessions/{id}/compact`: the directory and environment the
/// configuration is read with, as for a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactRequest {
    /// The client's working directory (absolute); the session's own
    /// directory is used while it exists.
    pub cwd: PathBuf,
    /// The provider entry; the configured one when absent.
    #[serde(default)]
    pub provider: Option<String>,
    /// The model id; the configured one when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// The client's environment variables.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
}

/// The answer to `POST /v1/sessions/{id}/compact`, once the summary is
/// stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCompacted {
    /// The estimated tokens after.
    pub after_tokens: u64,
    /// The estimated tokens before.
    pub before_tokens: u64,
    /// The run that made the summary (its events hold the `compaction`
    /// events).
    pub run_id: String,
    /// The session compacted (the whole id).
    pub session_id: String,
    /// What `troupe sessions compact` prints.
    pub text: String,
}

/// `POST /v1/views`: a read-only view of the store, rendered exactly as the
/// command line prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "view", rename_all = "snake_case")]
pub enum View {
    /// `sessions list [--json] [--all] [--tree] [--limit N]`.
    SessionsList {
        /// One JSON object per line.
        json: bool,
        /// Only the sessions whose directory is this project root or below
        /// it; every project's when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        project: Option<PathBuf>,
        /// Child sessions (sub-agents' and forks') too.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        tree: bool,
        /// At most this many sessions, the most recently updated.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<usize>,
    },
    /// `sessions show ID`.
    SessionShow {
        /// A session id or a unique prefix of one.
        id: String,
    },
    /// `sessions export ID`.
    SessionExport {
        /// A session id or a unique prefix of one.
        id: String,
    },
    /// `runs list [--json]`.
    RunsList {
        /// One JSON object per line.
        json: bool,
    },
    /// `runs show ID`.
    RunShow {
        /// A run id or a unique prefix of one.
        id: String,
    },
    /// `trace RUN`.
    Trace {
        /// A run id or a unique prefix of one.
        run: String,
    },
    /// `rewind SESSION` (its runs, numbered) or, with `to`, what
    /// `rewind SESSION --to N` would change.
    Rewind {
        /// A session id or a unique prefix of one.
        id: String,
        /// The run to go back to.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<u64>,
    },
}

/// The answer to `POST /v1/views`: what rendering the view produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rendered {
    /// The exit code.
    pub code: u8,
    /// What goes to stdout.
    pub stdout: String,
    /// What goes to stderr (an error message).
    pub stderr: String,
}

/// Every error answer: `{"error": {"code": …, "message": …}}`, with the
/// matching HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorAnswer {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The inside of an [`ErrorAnswer`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// A stable code for programs: `bad_request`, `unauthorized`,
    /// `forbidden`, `not_found`, `conflict`, `payload_too_large`,
    /// `invalid_request`, `internal`, `model_error`, `unavailable`.
    #[serde(default)]
    pub code: String,
    /// What went wrong and what to do, for people.
    pub message: String,
}

/// What an event stream sends in place of an event that could not be
/// written as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamError {
    /// Why the event could not be written.
    pub error: String,
}

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;
    use serde_json::{Value, json};

    use super::*;
    use crate::model::{ContentBlock, Role};

    /// `value` is written as `expected`, and `expected` reads back as
    /// `value`, also with a field the reader does not know.
    fn pins<T>(value: &T, expected: Value)
    where
        T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        assert_eq!(serde_json::to_value(value).unwrap(), expected);
        let back: T = serde_json::from_value(expected.clone()).unwrap();
        assert_eq!(&back, value);
        let mut extended = expected;
        if let Value::Object(fields) = &mut extended {
            fields.insert("added_later".into(), json!({"any": [1, 2]}));
        }
        let tolerant: T = serde_json::from_value(extended).unwrap();
        assert_eq!(&tolerant, value);
    }

    fn run_summary() -> RunSummary {
        RunSummary {
            run_id: "r1".into(),
            session_id: "s1".into(),
            prompt: "fix it".into(),
            status: RunState::Finished,
            stop_reason: Some("end_turn".into()),
            started: "2026-11-01T09:30:00Z".into(),
            ended: Some("2026-11-01T09:31:02.5Z".into()),
            agents: None,
            node: None,
        }
    }

    fn session_summary() -> SessionSummary {
        SessionSummary {
            id: "s1".into(),
            title: "Explore the parser".into(),
            cwd: "/repo".into(),
            provider: "claude".into(),
            model: "claude-sonnet-4-5".into(),
            created: "2026-11-01T09:30:00Z".into(),
            updated: "2026-11-01T09:30:00Z".into(),
            message_count: 1,
            parent: None,
            agent_path: None,
            run_id: None,
            fork_of: None,
        }
    }

    #[test]
    fn the_versioned_paths_lie_below_v1() {
        assert_eq!(PATH_PREFIX, "/v1");
        assert_eq!(HEALTH_PATH, "/healthz");
    }

    #[test]
    fn health() {
        let health = Health {
            status: "ok".into(),
            version: "0.1.0".into(),
            pid: 4242,
            runs_in_progress: Some(1),
            sessions_in_memory: None,
        };
        pins(
            &health,
            json!({"status": "ok", "version": "0.1.0", "pid": 4242,
                   "runs_in_progress": 1, "sessions_in_memory": null}),
        );
        // Byte for byte as the daemon has always written it.
        assert_eq!(
            serde_json::to_string(&health).unwrap(),
            r#"{"pid":4242,"runs_in_progress":1,"sessions_in_memory":null,"status":"ok","version":"0.1.0"}"#
        );
    }

    #[test]
    fn run_request_as_the_command_line_sends_it() {
        let request = RunRequest {
            prompt: "fix it".into(),
            session_id: Some("0193".into()),
            cwd: "/work/project".into(),
            keep_session_cwd: false,
            mode: Some(PermissionMode::AcceptEdits),
            provider: None,
            model: Some("m".into()),
            limits: RunLimits {
                max_turns: Some(3),
                budget_tokens: None,
                timeout_secs: None,
            },
            env: Some(BTreeMap::from([("HOME".into(), "/home/me".into())])),
            interactive: true,
            repository: Some("https://example.org/r.git".into()),
            revision: Some("v1".into()),
        };
        pins(
            &request,
            json!({
                "prompt": "fix it",
                "session_id": "0193",
                "cwd": "/work/project",
                "keep_session_cwd": false,
                "mode": "accept-edits",
                "provider": null,
                "model": "m",
                "limits": {"max_turns": 3, "budget_tokens": null, "timeout_secs": null},
                "env": {"HOME": "/home/me"},
                "interactive": true,
                "repository": "https://example.org/r.git",
                "revision": "v1",
            }),
        );
    }

    #[test]
    fn a_minimal_run_request_defaults_the_rest() {
        let request: RunRequest =
            serde_json::from_value(json!({"prompt": "hi", "cwd": "/tmp"})).unwrap();
        assert_eq!(request.session_id, None);
        assert_eq!(request.mode, None);
        assert_eq!(request.limits, RunLimits::default());
        assert_eq!(request.env, None);
        assert!(!request.keep_session_cwd);
        assert!(!request.interactive);
        let nulls: RunRequest = serde_json::from_value(
            json!({"prompt": "hi", "cwd": "/tmp", "mode": null, "session_id": null}),
        )
        .unwrap();
        assert_eq!(nulls, request);
    }

    #[test]
    fn an_unknown_mode_names_the_modes() {
        let err = serde_json::from_value::<RunRequest>(
            json!({"prompt": "x", "cwd": "/", "mode": "yolo"}),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("unknown mode \"yolo\" (expected default, accept-edits, plan or bypass)"),
            "{err}"
        );
    }

    #[test]
    fn run_created() {
        pins(
            &RunCreated {
                run_id: "r1".into(),
                session_id: "s1".into(),
                warnings: vec!["a setting has no effect".into()],
            },
            json!({"run_id": "r1", "session_id": "s1", "warnings": ["a setting has no effect"]}),
        );
    }

    #[test]
    fn runs_listed_and_shown() {
        pins(
            &RunList {
                runs: vec![run_summary()],
            },
            json!({"runs": [{
                "run_id": "r1", "session_id": "s1", "prompt": "fix it",
                "status": "finished", "stop_reason": "end_turn",
                "started": "2026-11-01T09:30:00Z", "ended": "2026-11-01T09:31:02.5Z",
            }]}),
        );
        let running = RunSummary {
            status: RunState::Running,
            stop_reason: None,
            ended: None,
            agents: Some(vec![AgentSummary {
                path: "main".into(),
                phase: "awaiting_approval".into(),
                turns: 2,
                history_len: 5,
                pending_approvals: vec!["a1".into()],
            }]),
            ..run_summary()
        };
        pins(
            &running,
            json!({
                "run_id": "r1", "session_id": "s1", "prompt": "fix it",
                "status": "running", "stop_reason": null,
                "started": "2026-11-01T09:30:00Z", "ended": null,
                "agents": [{"path": "main", "phase": "awaiting_approval", "turns": 2,
                            "history_len": 5, "pending_approvals": ["a1"]}],
            }),
        );
    }

    #[test]
    fn run_states_use_the_status_names() {
        for status in [
            RunStatus::Finished,
            RunStatus::Stopped,
            RunStatus::Cancelled,
            RunStatus::Error,
            RunStatus::Interrupted,
        ] {
            assert_eq!(
                serde_json::to_value(RunState::from(status)).unwrap(),
                status.as_str()
            );
        }
        assert_eq!(serde_json::to_value(RunState::Running).unwrap(), "running");
    }

    #[test]
    fn cancelling() {
        pins(
            &RunCancelling {
                run_id: "r1".into(),
                cancelling: true,
            },
            json!({"run_id": "r1", "cancelling": true}),
        );
        assert_eq!(
            serde_json::to_string(&RunCancelling {
                run_id: "r1".into(),
                cancelling: true,
            })
            .unwrap(),
            r#"{"cancelling":true,"run_id":"r1"}"#
        );
    }

    #[test]
    fn approval_answers() {
        pins(
            &ApprovalAnswer {
                outcome: ApprovalOutcome::Deny,
                reason: Some("use the staging database".into()),
            },
            json!({"outcome": "deny", "reason": "use the staging database"}),
        );
        pins(
            &ApprovalAnswer {
                outcome: ApprovalOutcome::AllowAlways,
                reason: None,
            },
            json!({"outcome": "allow_always", "reason": null}),
        );
        let hyphen: ApprovalAnswer =
            serde_json::from_value(json!({"outcome": "allow-always"})).unwrap();
        assert_eq!(hyphen.outcome, ApprovalOutcome::AllowAlways);
        assert_eq!(hyphen.reason, None);
        let err =
            serde_json::from_value::<ApprovalAnswer>(json!({"outcome": "maybe"})).unwrap_err();
        assert!(
            err.to_string()
                .contains("outcome \"maybe\": expected allow, allow_always, deny or cancel"),
            "{err}"
        );
        pins(
            &ApprovalAnswered {
                approval_id: "a1".into(),
                outcome: ApprovalOutcome::AllowAlways,
            },
            json!({"approval_id": "a1", "outcome": "allow_always"}),
        );
    }

    #[test]
    fn messages() {
        pins(
            &RunMessage {
                text: "use the staging database".into(),
            },
            json!({"text": "use the staging database"}),
        );
        pins(
            &MessageQueued {
                run_id: "r1".into(),
                queued: true,
            },
            json!({"run_id": "r1", "queued": true}),
        );
    }

    #[test]
    fn sessions_listed_and_shown() {
        pins(
            &SessionList {
                sessions: vec![session_summary()],
            },
            json!({"sessions": [{
                "id": "s1", "title": "Explore the parser", "cwd": "/repo",
                "provider": "claude", "model": "claude-sonnet-4-5",
                "created": "2026-11-01T09:30:00Z", "updated": "2026-11-01T09:30:00Z",
                "message_count": 1, "parent": null, "agent_path": null,
                "run_id": null, "fork_of": null,
            }]}),
        );
        let fork = SessionSummary {
            parent: Some("s0".into()),
            fork_of: Some(SessionFork {
                session: "s0".into(),
                len: 4,
            }),
            ..session_summary()
        };
        let written = serde_json::to_value(&fork).unwrap();
        assert_eq!(written["fork_of"], json!({"session": "s0", "len": 4}));
        let detail = SessionDetail {
            session: session_summary(),
            runs: vec![run_summary()],
            messages: vec![Message {
                role: Role::User,
                content: vec![ContentBlock::Text { text: "hi".into() }],
            }],
        };
        let written = serde_json::to_value(&detail).unwrap();
        assert_eq!(written["session"]["id"], "s1");
        assert_eq!(written["runs"][0]["status"], "finished");
        assert_eq!(
            written["messages"][0],
            serde_json::to_value(&detail.messages[0]).unwrap()
        );
        pins(&detail, written);
    }

    #[test]
    fn removing_a_session() {
        pins(
            &SessionRemoved {
                session_id: "s1".into(),
                removed: vec!["s1".into(), "c1".into()],
                text: "removed session s1 and its 1 child session".into(),
            },
            json!({"session_id": "s1", "removed": ["s1", "c1"],
                   "text": "removed session s1 and its 1 child session"}),
        );
    }

    #[test]
    fn the_plans_of_a_session() {
        use crate::task_plan::{StepStatus, TaskStep};
        pins(
            &SessionPlans {
                session_id: "s1".into(),
                plans: vec![
                    AgentPlan {
                        agent_path: "main".into(),
                        explanation: Some("why".into()),
                        plan: vec![TaskStep {
                            step: "Fix".into(),
                            status: StepStatus::InProgress,
                            active_form: Some("Fixing".into()),
                        }],
                        session_id: "s1".into(),
                    },
                    AgentPlan {
                        agent_path: "main/fork-1".into(),
                        explanation: None,
                        plan: vec![],
                        session_id: "c1".into(),
                    },
                ],
            },
            json!({"session_id": "s1", "plans": [
                {"agent_path": "main", "explanation": "why", "session_id": "s1",
                 "plan": [{"step": "Fix", "status": "in_progress", "active_form": "Fixing"}]},
                {"agent_path": "main/fork-1", "session_id": "c1", "plan": []}
            ]}),
        );
    }

    #[test]
    fn compacting_a_session() {
        pins(
            &CompactRequest {
                cwd: "/work/project".into(),
                provider: None,
                model: None,
                env: Some(BTreeMap::from([("HOME".into(), "/home/me".into())])),
            },
            json!({"cwd": "/work/project", "provider": null, "model": null,
                   "env": {"HOME": "/home/me"}}),
        );
        let bare: CompactRequest = serde_json::from_value(json!({"cwd": "/p"})).unwrap();
        assert_eq!((bare.provider, bare.model, bare.env), (None, None, None));
        pins(
            &SessionCompacted {
                session_id: "s1".into(),
                run_id: "r2".into(),
                before_tokens: 61234,
                after_tokens: 9120,
                text: "Compacted the conversation: about 61234 tokens before, 9120 after.".into(),
            },
            json!({"session_id": "s1", "run_id": "r2", "before_tokens": 61234,
                   "after_tokens": 9120,
                   "text": "Compacted the conversation: about 61234 tokens before, 9120 after."}),
        );
    }

    #[test]
    fn views() {
        pins(
            &View::SessionsList {
                json: false,
                project: None,
                tree: false,
                limit: None,
            },
            json!({"view": "sessions_list", "json": false}),
        );
        pins(
            &View::SessionsList {
                json: true,
                project: Some("/repo".into()),
                tree: true,
                limit: Some(3),
            },
            json!({"view": "sessions_list", "json": true, "project": "/repo", "tree": true, "limit": 3}),
        );
        pins(
            &View::SessionShow { id: "0193".into() },
            json!({"view": "session_show", "id": "0193"}),
        );
        pins(
            &View::SessionExport { id: "0193".into() },
            json!({"view": "session_export", "id": "0193"}),
        );
        pins(
            &View::RunsList { json: true },
            json!({"view": "runs_list", "json": true}),
        );
        pins(
            &View::RunShow { id: "r1".into() },
            json!({"view": "run_show", "id": "r1"}),
        );
        pins(
            &View::Trace {
                run: "0193a1".into(),
            },
            json!({"view": "trace", "run": "0193a1"}),
        );
        pins(
            &Rendered {
                code: 0,
                stdout: "no runs yet\n".into(),
                stderr: String::new(),
            },
            json!({"code": 0, "stdout": "no runs yet\n", "stderr": ""}),
        );
    }

    #[test]
    fn errors() {
        let answer = ErrorAnswer {
            error: ErrorDetail {
                code: "not_found".into(),
                message: "no run 01a2".into(),
            },
        };
        pins(
            &answer,
            json!({"error": {"code": "not_found", "message": "no run 01a2"}}),
        );
        assert_eq!(
            serde_json::to_string(&answer).unwrap(),
            r#"{"error":{"code":"not_found","message":"no run 01a2"}}"#
        );
        let read: ErrorAnswer = serde_json::from_value(
            json!({"error": {"message": "no run 01a2", "hint": "list the runs"}}),
        )
        .unwrap();
        assert_eq!(read.error.message, "no run 01a2");
        assert_eq!(read.error.code, "");
        pins(
            &StreamError {
                error: "key must be a string".into(),
            },
            json!({"error": "key must be a string"}),
        );
    }
}
