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
use troupe_agent::session::{OpenedSession, Transcript};
use troupe_agent::slots::{Admission, SessionSlots};
use troupe_agent::{AgentStatus, RunOutcome};
use troupe_loader::open_session;
use troupe_protocol::events::{ApprovalOutcome, EventKind, RunEvent, RunStatus};
use troupe_protocol::model::{Message, Usage};
use troupe_store::{
    ConversationRewind, NewSession, RewindRefusal, RewindRequest, Store, StoreError,
};

use crate::api::{
    RunHandle, RunSubmission, RuntimeError, RuntimeStats, SessionTarget, SubmitReply,
};
use crate::event_log::{EventLog, EventLogArgs, EventLogMsg, EventSink, LiveEvents, live_events};
use crate::hook_gate::SessionOpening;
use crate::port::Port;
use crate::run::{
    COMPACT_PROMPT, NewSessionWrite, RunActor, RunArgs, RunEnded, RunJob, RunMsg, SessionState,
    SubmitAnswer,
};
use crate::subscription::EventSubscription;

/// Where a session's history is.
pub(crate) enum HistorySource {
    /// In memory.
    Messages(Vec<Message>),
    /// With the run in progress.
    Run(ActorRef<RunMsg>),
    /// Only in the store.
    Stored,
}

/// A submission with what the run does, the id it is to have and the `seq`
/// of its first event (a new id and 1 when `None`) and the parent of its
/// spans.
pub(crate) type Submitted = (RunSubmission, RunJob, Option<(String, u64)>, tracing::Span);

/// Messages of the runtime actor.
pub(crate) enum RuntimeMsg {
    /// Start a run.
    Submit(Box<Submitted>, SubmitReply),
    /// The stored session a submission continues was read (and repaired) on
    /// the store's writer thread.
    Opened {
        submission: Box<Submitted>,
        reply: SubmitReply,
        session_id: String,
        opened: Result<Option<OpenedSession>, StoreError>,
    },
    /// The time an ended run's event log had to store its last events is
    /// over.
    LogOverdue(String),
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
    /// Rewrite a stored session that has no run in progress: it leaves
    /// memory, and the rewrite runs on the store's writer thread.
    RewriteSession(
        String,
        SessionRewrite,
        RpcReplyPort<Result<(), RuntimeError>>,
    ),
    /// Rewind the conversation of a session that has no run in progress:
    /// it leaves memory, and the store cuts it (on its writer thread).
    Rewind(
        Box<RewindRequest>,
        RpcReplyPort<Result<ConversationRewind, RuntimeError>>,
    ),
    /// A run's session is free for its next run (sent by its run actor
    /// before `run_finished` is emitted).
    SessionFree {
        run_id: String,
        session: Option<SessionState>,
    },
    /// A run ended (sent by its run actor).
    RunEnded { run_id: String, outcome: RunOutcome },
}

struct RunEntry {
    session_id: String,
    run: ActorRef<RunMsg>,
    log: ActorRef<EventLogMsg>,
    live: LiveEvents,
    outcome: Option<oneshot::Sender<RunOutcome>>,
    /// The run ended: its outcome, handed out once its log stored its last
    /// events.
    ended: Option<RunOutcome>,
    /// The run handed its session back: the session is free.
    session_free: bool,
}

/// How a submission's session was found.
struct Prepared {
    session_id: String,
    session: SessionState,
    /// What opening the stored session repaired, told before the run starts.
    notice: Option<String>,
    opening: Option<SessionOpening>,
    /// The new session the run's first write creates.
    create: Option<NewSessionWrite>,
}

/// How long, beyond the store's confirmation deadline, the runtime waits for
/// an ended run's event log to store its last events.
const LOG_DRAIN_MARGIN: std::time::Duration = std::time::Duration::from_secs(5);

/// State of the runtime actor.
pub(crate) struct RuntimeState {
    store: Store,
    runs: HashMap<String, RunEntry>,
    run_actors: HashMap<ActorId, String>,
    /// The runs of the event logs, by the logs' actors.
    log_actors: HashMap<ActorId, String>,
    sessions: SessionSlots,
}

/// How long a session's history stays in memory after its run, so that the
/// next message continues it without reading the store. Older ones are
/// reopened from the store when continued: a long-lived daemon's memory does
/// not grow with every session it ever ran.
pub const KEEP_IDLE_SESSIONS: std::time::Duration = std::time::Duration::from_secs(15 * 60);

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
            log_actors: HashMap::new(),
            sessions: SessionSlots::new(
                chrono::Duration::from_std(keep_idle).unwrap_or(chrono::Duration::MAX),
            ),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            RuntimeMsg::Submit(submission, reply) => state.submit(&myself, submission, reply).await,
            RuntimeMsg::Opened {
                submission,
                reply,
                session_id,
                opened,
            } => {
                state
                    .opened(&myself, submission, reply, session_id, opened)
                    .await;
            }
            RuntimeMsg::LogOverdue(run_id) => {
                if state
                    .runs
                    .get(&run_id)
                    .is_some_and(|run| run.ended.is_some())
                {
                    tracing::warn!(%run_id, "the run's event log did not finish in time");
                    state.finish_run(&run_id);
                }
            }
            RuntimeMsg::Run(run_id, reply) => {
                let _ = reply.send(state.runs.get(&run_id).map(|run| run.run.clone()));
            }
            RuntimeMsg::Running(reply) => {
                let _ = reply.send(state.runs.keys().cloned().collect());
            }
            RuntimeMsg::Stats(reply) => {
                let _ = reply.send(RuntimeStats {
                    runs_in_progress: state.runs.values().filter(|r| r.ended.is_none()).count(),
                    sessions_in_memory: state.sessions.len(),
                });
            }
            RuntimeMsg::LiveEvents(run_id, reply) => {
                let _ = reply.send(state.runs.get(&run_id).map(|run| run.live.subscribe()));
            }
            RuntimeMsg::History(session_id, reply) => {
                let source = match state.sessions.history(&session_id) {
                    Ok(session) => HistorySource::Messages(session.transcript.messages().to_vec()),
                    Err(Some(run_id)) => match state.runs.get(run_id) {
                        Some(run) => HistorySource::Run(run.run.clone()),
                        None => HistorySource::Stored,
                    },
                    Err(None) => HistorySource::Stored,
                };
                let _ = reply.send(source);
            }
            RuntimeMsg::RemoveSession(session_id, reply) => {
                state.remove_session(session_id, reply);
            }
            RuntimeMsg::RewriteSession(session_id, rewrite, reply) => {
                state.rewrite_session(session_id, rewrite, reply);
            }
            RuntimeMsg::Rewind(request, reply) => state.rewind_session(*request, reply),
            RuntimeMsg::SessionFree { run_id, session } => state.free_session(&run_id, session),
            RuntimeMsg::RunEnded { run_id, outcome } => {
                state.run_ended(&myself, &run_id, outcome, None);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // The runtime never stops because something below it did.
        if let SupervisionEvent::ActorTerminated(cell, _, _)
        | SupervisionEvent::ActorFailed(cell, _) = &event
            && let Some(run_id) = state.log_actors.remove(&cell.get_id())
        {
            // An ended run's log stored its last events (or failed): the
            // run is over.
            if state
                .runs
                .get(&run_id)
                .is_some_and(|run| run.ended.is_some())
            {
                state.finish_run(&run_id);
            }
            return Ok(());
        }
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
                    state.run_ended(
                        &myself,
                        &run_id,
                        RunOutcome {
                            status: RunStatus::Error,
                            stop_reason: "run_failed".into(),
                            final_text: String::new(),
                            usage: Usage::default(),
                        },
                        None,
                    );
                }
                None => tracing::warn!(%err, "a runtime child failed"),
            }
        }
        Ok(())
    }
}

impl RuntimeState {
    /// Admits a submission to its session. A new session or one kept in
    /// memory starts at once; a stored one is read and repaired on the
    /// store's writer thread, which answers with [`RuntimeMsg::Opened`]: this
    /// handler never waits for the disk.
    async fn submit(
        &mut self,
        myself: &ActorRef<RuntimeMsg>,
        submission: Box<Submitted>,
        reply: SubmitReply,
    ) {
        if let Some((run_id, _)) = &submission.2
            && self.runs.contains_key(run_id)
        {
            let _ = reply.send(Err(RuntimeError::Store(StoreError::AlreadyExists {
                what: format!("run {run_id}"),
            })));
            return;
        }
        let prepared = match &submission.0.session {
            SessionTarget::New(id) => {
                let id = id
                    .clone()
                    .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
                if !self.sessions.new_session(&id) {
                    let _ = reply.send(Err(RuntimeError::Store(StoreError::AlreadyExists {
                        what: format!("session {id}"),
                    })));
                    return;
                }
                let env = &submission.0.env;
                // Later runs of the session send the memory this one sends.
                let memory = env.memory.snapshot.clone().unwrap_or_default();
                Prepared {
                    create: Some(NewSessionWrite {
                        session: NewSession {
                            id: id.clone(),
                            cwd: env.sandbox.project_root().to_path_buf(),
                            provider: env.provider.name().to_string(),
                            model: env.provider.model().to_string(),
                            parent: None,
                            agent_path: None,
                            run_id: None,
                            fork_of: None,
                        },
                        memory,
                    }),
                    session_id: id,
                    session: SessionState::default(),
                    notice: None,
                    opening: Some(SessionOpening::Startup),
                }
            }
            SessionTarget::Continue(id) => match self.sessions.continue_session(id) {
                Admission::Busy => {
                    let _ = reply.send(Err(RuntimeError::SessionBusy(id.clone())));
                    return;
                }
                Admission::Kept(session) => Prepared {
                    session_id: id.clone(),
                    session,
                    notice: None,
                    opening: None,
                    create: None,
                },
                Admission::FromStore => {
                    let id = id.clone();
                    self.open_stored(myself, id, submission, reply);
                    return;
                }
            },
        };
        self.start_run(myself, submission, reply, prepared).await;
    }

    /// Reads and repairs the stored session a submission continues on the
    /// store's writer thread (after every write handed over before it);
    /// [`RuntimeMsg::Opened`] brings it back.
    fn open_stored(
        &self,
        myself: &ActorRef<RuntimeMsg>,
        session_id: String,
        submission: Box<Submitted>,
        reply: SubmitReply,
    ) {
        let runtime = myself.clone();
        let reading = session_id.clone();
        self.store.commit_with(
            move |store| open_session(store, &reading),
            move |opened| {
                let _ = runtime.cast(RuntimeMsg::Opened {
                    submission,
                    reply,
                    session_id,
                    opened,
                });
            },
        );
    }

    /// The stored session a submission continues was read: its run starts,
    /// or the submission is refused.
    async fn opened(
        &mut self,
        myself: &ActorRef<RuntimeMsg>,
        submission: Box<Submitted>,
        reply: SubmitReply,
        session_id: String,
        opened: Result<Option<OpenedSession>, StoreError>,
    ) {
        let opened = match opened {
            Ok(Some(opened)) => opened,
            Ok(None) => {
                self.sessions.forget(&session_id);
                let _ = reply.send(Err(RuntimeError::UnknownSession(session_id)));
                return;
            }
            Err(err) => {
                self.sessions.forget(&session_id);
                let _ = reply.send(Err(err.into()));
                return;
            }
        };
        let prepared = Prepared {
            notice: opened.repair_notice(&session_id),
            session: SessionState {
                transcript: Transcript::from_opened(&opened),
                last_active: opened.last_updated,
                rules: opened.rules,
                rewind: opened.rewind.map(Box::new),
            },
            session_id,
            opening: Some(SessionOpening::Resume),
            create: None,
        };
        self.start_run(myself, submission, reply, prepared).await;
    }

    /// Starts the run of an admitted submission: its event log and its run
    /// actor, both linked here. The run actor answers the submitter once the
    /// run is recorded (on the store's writer thread, not here).
    async fn start_run(
        &mut self,
        myself: &ActorRef<RuntimeMsg>,
        submission: Box<Submitted>,
        reply: SubmitReply,
        prepared: Prepared,
    ) {
        let (submission, job, given_run_id, parent_span) = *submission;
        let Prepared {
            session_id,
            session,
            notice,
            opening,
            create,
        } = prepared;
        if job == RunJob::Compact
            && !troupe_agent::compact::compactable(
                session.transcript.messages(),
                submission.env.context_window,
            )
        {
            // Refused before anything is recorded; the session stays as it was.
            self.sessions.opened(&session_id, session);
            let _ = reply.send(Err(RuntimeError::NothingToCompact(session_id)));
            return;
        }
        for rule in &session.rules {
            if let Err(err) = submission.permissions.add_session_rule(rule.clone()) {
                tracing::warn!(%err, "a stored session rule was not restored");
            }
        }
        submission.permissions.set_mode(submission.mode);
        let (run_id, first_seq) =
            given_run_id.unwrap_or_else(|| (uuid::Uuid::now_v7().to_string(), 1));
        let live = live_events();
        // Subscribed before the first event exists: the handle misses nothing.
        let events_rx = EventSubscription::live(
            self.store.clone(),
            run_id.clone(),
            first_seq,
            live.subscribe(),
        );
        let log = Actor::spawn_linked(
            None,
            EventLog,
            EventLogArgs {
                run_id: run_id.clone(),
                session_id: session_id.clone(),
                store: self.store.clone(),
                live: live.clone(),
                first_seq,
            },
            myself.get_cell(),
        )
        .await;
        let log = match log {
            Ok((log, _)) => log,
            Err(err) => {
                self.sessions.forget(&session_id);
                let _ = reply.send(Err(RuntimeError::RunStart(err.to_string())));
                return;
            }
        };
        let events = EventSink::new(log.clone(), "main");
        // What opening the stored session repaired is told before the run starts.
        if let Some(text) = notice {
            events.emit(EventKind::notice(text));
        }
        let (outcome_tx, outcome_rx) = oneshot::channel();
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
            create,
            answer: SubmitAnswer {
                reply,
                handle: RunHandle {
                    run_id: run_id.clone(),
                    session_id: session_id.clone(),
                    events: events_rx,
                    outcome: outcome_rx,
                },
            },
            events,
            parent_span,
            ended: {
                let runtime = myself.clone();
                Port::new(move |ended: RunEnded| {
                    let message = match ended {
                        RunEnded::SessionFree { run_id, session } => {
                            RuntimeMsg::SessionFree { run_id, session }
                        }
                        RunEnded::Over { run_id, outcome } => {
                            RuntimeMsg::RunEnded { run_id, outcome }
                        }
                    };
                    runtime.cast(message).is_ok()
                })
            },
        };
        let run = match Actor::spawn_linked(None, RunActor, args, myself.get_cell()).await {
            Ok((run, _)) => run,
            Err(err) => {
                // The answer went down with the run's arguments: the
                // submitter learns the run is gone.
                tracing::error!(%run_id, %err, "the run could not start");
                self.sessions.forget(&session_id);
                log.stop(None);
                return;
            }
        };
        self.run_actors.insert(run.get_id(), run_id.clone());
        self.log_actors.insert(log.get_id(), run_id.clone());
        self.sessions.started(&session_id, &run_id);
        self.runs.insert(
            run_id,
            RunEntry {
                session_id,
                run,
                log,
                live,
                outcome: Some(outcome_tx),
                ended: None,
                session_free: false,
            },
        );
    }

    /// Removes a session that has no run in progress: from memory here, from
    /// the store on its writer thread, which answers. A run submitted later
    /// for it reads the store after the removal (the writer keeps order), so
    /// it finds no session.
    fn remove_session(
        &mut self,
        session_id: String,
        reply: RpcReplyPort<Result<Vec<String>, RuntimeError>>,
    ) {
        if !self.sessions.remove(&session_id) {
            let _ = reply.send(Err(RuntimeError::SessionBusy(session_id)));
            return;
        }
        self.store.commit_with(
            move |store| store.remove_session(&session_id),
            move |removed| {
                let _ = reply.send(removed.map_err(RuntimeError::from));
            },
        );
    }

    /// Rewrites a stored session: refused while a run is in progress or
    /// about to start in it; otherwise the session leaves memory (its next
    /// run reads it from the store) and `rewrite` runs on the store's
    /// writer thread.
    fn rewrite_session(
        &mut self,
        session_id: String,
        rewrite: SessionRewrite,
        reply: RpcReplyPort<Result<(), RuntimeError>>,
    ) {
        if !self.sessions.remove(&session_id) {
            let _ = reply.send(Err(RuntimeError::SessionBusy(session_id)));
            return;
        }
        self.store.commit_with(rewrite, move |written| {
            let _ = reply.send(written.map_err(RuntimeError::from));
        });
    }

    /// Rewinds a session's conversation: refused while a run is in progress
    /// or about to start in it (naming the run); otherwise the session
    /// leaves memory (its next run reads the cut history and the note from
    /// the store) and the store's writer thread cuts it.
    fn rewind_session(
        &mut self,
        request: RewindRequest,
        reply: RpcReplyPort<Result<ConversationRewind, RuntimeError>>,
    ) {
        let session_id = request.session.clone();
        if !self.sessions.remove(&session_id) {
            let refused = match self.sessions.history(&session_id) {
                Err(Some(run_id)) => {
                    RuntimeError::Store(StoreError::Rewind(RewindRefusal::RunInProgress {
                        session: session_id,
                        run_id: run_id.to_owned(),
                    }))
                }
                _ => RuntimeError::SessionBusy(session_id),
            };
            let _ = reply.send(Err(refused));
            return;
        }
        self.store.commit_with(
            move |store| store.rewind_conversation(&request),
            move |rewound| {
                let _ = reply.send(rewound.map_err(RuntimeError::from));
            },
        );
    }

    /// A run ended: its log stores what is queued and stops; the outcome is
    /// handed out when it has (or when [`LOG_DRAIN_MARGIN`] beyond the
    /// store's confirmation deadline is over), so a subscriber that comes
    /// later reads `run_finished` from the store. Nothing here waits.
    fn run_ended(
        &mut self,
        myself: &ActorRef<RuntimeMsg>,
        run_id: &str,
        outcome: RunOutcome,
        session: Option<SessionState>,
    ) {
        let Some(run) = self.runs.get_mut(run_id) else {
            return;
        };
        if run.ended.is_some() {
            return;
        }
        run.ended = Some(outcome);
        let log_gone = run.log.drain().is_err();
        // The session is free for its next run at once, unless the run
        // freed it already.
        self.free_session(run_id, session);
        if log_gone {
            // Nothing more to store.
            self.finish_run(run_id);
            return;
        }
        let limit = troupe_store::CONFIRM_DEADLINE + LOG_DRAIN_MARGIN;
        let overdue = run_id.to_owned();
        myself.send_after(limit, move || RuntimeMsg::LogOverdue(overdue));
    }

    /// A run's session is free for its next run (kept in memory, or left to
    /// the store): handed back by the run before it announced its end, or
    /// freed when the run ended without doing so. Once per run.
    fn free_session(&mut self, run_id: &str, session: Option<SessionState>) {
        let Some(run) = self.runs.get_mut(run_id) else {
            return;
        };
        if run.session_free {
            return;
        }
        run.session_free = true;
        self.sessions
            .ended(&run.session_id, session, chrono::Utc::now());
    }

    /// The ended run, whose log is done, is forgotten and its outcome handed
    /// out.
    fn finish_run(&mut self, run_id: &str) {
        let Some(mut run) = self.runs.remove(run_id) else {
            return;
        };
        self.run_actors.retain(|_, id| id != run_id);
        self.log_actors.retain(|_, id| id != run_id);
        if let (Some(outcome_tx), Some(outcome)) = (run.outcome.take(), run.ended.take()) {
            let _ = outcome_tx.send(outcome);
        }
    }
}

/// A rewrite of a stored session, run on the store's writer thread
/// ([`Runtime::rewrite_session`]).
pub type SessionRewrite = Box<dyn FnOnce(&Store) -> Result<(), StoreError> + Send + 'static>;

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
            Box::new((submission, RunJob::Prompt, None, tracing::Span::none()))
        )
        .map_err(|_| RuntimeError::Gone)?
    }

    /// Starts a run under the id `run_id`, chosen by whoever accepted it (a
    /// cluster node that answered with it before the run was placed), its
    /// spans below `parent` (the span that placed it). An id a run of this
    /// runtime or the store already has is refused.
    pub async fn submit_as(
        &self,
        submission: RunSubmission,
        run_id: String,
        parent: tracing::Span,
    ) -> Result<RunHandle, RuntimeError> {
        self.submit_continuing(submission, run_id, 1, parent).await
    }

    /// [`Runtime::submit_as`] of a run that goes on here after it ran
    /// elsewhere (another node of a cluster): its events are numbered from
    /// `first_seq`, after those it had there.
    pub async fn submit_continuing(
        &self,
        submission: RunSubmission,
        run_id: String,
        first_seq: u64,
        parent: tracing::Span,
    ) -> Result<RunHandle, RuntimeError> {
        if self.store.run(&run_id)?.is_some() {
            return Err(RuntimeError::Store(StoreError::AlreadyExists {
                what: format!("run {run_id}"),
            }));
        }
        ractor::call!(
            self.actor,
            RuntimeMsg::Submit,
            Box::new((
                submission,
                RunJob::Prompt,
                Some((run_id, first_seq)),
                parent
            ))
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
            Box::new((submission, RunJob::Compact, None, tracing::Span::none()))
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
    /// `approval_id` is the approval's id (`RUN-N`) or its number in the
    /// run (`N`), see [`full_approval_id`].
    pub async fn approve(
        &self,
        run_id: &str,
        approval_id: &str,
        outcome: ApprovalOutcome,
        reason: Option<String>,
    ) -> Result<(), RuntimeError> {
        let run = self.run(run_id).await?;
        let approval_id = full_approval_id(run_id, approval_id);
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

    /// Rewrites stored session `session_id` with `rewrite` (run on the
    /// store's writer thread) when it has no run in progress; its history
    /// leaves memory first, so its next run reads what the rewrite left.
    /// A session with a run in progress is [`RuntimeError::SessionBusy`].
    pub async fn rewrite_session(
        &self,
        session_id: &str,
        rewrite: SessionRewrite,
    ) -> Result<(), RuntimeError> {
        ractor::call!(
            self.actor,
            RuntimeMsg::RewriteSession,
            session_id.to_string(),
            rewrite
        )
        .map_err(|_| RuntimeError::Gone)?
    }

    /// Rewinds a session's conversation to the end of one of its runs
    /// ([`Store::rewind_conversation`]); refused while a run is in progress
    /// in the session.
    pub async fn rewind(&self, request: RewindRequest) -> Result<ConversationRewind, RuntimeError> {
        ractor::call!(self.actor, RuntimeMsg::Rewind, Box::new(request))
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

/// The id of the approval `given` names in run `run_id`: approvals are
/// numbered per run (`RUN-1`, `RUN-2`, …), so a bare number `N` means
/// `RUN-N`; anything else is an approval id already.
pub fn full_approval_id(run_id: &str, given: &str) -> String {
    if !given.is_empty() && given.bytes().all(|byte| byte.is_ascii_digit()) {
        format!("{run_id}-{given}")
    } else {
        given.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_approval_is_named_by_its_number_in_the_run_or_by_its_id() {
        assert_eq!(full_approval_id("r1", "2"), "r1-2");
        assert_eq!(full_approval_id("r1", "r1-2"), "r1-2");
        assert_eq!(full_approval_id("r1", ""), "");
        assert_eq!(full_approval_id("r1", "2a"), "2a");
    }
}
