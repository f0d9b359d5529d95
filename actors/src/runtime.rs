//! The runtime actor: the root of the supervision tree. It starts
//! runs — an event log and a run actor (`run`) per run, both linked to
//! it — keeps each session between its runs (history in memory, one run at a
//! time), routes cancellations and approvals to the run, and outlives any
//! failure below it: a run that fails ends with an error event instead of
//! taking the process down.
//!
//! A session is compacted on request by a run of its own whose only job is
//! the summary ([`Runtime::compact`]): the same loop, events and store
//! writes as any compaction, and the same rule of one run per session.
//!
//! [`Runtime`] is the handle front doors (the CLI, the daemon, tests) use.

use std::collections::HashMap;
use std::sync::Arc;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::sync::oneshot;
use troupe_agent::session::{Transcript, keep_idle_session};
use troupe_agent::{AgentStatus, Approver, RunOutcome};
use troupe_config::Limits;
use troupe_loader::open_session;
use troupe_permissions::PermissionEngine;
use troupe_protocol::events::{ApprovalOutcome, EventKind, RunEvent, RunStatus};
use troupe_protocol::model::{Message, Usage};
use troupe_protocol::permission::PermissionMode;
use troupe_store::{NewSession, Store, StoreError};

use crate::env::AgentEnv;
use crate::event_log::{EventLog, EventLogArgs, EventLogMsg, EventSink, LiveEvents, live_events};
use crate::hook_gate::SessionOpening;
use crate::run::{COMPACT_PROMPT, RunActor, RunArgs, RunJob, RunMsg, SessionState};
use crate::subscription::EventSubscription;

/// Errors of the runtime handle.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The runtime actor could not start.
    #[error("the runtime could not start: {0}")]
    Start(String),
    /// The runtime actor is gone.
    #[error("the runtime is not running")]
    Gone,
    /// No such run (it may have ended).
    #[error("no running run {0}")]
    UnknownRun(String),
    /// No agent with this path in the run.
    #[error("no running agent {0} in this run")]
    UnknownAgent(String),
    /// No approval with this id waits in the run.
    #[error("no approval {0} is waiting in this run")]
    UnknownApproval(String),
    /// A run could not start.
    #[error("the run could not start: {0}")]
    RunStart(String),
    /// No session with this id exists.
    #[error("no session {0}; list sessions with `troupe sessions list`")]
    UnknownSession(String),
    /// The session already has a run in progress.
    #[error("session {0} already has a run in progress; wait for it or cancel it")]
    SessionBusy(String),
    /// A UserPromptSubmit hook blocked the text.
    #[error("a UserPromptSubmit hook blocked the message: {0}")]
    HookBlocked(String),
    /// The session's history is too short to compact.
    #[error(
        "session {0} is too short to compact: all of it would be kept verbatim as the recent part"
    )]
    NothingToCompact(String),
    /// The store refused a read or write.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Which session a run belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionTarget {
    /// A new session, with this id when given.
    New(Option<String>),
    /// An existing session: kept in memory since its last run, or its stored
    /// history (repaired).
    Continue(String),
}

/// What a front door submits.
pub struct RunSubmission {
    /// The user's message.
    pub prompt: String,
    /// The session: a new one, or one to continue.
    pub session: SessionTarget,
    /// The agents' environment.
    pub env: Arc<AgentEnv>,
    /// The permission engine (the session's "always" rules are added to it).
    pub permissions: PermissionEngine,
    /// Permission mode for this run.
    pub mode: PermissionMode,
    /// Limits of this run.
    pub limits: Limits,
    /// Who answers approvals.
    pub approver: Approver,
}

/// A started run.
pub struct RunHandle {
    /// Run id.
    pub run_id: String,
    /// Session id.
    pub session_id: String,
    /// Every event of the run, from the first (bounded memory, however
    /// slowly it is read).
    pub events: EventSubscription,
    /// The outcome, once the run ends.
    pub outcome: oneshot::Receiver<RunOutcome>,
}

/// Where a session's history is.
pub(crate) enum HistorySource {
    /// In memory.
    Messages(Vec<Message>),
    /// With the run in progress.
    Run(ActorRef<RunMsg>),
    /// Only in the store.
    Stored,
}

/// Messages of the runtime actor.
pub(crate) enum RuntimeMsg {
    /// Start a run.
    Submit(
        Box<(RunSubmission, RunJob)>,
        RpcReplyPort<Result<RunHandle, RuntimeError>>,
    ),
    /// The run actor of a run in progress.
    Run(String, RpcReplyPort<Option<ActorRef<RunMsg>>>),
    /// The ids of the runs in progress.
    Running(RpcReplyPort<Vec<String>>),
    /// What the runtime holds.
    Stats(RpcReplyPort<RuntimeStats>),
    /// A receiver of the live events of a run in progress.
    LiveEvents(
        String,
        RpcReplyPort<Option<tokio::sync::broadcast::Receiver<Arc<RunEvent>>>>,
    ),
    /// Where a session's history is.
    History(String, RpcReplyPort<HistorySource>),
    /// Remove a session that has no run in progress, from memory and store.
    RemoveSession(String, RpcReplyPort<Result<Vec<String>, RuntimeError>>),
    /// A run ended (sent by its run actor).
    RunEnded {
        run_id: String,
        outcome: RunOutcome,
        session: Option<SessionState>,
    },
}

struct RunEntry {
    session_id: String,
    run: ActorRef<RunMsg>,
    log: ActorRef<EventLogMsg>,
    live: LiveEvents,
    outcome: Option<oneshot::Sender<RunOutcome>>,
}

/// A session the runtime knows.
enum SessionSlot {
    /// A run is in progress.
    Running(String),
    /// Between runs.
    Idle(SessionState),
}

/// How long, beyond the store's confirmation deadline, the runtime waits for
/// an ended run's event log to store its last events.
const LOG_DRAIN_MARGIN: std::time::Duration = std::time::Duration::from_secs(5);

/// State of the runtime actor.
pub(crate) struct RuntimeState {
    store: Store,
    runs: HashMap<String, RunEntry>,
    run_actors: HashMap<ActorId, String>,
    sessions: HashMap<String, SessionSlot>,
    /// How long an idle session's history stays in memory.
    keep_idle: chrono::Duration,
}

/// How long a session's history stays in memory after its run, so that the
/// next message continues it without reading the store. Older ones are
/// reopened from the store when continued: a long-lived daemon's memory does
/// not grow with every session it ever ran.
pub const KEEP_IDLE_SESSIONS: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// What the runtime holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Runs in progress.
    pub runs_in_progress: usize,
    /// Sessions whose history is in memory (running or idle).
    pub sessions_in_memory: usize,
}

/// The runtime actor.
pub(crate) struct RuntimeActor;

impl Actor for RuntimeActor {
    type Msg = RuntimeMsg;
    type State = RuntimeState;
    type Arguments = (Store, std::time::Duration);

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        (store, keep_idle): (Store, std::time::Duration),
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(RuntimeState {
            store,
            runs: HashMap::new(),
            run_actors: HashMap::new(),
            sessions: HashMap::new(),
            keep_idle: chrono::Duration::from_std(keep_idle).unwrap_or(chrono::Duration::MAX),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            RuntimeMsg::Submit(submission, reply) => {
                let (submission, job) = *submission;
                let result = state.submit(&myself, submission, job).await;
                let _ = reply.send(result);
            }
            RuntimeMsg::Run(run_id, reply) => {
                let _ = reply.send(state.runs.get(&run_id).map(|run| run.run.clone()));
            }
            RuntimeMsg::Running(reply) => {
                let _ = reply.send(state.runs.keys().cloned().collect());
            }
            RuntimeMsg::Stats(reply) => {
                let _ = reply.send(RuntimeStats {
                    runs_in_progress: state.runs.len(),
                    sessions_in_memory: state.sessions.len(),
                });
            }
            RuntimeMsg::LiveEvents(run_id, reply) => {
                let _ = reply.send(state.runs.get(&run_id).map(|run| run.live.subscribe()));
            }
            RuntimeMsg::History(session_id, reply) => {
                let source = match state.sessions.get(&session_id) {
                    Some(SessionSlot::Idle(session)) => {
                        HistorySource::Messages(session.transcript.messages().to_vec())
                    }
                    Some(SessionSlot::Running(run_id)) => match state.runs.get(run_id) {
                        Some(run) => HistorySource::Run(run.run.clone()),
                        None => HistorySource::Stored,
                    },
                    None => HistorySource::Stored,
                };
                let _ = reply.send(source);
            }
            RuntimeMsg::RemoveSession(session_id, reply) => {
                let result = match state.sessions.get(&session_id) {
                    Some(SessionSlot::Running(_)) => Err(RuntimeError::SessionBusy(session_id)),
                    _ => {
                        // In this handler, so no run can continue the session
                        // between leaving memory and leaving the store.
                        state.sessions.remove(&session_id);
                        state
                            .store
                            .remove_session(&session_id)
                            .map_err(RuntimeError::from)
                    }
                };
                let _ = reply.send(result);
            }
            RuntimeMsg::RunEnded {
                run_id,
                outcome,
                session,
            } => state.run_ended(&run_id, outcome, session).await,
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // The runtime never stops because something below it did.
        if let SupervisionEvent::ActorFailed(cell, err) = event {
            match state.run_actors.get(&cell.get_id()).cloned() {
                Some(run_id) => {
                    tracing::error!(%run_id, %err, "run failed");
                    if let Some(run) = state.runs.get(&run_id) {
                        let sink = EventSink::new(run.log.clone(), "main");
                        sink.emit(EventKind::Error {
                            kind: "run_failed".into(),
                            message: format!("the run failed: {err}"),
                        });
                        sink.emit(EventKind::RunFinished {
                            status: RunStatus::Error,
                            stop_reason: "run_failed".into(),
                            final_text: String::new(),
                            usage_total: Usage::default(),
                        });
                    }
                    state
                        .run_ended(
                            &run_id,
                            RunOutcome {
                                status: RunStatus::Error,
                                stop_reason: "run_failed".into(),
                                final_text: String::new(),
                                usage: Usage::default(),
                            },
                            None,
                        )
                        .await;
                }
                None => tracing::warn!(%err, "a runtime child failed"),
            }
        }
        Ok(())
    }
}

impl RuntimeState {
    async fn submit(
        &mut self,
        myself: &ActorRef<RuntimeMsg>,
        submission: RunSubmission,
        job: RunJob,
    ) -> Result<RunHandle, RuntimeError> {
        let (session_id, session, notice, opening) = self.open(&submission)?;
        if job == RunJob::Compact
            && !troupe_agent::compact::compactable(
                session.transcript.messages(),
                submission.env.context_window,
            )
        {
            // Refused before anything is recorded; the session stays as it was.
            self.sessions
                .insert(session_id.clone(), SessionSlot::Idle(session));
            return Err(RuntimeError::NothingToCompact(session_id));
        }
        for rule in &session.rules {
            if let Err(err) = submission.permissions.add_session_rule(rule.clone()) {
                tracing::warn!(%err, "a stored session rule was not restored");
            }
        }
        submission.permissions.set_mode(submission.mode);
        let run_id = uuid::Uuid::now_v7().to_string();
        let live = live_events();
        // Subscribed before the first event exists: the handle misses nothing.
        let events_rx =
            EventSubscription::live(self.store.clone(), run_id.clone(), 1, live.subscribe());
        let (log, _) = Actor::spawn_linked(
            None,
            EventLog,
            EventLogArgs {
                run_id: run_id.clone(),
                session_id: session_id.clone(),
                store: self.store.clone(),
                live: live.clone(),
            },
            myself.get_cell(),
        )
        .await
        .map_err(|err| RuntimeError::RunStart(err.to_string()))?;
        let events = EventSink::new(log.clone(), "main");
        // What opening the stored session repaired is told before the run starts.
        if let Some(text) = notice {
            events.emit(EventKind::notice(text));
        }
        let args = RunArgs {
            run_id: run_id.clone(),
            session_id: session_id.clone(),
            prompt: match job {
                RunJob::Prompt => submission.prompt,
                RunJob::Compact => COMPACT_PROMPT.to_string(),
            },
            job,
            env: submission.env,
            permissions: Arc::new(submission.permissions),
            limits: submission.limits,
            approver: submission.approver,
            session,
            opening,
            events,
            runtime: myself.clone(),
        };
        let run = match Actor::spawn_linked(None, RunActor, args, myself.get_cell()).await {
            Ok((run, _)) => run,
            Err(err) => {
                self.sessions.remove(&session_id);
                log.stop(None);
                return Err(RuntimeError::RunStart(err.to_string()));
            }
        };
        let (outcome_tx, outcome_rx) = oneshot::channel();
        self.run_actors.insert(run.get_id(), run_id.clone());
        self.sessions
            .insert(session_id.clone(), SessionSlot::Running(run_id.clone()));
        self.runs.insert(
            run_id.clone(),
            RunEntry {
                session_id: session_id.clone(),
                run,
                log,
                live,
                outcome: Some(outcome_tx),
            },
        );
        Ok(RunHandle {
            run_id,
            session_id,
            events: events_rx,
            outcome: outcome_rx,
        })
    }

    /// The session a submission runs in: created, kept from its last run, or
    /// opened from the store (with the notice of what was repaired), and how
    /// it was opened (for SessionStart hooks).
    fn open(
        &mut self,
        submission: &RunSubmission,
    ) -> Result<(String, SessionState, Option<String>, Option<SessionOpening>), RuntimeError> {
        match &submission.session {
            SessionTarget::New(id) => {
                let id = id
                    .clone()
                    .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
                self.store.create_session(&NewSession {
                    id: id.clone(),
                    cwd: submission.env.sandbox.project_root().to_path_buf(),
                    provider: submission.env.provider.name().to_string(),
                    model: submission.env.provider.model().to_string(),
                    parent: None,
                    agent_path: None,
                    run_id: None,
                    fork_of: None,
                })?;
                // Later runs of the session send the memory this one sends.
                let memory = submission
                    .env
                    .memory
                    .snapshot
                    .as_deref()
                    .unwrap_or_default();
                if let Err(err) = self.store.put_session_memory(&id, memory) {
                    tracing::warn!(%err, "the session's memory could not be kept with it");
                }
                Ok((
                    id,
                    SessionState::default(),
                    None,
                    Some(SessionOpening::Startup),
                ))
            }
            SessionTarget::Continue(id) => match self.sessions.remove(id) {
                Some(SessionSlot::Running(run_id)) => {
                    self.sessions
                        .insert(id.clone(), SessionSlot::Running(run_id));
                    Err(RuntimeError::SessionBusy(id.clone()))
                }
                Some(SessionSlot::Idle(session)) => Ok((id.clone(), session, None, None)),
                None => match open_session(&self.store, id)? {
                    Some(opened) => {
                        let notice = opened.repair_notice(id);
                        let session = SessionState {
                            transcript: Transcript::from_opened(&opened),
                            last_active: opened.last_updated,
                            rules: opened.rules,
                        };
                        Ok((id.clone(), session, notice, Some(SessionOpening::Resume)))
                    }
                    None => Err(RuntimeError::UnknownSession(id.clone())),
                },
            },
        }
    }

    /// A run ended: keep its session for the next run, hand out the outcome,
    /// let the log deliver what is queued and stop.
    /// Drops the histories of sessions idle for longer than `keep_idle`
    /// (they are reopened from the store when continued).
    fn forget_idle_sessions(&mut self) {
        let (now, keep) = (chrono::Utc::now(), self.keep_idle);
        self.sessions.retain(|_, slot| match slot {
            SessionSlot::Running(_) => true,
            SessionSlot::Idle(session) => keep_idle_session(session.last_active, now, keep),
        });
    }

    async fn run_ended(
        &mut self,
        run_id: &str,
        outcome: RunOutcome,
        session: Option<SessionState>,
    ) {
        self.forget_idle_sessions();
        // The run's last event is stored before the run is forgotten: a
        // subscriber that comes later reads `run_finished` from the store.
        // The log answers within the store's confirmation deadline.
        if let Some(run) = self.runs.get(run_id) {
            let limit = troupe_store::CONFIRM_DEADLINE + LOG_DRAIN_MARGIN;
            if let Err(err) = run.log.drain_and_wait(Some(limit)).await {
                tracing::warn!(%run_id, %err, "the run's event log did not finish in time");
            }
        }
        let Some(mut run) = self.runs.remove(run_id) else {
            return;
        };
        self.run_actors.retain(|_, id| id != run_id);
        match session {
            Some(session) => {
                self.sessions
                    .insert(run.session_id.clone(), SessionSlot::Idle(session));
            }
            // Reopened (and repaired) from the store next time.
            None => {
                self.sessions.remove(&run.session_id);
            }
        }
        if let Some(outcome_tx) = run.outcome.take() {
            let _ = outcome_tx.send(outcome);
        }
    }
}

/// The handle to a running runtime.
#[derive(Clone)]
pub struct Runtime {
    actor: ActorRef<RuntimeMsg>,
    store: Store,
}

impl Runtime {
    /// Starts the runtime actor over `store`, keeping idle sessions in
    /// memory for [`KEEP_IDLE_SESSIONS`].
    pub async fn start(store: Store) -> Result<Self, RuntimeError> {
        Self::start_keeping_idle_sessions(store, KEEP_IDLE_SESSIONS).await
    }

    /// Starts the runtime actor over `store`, keeping an idle session's
    /// history in memory for `keep` after its run.
    pub async fn start_keeping_idle_sessions(
        store: Store,
        keep: std::time::Duration,
    ) -> Result<Self, RuntimeError> {
        let (actor, _) = Actor::spawn(None, RuntimeActor, (store.clone(), keep))
            .await
            .map_err(|err| RuntimeError::Start(err.to_string()))?;
        Ok(Self { actor, store })
    }

    /// Starts a run.
    pub async fn submit(&self, submission: RunSubmission) -> Result<RunHandle, RuntimeError> {
        ractor::call!(
            self.actor,
            RuntimeMsg::Submit,
            Box::new((submission, RunJob::Prompt))
        )
        .map_err(|_| RuntimeError::Gone)?
    }

    /// Compacts a stored session now (manual compaction): a run whose only
    /// job is to summarise the older history of the session that
    /// `submission.session` continues (its `prompt` is not used). The run
    /// emits `compaction` events (trigger `manual`) and ends `finished` with
    /// stop reason `compacted`, or with an error when the summary could not
    /// be made. A session with a run in progress is
    /// [`RuntimeError::SessionBusy`]; one too short to cut is
    /// [`RuntimeError::NothingToCompact`], refused before any run starts.
    pub async fn compact(&self, submission: RunSubmission) -> Result<RunHandle, RuntimeError> {
        if !matches!(submission.session, SessionTarget::Continue(_)) {
            return Err(RuntimeError::RunStart(
                "only a stored session can be compacted".into(),
            ));
        }
        ractor::call!(
            self.actor,
            RuntimeMsg::Submit,
            Box::new((submission, RunJob::Compact))
        )
        .map_err(|_| RuntimeError::Gone)?
    }

    async fn run(&self, run_id: &str) -> Result<ActorRef<RunMsg>, RuntimeError> {
        ractor::call!(self.actor, RuntimeMsg::Run, run_id.to_string())
            .map_err(|_| RuntimeError::Gone)?
            .ok_or_else(|| RuntimeError::UnknownRun(run_id.to_string()))
    }

    /// Cancels a run: every agent, stream and process of its tree.
    pub async fn cancel(&self, run_id: &str) -> Result<(), RuntimeError> {
        self.run(run_id)
            .await?
            .cast(RunMsg::Cancel)
            .map_err(|_| RuntimeError::UnknownRun(run_id.to_string()))
    }

    /// Cancels one agent of a run by path (`main/fork-2`) and what runs below
    /// it; its parent goes on with an error result for that call.
    pub async fn cancel_agent(&self, run_id: &str, path: &str) -> Result<(), RuntimeError> {
        let run = self.run(run_id).await?;
        let path = path.to_string();
        run.call(|reply| RunMsg::CancelAgent { path, reply }, None)
            .await
            .map_err(|_| RuntimeError::UnknownRun(run_id.to_string()))?
            .success_or(RuntimeError::UnknownRun(run_id.to_string()))?
    }

    /// Answers an approval of a run, whichever agent of its tree asked.
    pub async fn approve(
        &self,
        run_id: &str,
        approval_id: &str,
        outcome: ApprovalOutcome,
        reason: Option<String>,
    ) -> Result<(), RuntimeError> {
        let run = self.run(run_id).await?;
        let approval_id = approval_id.to_string();
        run.call(
            |reply| RunMsg::Approve {
                approval_id,
                outcome,
                reason,
                reply,
            },
            None,
        )
        .await
        .map_err(|_| RuntimeError::UnknownRun(run_id.to_string()))?
        .success_or(RuntimeError::UnknownRun(run_id.to_string()))?
    }

    /// Hands text the person wrote to a run in progress: it joins the main
    /// agent's history before its next model call, announced by a
    /// `user_message` event. Text the run no longer takes (it is ending) gets
    /// no event.
    pub async fn send_message(&self, run_id: &str, text: &str) -> Result<(), RuntimeError> {
        let run = self.run(run_id).await?;
        let text = text.to_string();
        run.call(|reply| RunMsg::Message { text, reply }, None)
            .await
            .map_err(|_| RuntimeError::UnknownRun(run_id.to_string()))?
            .success_or(RuntimeError::UnknownRun(run_id.to_string()))?
    }

    /// Removes a session with no run in progress (and its child sessions)
    /// from memory and from the store; returns the ids removed. A session
    /// with a run in progress is [`RuntimeError::SessionBusy`].
    pub async fn remove_session(&self, session_id: &str) -> Result<Vec<String>, RuntimeError> {
        ractor::call!(
            self.actor,
            RuntimeMsg::RemoveSession,
            session_id.to_string()
        )
        .map_err(|_| RuntimeError::Gone)?
    }

    /// What every agent of a run in progress is doing, by path.
    pub async fn agents(&self, run_id: &str) -> Result<Vec<AgentStatus>, RuntimeError> {
        let run = self.run(run_id).await?;
        ractor::call!(run, RunMsg::Statuses)
            .map_err(|_| RuntimeError::UnknownRun(run_id.to_string()))
    }

    /// A session's history: live, kept since its last run, or stored.
    pub async fn history(&self, session_id: &str) -> Result<Vec<Message>, RuntimeError> {
        let ask = async || {
            ractor::call!(self.actor, RuntimeMsg::History, session_id.to_string())
                .map_err(|_| RuntimeError::Gone)
        };
        let mut source = ask().await?;
        if let HistorySource::Run(run) = source {
            match ractor::call!(run, RunMsg::History) {
                Ok(history) => return Ok(history),
                // The run ended meanwhile. It handed the session to the
                // runtime before it stopped, so asking again finds it kept.
                Err(_) => source = ask().await?,
            }
        }
        match source {
            HistorySource::Messages(messages) => Ok(messages),
            HistorySource::Run(_) => Err(RuntimeError::Gone),
            HistorySource::Stored => {
                if self.store.session(session_id)?.is_none() {
                    return Err(RuntimeError::UnknownSession(session_id.to_string()));
                }
                Ok(self.store.load_history(session_id)?.messages)
            }
        }
    }

    /// What the runtime holds now.
    pub async fn stats(&self) -> Result<RuntimeStats, RuntimeError> {
        ractor::call!(self.actor, RuntimeMsg::Stats).map_err(|_| RuntimeError::Gone)
    }

    /// The ids of the runs in progress.
    pub async fn running(&self) -> Result<Vec<String>, RuntimeError> {
        ractor::call!(self.actor, RuntimeMsg::Running).map_err(|_| RuntimeError::Gone)
    }

    /// Every event of a run from `from_seq` (1 = all), live while the run is
    /// in progress here, else from the store; a run the store does not know
    /// is [`RuntimeError::UnknownRun`].
    pub async fn subscribe(
        &self,
        run_id: &str,
        from_seq: u64,
    ) -> Result<EventSubscription, RuntimeError> {
        let live = ractor::call!(self.actor, RuntimeMsg::LiveEvents, run_id.to_string())
            .map_err(|_| RuntimeError::Gone)?;
        match live {
            Some(live) => Ok(EventSubscription::live(
                self.store.clone(),
                run_id.to_string(),
                from_seq,
                live,
            )),
            None if self.store.run(run_id)?.is_some() => Ok(EventSubscription::stored(
                self.store.clone(),
                run_id.to_string(),
                from_seq,
            )),
            None => Err(RuntimeError::UnknownRun(run_id.to_string())),
        }
    }

    /// Stops the runtime and everything under it.
    pub async fn shutdown(self) {
        self.actor.stop_children(None);
        let _ = self.actor.stop_and_wait(None, None).await;
    }
}
