//! The web dashboard the daemon serves at `/`: runs (live), a run's agents,
//! transcript, approvals, plan and changed files (live), its span
//! waterfall, sessions and their conversations (docs/dashboard.md).
//!
//! Pages are rendered here from the same store and runtime handle the API
//! uses ([`ApiState`]); live parts are Server-Sent Events that htmx swaps
//! into the page. A run's live view follows the run through
//! [`troupe_actors::Runtime::subscribe`], the bounded subscription every
//! client uses, so a dashboard adds nothing to a run's own work. Access is
//! [`access`]'s: a session cookie from a one-time login code, a CSRF token on
//! every state change, the API's `Host`/`Origin` checks, and strict security
//! headers on every answer.

pub(crate) mod access;
pub(crate) mod command;
pub(crate) mod costs;
pub(crate) mod feed;
pub(crate) mod markdown;
pub(crate) mod model;
pub(crate) mod pages;
pub(crate) mod tokens;
pub(crate) mod waterfall;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Form, Router};
use serde::{Deserialize, Serialize};
use troupe_protocol::events::ApprovalOutcome;
use troupe_store::{RunRecord, SessionMeta, Store};

use self::access::{Access, SessionView};
use self::model::{ChangeSource, FilesShown, FromCheckpoints, FromToolCalls, RunView};
use self::pages::RunRow;
use crate::daemon::api::ApiState;
use crate::daemon::{guard, peer, server};
use crate::ids::{self, IdKind};

/// Where the login script exchanges a login code for a session.
pub(crate) const LOGIN_PATH: &str = "/login";

/// Where `troupe dashboard` asks for a login code (with the daemon's token).
pub(crate) const CODES_PATH: &str = "/login/codes";

/// What browsers ask for on their own: answered with nothing, so that it
/// does not reach the API (which would answer 401).
const FAVICON_PATH: &str = "/favicon.ico";

/// htmx's settings: no indicator styles (an inline style the policy
/// refuses), no `eval`, no scripts from swapped HTML, requests only to this
/// daemon, and no copies of pages (which hold the CSRF token) in the
/// browser's storage for its history.
pub(crate) const HTMX_CONFIG: &str = r#"{"includeIndicatorStyles":false,"allowEval":false,"allowScriptTags":false,"selfRequestsOnly":true,"historyEnabled":false,"historyCacheSize":0}"#;

/// Rows per page of the runs and sessions lists.
pub(crate) const PAGE_SIZE: usize = 50;

/// The most events a run page shows (the latest ones).
pub(crate) const TRANSCRIPT_EVENTS: usize = 2_000;

/// The most messages a session page shows (the latest ones).
pub(crate) const SESSION_MESSAGES: usize = 500;

/// The most runs the costs page reads the events of.
pub(crate) const MAX_COST_RUNS: usize = 500;

/// How often the live runs list looks at the store for changes.
pub(crate) const RUNS_REFRESH: Duration = Duration::from_secs(1);

/// The largest login body read.
const LOGIN_BODY_LIMIT: usize = 4 * 1024;

/// What the dashboard's handlers share.
#[derive(Clone)]
pub(crate) struct DashboardState {
    api: ApiState,
    access: Arc<Access>,
    tokens: Arc<tokens::RunTokens>,
    live_rows: Arc<tokens::SharedRows>,
    feeds: Arc<feed::Feeds>,
}

/// The dashboard's routes, behind its guard and headers, for the daemon's
/// router to merge.
pub(crate) fn router(api: ApiState) -> Router {
    let state = DashboardState {
        api,
        access: Arc::default(),
        tokens: Arc::default(),
        live_rows: Arc::default(),
        feeds: Arc::default(),
    };
    Router::new()
        .route("/", get(runs_list))
        .route("/live/runs", get(runs_live))
        .route("/runs/{id}", get(run_show))
        .route("/runs/{id}/live", get(run_live))
        .route("/runs/{id}/spans", get(run_spans))
        .route("/runs/{id}/cancel", post(cancel_run))
        .route("/runs/{id}/agents/cancel", post(cancel_agent))
        .route("/runs/{id}/approvals/{approval_id}", post(answer_approval))
        .route("/costs", get(costs_page))
        .route("/sessions", get(sessions_list))
        .route("/sessions/{id}", get(session_show))
        .route(LOGIN_PATH, post(login))
        .route(CODES_PATH, post(issue_code))
        .route("/assets/{name}", get(asset))
        .route(FAVICON_PATH, get(|| async { StatusCode::NO_CONTENT }))
        .layer(middleware::from_fn_with_state(state.clone(), guard_request))
        .layer(middleware::map_response(secure_headers))
        .with_state(state)
}

/// The security headers, on every answer of the dashboard's.
async fn secure_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in access::SECURITY_HEADERS {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// An answer that is a short HTML page.
fn problem(status: StatusCode, title: &str, message: &str) -> Response {
    (
        status,
        Html(pages::problem_page(title, message).into_string()),
    )
        .into_response()
}

/// Host/Origin for every request; the token (and an owner peer) for a
/// login code; an `Origin` for a login; the session cookie for everything
/// else but the assets, and the CSRF token with an `Origin` for every
/// request that changes something.
async fn guard_request(
    State(state): State<DashboardState>,
    mut request: Request,
    next: Next,
) -> Response {
    state.api.activity.touch();
    let headers = request.headers();
    let text = |name| headers.get(name).and_then(|value| value.to_str().ok());
    let origin = text(header::ORIGIN);
    if let Err(err) = guard::check_origin(
        text(header::HOST),
        origin,
        state.api.listen,
        &state.api.allowed_hosts,
    ) {
        return problem(StatusCode::FORBIDDEN, "Refused", &err.message);
    }
    let path = request.uri().path();
    if path.starts_with("/assets/") || path == FAVICON_PATH {
        return next.run(request).await;
    }
    if path == CODES_PATH {
        if let Err(err) = guard::check_token(text(header::AUTHORIZATION), &state.api.token) {
            return err.into_response();
        }
        mark_authenticated(&request);
        let from = request.extensions().get::<peer::Peer>().copied();
        if let Err(err) = peer::require_owner(from, "open the dashboard").await {
            return err.into_response();
        }
        return next.run(request).await;
    }
    if path == LOGIN_PATH {
        if origin.is_none() {
            return problem(
                StatusCode::FORBIDDEN,
                "Refused",
                "a login must come from the dashboard's own page",
            );
        }
        return next.run(request).await;
    }
    let session = text(header::COOKIE)
        .and_then(|cookies| access::cookie_value(cookies, access::COOKIE_NAME))
        .and_then(|id| state.access.session(id, Instant::now()));
    let Some(session) = session else {
        return (
            StatusCode::UNAUTHORIZED,
            Html(pages::login_page().into_string()),
        )
            .into_response();
    };
    mark_authenticated(&request);
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let csrf = headers
            .get(access::CSRF_HEADER)
            .and_then(|value| value.to_str().ok());
        if let Err(why) = access::state_change_allowed(origin, csrf, &session) {
            return problem(StatusCode::FORBIDDEN, "Refused", why);
        }
    }
    request.extensions_mut().insert(session);
    next.run(request).await
}

/// The request's connection has shown a credential: it no longer counts
/// against the cap on unauthenticated connections.
fn mark_authenticated(request: &Request) {
    if let Some(connection) = request.extensions().get::<server::Connection>() {
        connection.authenticated();
    }
}

/// The embedded scripts and the style sheet.
async fn asset(Path(name): Path<String>) -> Response {
    let (body, kind) = match name.as_str() {
        "htmx.min.js" => (HTMX, "text/javascript; charset=utf-8"),
        "htmx-ext-sse.min.js" => (HTMX_SSE, "text/javascript; charset=utf-8"),
        "login.js" => (LOGIN_JS, "text/javascript; charset=utf-8"),
        "dashboard.js" => (DASHBOARD_JS, "text/javascript; charset=utf-8"),
        "dashboard.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return problem(StatusCode::NOT_FOUND, "Not found", "no such file"),
    };
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

/// htmx 2.0.8 (0BSD), as published.
const HTMX: &str = include_str!("../../assets/htmx-2.0.8.min.js");
/// htmx's SSE extension 2.2.4 (0BSD), as published.
const HTMX_SSE: &str = include_str!("../../assets/htmx-ext-sse-2.2.4.min.js");
/// The login script.
const LOGIN_JS: &str = include_str!("../../assets/login.js");
/// The pages' own script.
const DASHBOARD_JS: &str = include_str!("../../assets/dashboard.js");
/// The style sheet.
const STYLE: &str = include_str!("../../assets/dashboard.css");

/// What the login script posts.
#[derive(Debug, Deserialize)]
struct LoginBody {
    code: String,
}

/// A login code, for `troupe dashboard`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct LoginCode {
    /// The code.
    pub code: String,
}

async fn issue_code(State(state): State<DashboardState>) -> axum::Json<LoginCode> {
    axum::Json(LoginCode {
        code: state.access.issue_code(Instant::now()),
    })
}

/// Exchanges a login code for the session cookie. A body announced as too
/// large is refused before any of it is read.
async fn login(
    State(state): State<DashboardState>,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Response {
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    if announced.is_some_and(|length| length > LOGIN_BODY_LIMIT as u64) {
        return problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Refused",
            "the login is too large",
        );
    }
    let Ok(bytes) = axum::body::to_bytes(body, LOGIN_BODY_LIMIT).await else {
        return problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Refused",
            "the login is too large",
        );
    };
    let Ok(login) = serde_json::from_slice::<LoginBody>(&bytes) else {
        return problem(StatusCode::BAD_REQUEST, "Refused", "malformed login");
    };
    match state.access.redeem(&login.code, Instant::now()) {
        Some(grant) => {
            let cookie = access::session_cookie(&grant.session_id);
            match HeaderValue::from_str(&cookie) {
                Ok(value) => {
                    (StatusCode::NO_CONTENT, [(header::SET_COOKIE, value)]).into_response()
                }
                Err(_) => problem(StatusCode::INTERNAL_SERVER_ERROR, "Error", "no cookie"),
            }
        }
        None => problem(
            StatusCode::UNAUTHORIZED,
            "Login link spent",
            "This login link was used already or has expired: run `troupe dashboard` for a new one.",
        ),
    }
}

/// An error answer of a page handler.
struct PageError(Box<Response>);

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        *self.0
    }
}

fn store_problem(err: impl std::fmt::Display) -> PageError {
    tracing::warn!(%err, "the dashboard could not read the store");
    PageError(Box::new(problem(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Store error",
        &format!("the store could not be read: {err}"),
    )))
}

fn not_found(message: &str) -> PageError {
    PageError(Box::new(problem(
        StatusCode::NOT_FOUND,
        "Not found",
        message,
    )))
}

/// The runs list's filters and page.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct RunsQuery {
    /// Only runs with this status (`running`, `finished`, …).
    pub status: Option<String>,
    /// Only runs whose project path contains this.
    pub project: Option<String>,
    /// The page, from 0.
    pub page: Option<usize>,
}

impl RunsQuery {
    /// The query string of these filters at `page`.
    pub(crate) fn query_string(&self, page: usize) -> String {
        let mut parts = vec![format!("page={page}")];
        for (name, value) in [("status", &self.status), ("project", &self.project)] {
            if let Some(value) = value.as_deref().filter(|value| !value.is_empty()) {
                parts.push(format!("{name}={}", encode_query_value(value)));
            }
        }
        parts.join("&")
    }
}

/// `value` percent-encoded for a query string.
pub(crate) fn encode_query_value(value: &str) -> String {
    value
        .bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (byte as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// The runs of one page of the list: newest first, filtered, with their
/// project and number of agents. The second value says whether a later page
/// has rows.
pub(crate) fn select_runs(
    mut runs: Vec<RunRecord>,
    sessions: &[SessionMeta],
    filter: &RunsQuery,
) -> (Vec<RunRow>, bool) {
    let projects: HashMap<&str, String> = sessions
        .iter()
        .map(|meta| (meta.id.as_str(), meta.cwd.display().to_string()))
        .collect();
    let mut agents: HashMap<&str, usize> = HashMap::new();
    for meta in sessions {
        if let Some(run) = meta.run_id.as_deref() {
            *agents.entry(run).or_default() += 1;
        }
    }
    runs.sort_by(|a, b| b.started.cmp(&a.started).then(b.run_id.cmp(&a.run_id)));
    let status = filter.status.as_deref().filter(|status| !status.is_empty());
    let project = filter
        .project
        .as_deref()
        .filter(|project| !project.is_empty());
    let page = filter.page.unwrap_or(0);
    let mut matching = runs.into_iter().filter_map(|run| {
        let cwd = projects
            .get(run.session_id.as_str())
            .cloned()
            .unwrap_or_default();
        let wanted = status.is_none_or(|status| run.status.as_str() == status)
            && project.is_none_or(|project| cwd.contains(project));
        wanted.then(|| RunRow {
            agents: 1 + agents.get(run.run_id.as_str()).copied().unwrap_or(0),
            project: cwd,
            tokens: troupe_protocol::model::Usage::default(),
            run,
        })
    });
    let rows: Vec<RunRow> = matching
        .by_ref()
        .skip(page.saturating_mul(PAGE_SIZE))
        .take(PAGE_SIZE)
        .collect();
    let has_next = matching.next().is_some();
    (rows, has_next)
}

/// One page of the runs list, from the store.
fn runs_of(
    store: &Store,
    tokens: &tokens::RunTokens,
    filter: &RunsQuery,
) -> Result<(Vec<RunRow>, bool), PageError> {
    let runs = store.list_runs(None).map_err(store_problem)?;
    let sessions = store.list_sessions().map_err(store_problem)?;
    let (mut rows, has_next) = select_runs(runs, &sessions, filter);
    for row in &mut rows {
        row.tokens = tokens.of(store, &row.run.run_id).map_err(store_problem)?;
    }
    Ok((rows, has_next))
}

async fn runs_list(
    State(state): State<DashboardState>,
    Extension(session): Extension<SessionView>,
    Query(filter): Query<RunsQuery>,
) -> Result<Html<String>, PageError> {
    let (rows, has_next) = runs_of(&state.api.store, &state.tokens, &filter)?;
    let page = pages::runs_page(&session.csrf, &rows, &filter, has_next, chrono::Utc::now());
    Ok(Html(page.into_string()))
}

/// HTML for an SSE data field: a carriage return (which the format cannot
/// carry) as its character reference.
fn sse_html(html: &str) -> String {
    html.replace('\r', "&#13;")
}

/// The runs table's rows, sent again whenever they change (checked every
/// [`RUNS_REFRESH`]), until the browser goes or the daemon stops.
async fn runs_live(
    State(state): State<DashboardState>,
    Query(filter): Query<RunsQuery>,
) -> Response {
    let open = state.api.activity.stream_opened();
    let stopping = state.api.stopping.clone();
    let ticks = tokio::time::interval(RUNS_REFRESH);
    let stream = futures::stream::unfold(
        (ticks, String::new(), open),
        move |(mut ticks, mut last, open)| {
            let (state, filter, stopping) = (state.clone(), filter.clone(), stopping.clone());
            async move {
                loop {
                    tokio::select! {
                        _ = ticks.tick() => {}
                        () = stopping.cancelled() => return None,
                    }
                    // Dashboards with the same filters share one look at the
                    // store per refresh.
                    let rendered = state.live_rows.get_or_render(
                        &filter.query_string(filter.page.unwrap_or(0)),
                        Instant::now(),
                        RUNS_REFRESH / 2,
                        || {
                            runs_of(&state.api.store, &state.tokens, &filter).map(|(rows, _)| {
                                pages::runs_rows(&rows, chrono::Utc::now()).into_string()
                            })
                        },
                    );
                    let Ok(html) = rendered else {
                        continue;
                    };
                    if *html != *last {
                        last = html.to_string();
                        let event = Event::default().event("runs").data(sse_html(&html));
                        return Some((Ok::<_, Infallible>(event), (ticks, last, open)));
                    }
                }
            }
        },
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// The full run id `given` names, and its record.
fn find_run(store: &Store, given: &str) -> Result<RunRecord, PageError> {
    let id = ids::resolve(store, IdKind::Run, given).map_err(|err| not_found(&err.message))?;
    store
        .run(&id)
        .map_err(store_problem)?
        .ok_or_else(|| not_found(&format!("no run {id}")))
}

/// The writing calls a page has read so far, by id.
type KnownCalls = HashMap<String, troupe_protocol::model::ToolCall>;

/// The state panel of a run. Its files come from the run's checkpoints,
/// else from its tool calls (see [`tool_call_files`]).
async fn state_panel(
    state: &DashboardState,
    run: &RunRecord,
    view: &RunView,
    known: &mut KnownCalls,
) -> maud::Markup {
    let phases = if run.status.is_running() && view.finished.is_none() {
        state
            .api
            .runtime
            .agents(&run.run_id)
            .await
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let status = match view.finished {
        Some(status) => status.as_str(),
        None => run.status.as_str(),
    };
    let files = match checkpoint_patches(state, run).await {
        Ok(Some(patches)) => FilesShown {
            files: FromCheckpoints { patches: &patches }.changed_files(view),
            note: (patches.omitted > 0)
                .then(|| format!("{} more files changed, not listed.", patches.omitted)),
        },
        Ok(None) => FilesShown {
            files: tool_call_files(state, run, view, known),
            note: None,
        },
        Err(why) => FilesShown {
            files: tool_call_files(state, run, view, known),
            note: Some(format!(
                "The checkpoints could not be read ({why}): these are the files the tool calls wrote."
            )),
        },
    };
    // A plan the session had before this run still shows until the run
    // changes it.
    if view.plan.is_none()
        && let Ok(Some(stored)) = state.api.store.task_plan(&run.session_id)
        && !stored.plan.is_empty()
    {
        let mut with_plan = view.clone();
        with_plan.plan = Some((stored.explanation, stored.plan));
        return pages::run_state(&run.run_id, status, &with_plan, &phases, &files);
    }
    pages::run_state(&run.run_id, status, view, &phases, &files)
}

/// How long a run page waits for the checkpoint store before it shows the
/// files the tool calls wrote instead.
pub(crate) const CHECKPOINT_READ_LIMIT: Duration = Duration::from_secs(2);

/// The patches of the files run `run` changed, from its checkpoints
/// (`None`: it took none, or checkpoints are off). Read in a task of its
/// own, waited for at most [`CHECKPOINT_READ_LIMIT`]: a slow store is an
/// error here, and the read ends on its own (only reads; the store's lock
/// is held for its git commands alone).
async fn checkpoint_patches(
    state: &DashboardState,
    run: &RunRecord,
) -> Result<Option<troupe_checkpoint::FilePatches>, String> {
    let (store, data_dir) = (state.api.store.clone(), state.api.data_dir.clone());
    let (session, run_id) = (run.session_id.clone(), run.run_id.clone());
    let read = tokio::spawn(async move {
        crate::undo::run_patches(
            &store,
            &data_dir,
            &session,
            &run_id,
            troupe_checkpoint::PatchLimits::default(),
        )
        .await
    });
    match tokio::time::timeout(CHECKPOINT_READ_LIMIT, read).await {
        Ok(Ok(read)) => read,
        Ok(Err(err)) => Err(err.to_string()),
        Err(_) => Err(format!(
            "no answer within {} s",
            CHECKPOINT_READ_LIMIT.as_secs()
        )),
    }
    .inspect_err(|why| tracing::debug!(%why, "the run's checkpoints could not be read"))
}

/// The files the run's writing tool calls named, each with the diff of
/// what its calls changed. The sessions are read for the calls' arguments
/// only when a file names a call not in `known`.
fn tool_call_files(
    state: &DashboardState,
    run: &RunRecord,
    view: &RunView,
    known: &mut KnownCalls,
) -> Vec<model::ChangedFile> {
    let mut files = FromToolCalls.changed_files(view);
    let unknown = files
        .iter()
        .flat_map(|file| &file.calls)
        .any(|call| !known.contains_key(call));
    if unknown {
        match writing_calls(&state.api.store, run) {
            Ok(calls) => known.extend(calls),
            Err(err) => tracing::debug!(%err, "the changed files' diffs could not be read"),
        }
    }
    model::attach_diffs(&mut files, known);
    files
}

/// The tool calls of a run's sessions (its own and those it made for its
/// sub-agents) that wrote files, by call id, with their full arguments.
fn writing_calls(
    store: &Store,
    run: &RunRecord,
) -> Result<HashMap<String, troupe_protocol::model::ToolCall>, troupe_store::StoreError> {
    let mut sessions = vec![run.session_id.clone()];
    sessions.extend(
        store
            .descendant_sessions(&run.session_id)?
            .into_iter()
            .filter(|meta| meta.run_id.as_deref() == Some(run.run_id.as_str()))
            .map(|meta| meta.id),
    );
    let mut calls = HashMap::new();
    for session in sessions {
        for message in store.load_history(&session)?.messages {
            for call in message.tool_calls() {
                if model::WRITING_TOOLS.contains(&call.name.as_str()) {
                    calls.insert(call.id.clone(), call.clone());
                }
            }
        }
    }
    Ok(calls)
}

/// Where the transcript of `events` starts so that it shows at most
/// `limit` entries: the latest ones, a streak of text counting as one.
pub(crate) fn transcript_start(
    events: &[troupe_protocol::events::RunEvent],
    limit: usize,
) -> usize {
    use troupe_protocol::events::EventKind;
    let mut entries = 0;
    let mut previous_was_text = false;
    for (index, event) in events.iter().enumerate().rev() {
        let is_text = matches!(event.kind, EventKind::TextDelta { .. });
        if !is_text || !previous_was_text {
            entries += 1;
        }
        previous_was_text = is_text;
        if entries > limit {
            return index + 1;
        }
    }
    0
}

async fn run_show(
    State(state): State<DashboardState>,
    Extension(session): Extension<SessionView>,
    Path(given): Path<String>,
) -> Result<Html<String>, PageError> {
    let store = &state.api.store;
    let run = find_run(store, &given)?;
    let events = store.events(&run.run_id, 1).map_err(store_problem)?;
    let view = RunView::of(&events);
    let panel = state_panel(&state, &run, &view, &mut KnownCalls::new()).await;
    let shown_from = transcript_start(&events, TRANSCRIPT_EVENTS);
    let live_from = (run.status.is_running() && view.finished.is_none())
        .then_some(view.last_seq.saturating_add(1));
    let page = pages::RunPage {
        run: &run,
        state: panel,
        events: &events[shown_from..],
        skipped: shown_from as u64,
        live_from,
        agents: view.agents.iter().map(|agent| agent.path.clone()).collect(),
    };
    Ok(Html(pages::run_page(&session.csrf, &page).into_string()))
}

#[derive(Debug, Deserialize)]
struct LiveQuery {
    from: Option<u64>,
}

/// A run's live view: the transcript's entries (`entry`), and the state
/// panel again (`state`) when events changed it, from the run's feed
/// ([`feed`]), shared by every page open on the run.
async fn run_live(
    State(state): State<DashboardState>,
    Path(given): Path<String>,
    Query(query): Query<LiveQuery>,
) -> Result<Response, PageError> {
    let run = find_run(&state.api.store, &given)?;
    let from = query.from.unwrap_or(1).max(1);
    feed::page_stream(&state, &run, from).await
}

/// The Jaeger page of `trace_id` when spans are exported over OTLP: the
/// Jaeger UI on the endpoint's host (`TROUPE_JAEGER_URL` names another).
pub(crate) fn jaeger_link(
    endpoint: Option<&str>,
    configured: Option<&str>,
    trace_id: &str,
) -> Option<String> {
    if let Some(base) = configured.filter(|base| !base.trim().is_empty()) {
        return Some(format!("{}/trace/{trace_id}", base.trim_end_matches('/')));
    }
    let endpoint = endpoint?;
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))?;
    let authority = rest.split('/').next()?;
    let host = match authority.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => authority,
    };
    (!host.is_empty()).then(|| format!("http://{host}:16686/trace/{trace_id}"))
}

async fn run_spans(
    State(state): State<DashboardState>,
    Extension(session): Extension<SessionView>,
    Path(given): Path<String>,
) -> Result<Html<String>, PageError> {
    let store = &state.api.store;
    let run = find_run(store, &given)?;
    let spans: Vec<troupe_telemetry::SpanRecord> = store
        .spans(&run.run_id)
        .map_err(store_problem)?
        .into_iter()
        .filter_map(|value| serde_json::from_value(value).ok())
        .collect();
    let rows = waterfall::rows(&spans);
    let jaeger = rows.first().and_then(|row| {
        jaeger_link(
            state.api.about.otlp_endpoint.as_deref(),
            std::env::var("TROUPE_JAEGER_URL").ok().as_deref(),
            &row.span.trace_id,
        )
    });
    let page = pages::spans_page(&session.csrf, &run, &rows, jaeger.as_deref());
    Ok(Html(page.into_string()))
}

/// What an action answers: a short fragment htmx puts where its form was.
fn done(text: &str) -> Response {
    Html(maud::html! { p.done { (text) } }.into_string()).into_response()
}

/// What an action that failed answers, as a fragment.
fn refused(err: &troupe_actors::RuntimeError) -> Response {
    let status = match err {
        troupe_actors::RuntimeError::UnknownRun(_)
        | troupe_actors::RuntimeError::UnknownAgent(_)
        | troupe_actors::RuntimeError::UnknownApproval(_) => StatusCode::NOT_FOUND,
        _ => StatusCode::CONFLICT,
    };
    (
        status,
        Html(maud::html! { p.refused { (err.to_string()) } }.into_string()),
    )
        .into_response()
}

async fn cancel_run(State(state): State<DashboardState>, Path(given): Path<String>) -> Response {
    let run = match find_run(&state.api.store, &given) {
        Ok(run) => run,
        Err(err) => return err.into_response(),
    };
    match state.api.runtime.cancel(&run.run_id).await {
        Ok(()) => done("Cancelling the run…"),
        Err(err) => refused(&err),
    }
}

#[derive(Debug, Deserialize)]
struct AgentForm {
    path: String,
}

async fn cancel_agent(
    State(state): State<DashboardState>,
    Path(given): Path<String>,
    Form(agent): Form<AgentForm>,
) -> Response {
    let run = match find_run(&state.api.store, &given) {
        Ok(run) => run,
        Err(err) => return err.into_response(),
    };
    match state
        .api
        .runtime
        .cancel_agent(&run.run_id, &agent.path)
        .await
    {
        Ok(()) => done("Cancelling the agent…"),
        Err(err) => refused(&err),
    }
}

#[derive(Debug, Deserialize)]
struct ApprovalForm {
    outcome: String,
}

/// Answers an approval through the run's broker, as the terminal and the
/// API do.
async fn answer_approval(
    State(state): State<DashboardState>,
    Path((given, approval_id)): Path<(String, String)>,
    Form(answer): Form<ApprovalForm>,
) -> Response {
    let run = match find_run(&state.api.store, &given) {
        Ok(run) => run,
        Err(err) => return err.into_response(),
    };
    let outcome = match ApprovalOutcome::parse(&answer.outcome) {
        Some(
            outcome @ (ApprovalOutcome::Allow
            | ApprovalOutcome::AllowAlways
            | ApprovalOutcome::Deny),
        ) => outcome,
        _ => {
            return problem(
                StatusCode::BAD_REQUEST,
                "Refused",
                "the answer is allow, allow_always or deny",
            );
        }
    };
    let said = outcome.as_str();
    match state
        .api
        .runtime
        .approve(&run.run_id, &approval_id, outcome, None)
        .await
    {
        Ok(()) => done(&format!("Answered: {said}")),
        Err(err) => refused(&err),
    }
}

/// The `price` of each provider in the user's config file (none when it
/// cannot be read: costs are then unknown, tokens still shown).
fn user_prices() -> HashMap<String, troupe_config::Price> {
    let config = crate::project::Locations::from_process()
        .map_err(|err| err.message)
        .and_then(|locations| locations.user_config().map_err(|err| err.to_string()));
    match config {
        Ok(config) => config
            .providers
            .into_iter()
            .filter_map(|(name, provider)| provider.price.map(|price| (name, price)))
            .collect(),
        Err(err) => {
            tracing::debug!(%err, "no prices for the costs page");
            HashMap::new()
        }
    }
}

/// The costs page's period.
#[derive(Debug, Deserialize)]
struct CostsQuery {
    days: Option<i64>,
}

/// Runs, each with its usage events.
type RunsWithUsage = Vec<(RunRecord, Vec<troupe_protocol::events::RunEvent>)>;

/// The runs of the last `days` days (at most [`MAX_COST_RUNS`], the
/// latest) with their usage events, and whether some were left out.
fn runs_with_usage(
    store: &Store,
    days: i64,
) -> Result<(RunsWithUsage, bool), troupe_store::StoreError> {
    let since = chrono::Utc::now() - chrono::Duration::days(days);
    let mut runs = store.list_runs(None)?;
    runs.retain(|run| run.started >= since);
    runs.sort_by_key(|run| std::cmp::Reverse(run.started));
    let capped = runs.len() > MAX_COST_RUNS;
    runs.truncate(MAX_COST_RUNS);
    let mut out = Vec::with_capacity(runs.len());
    for run in runs {
        let usage = store
            .events(&run.run_id, 1)?
            .into_iter()
            .filter(|event| matches!(event.kind, troupe_protocol::events::EventKind::Usage { .. }))
            .collect();
        out.push((run, usage));
    }
    Ok((out, capped))
}

async fn costs_page(
    State(state): State<DashboardState>,
    Extension(session): Extension<SessionView>,
    Query(query): Query<CostsQuery>,
) -> Result<Html<String>, PageError> {
    let days = query.days.unwrap_or(7).clamp(1, 365);
    let store = state.api.store.clone();
    let read = tokio::task::spawn_blocking(move || {
        let prices = user_prices();
        let (runs, capped) = runs_with_usage(&store, days)?;
        let sessions = store.list_sessions()?;
        Ok::<_, troupe_store::StoreError>((costs::tally(runs, &sessions, &prices), capped))
    })
    .await
    .map_err(store_problem)?;
    let (tally, capped) = read.map_err(store_problem)?;
    Ok(Html(
        pages::costs_page(&session.csrf, &tally, days, capped).into_string(),
    ))
}

/// The sessions list's search and page.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct SessionsQuery {
    /// Words the title, project, model or id contain.
    pub q: Option<String>,
    /// The page, from 0.
    pub page: Option<usize>,
}

/// One page of top-level sessions matching `query`, most recently updated
/// first, and whether a later page has any.
pub(crate) fn select_sessions(
    mut sessions: Vec<SessionMeta>,
    query: &SessionsQuery,
) -> (Vec<SessionMeta>, bool) {
    let needle = query.q.as_deref().unwrap_or("").trim().to_lowercase();
    sessions.retain(|meta| {
        !meta.is_child()
            && (needle.is_empty()
                || [
                    meta.title.as_str(),
                    &meta.cwd.display().to_string(),
                    meta.model.as_str(),
                    meta.id.as_str(),
                ]
                .iter()
                .any(|field| field.to_lowercase().contains(&needle)))
    });
    sessions.sort_by(|a, b| b.updated.cmp(&a.updated).then(b.id.cmp(&a.id)));
    let start = query.page.unwrap_or(0).saturating_mul(PAGE_SIZE);
    let has_next = sessions.len() > start.saturating_add(PAGE_SIZE);
    let page = sessions.into_iter().skip(start).take(PAGE_SIZE).collect();
    (page, has_next)
}

async fn sessions_list(
    State(state): State<DashboardState>,
    Extension(session): Extension<SessionView>,
    Query(query): Query<SessionsQuery>,
) -> Result<Html<String>, PageError> {
    let sessions = state.api.store.list_sessions().map_err(store_problem)?;
    let (shown, has_next) = select_sessions(sessions, &query);
    Ok(Html(
        pages::sessions_page(&session.csrf, &shown, &query, has_next).into_string(),
    ))
}

async fn session_show(
    State(state): State<DashboardState>,
    Extension(session): Extension<SessionView>,
    Path(given): Path<String>,
) -> Result<Html<String>, PageError> {
    let store = &state.api.store;
    let id = ids::resolve(store, IdKind::Session, &given).map_err(|err| not_found(&err.message))?;
    let meta = store
        .session(&id)
        .map_err(store_problem)?
        .ok_or_else(|| not_found(&format!("no session {id}")))?;
    let mut runs = store.list_runs(Some(&id)).map_err(store_problem)?;
    runs.sort_by_key(|run| std::cmp::Reverse(run.started));
    let history = store.load_history(&id).map_err(store_problem)?;
    let skipped = history.messages.len().saturating_sub(SESSION_MESSAGES);
    let page = pages::session_page(
        &session.csrf,
        &meta,
        &runs,
        &history.messages[skipped..],
        skipped,
    );
    Ok(Html(page.into_string()))
}

#[cfg(test)]
mod tests {
    use chrono::{Duration as Span, Utc};
    use troupe_store::RunState;

    use super::*;

    fn run(id: &str, session: &str, status: RunState, minutes_ago: i64) -> RunRecord {
        RunRecord {
            run_id: id.into(),
            session_id: session.into(),
            prompt: "p".into(),
            status,
            stop_reason: None,
            started: Utc::now() - Span::minutes(minutes_ago),
            ended: None,
            pid: 1,
            history: None,
        }
    }

    fn meta(id: &str, cwd: &str, run: Option<&str>) -> SessionMeta {
        SessionMeta {
            id: id.into(),
            title: format!("title {id}"),
            cwd: cwd.into(),
            provider: "anthropic".into(),
            model: "m".into(),
            created: Utc::now(),
            updated: Utc::now(),
            message_count: 1,
            parent: run.map(|_| "s1".to_string()),
            agent_path: None,
            run_id: run.map(Into::into),
            fork_of: None,
            branch_of: None,
        }
    }

    #[test]
    fn runs_are_filtered_newest_first_and_paged() {
        let sessions = vec![
            meta("s1", "/work/alpha", None),
            meta("s2", "/work/beta", None),
            meta("c1", "/work/alpha", Some("r1")),
            meta("c2", "/work/alpha", Some("r1")),
        ];
        let runs = vec![
            run("r1", "s1", RunState::Running, 1),
            run(
                "r2",
                "s2",
                RunState::Ended(troupe_protocol::events::RunStatus::Finished),
                5,
            ),
        ];
        let (all, more) = select_runs(runs.clone(), &sessions, &RunsQuery::default());
        assert!(!more);
        assert_eq!(all[0].run.run_id, "r1");
        assert_eq!(all[0].agents, 3);
        assert_eq!(all[1].project, "/work/beta");
        let by_status = RunsQuery {
            status: Some("finished".into()),
            ..RunsQuery::default()
        };
        let (finished, _) = select_runs(runs.clone(), &sessions, &by_status);
        assert_eq!(finished.len(), 1);
        assert_eq!(finished[0].run.run_id, "r2");
        let by_project = RunsQuery {
            project: Some("alpha".into()),
            ..RunsQuery::default()
        };
        assert_eq!(select_runs(runs, &sessions, &by_project).0.len(), 1);

        let many: Vec<RunRecord> = (0..PAGE_SIZE + 1)
            .map(|n| run(&format!("r{n}"), "s1", RunState::Running, n as i64))
            .collect();
        let (first, more) = select_runs(many.clone(), &sessions, &RunsQuery::default());
        assert_eq!((first.len(), more), (PAGE_SIZE, true));
        let second = RunsQuery {
            page: Some(1),
            ..RunsQuery::default()
        };
        let (rest, more) = select_runs(many, &sessions, &second);
        assert_eq!((rest.len(), more), (1, false));
    }

    #[test]
    fn sessions_are_searched_among_top_level_ones() {
        let sessions = vec![
            meta("s1", "/work/alpha", None),
            meta("s2", "/work/beta", None),
            meta("c1", "/work/alpha", Some("r1")),
        ];
        let (all, _) = select_sessions(sessions.clone(), &SessionsQuery::default());
        assert_eq!(all.len(), 2);
        let query = SessionsQuery {
            q: Some("BETA".into()),
            page: None,
        };
        let (found, more) = select_sessions(sessions, &query);
        assert_eq!((found.len(), more), (1, false));
        assert_eq!(found[0].id, "s2");
    }

    #[test]
    fn query_strings_are_encoded() {
        let filter = RunsQuery {
            status: Some("running".into()),
            project: Some("a b&c=<".into()),
            page: None,
        };
        assert_eq!(
            filter.query_string(2),
            "page=2&status=running&project=a%20b%26c%3D%3C"
        );
    }

    #[test]
    fn the_jaeger_link_follows_the_otlp_endpoint_or_the_setting() {
        assert_eq!(
            jaeger_link(Some("http://collector:4318/v1/traces"), None, "abc").as_deref(),
            Some("http://collector:16686/trace/abc")
        );
        assert_eq!(
            jaeger_link(
                Some("http://x:4318"),
                Some("https://jaeger.example/"),
                "abc"
            )
            .as_deref(),
            Some("https://jaeger.example/trace/abc")
        );
        assert_eq!(jaeger_link(None, None, "abc"), None);
        assert_eq!(jaeger_link(Some("collector:4318"), None, "abc"), None);
    }

    #[test]
    fn a_streak_of_text_counts_as_one_entry_of_the_transcript() {
        use troupe_protocol::events::EventKind;
        let event = |kind| model::test_event(0, "main", kind);
        let text = || event(EventKind::TextDelta { text: "a".into() });
        let notice = || event(EventKind::notice("n"));
        let events = vec![notice(), text(), text(), text(), notice(), text(), text()];
        assert_eq!(transcript_start(&events, 10), 0);
        assert_eq!(transcript_start(&events, 3), 1);
        assert_eq!(transcript_start(&events, 2), 4);
        assert_eq!(transcript_start(&events, 1), 5);
    }

    #[test]
    fn carriage_returns_do_not_reach_an_sse_field() {
        assert_eq!(sse_html("a\rb\nc"), "a&#13;b\nc");
    }
}
