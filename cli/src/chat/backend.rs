//! Where the chat's turns run: in the daemon (the default, started on demand)
//! or on a runtime embedded in this process (`--no-daemon`), which stays up
//! for the whole chat. Either way each turn is a run on the chat's session,
//! followed through a [`RunLink`].
//!
//! A chat holds the daemon's presence stream while it is open, so the daemon
//! does not leave for being idle under it; and before each request it checks
//! that its daemon is still the live one of the data directory. A daemon
//! that went away anyway (stopped, killed) is found again or started, and the
//! chat carries on in the same session, which lives in the store.

use std::sync::Arc;

use futures::future::BoxFuture;
use troupe_actors::{Approver, Runtime};
use troupe_protocol::api::{CompactRequest, Rendered, View};
use troupe_protocol::events::RunEvent;
use troupe_store::Store;
use troupe_tools::memory::MEMORY_SETTLE_LIMIT;

use crate::client::{DaemonClient, RemoteRun};
use crate::daemon::home;
use crate::follow::{Answerer, RunLink};
use crate::ids::{self, IdKind};
use crate::project::{Locations, RunOptions, SetupError};
use crate::run::{EmbeddedRun, remote_request};
use crate::sessions::render_view;
use crate::{EXIT_RUNTIME, EXIT_USAGE, RunFlags};

/// A failure to show the person, with the exit code it would give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChatError {
    /// What went wrong.
    pub message: String,
    /// Exit code.
    pub code: u8,
}

impl From<SetupError> for ChatError {
    fn from(err: SetupError) -> Self {
        Self {
            message: err.message,
            code: err.code,
        }
    }
}

impl From<crate::client::ClientError> for ChatError {
    fn from(err: crate::client::ClientError) -> Self {
        Self {
            message: err.message,
            code: err.code,
        }
    }
}

/// A runtime in this process, kept for the whole chat.
pub(crate) struct Embedded {
    runtime: Runtime,
    store: Store,
    locations: Locations,
    telemetry: crate::telemetry::CliTelemetry,
    /// The memory of each turn's run: background updates still running get
    /// a bounded chance to finish when the chat ends.
    memories: std::sync::Mutex<Vec<troupe_tools::memory::SessionMemory>>,
}

/// The daemon a chat talks to, found again (or started) when it is gone.
pub(crate) struct Remote {
    locations: Locations,
    current: tokio::sync::Mutex<Connected>,
}

/// One daemon the chat is connected to.
struct Connected {
    client: Arc<DaemonClient>,
    /// Its process id, when the data directory's `daemon.json` names it.
    pid: Option<u32>,
    /// Holds the daemon's presence stream; finished once the daemon went
    /// away.
    presence: tokio::task::JoinHandle<()>,
}

impl Connected {
    /// The daemon of `locations` (started on demand), its presence held.
    async fn open(locations: &Locations) -> Result<Self, ChatError> {
        let client = Arc::new(DaemonClient::locate_or_start(locations).await?);
        let pid = home::read_state(&locations.data_dir)
            .filter(home::daemon_alive)
            .map(|state| state.pid);
        let holder = client.clone();
        let presence = tokio::spawn(async move { holder.hold_presence().await });
        Ok(Self {
            client,
            pid,
            presence,
        })
    }

    /// True when this daemon is no longer there: its presence stream ended,
    /// or the data directory no longer names it as a live daemon.
    fn gone(&self, locations: &Locations) -> bool {
        if self.presence.is_finished() {
            return true;
        }
        self.pid.is_some_and(|pid| {
            home::read_state(&locations.data_dir)
                .filter(home::daemon_alive)
                .is_none_or(|state| state.pid != pid)
        })
    }
}

impl Drop for Connected {
    fn drop(&mut self) {
        self.presence.abort();
    }
}

impl Remote {
    /// The daemon to send the next request to: the one connected to while
    /// it is there, else the data directory's daemon found again or
    /// started.
    async fn client(&self) -> Result<Arc<DaemonClient>, ChatError> {
        let mut current = self.current.lock().await;
        if current.gone(&self.locations) {
            tracing::info!(
                daemon = current.client.base(),
                "the daemon went away; finding or starting it again"
            );
            *current = Connected::open(&self.locations).await?;
        }
        Ok(current.client.clone())
    }
}

/// Where turns run.
pub(crate) enum Backend {
    /// The daemon.
    Daemon(Box<Remote>),
    /// This process.
    Embedded(Box<Embedded>),
}

/// One turn that started.
pub(crate) struct Started {
    /// Its events and controls.
    pub link: TurnLink,
    /// The session it works in.
    pub session_id: String,
    /// Things to know before it runs.
    pub warnings: Vec<String>,
}

impl Backend {
    /// The daemon (started on demand), or an embedded runtime for `no_daemon`.
    pub(crate) async fn open(locations: &Locations, no_daemon: bool) -> Result<Self, ChatError> {
        if !no_daemon {
            let current = Connected::open(locations).await?;
            return Ok(Self::Daemon(Box::new(Remote {
                locations: locations.clone(),
                current: tokio::sync::Mutex::new(current),
            })));
        }
        let store = locations.open_store()?;
        let telemetry = crate::telemetry::start(&store, crate::telemetry::terminal_log_style());
        crate::run::report_recovered(&store, false);
        let runtime = Runtime::start(store.clone())
            .await
            .map_err(|err| ChatError {
                message: err.to_string(),
                code: EXIT_RUNTIME,
            })?;
        Ok(Self::Embedded(Box::new(Embedded {
            runtime,
            store,
            locations: locations.clone(),
            telemetry,
            memories: Default::default(),
        })))
    }

    /// Starts a turn: `prompt` on `session` (a new one when `None`), set up
    /// as `flags` say, its approvals asked in the chat.
    pub(crate) async fn start_turn(
        &self,
        prompt: &str,
        session: Option<&str>,
        flags: &RunFlags,
    ) -> Result<Started, ChatError> {
        match self {
            Self::Daemon(remote) => {
                let client = remote.client().await?;
                let current_dir = std::env::current_dir().map_err(|err| ChatError {
                    message: format!("cannot read the current directory: {err}"),
                    code: EXIT_USAGE,
                })?;
                let body = remote_request(
                    prompt,
                    session,
                    flags,
                    &current_dir,
                    troupe_process::secrets::process_vars(),
                    true,
                );
                let submitted = client.submit(&body).await?;
                let events = client.events(&submitted.run_id, 1, true).await?;
                Ok(Started {
                    session_id: submitted.session_id,
                    warnings: submitted.warnings,
                    link: TurnLink::Remote(Box::new(RemoteRun {
                        client: client.clone(),
                        run_id: submitted.run_id,
                        events,
                    })),
                })
            }
            Self::Embedded(embedded) => {
                let session = session
                    .map(|given| ids::resolve(&embedded.store, IdKind::Session, given))
                    .transpose()?;
                let options = RunOptions::from_flags(flags);
                let mut prepared = crate::setup::prepare(
                    &options,
                    None,
                    &embedded.store,
                    &embedded.locations,
                    session.as_deref(),
                )
                .await?;
                let warnings = std::mem::take(&mut prepared.warnings);
                embedded
                    .memories
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(prepared.env.memory().clone());
                let submission = prepared.into_submission(prompt.to_string(), Approver::Present);
                let handle =
                    embedded
                        .runtime
                        .submit(submission)
                        .await
                        .map_err(|err| ChatError {
                            message: err.to_string(),
                            code: EXIT_RUNTIME,
                        })?;
                Ok(Started {
                    session_id: handle.session_id.clone(),
                    warnings,
                    link: TurnLink::Embedded(EmbeddedRun {
                        runtime: embedded.runtime.clone(),
                        handle,
                    }),
                })
            }
        }
    }

    /// Compacts `session` now (`/compact`): the text saying what was done.
    pub(crate) async fn compact(
        &self,
        session: &str,
        flags: &RunFlags,
    ) -> Result<String, ChatError> {
        match self {
            Self::Daemon(remote) => {
                let client = remote.client().await?;
                let current_dir = std::env::current_dir().map_err(|err| ChatError {
                    message: format!("cannot read the current directory: {err}"),
                    code: EXIT_USAGE,
                })?;
                let body = CompactRequest {
                    provider: flags.provider.clone(),
                    model: flags.model.clone(),
                    ..crate::sessions::compact_request(
                        &current_dir,
                        troupe_process::secrets::process_vars(),
                    )
                };
                Ok(client.compact_session(session, &body).await?)
            }
            Self::Embedded(embedded) => {
                let session = ids::resolve(&embedded.store, IdKind::Session, session)?;
                let prepared = crate::setup::prepare(
                    &RunOptions::from_flags(flags),
                    None,
                    &embedded.store,
                    &embedded.locations,
                    Some(&session),
                )
                .await?;
                let submission = prepared.into_submission(String::new(), Approver::Absent);
                let refused = |(code, message): (u8, String)| ChatError { message, code };
                let handle = embedded
                    .runtime
                    .compact(submission)
                    .await
                    .map_err(|err| refused(crate::sessions::compact_refusal(err)))?;
                let outcome = handle.outcome.await.map_err(|_| ChatError {
                    message: "the compaction ended without an outcome".into(),
                    code: EXIT_RUNTIME,
                })?;
                crate::sessions::compacted_text(&outcome).map_err(refused)
            }
        }
    }

    /// Rewinds `session` to the end of its run `to` (`/rewind N`): the text
    /// saying what was done.
    pub(crate) async fn rewind(
        &self,
        session: &str,
        to: u64,
        scope: crate::rewind::RewindScope,
    ) -> Result<String, ChatError> {
        match self {
            Self::Daemon(remote) => {
                let client = remote.client().await?;
                let body = troupe_protocol::api::RewindSession {
                    to,
                    conversation: scope.conversation,
                    code: scope.code,
                    force: scope.force,
                };
                Ok(client.rewind_session(session, &body).await?.text)
            }
            Self::Embedded(embedded) => {
                let session = ids::resolve(&embedded.store, IdKind::Session, session)?;
                crate::rewind::rewind_on_runtime(
                    &embedded.runtime,
                    &embedded.store,
                    &embedded.locations.data_dir,
                    &session,
                    to,
                    scope,
                )
                .await
                .map(|done| done.text)
                .map_err(|err| {
                    let (code, message) = err.failure();
                    ChatError { message, code }
                })
            }
        }
    }

    /// Undoes (or redoes) the last turn of `session` that changed files
    /// (`/undo`): what was done.
    pub(crate) async fn undo(
        &self,
        session: &str,
        request: crate::undo::UndoRequest,
    ) -> Result<crate::undo::UndoReport, ChatError> {
        match self {
            Self::Daemon(remote) => {
                let client = remote.client().await?;
                Ok(client.undo_session(session, &request).await?)
            }
            Self::Embedded(embedded) => crate::undo::undo_session(
                &embedded.store,
                &embedded.locations.data_dir,
                session,
                request,
            )
            .await
            .map_err(|(code, message)| ChatError { message, code }),
        }
    }

    /// The checkpoints of `session` and the files each run changed
    /// (`/rewind`).
    pub(crate) async fn checkpoints(
        &self,
        session: &str,
    ) -> Result<crate::undo::CheckpointList, ChatError> {
        match self {
            Self::Daemon(remote) => {
                let client = remote.client().await?;
                Ok(client.session_checkpoints(session).await?)
            }
            Self::Embedded(embedded) => crate::undo::list_checkpoints(
                &embedded.store,
                &embedded.locations.data_dir,
                session,
            )
            .await
            .map_err(|(code, message)| ChatError { message, code }),
        }
    }

    /// Renders a read-only view of the store (`/sessions`, `/resume`).
    pub(crate) async fn view(&self, view: View) -> Rendered {
        match self {
            Self::Daemon(remote) => match remote.client().await {
                Ok(client) => match client.view(&view).await {
                    Ok(rendered) => rendered,
                    Err(err) => Rendered {
                        code: err.code,
                        stdout: String::new(),
                        stderr: format!("troupe: {err}\n"),
                    },
                },
                Err(err) => Rendered {
                    code: err.code,
                    stdout: String::new(),
                    stderr: format!("troupe: {}\n", err.message),
                },
            },
            Self::Embedded(embedded) => {
                let store = embedded.store.clone();
                tokio::task::spawn_blocking(move || render_view(&store, &view))
                    .await
                    .unwrap_or_else(|err| Rendered {
                        code: EXIT_RUNTIME,
                        stdout: String::new(),
                        stderr: format!("troupe: the view failed: {err}\n"),
                    })
            }
        }
    }

    /// Stops what the chat started in this process.
    pub(crate) async fn close(self) {
        if let Self::Embedded(embedded) = self {
            embedded.runtime.shutdown().await;
            let memories = std::mem::take(
                &mut *embedded
                    .memories
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            let deadline = tokio::time::Instant::now() + MEMORY_SETTLE_LIMIT;
            for memory in memories {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                if !memory.settle(left).await {
                    tracing::warn!("a background memory update did not finish before exit");
                    break;
                }
            }
            if let Err(err) = embedded.store.flush() {
                eprintln!("troupe: the store could not be flushed at exit: {err}");
            }
            embedded.telemetry.stop();
        }
    }
}

/// One turn's run, in the daemon or here.
pub(crate) enum TurnLink {
    /// In the daemon.
    Remote(Box<RemoteRun>),
    /// In this process.
    Embedded(EmbeddedRun),
}

impl RunLink for TurnLink {
    async fn next_event(&mut self) -> Option<RunEvent> {
        match self {
            Self::Remote(run) => run.next_event().await,
            Self::Embedded(run) => run.next_event().await,
        }
    }

    fn cancel(&self) -> BoxFuture<'static, ()> {
        match self {
            Self::Remote(run) => run.cancel(),
            Self::Embedded(run) => run.cancel(),
        }
    }

    fn answerer(&self) -> Answerer {
        match self {
            Self::Remote(run) => run.answerer(),
            Self::Embedded(run) => run.answerer(),
        }
    }

    fn send_message(&self, text: String) -> BoxFuture<'static, Result<(), String>> {
        match self {
            Self::Remote(run) => run.send_message(text),
            Self::Embedded(run) => run.send_message(text),
        }
    }
}
