//! The command line as a client of a running daemon (`troupe serve`): where
//! it is, and the requests a run needs — submit, follow the events (SSE,
//! reconnecting after the last event seen), answer approvals, cancel.
//!
//! A daemon is used when `TROUPE_ADDR` names one, or when the data
//! directory's `daemon.json` names a live daemon; its token is read from
//! `TROUPE_TOKEN` or the data directory's `daemon.token`. A `daemon.json`
//! whose process is gone (or is no longer a daemon) is ignored, and a run
//! starts a daemon on demand ([`spawn`]). The daemon of the data directory
//! is reached through its Unix socket, where the kernel tells it who is
//! asking (it lets only the owner's processes, never a run's commands,
//! start runs or answer approvals); a daemon named by `TROUPE_ADDR` alone
//! over TCP. Requests and answers are the bodies of
//! [`troupe_protocol::api`], which the daemon reads and writes too.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use troupe_llm::sse::SseParser;
use troupe_protocol::api::{
    ApprovalAnswer, CompactRequest, ErrorAnswer, PATH_PREFIX, Rendered, RunCreated, RunMessage,
    RunRequest, SessionCompacted, SessionRemoved, View,
};
use troupe_protocol::events::{ApprovalOutcome, EventKind, RunEvent};

use crate::daemon::{home, spawn};
use crate::follow::{Answerer, RunLink};
use crate::project::Locations;
use crate::{EXIT_RUNTIME, EXIT_USAGE};

/// Environment variable naming a daemon's address (`127.0.0.1:PORT`).
pub(crate) const ADDR_VAR: &str = "TROUPE_ADDR";
/// Environment variable holding a daemon's token (else `daemon.token`).
pub(crate) const TOKEN_VAR: &str = "TROUPE_TOKEN";
/// How long a request other than the event stream may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a compaction (one model call) may take through the daemon.
const COMPACT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// How many times a broken event stream is reopened in a row.
const RECONNECTS: u32 = 5;
/// How long an idle connection to the daemon is kept for the next request:
/// shorter than the daemon keeps one
/// ([`IDLE_TIMEOUT`](crate::daemon::connections::IDLE_TIMEOUT)), so a request
/// never goes out on a connection the daemon is closing.
pub(crate) const POOL_IDLE: Duration = Duration::from_secs(60);

/// What to do about a daemon that holds the data directory but does not
/// answer: `--no-daemon` would fail on the same store.
pub(crate) const STOP_ADVICE: &str = "stop it with `troupe daemon stop` (its runs are cancelled) \
     and run again, which starts a fresh daemon, or wait for it to answer";

/// The advice when no daemon answered for `data_dir`: stop the one that
/// holds it, or (when none does) run in this process.
fn advice_when_no_daemon_answers(data_dir: &std::path::Path) -> String {
    match home::read_state(data_dir).filter(home::daemon_alive) {
        Some(state) => format!(
            "a daemon (pid {}, listening on {}) holds the data directory: {STOP_ADVICE}",
            state.pid, state.addr
        ),
        None => "run with --no-daemon to run in this process".to_string(),
    }
}

/// A failed request, worded for the person, with the exit code it deserves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientError {
    /// What went wrong.
    pub message: String,
    /// 2 for what the person can fix in the request or configuration, 1 else.
    pub code: u8,
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The exit code an API error status deserves: configuration and request
/// errors are the person's to fix (2), the rest are runtime errors (1).
pub(crate) fn exit_code_for_status(status: u16) -> u8 {
    match status {
        400 | 404 | 422 => EXIT_USAGE,
        _ => EXIT_RUNTIME,
    }
}

/// How many times a request is sent again after its connection closed
/// before an answer.
const RESENDS: u32 = 3;

/// True when a request that failed with `err`, already sent again `resends`
/// times, is sent once more: its connection closed or was reset before an
/// answer came. The daemon closes a connection without answering only when
/// no request of it is in flight (one it had not read yet, or one it chose to
/// make room for a newer connection), so such a request was never started.
pub(crate) fn resend_after(err: &(dyn std::error::Error + 'static), resends: u32) -> bool {
    resends < RESENDS && closed_before_answer(err)
}

/// True when `err`, or an error it was caused by, says the connection closed
/// or was reset before a response.
fn closed_before_answer(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(err);
    while let Some(current) = cause {
        if let Some(io) = current.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::UnexpectedEof
            )
        {
            return true;
        }
        if current
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_incomplete_message)
        {
            return true;
        }
        cause = current.source();
    }
    false
}

/// A daemon to talk to.
#[derive(Clone)]
pub(crate) struct DaemonClient {
    base: String,
    token: String,
    http: reqwest::Client,
    /// The socket's directory, held open while its address goes through
    /// it (see `home::socket_address`).
    _socket_dir: Option<Arc<std::os::fd::OwnedFd>>,
    /// The data directory whose own daemon this is (not one `TROUPE_ADDR`
    /// names elsewhere): an event stream whose daemon went away finds that
    /// directory's daemon again, or starts one.
    origin: Option<Arc<Locations>>,
}

impl DaemonClient {
    /// The daemon for `locations`, if one is running: `TROUPE_ADDR`, else a
    /// `daemon.json` naming a live process. Errors: a daemon is named but
    /// there is no token to talk to it with.
    pub(crate) fn locate(locations: &Locations) -> Result<Option<Self>, ClientError> {
        let state = home::read_state(&locations.data_dir).filter(home::daemon_alive);
        let (addr, socket, own) = match std::env::var(ADDR_VAR).ok().filter(|addr| !addr.is_empty())
        {
            // The data directory's own daemon, named: its socket still.
            Some(addr) => match state {
                Some(state) if state.addr == addr => (addr, state.socket, true),
                _ => (addr, None, false),
            },
            None => match state {
                Some(state) => (state.addr, state.socket, true),
                None => return Ok(None),
            },
        };
        let token = std::env::var(TOKEN_VAR)
            .ok()
            .filter(|token| !token.is_empty())
            .or_else(|| home::read_token(&locations.data_dir))
            .ok_or_else(|| ClientError {
                message: format!(
                    "a daemon runs at {addr} but there is no token for it: set {TOKEN_VAR} or \
                     check {}",
                    locations.data_dir.join(home::TOKEN_FILE).display()
                ),
                code: EXIT_RUNTIME,
            })?;
        let mut client = Self::connect(&addr, socket.as_deref(), token)?;
        if own {
            client.origin = Some(Arc::new(locations.clone()));
        }
        Ok(Some(client))
    }

    /// The daemon for `locations`: the running one, or one started now
    /// (detached, exiting after its idle limit). Racing clients end up with
    /// the same daemon.
    pub(crate) async fn locate_or_start(locations: &Locations) -> Result<Self, ClientError> {
        if let Some(client) = Self::locate(locations)? {
            return Ok(client);
        }
        let failed = |message: String| ClientError {
            message,
            code: EXIT_RUNTIME,
        };
        let idle = spawn::idle_secs(std::env::var(spawn::IDLE_VAR).ok().as_deref()).map_err(
            |message| ClientError {
                message,
                code: crate::EXIT_USAGE,
            },
        )?;
        let data_dir = locations.data_dir.clone();
        // A data directory this user cannot write is the first thing to say:
        // neither a daemon nor --no-daemon can run on it.
        spawn::check_writable(&data_dir).map_err(|err| {
            failed(format!(
                "cannot write the troupe data directory {}: {err}; make it writable by this \
                 user or point TROUPE_HOME at a writable directory",
                data_dir.display()
            ))
        })?;
        spawn::start_detached(&data_dir, idle).map_err(|err| {
            failed(format!(
                "cannot start a daemon for {}: {err}; run with --no-daemon to run in this process",
                data_dir.display()
            ))
        })?;
        let started = {
            let data_dir = data_dir.clone();
            tokio::task::spawn_blocking(move || {
                spawn::wait_for_state(&data_dir, spawn::START_LIMIT)
            })
            .await
            .ok()
            .flatten()
        };
        match started {
            Some(_) => Self::locate(locations)?.ok_or_else(|| {
                failed(format!(
                    "the daemon that was started went away:\n{}\n(see {}; run again, or with \
                     --no-daemon to run in this process)",
                    spawn::log_tail(&data_dir),
                    data_dir.join(spawn::LOG_FILE).display()
                ))
            }),
            None => Err(failed(format!(
                "a daemon could not be started for {}:\n{}\n({})",
                data_dir.display(),
                spawn::log_tail(&data_dir),
                advice_when_no_daemon_answers(&data_dir)
            ))),
        }
    }

    /// A client of the daemon at `addr` (`host:port`) with `token`, through
    /// its Unix socket when `socket` names one (the requests still name
    /// `addr` as their host).
    pub(crate) fn connect(
        addr: &str,
        socket: Option<&std::path::Path>,
        token: String,
    ) -> Result<Self, ClientError> {
        troupe_llm::http::install_crypto_provider();
        let failed = |err: &dyn std::fmt::Display| ClientError {
            message: format!("cannot set up the daemon client: {err}"),
            code: EXIT_RUNTIME,
        };
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .pool_idle_timeout(POOL_IDLE)
            .tls_certs_only(Vec::new());
        let mut socket_dir = None;
        if let Some(socket) = socket {
            let (address, dir) = home::socket_address(socket).map_err(|err| failed(&err))?;
            builder = builder.unix_socket(address);
            socket_dir = dir.map(Arc::new);
        }
        let http = builder.build().map_err(|err| failed(&err))?;
        Ok(Self {
            base: format!("http://{addr}"),
            token,
            http,
            _socket_dir: socket_dir,
            origin: None,
        })
    }

    fn unreachable(&self, err: &reqwest::Error) -> ClientError {
        ClientError {
            message: format!(
                "the daemon at {} does not answer ({err}); {}",
                self.base, STOP_ADVICE
            ),
            code: EXIT_RUNTIME,
        }
    }

    /// Sends a request with the token, again when its connection closed
    /// before an answer ([`resend_after`]); a non-2xx answer becomes the
    /// API's error message.
    async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ClientError> {
        let mut request = request.bearer_auth(&self.token);
        let mut resends = 0;
        let response = loop {
            let again = request.try_clone();
            match request.send().await {
                Ok(response) => break response,
                Err(err) => match again {
                    Some(again) if resend_after(&err, resends) => {
                        tracing::debug!(%err, "the daemon closed the connection before answering; sending again");
                        resends += 1;
                        request = again;
                    }
                    _ => return Err(self.unreachable(&err)),
                },
            }
        };
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let message = match response.json::<ErrorAnswer>().await {
            Ok(answer) => answer.error.message,
            Err(_) => format!("the daemon answered HTTP {status}"),
        };
        Err(ClientError {
            message,
            code: exit_code_for_status(status),
        })
    }

    /// The URL of the versioned API path `path` (`/runs`, …).
    fn url(&self, path: &str) -> String {
        format!("{}{PATH_PREFIX}{path}", self.base)
    }

    /// Submits a run (`POST /v1/runs`).
    pub(crate) async fn submit(&self, body: &RunRequest) -> Result<RunCreated, ClientError> {
        let request = self
            .http
            .post(self.url("/runs"))
            .timeout(REQUEST_TIMEOUT)
            .json(body);
        self.json_of(request).await
    }

    /// Renders a read-only view in the daemon (`POST /v1/views`).
    pub(crate) async fn view(&self, view: &View) -> Result<Rendered, ClientError> {
        let request = self
            .http
            .post(self.url("/views"))
            .timeout(REQUEST_TIMEOUT)
            .json(view);
        self.json_of(request).await
    }

    /// Cancels a run.
    pub(crate) async fn cancel(&self, run_id: &str) -> Result<(), ClientError> {
        let request = self
            .http
            .post(self.url(&format!("/runs/{run_id}/cancel")))
            .timeout(REQUEST_TIMEOUT);
        self.send(request).await.map(drop)
    }

    /// Hands text the person wrote to a run in progress (for its next model
    /// call).
    pub(crate) async fn send_message(&self, run_id: &str, text: &str) -> Result<(), ClientError> {
        let request = self
            .http
            .post(self.url(&format!("/runs/{run_id}/messages")))
            .timeout(REQUEST_TIMEOUT)
            .json(&RunMessage {
                text: text.to_string(),
            });
        self.send(request).await.map(drop)
    }

    /// Removes a session (`DELETE /v1/sessions/{id}`); returns what
    /// `sessions rm` prints.
    pub(crate) async fn remove_session(&self, id: &str) -> Result<String, ClientError> {
        let request = self
            .http
            .delete(self.url(&format!("/sessions/{id}")))
            .timeout(REQUEST_TIMEOUT);
        let answer: SessionRemoved = self.json_of(request).await?;
        Ok(answer.text)
    }

    /// Undoes (or plans to undo) a session's last turn that changed files
    /// (`POST /v1/sessions/{id}/undo`).
    pub(crate) async fn undo_session(
        &self,
        id: &str,
        body: &crate::undo::UndoRequest,
    ) -> Result<crate::undo::UndoReport, ClientError> {
        let request = self
            .http
            .post(self.url(&format!("/sessions/{id}/undo")))
            .timeout(COMPACT_TIMEOUT)
            .json(body);
        self.json_of(request).await
    }

    /// Rewinds a session (`POST /v1/sessions/{id}/rewind`): what was done.
    pub(crate) async fn rewind_session(
        &self,
        id: &str,
        body: &troupe_protocol::api::RewindSession,
    ) -> Result<troupe_protocol::api::SessionRewound, ClientError> {
        let request = self
            .http
            .post(self.url(&format!("/sessions/{id}/rewind")))
            .timeout(COMPACT_TIMEOUT)
            .json(body);
        self.json_of(request).await
    }

    /// A session's checkpoints, the store's size and the files each run
    /// changed (`GET /v1/sessions/{id}/checkpoints`).
    pub(crate) async fn session_checkpoints(
        &self,
        id: &str,
    ) -> Result<crate::undo::CheckpointList, ClientError> {
        let request = self
            .http
            .get(self.url(&format!("/sessions/{id}/checkpoints")))
            .timeout(COMPACT_TIMEOUT);
        self.json_of(request).await
    }

    /// Applies the retention policy and sweeps the checkpoint stores now
    /// (`POST /v1/clean`).
    pub(crate) async fn clean(&self) -> Result<crate::retention::Cleaned, ClientError> {
        let request = self.http.post(self.url("/clean")).timeout(COMPACT_TIMEOUT);
        self.json_of(request).await
    }

    /// Compacts a session (`POST /v1/sessions/{id}/compact`) and waits for
    /// it: the text saying what was done.
    pub(crate) async fn compact_session(
        &self,
        id: &str,
        body: &CompactRequest,
    ) -> Result<String, ClientError> {
        let request = self
            .http
            .post(self.url(&format!("/sessions/{id}/compact")))
            .timeout(COMPACT_TIMEOUT)
            .json(body);
        let answer: SessionCompacted = self.json_of(request).await?;
        Ok(answer.text)
    }

    /// Holds the daemon's presence stream open until the daemon goes away
    /// or stops: while it is held the daemon counts this client and does
    /// not leave for being idle. Returns when the stream ends.
    pub(crate) async fn hold_presence(&self) {
        let request = self.http.get(self.url(crate::daemon::api::PRESENCE_PATH));
        let Ok(mut response) = self.send(request).await else {
            return;
        };
        while let Ok(Some(_)) = response.chunk().await {}
    }

    /// The daemon's status and settings (`GET /v1/daemon`).
    pub(crate) async fn status(&self) -> Result<troupe_protocol::api::DaemonStatus, ClientError> {
        let request = self
            .http
            .get(self.url(crate::daemon::api::STATUS_PATH))
            .timeout(REQUEST_TIMEOUT);
        self.json_of(request).await
    }

    /// The cluster the daemon is a node of (`GET /v1/cluster`).
    pub(crate) async fn cluster_status(
        &self,
    ) -> Result<troupe_protocol::api::ClusterStatus, ClientError> {
        let request = self
            .http
            .get(self.url(crate::daemon::api::CLUSTER_PATH))
            .timeout(REQUEST_TIMEOUT);
        self.json_of(request).await
    }

    /// Drains node `node` of the daemon's cluster, or lets it take runs
    /// again (`POST /v1/cluster/nodes/{node}/drain` or `…/resume`).
    pub(crate) async fn command_node(
        &self,
        node: &str,
        resume: bool,
    ) -> Result<troupe_protocol::cluster_control::NodeState, ClientError> {
        let path = if resume {
            crate::daemon::cluster_ops::RESUME_PATH
        } else {
            crate::daemon::cluster_ops::DRAIN_PATH
        };
        let request = self
            .http
            .post(self.url(&path.replace("{node}", node)))
            .timeout(REQUEST_TIMEOUT);
        self.json_of(request).await
    }

    /// A one-time login code for the dashboard (`POST /login/codes`).
    pub(crate) async fn dashboard_code(&self) -> Result<String, ClientError> {
        let request = self
            .http
            .post(format!("{}{}", self.base, crate::dashboard::CODES_PATH))
            .timeout(REQUEST_TIMEOUT);
        let answer: crate::dashboard::LoginCode = self.json_of(request).await?;
        Ok(answer.code)
    }

    /// Where the daemon is (`http://host:port`).
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// Sends `request` and reads its JSON answer.
    async fn json_of<T: serde::de::DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        self.send(request)
            .await?
            .json()
            .await
            .map_err(|err| self.unreachable(&err))
    }

    /// Answers an approval.
    pub(crate) async fn approve(
        &self,
        run_id: &str,
        approval_id: &str,
        outcome: ApprovalOutcome,
        reason: Option<String>,
    ) -> Result<(), ClientError> {
        let request = self
            .http
            .post(self.url(&format!("/runs/{run_id}/approvals/{approval_id}")))
            .timeout(REQUEST_TIMEOUT)
            .json(&ApprovalAnswer { outcome, reason });
        self.send(request).await.map(drop)
    }

    /// Opens a run's event stream from `from_seq`. An `owner` (the command
    /// that started the run) takes the run with it when it goes away: the
    /// daemon cancels a run whose owners all disconnected before it ended.
    pub(crate) async fn events(
        &self,
        run_id: &str,
        from_seq: u64,
        owner: bool,
    ) -> Result<RemoteEvents, ClientError> {
        let response = self.open_events(run_id, from_seq, owner).await?;
        Ok(RemoteEvents {
            client: self.clone(),
            owner,
            run_id: run_id.to_string(),
            next_seq: from_seq.max(1),
            response: Some(response),
            parser: SseParser::new(),
            finished: false,
            replaced: false,
        })
    }

    async fn open_events(
        &self,
        run_id: &str,
        from_seq: u64,
        owner: bool,
    ) -> Result<reqwest::Response, ClientError> {
        let request = self.http.get(self.url(&format!(
            "/runs/{run_id}/events?from_seq={}&owner={owner}",
            from_seq.max(1)
        )));
        self.send(request).await
    }
}

/// A run's events as the daemon streams them.
pub(crate) struct RemoteEvents {
    client: DaemonClient,
    /// The stream owns the run (see [`DaemonClient::events`]).
    owner: bool,
    run_id: String,
    /// The sequence number wanted next (a reopened stream starts there).
    next_seq: u64,
    response: Option<reqwest::Response>,
    parser: SseParser,
    finished: bool,
    /// The daemon followed first went away and another one is followed.
    replaced: bool,
}

/// True for the event that ends a run: the main agent's `run_finished`.
fn ends_the_run(event: &RunEvent) -> bool {
    matches!(event.kind, EventKind::RunFinished { .. }) && event.agent_path == "main"
}

impl RemoteEvents {
    /// The data directory's daemon when it is another than the one this
    /// stream followed (found, or started now); `None` for a daemon named
    /// elsewhere, or when none could be found or started.
    async fn daemon_again(&self) -> Option<DaemonClient> {
        let origin = self.client.origin.clone()?;
        let alive = home::read_state(&origin.data_dir)
            .filter(home::daemon_alive)
            .is_some_and(|state| format!("http://{}", state.addr) == self.client.base);
        if alive {
            return None;
        }
        match DaemonClient::locate_or_start(&origin).await {
            Ok(found) => Some(found),
            Err(err) => {
                tracing::warn!(%err, "no daemon to follow the run on");
                None
            }
        }
    }

    /// The next event, or `None` after the main agent's `run_finished` or
    /// when the stream cannot be reopened. A broken connection is reopened
    /// from the next sequence number, so nothing is lost or repeated.
    /// Cancel-safe: bytes are taken from the connection only in the poll
    /// that hands them to the parser.
    pub(crate) async fn recv(&mut self) -> Option<RunEvent> {
        let mut reconnects = 0;
        loop {
            if self.finished {
                return None;
            }
            match self.parser.next_event() {
                Ok(Some(event)) => match serde_json::from_str::<RunEvent>(event.data) {
                    Ok(event)
                        if event.seq >= self.next_seq
                            || (self.replaced && ends_the_run(&event)) =>
                    {
                        self.next_seq = self.next_seq.max(event.seq + 1);
                        if ends_the_run(&event) {
                            self.finished = true;
                        }
                        return Some(event);
                    }
                    Ok(_) => continue,
                    Err(err) => {
                        tracing::warn!(%err, "an unreadable event from the daemon was skipped");
                        continue;
                    }
                },
                Ok(None) => {}
                Err(err) => {
                    tracing::warn!(%err, "the daemon's event stream is malformed; reopening");
                    self.response = None;
                }
            }
            let chunk = match self.response.as_mut() {
                Some(response) => response.chunk().await,
                None => Ok(None),
            };
            if let Ok(Some(bytes)) = chunk {
                self.parser.push(&bytes);
                continue;
            }
            // The stream ended before `run_finished`: reopen it.
            reconnects += 1;
            if reconnects > RECONNECTS {
                crate::signals::notice(&format!(
                    "lost the connection to the daemon at {}; the run may still be going: \
                     follow it with `troupe runs attach {} --from {}`",
                    self.client.base, self.run_id, self.next_seq
                ));
                return None;
            }
            self.parser = SseParser::new();
            match self
                .client
                .open_events(&self.run_id, self.next_seq, self.owner)
                .await
            {
                Ok(response) => self.response = Some(response),
                Err(err) => {
                    tracing::warn!(%err, "reopening the daemon's event stream failed");
                    self.response = None;
                    // The daemon may be gone: the data directory's daemon,
                    // found again or started, has the run's events in the
                    // store (a run its process left unfinished ends as
                    // interrupted there).
                    if let Some(found) = self.daemon_again().await {
                        tracing::info!(daemon = %found.base, "following the run on the data directory's daemon");
                        self.client = found;
                        // A daemon killed outright may not have stored the
                        // last events this stream saw: the run's end can
                        // take a sequence number already seen. Its events
                        // are read again from the start; only its end is
                        // taken from below the next sequence number.
                        self.replaced = true;
                        if let Ok(response) =
                            self.client.open_events(&self.run_id, 1, self.owner).await
                        {
                            self.response = Some(response);
                        }
                    }
                }
            }
        }
    }
}

/// A run in the daemon, followed from the terminal.
pub(crate) struct RemoteRun {
    /// The daemon.
    pub client: Arc<DaemonClient>,
    /// The run.
    pub run_id: String,
    /// Its events.
    pub events: RemoteEvents,
}

impl RunLink for RemoteRun {
    async fn next_event(&mut self) -> Option<RunEvent> {
        self.events.recv().await
    }

    fn cancel(&self) -> BoxFuture<'static, ()> {
        let (client, run_id) = (self.client.clone(), self.run_id.clone());
        Box::pin(async move {
            // A run that already ended needs no cancelling.
            if let Err(err) = client.cancel(&run_id).await {
                tracing::debug!(%err, "cancel not delivered");
            }
        })
    }

    fn answerer(&self) -> Answerer {
        let (client, run_id) = (self.client.clone(), self.run_id.clone());
        Arc::new(move |approval_id, outcome, reason| {
            let (client, run_id) = (client.clone(), run_id.clone());
            Box::pin(async move {
                if let Err(err) = client.approve(&run_id, &approval_id, outcome, reason).await {
                    tracing::warn!(%err, "the answer did not reach the daemon");
                }
            })
        })
    }

    fn send_message(&self, text: String) -> BoxFuture<'static, Result<(), String>> {
        let (client, run_id) = (self.client.clone(), self.run_id.clone());
        Box::pin(async move {
            client
                .send_message(&run_id, &text)
                .await
                .map_err(|err| err.message)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error caused by `cause`, as a client library wraps one.
    #[derive(Debug)]
    struct Wrapped(std::io::Error);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("error sending request")
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_request_whose_connection_closed_before_an_answer_is_sent_again_a_few_times() {
        use std::io::ErrorKind;
        for kind in [
            ErrorKind::ConnectionReset,
            ErrorKind::ConnectionAborted,
            ErrorKind::BrokenPipe,
            ErrorKind::UnexpectedEof,
        ] {
            let err = Wrapped(std::io::Error::from(kind));
            assert!(resend_after(&err, 0), "{kind:?}");
            assert!(resend_after(&err, RESENDS - 1), "{kind:?}");
            assert!(!resend_after(&err, RESENDS), "{kind:?}");
        }
        // No daemon, or one that did not answer in time: not again.
        for kind in [ErrorKind::ConnectionRefused, ErrorKind::TimedOut] {
            assert!(!resend_after(&Wrapped(std::io::Error::from(kind)), 0));
        }
    }

    #[test]
    fn request_and_configuration_errors_are_usage_errors() {
        for status in [400, 404, 422] {
            assert_eq!(exit_code_for_status(status), EXIT_USAGE, "{status}");
        }
        for status in [401, 403, 409, 413, 500, 503] {
            assert_eq!(exit_code_for_status(status), EXIT_RUNTIME, "{status}");
        }
    }
}
