//! The runtime actor: the root of the supervision tree (DESIGN.md). It starts
//! runs — an event log and, for a new session, an agent actor, both linked to it
//! — routes cancellations and approvals to the right agent, and outlives any
//! failure below it: an agent that fails ends its run with an error event
//! instead of taking the process down.
//!
//! [`Runtime`] is the handle front doors (the CLI, the daemon, tests) use.

use std::collections::HashMap;
use std::sync::Arc;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use troupe_runtime::agent::AgentSpec;
use troupe_runtime::config::{Limits, PermissionMode};
use troupe_runtime::events::{ApprovalOutcome, EventKind, RunEvent, RunStatus};
use troupe_runtime::model::Usage;
use troupe_runtime::permissions::PermissionEngine;
use troupe_runtime::session::{Transcript, open_session};
use troupe_runtime::store::{NewSession, Store, StoreError};

use crate::agent::{AgentActor, AgentArgs, AgentEnv, AgentMsg, Approver, RunOutcome, RunStart};
use crate::event_log::{EventLog, EventLogArgs, EventLogMsg, EventSink};

/// Errors of the runtime handle.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The runtime actor could not start.
    #[error("the runtime could not start: {0}")]
    Start(String),
    /// The runtime actor is gone.
    #[error("the runtime is not running")]
    Gone,
    /// No such run.
    #[error("no run {0}")]
    UnknownRun(String),
    /// A run could not start.
    #[error("the run could not start: {0}")]
    RunStart(String),
    /// No session with this id exists.
    #[error("no session {0}; list sessions with `troupe sessions list`")]
    UnknownSession(String),
    /// The store refused a read or write.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Which session a run belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionTarget {
    /// A new session, with this id when given.
    New(Option<String>),
    /// An existing session: its live agent, or its stored history (repaired).
    Continue(String),
}

/// What a front door submits.
pub struct RunSubmission {
    /// The user's message.
    pub prompt: String,
    /// The session: a new one, or one to continue.
    pub session: SessionTarget,
    /// The agent's environment (used when the session's agent is created).
    pub env: Arc<AgentEnv>,
    /// The permission engine (used when the session's agent is created).
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
    /// Every event of the run, from the first.
    pub events: mpsc::UnboundedReceiver<RunEvent>,
    /// The outcome, once the run ends.
    pub outcome: oneshot::Receiver<RunOutcome>,
}

/// Messages of the runtime actor.
pub enum RuntimeMsg {
    /// Start a run.
    Submit(
        Box<RunSubmission>,
        RpcReplyPort<Result<RunHandle, RuntimeError>>,
    ),
    /// Cancel a run.
    Cancel(String, RpcReplyPort<Result<(), RuntimeError>>),
    /// Answer an approval of a run.
    Approve {
        /// Run id.
        run_id: String,
        /// Approval id.
        approval_id: String,
        /// The answer.
        outcome: ApprovalOutcome,
        /// Reason given with a denial.
        reason: Option<String>,
        /// Result.
        reply: RpcReplyPort<Result<(), RuntimeError>>,
    },
    /// The agent of a session (tests, status).
    Agent(String, RpcReplyPort<Option<ActorRef<AgentMsg>>>),
    /// A run ended (sent by the run's watcher).
    RunEnded(String),
}

struct RunEntry {
    session_id: String,
    cancel: CancellationToken,
    log: ActorRef<EventLogMsg>,
}

/// State of the runtime actor.
pub struct RuntimeState {
    store: Store,
    agents: HashMap<String, ActorRef<AgentMsg>>,
    agent_sessions: HashMap<ActorId, String>,
    runs: HashMap<String, RunEntry>,
}

/// The runtime actor.
pub struct RuntimeActor;

impl Actor for RuntimeActor {
    type Msg = RuntimeMsg;
    type State = RuntimeState;
    type Arguments = Store;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        store: Store,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(RuntimeState {
            store,
            agents: HashMap::new(),
            agent_sessions: HashMap::new(),
            runs: HashMap::new(),
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
                let result = state.submit(&myself, *submission).await;
                let _ = reply.send(result);
            }
            RuntimeMsg::Cancel(run_id, reply) => {
                let result = match state.runs.get(&run_id) {
                    Some(run) => {
                        run.cancel.cancel();
                        if let Some(agent) = state.agents.get(&run.session_id) {
                            let _ = agent.cast(AgentMsg::Cancel);
                        }
                        Ok(())
                    }
                    None => Err(RuntimeError::UnknownRun(run_id)),
                };
                let _ = reply.send(result);
            }
            RuntimeMsg::Approve {
                run_id,
                approval_id,
                outcome,
                reason,
                reply,
            } => {
                let agent = state
                    .runs
                    .get(&run_id)
                    .and_then(|run| state.agents.get(&run.session_id));
                let result = match agent {
                    Some(agent) => agent
                        .cast(AgentMsg::Approve {
                            approval_id,
                            outcome,
                            reason,
                        })
                        .map_err(|_| RuntimeError::Gone),
                    None => Err(RuntimeError::UnknownRun(run_id)),
                };
                let _ = reply.send(result);
            }
            RuntimeMsg::Agent(session_id, reply) => {
                let _ = reply.send(state.agents.get(&session_id).cloned());
            }
            RuntimeMsg::RunEnded(run_id) => {
                if let Some(run) = state.runs.remove(&run_id) {
                    // Let the log deliver what is queued (run_finished among it),
                    // then stop: subscribers then hold every event.
                    let _ = run.log.drain();
                }
            }
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
        match event {
            SupervisionEvent::ActorFailed(cell, err) => {
                if let Some(session_id) = state.agent_sessions.remove(&cell.get_id()) {
                    tracing::error!(%session_id, %err, "agent failed");
                    state.agents.remove(&session_id);
                    for run in state.runs.values().filter(|r| r.session_id == session_id) {
                        let sink = EventSink::new(run.log.clone(), "main");
                        sink.emit(EventKind::Error {
                            kind: "agent_failed".into(),
                            message: format!("the agent failed: {err}"),
                        });
                        sink.emit(EventKind::RunFinished {
                            status: RunStatus::Error,
                            stop_reason: "agent_failed".into(),
                            final_text: String::new(),
                            usage_total: Usage::default(),
                        });
                    }
                } else {
                    tracing::warn!(%err, "a runtime child failed");
                }
            }
            SupervisionEvent::ActorTerminated(cell, _, _) => {
                if let Some(session_id) = state.agent_sessions.remove(&cell.get_id()) {
                    state.agents.remove(&session_id);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

impl RuntimeState {
    async fn submit(
        &mut self,
        myself: &ActorRef<RuntimeMsg>,
        submission: RunSubmission,
    ) -> Result<RunHandle, RuntimeError> {
        let (session_id, opened) = match &submission.session {
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
                })?;
                (id, None)
            }
            SessionTarget::Continue(id) if self.agents.contains_key(id) => (id.clone(), None),
            SessionTarget::Continue(id) => match open_session(&self.store, id)? {
                Some(opened) => (id.clone(), Some(opened)),
                None => return Err(RuntimeError::UnknownSession(id.clone())),
            },
        };
        let run_id = uuid::Uuid::now_v7().to_string();
        let (log, _) = Actor::spawn_linked(
            None,
            EventLog,
            EventLogArgs {
                run_id: run_id.clone(),
                session_id: session_id.clone(),
                store: Some(self.store.clone()),
            },
            myself.get_cell(),
        )
        .await
        .map_err(|err| RuntimeError::RunStart(err.to_string()))?;
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        log.cast(EventLogMsg::Subscribe {
            from_seq: 1,
            sender: events_tx,
        })
        .map_err(|err| RuntimeError::RunStart(err.to_string()))?;

        let agent = match self.agents.get(&session_id) {
            Some(agent) => {
                agent
                    .cast(AgentMsg::SetMode(submission.mode))
                    .map_err(|_| RuntimeError::Gone)?;
                agent.clone()
            }
            None => {
                let (transcript, last_active) = match &opened {
                    Some(opened) => {
                        for rule in &opened.rules {
                            if let Err(err) = submission.permissions.add_session_rule(rule.clone())
                            {
                                tracing::warn!(%err, "a stored session rule was not restored");
                            }
                        }
                        (Transcript::from_opened(opened), opened.last_updated)
                    }
                    None => (Transcript::new(), None),
                };
                let (agent, _) = Actor::spawn_linked(
                    None,
                    AgentActor,
                    AgentArgs {
                        session_id: session_id.clone(),
                        spec: AgentSpec::main(submission.limits.max_turns),
                        env: submission.env,
                        permissions: submission.permissions,
                        mode: submission.mode,
                        transcript,
                        last_active,
                    },
                    myself.get_cell(),
                )
                .await
                .map_err(|err| RuntimeError::RunStart(err.to_string()))?;
                self.agents.insert(session_id.clone(), agent.clone());
                self.agent_sessions
                    .insert(agent.get_id(), session_id.clone());
                agent
            }
        };

        // What opening the stored session repaired is told before the run starts.
        if let Some(text) = opened
            .as_ref()
            .and_then(|opened| opened.repair_notice(&session_id))
        {
            EventSink::new(log.clone(), "main").emit(EventKind::Notice { text });
        }
        let cancel = CancellationToken::new();
        let (done_tx, done_rx) = oneshot::channel();
        let (outcome_tx, outcome_rx) = oneshot::channel();
        agent
            .cast(AgentMsg::Run(Box::new(RunStart {
                run_id: run_id.clone(),
                prompt: submission.prompt,
                events: EventSink::new(log.clone(), "main"),
                limits: submission.limits,
                approver: submission.approver,
                cancel: cancel.clone(),
                done: done_tx,
                // The main agent's span is the root of the run's trace.
                parent_span: tracing::Span::none(),
            })))
            .map_err(|_| RuntimeError::Gone)?;
        self.runs.insert(
            run_id.clone(),
            RunEntry {
                session_id: session_id.clone(),
                cancel,
                log,
            },
        );
        // Watch the outcome: pass it on and tell the runtime the run ended.
        let runtime = myself.clone();
        let watched_run = run_id.clone();
        tokio::spawn(async move {
            if let Ok(outcome) = done_rx.await {
                let _ = outcome_tx.send(outcome);
            }
            let _ = runtime.cast(RuntimeMsg::RunEnded(watched_run));
        });
        Ok(RunHandle {
            run_id,
            session_id,
            events: events_rx,
            outcome: outcome_rx,
        })
    }
}

/// The handle to a running runtime.
#[derive(Clone)]
pub struct Runtime {
    actor: ActorRef<RuntimeMsg>,
}

impl Runtime {
    /// Starts the runtime actor over `store`.
    pub async fn start(store: Store) -> Result<Self, RuntimeError> {
        let (actor, _) = Actor::spawn(None, RuntimeActor, store)
            .await
            .map_err(|err| RuntimeError::Start(err.to_string()))?;
        Ok(Self { actor })
    }

    /// Starts a run.
    pub async fn submit(&self, submission: RunSubmission) -> Result<RunHandle, RuntimeError> {
        ractor::call!(self.actor, RuntimeMsg::Submit, Box::new(submission))
            .map_err(|_| RuntimeError::Gone)?
    }

    /// Cancels a run.
    pub async fn cancel(&self, run_id: &str) -> Result<(), RuntimeError> {
        ractor::call!(self.actor, RuntimeMsg::Cancel, run_id.to_string())
            .map_err(|_| RuntimeError::Gone)?
    }

    /// Answers an approval.
    pub async fn approve(
        &self,
        run_id: &str,
        approval_id: &str,
        outcome: ApprovalOutcome,
        reason: Option<String>,
    ) -> Result<(), RuntimeError> {
        let run_id = run_id.to_string();
        let approval_id = approval_id.to_string();
        self.actor
            .call(
                |reply| RuntimeMsg::Approve {
                    run_id,
                    approval_id,
                    outcome,
                    reason,
                    reply,
                },
                None,
            )
            .await
            .map_err(|_| RuntimeError::Gone)?
            .success_or(RuntimeError::Gone)?
    }

    /// The agent actor of a session, if one is alive.
    pub async fn agent(&self, session_id: &str) -> Option<ActorRef<AgentMsg>> {
        ractor::call!(self.actor, RuntimeMsg::Agent, session_id.to_string())
            .ok()
            .flatten()
    }

    /// Stops the runtime and everything under it.
    pub async fn shutdown(self) {
        self.actor.stop_children(None);
        let _ = self.actor.stop_and_wait(None, None).await;
    }
}
