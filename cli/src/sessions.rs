//! `troupe sessions list|show|export|rm` (SPEC §1.1, §9): read-only views of the
//! store and removal. Listing reads session metadata only, never histories.
//! Child sessions (the transcripts of sub-agents and forks) are listed with
//! their parent, shown under it, and removed with it.

use std::io::Write;
use std::path::{Path, PathBuf};

use troupe_protocol::api::{CompactRequest, Rendered, View};
use troupe_protocol::events::{EventKind, RunEvent, preview};
use troupe_protocol::model::{ContentBlock, Message, Role};
use troupe_store::{RunRecord, SessionMeta, Store, StoreError, short_id};

use crate::client::DaemonClient;
use crate::ids::{self, IdKind, ShownIds};
use crate::project::Locations;
use crate::{EXIT_RUNTIME, EXIT_USAGE, SessionsCommand};

/// Writes `view` from `store` to `out`. While a daemon holds the store, the
/// daemon renders views (`POST /v1/views`), so the output is the same either
/// way.
fn write_view(store: &Store, view: &View, out: &mut impl Write) -> CommandResult {
    match view {
        View::SessionsList {
            json,
            project,
            tree,
            limit,
        } => {
            let filter = ListFilter {
                project: project.as_deref(),
                tree: *tree,
                limit: *limit,
            };
            list(store, *json, &filter, out)
        }
        View::SessionShow { id } => show(store, id, out),
        View::SessionExport { id } => export(store, id, out),
        View::Trace { run } => trace_view(store, run, out),
        View::RunsList { json } => runs_list(store, *json, out),
        View::RunShow { id } => run_show(store, id, out),
        View::Rewind { id, to } => crate::rewind::write_view(store, id, *to, out),
    }
}

/// What `runs list` prints when the store holds no run.
pub(crate) const NO_RUNS: &str = "no runs yet";

/// One line of `runs list`: id (as `shown` shows it), status, start time,
/// the prompt's start.
pub(crate) fn format_runs_list_line(run: &RunRecord, shown: &ShownIds) -> String {
    format!(
        "{:<ID_COLUMN$}  {:<11}  {}  {}",
        shown.get(&run.run_id),
        run.status.as_str(),
        run.started.format("%Y-%m-%d %H:%M"),
        preview(&run.prompt)
    )
}

fn runs_list(store: &Store, json: bool, out: &mut impl Write) -> CommandResult {
    let mut runs = store.list_runs(None).map_err(runtime_error)?;
    runs.sort_by(|a, b| b.started.cmp(&a.started).then(b.run_id.cmp(&a.run_id)));
    if json {
        for run in &runs {
            let line = serde_json::to_string(run).map_err(runtime_error)?;
            writeln!(out, "{line}").map_err(runtime_error)?;
        }
        return Ok(());
    }
    if runs.is_empty() {
        return writeln!(out, "{NO_RUNS}").map_err(runtime_error);
    }
    writeln!(
        out,
        "{:<ID_COLUMN$}  {:<11}  {:<16}  PROMPT",
        "RUN", "STATUS", "STARTED"
    )
    .map_err(runtime_error)?;
    let shown = ShownIds::new(runs.iter().map(|run| run.run_id.as_str()));
    for run in &runs {
        writeln!(out, "{}", format_runs_list_line(run, &shown)).map_err(runtime_error)?;
    }
    Ok(())
}

fn run_show(store: &Store, given: &str, out: &mut impl Write) -> CommandResult {
    let id = ids::resolve(store, IdKind::Run, given).map_err(|err| (err.code, err.message))?;
    let Some(run) = store.run(&id).map_err(runtime_error)? else {
        return Err((
            EXIT_USAGE,
            format!("no run {id}; list runs with `troupe runs list`"),
        ));
    };
    let events = store.events(&id, 1).map_err(runtime_error)?;
    let mut text = format!(
        "run      {}\nsession  {}\nstatus   {}",
        run.run_id,
        run.session_id,
        run.status.as_str()
    );
    if let Some(reason) = run.stop_reason.as_deref().filter(|r| !r.is_empty()) {
        text.push_str(&format!(" ({reason})"));
    }
    text.push_str(&format!("\nstarted  {}", run.started.to_rfc3339()));
    if let Some(ended) = run.ended {
        text.push_str(&format!("\nended    {}", ended.to_rfc3339()));
    }
    text.push_str(&format!(
        "\nevents   {} (follow with: troupe runs attach {})\nprompt   {}",
        events.len(),
        short_id(&run.run_id),
        run.prompt
    ));
    if run.status.is_running() {
        for line in pending_approval_lines(&run.run_id, &events) {
            text.push('\n');
            text.push_str(&line);
        }
    }
    writeln!(out, "{text}").map_err(runtime_error)
}

/// One line per approval of run `run_id` that `events` request and do not
/// resolve: its number in the run, what it asks, and how to answer it.
pub(crate) fn pending_approval_lines(run_id: &str, events: &[RunEvent]) -> Vec<String> {
    let mut pending: Vec<(&str, String)> = Vec::new();
    for event in events {
        match &event.kind {
            EventKind::ApprovalRequested {
                approval_id,
                tool,
                args,
                ..
            } => pending.push((approval_id, crate::approval::heading(tool, args))),
            EventKind::ApprovalResolved { approval_id, .. } => {
                pending.retain(|(id, _)| id != approval_id)
            }
            _ => {}
        }
    }
    let short = short_id(run_id);
    pending
        .into_iter()
        .map(|(approval_id, heading)| {
            let number = approval_id
                .strip_prefix(run_id)
                .and_then(|rest| rest.strip_prefix('-'))
                .unwrap_or(approval_id);
            format!(
                "approval {number}  {}  (answer: troupe approve {short} {number} allow|deny)",
                preview(&heading)
            )
        })
        .collect()
}

/// Renders `view` from `store` into text (what the daemon sends back).
pub(crate) fn render_view(store: &Store, view: &View) -> Rendered {
    let mut out = Vec::new();
    let result = write_view(store, view, &mut out);
    let (code, stderr) = match result {
        Ok(()) => (0, String::new()),
        Err((code, message)) => (code, format!("troupe: {message}\n")),
    };
    Rendered {
        code,
        stdout: String::from_utf8_lossy(&out).into_owned(),
        stderr,
    }
}

/// Prints a view: rendered by the running daemon when there is one, else
/// from the store opened here. Returns the exit code.
pub(crate) async fn print_view(view: View) -> u8 {
    match rendered(&view).await {
        Ok(rendered) => {
            let _ = std::io::stdout()
                .lock()
                .write_all(rendered.stdout.as_bytes());
            let _ = std::io::stderr()
                .lock()
                .write_all(rendered.stderr.as_bytes());
            rendered.code
        }
        Err((code, message)) => {
            eprintln!("troupe: {message}");
            code
        }
    }
}

/// Renders a view: by the running daemon when there is one, else from the
/// store opened here (and closed again).
pub(crate) async fn rendered(view: &View) -> Result<Rendered, (u8, String)> {
    let locations = Locations::from_process().map_err(|err| (err.code, err.message))?;
    let mut client = DaemonClient::locate(&locations).map_err(|err| (err.code, err.message))?;
    // A daemon that ended on a hung store write left its record: the next
    // client starts a fresh one (which marks the runs it left interrupted
    // and says why its predecessor ended), unless daemons are off.
    if client.is_none()
        && crate::daemon::home::stall_recorded(&locations.data_dir)
        && !crate::daemon::spawn::daemons_off_by_env()
    {
        client = DaemonClient::locate_or_start(&locations).await.ok();
    }
    if let Some(client) = client {
        return client
            .view(view)
            .await
            .map_err(|err| (err.code, err.message));
    }
    let store = locations
        .open_store()
        .map_err(|err| (err.code, err.message))?;
    // Runs a dead process left unfinished show as interrupted.
    crate::run::report_recovered(&store, false);
    Ok(render_view(&store, view))
}

/// The project root of the directory `dir` (see
/// [`troupe_config::paths::find_project_root`]): `sessions list`, `resume
/// --last` and `chat --continue` consider the sessions whose directory is
/// this root or below it.
pub(crate) fn project_of(dir: &Path) -> PathBuf {
    troupe_config::paths::find_project_root(dir)
}

/// The view that finds the most recently updated top-level session of the
/// project at `root`.
pub(crate) fn latest_session_view(root: PathBuf) -> View {
    View::SessionsList {
        json: true,
        project: Some(root),
        tree: false,
        limit: Some(1),
    }
}

/// The id of the session [`latest_session_view`] rendered, or why there is
/// none.
pub(crate) fn latest_session_id(rendered: &Rendered, root: &Path) -> Result<String, (u8, String)> {
    if let Some(failed) = rendered_failure(rendered) {
        return Err(failed);
    }
    let id = rendered
        .stdout
        .lines()
        .next()
        .and_then(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .and_then(|meta| meta.get("id")?.as_str().map(str::to_string));
    id.ok_or_else(|| {
        (
            EXIT_USAGE,
            format!(
                "no session in the project {}; list every project's with `troupe sessions list --all`",
                root.display()
            ),
        )
    })
}

/// The exit code and message of a view that failed, `None` when it did
/// not.
pub(crate) fn rendered_failure(rendered: &Rendered) -> Option<(u8, String)> {
    if rendered.code == 0 {
        return None;
    }
    let message = rendered.stderr.trim();
    let message = message.strip_prefix("troupe: ").unwrap_or(message);
    Some((rendered.code, message.to_string()))
}

/// Which sessions `sessions list` shows.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ListFilter<'a> {
    /// Only those whose directory is this project root or below it.
    pub(crate) project: Option<&'a Path>,
    /// Child sessions (sub-agents' and forks') too.
    pub(crate) tree: bool,
    /// At most this many.
    pub(crate) limit: Option<usize>,
}

impl ListFilter<'_> {
    /// The sessions of `sessions` (newest first) the filter keeps, in the
    /// same order. `in_project` says whether a session's directory is the
    /// project root or below it.
    pub(crate) fn apply(
        &self,
        sessions: Vec<SessionMeta>,
        in_project: impl Fn(&Path, &Path) -> bool,
    ) -> Vec<SessionMeta> {
        sessions
            .into_iter()
            .filter(|meta| self.tree || (meta.parent.is_none() && meta.fork_of.is_none()))
            .filter(|meta| self.project.is_none_or(|root| in_project(&meta.cwd, root)))
            .take(self.limit.unwrap_or(usize::MAX))
            .collect()
    }
}

/// Whether the directory `cwd` is `root` or below it, as written or once
/// symbolic links are resolved.
fn in_project(cwd: &Path, root: &Path) -> bool {
    cwd.starts_with(root)
        || std::fs::canonicalize(cwd)
            .is_ok_and(|cwd| cwd.starts_with(std::fs::canonicalize(root).unwrap_or_default()))
}

/// Runs a `troupe sessions` subcommand; returns the exit code.
pub(crate) async fn sessions(command: SessionsCommand) -> u8 {
    let view = match command {
        SessionsCommand::List {
            json,
            all,
            tree,
            limit,
        } => View::SessionsList {
            json,
            project: if all {
                None
            } else {
                Some(project_of(&std::env::current_dir().unwrap_or_default()))
            },
            tree,
            limit: limit.and_then(|limit| usize::try_from(limit).ok()),
        },
        SessionsCommand::Show { id } => View::SessionShow { id },
        SessionsCommand::Export { id } => View::SessionExport { id },
        SessionsCommand::Rm { id } => return remove_command(&id).await,
        SessionsCommand::Compact { id } => return compact_command(&id).await,
        SessionsCommand::Clean => return clean_command().await,
    };
    print_view(view).await
}

/// `troupe sessions rm ID`: by the running daemon when there is one (it
/// refuses a session with a run in progress), else on the store opened here.
async fn remove_command(id: &str) -> u8 {
    let locations = match Locations::from_process() {
        Ok(locations) => locations,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    match DaemonClient::locate(&locations) {
        Ok(Some(client)) => {
            return match client.remove_session(id).await {
                Ok(text) => {
                    println!("{text}");
                    0
                }
                Err(err) => {
                    eprintln!("troupe: {err}");
                    err.code
                }
            };
        }
        Ok(None) => {}
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    }
    let store = match locations.open_store() {
        Ok(store) => store,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    crate::run::report_recovered(&store, false);
    let project = session_id(&store, id)
        .ok()
        .and_then(|full| crate::undo::session_project(&store, &full).ok());
    match remove(&store, id, &mut std::io::stdout().lock()) {
        Ok(removed) => {
            // The spill files and the checkpoints go with their sessions.
            troupe_tools::output::remove_spill_dirs(&locations.data_dir, &removed);
            crate::undo::forget_checkpoints(&locations.data_dir, project, &removed).await;
            0
        }
        Err((code, message)) => {
            eprintln!("troupe: {message}");
            code
        }
    }
}

/// `troupe sessions clean`: by the running daemon when there is one, else
/// on the store opened here; prints what was removed.
async fn clean_command() -> u8 {
    let answer = async {
        let locations = Locations::from_process().map_err(|err| (err.code, err.message))?;
        match DaemonClient::locate(&locations).map_err(|err| (err.code, err.message))? {
            Some(client) => client.clean().await.map_err(|err| (err.code, err.message)),
            None => {
                let store = locations
                    .open_store()
                    .map_err(|err| (err.code, err.message))?;
                crate::run::report_recovered(&store, false);
                crate::retention::clean_now(&store, &locations).await
            }
        }
    }
    .await;
    match answer {
        Ok(cleaned) => {
            println!("{}", cleaned.text());
            0
        }
        Err((code, message)) => {
            eprintln!("troupe: {message}");
            code
        }
    }
}

/// `troupe sessions compact ID`: by the running daemon when there is one,
/// else on a runtime started here; prints what the compaction did.
async fn compact_command(given: &str) -> u8 {
    let locations = match Locations::from_process() {
        Ok(locations) => locations,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    let answer = match DaemonClient::locate(&locations) {
        Ok(Some(client)) => {
            let cwd = std::env::current_dir().unwrap_or_default();
            client
                .compact_session(given, &compact_request(&cwd, std::env::vars()))
                .await
                .map_err(|err| (err.code, err.message))
        }
        Ok(None) => compact_here(&locations, given).await,
        Err(err) => Err((err.code, err.message)),
    };
    match answer {
        Ok(text) => {
            println!("{text}");
            0
        }
        Err((code, message)) => {
            eprintln!("troupe: {message}");
            code
        }
    }
}

/// The `POST /v1/sessions/{id}/compact` body sent from this shell: its
/// directory and environment, so the daemon reads the configuration a run
/// started here would read.
pub(crate) fn compact_request(
    cwd: &std::path::Path,
    env: impl IntoIterator<Item = (String, String)>,
) -> CompactRequest {
    CompactRequest {
        cwd: cwd.to_path_buf(),
        provider: None,
        model: None,
        env: Some(env.into_iter().collect()),
    }
}

/// Compacts `given` on a runtime of this process; the text to print.
async fn compact_here(locations: &Locations, given: &str) -> Result<String, (u8, String)> {
    let store = locations
        .open_store()
        .map_err(|err| (err.code, err.message))?;
    let id = crate::ids::resolve(&store, crate::ids::IdKind::Session, given)
        .map_err(|err| (err.code, err.message))?;
    crate::run::report_recovered(&store, false);
    let prepared = crate::setup::prepare(
        &crate::project::RunOptions::default(),
        None,
        &store,
        locations,
        Some(&id),
    )
    .await
    .map_err(|err| (err.code, err.message))?;
    let runtime = troupe_actors::Runtime::start(store.clone())
        .await
        .map_err(runtime_error)?;
    let submission = prepared.into_submission(String::new(), troupe_actors::Approver::Absent);
    let outcome = match runtime.compact(submission).await {
        Ok(handle) => handle.outcome.await.map_err(runtime_error),
        Err(err) => Err(compact_refusal(err)),
    };
    runtime.shutdown().await;
    if let Err(err) = store.flush() {
        tracing::warn!(%err, "the store could not be flushed");
    }
    compacted_text(&outcome?)
}

/// The exit code and message of a refused compaction.
pub(crate) fn compact_refusal(err: troupe_actors::RuntimeError) -> (u8, String) {
    match err {
        troupe_actors::RuntimeError::NothingToCompact(_)
        | troupe_actors::RuntimeError::UnknownSession(_) => (EXIT_USAGE, err.to_string()),
        err => runtime_error(err),
    }
}

/// What a compaction run's outcome says: its text when it compacted, else
/// the error.
pub(crate) fn compacted_text(outcome: &troupe_actors::RunOutcome) -> Result<String, (u8, String)> {
    match outcome.status {
        troupe_protocol::events::RunStatus::Finished => Ok(outcome.final_text.clone()),
        _ => Err((EXIT_RUNTIME, outcome.final_text.clone())),
    }
}

type CommandResult = Result<(), (u8, String)>;

fn runtime_error(err: impl std::fmt::Display) -> (u8, String) {
    (EXIT_RUNTIME, err.to_string())
}

/// The full session id `given` (an id or a unique prefix of one) names.
fn session_id(store: &Store, given: &str) -> Result<String, (u8, String)> {
    ids::resolve(store, IdKind::Session, given).map_err(|err| (err.code, err.message))
}

fn meta_or_usage(store: &Store, id: &str) -> Result<SessionMeta, (u8, String)> {
    match store.session(id).map_err(runtime_error)? {
        Some(meta) => Ok(meta),
        None => Err((
            EXIT_USAGE,
            format!("no session {id}; list sessions with `troupe sessions list`"),
        )),
    }
}

/// `troupe trace RUN`: the run's span tree from the local span store. `RUN`
/// is a run id or a unique prefix of one.
fn trace_view(store: &Store, given: &str, out: &mut impl Write) -> CommandResult {
    let run_id = ids::resolve(store, IdKind::Run, given).map_err(|err| (err.code, err.message))?;
    let run_id = run_id.as_str();
    if store.run(run_id).map_err(runtime_error)?.is_none() {
        return Err((
            EXIT_USAGE,
            format!("no run {run_id}; see `troupe sessions show SESSION` for run ids"),
        ));
    }
    match crate::telemetry::span_tree(store, run_id) {
        Ok(Some(tree)) => writeln!(out, "{}", tree.trim_end()).map_err(runtime_error),
        Ok(None) => Err((
            EXIT_RUNTIME,
            format!("no spans were recorded for run {run_id}"),
        )),
        Err(err) => Err(runtime_error(err)),
    }
}

/// Width of the id column of `sessions list` and `runs list` (a short id's
/// length; longer ids, which are not UUIDs, push the rest of their line
/// right).
pub(crate) const ID_COLUMN: usize = troupe_store::SHORT_ID_LEN;

/// What `sessions list` prints when the store holds no session.
pub(crate) const NO_SESSIONS: &str = "no sessions yet";

/// What `sessions list` prints when the project at `root` has no session but
/// others do.
pub(crate) fn no_sessions_here(root: &Path) -> String {
    format!(
        "no sessions in {} yet; `troupe sessions list --all` lists every project's",
        root.display()
    )
}

/// The header line of `sessions list`, aligned with [`format_list_line`].
pub(crate) fn list_header() -> String {
    format!(
        "{:<ID_COLUMN$}  {:<16}  {:>5}  {:<24}  TITLE",
        "ID", "UPDATED", "MSGS", "MODEL"
    )
}

/// One line per session, newest first, by short id (as `shown` shows it). A
/// child session's line ends with `  ↳ PARENT AGENT_PATH`; a top-level
/// session's line has no suffix.
pub(crate) fn format_list_line(meta: &SessionMeta, shown: &ShownIds) -> String {
    let mut line = format!(
        "{:<ID_COLUMN$}  {}  {:>5}  {:<24}  {}",
        shown.get(&meta.id),
        meta.updated.format("%Y-%m-%d %H:%M"),
        meta.message_count,
        meta.model,
        meta.title
    );
    if let Some(parent) = &meta.parent {
        line.push_str(&format!("  ↳ {}", shown.get(parent)));
        if let Some(agent_path) = &meta.agent_path {
            line.push_str(&format!(" {agent_path}"));
        }
    }
    if let Some(branch) = &meta.branch_of {
        line.push_str(&format!("  (branch of {})", shown.get(&branch.session)));
    }
    line
}

/// One line of `sessions show` per child session: id (as `shown` shows it),
/// agent path, message count, title.
pub(crate) fn format_child_line(child: &SessionMeta, shown: &ShownIds) -> String {
    format!(
        "child     {}  {}  {} message{}  {}",
        shown.get(&child.id),
        child.agent_path.as_deref().unwrap_or("-"),
        child.message_count,
        if child.message_count == 1 { "" } else { "s" },
        child.title
    )
    .trim_end()
    .to_string()
}

/// One line of `sessions show` per run: id (as `shown` shows it), status
/// and, when it says more than the status, the stop reason (`finished
/// (end_turn)`, `interrupted`).
pub(crate) fn format_run_line(run: &RunRecord, shown: &ShownIds) -> String {
    let status = run.status.as_str();
    let id = shown.get(&run.run_id);
    match run.stop_reason.as_deref() {
        Some(reason) if !reason.is_empty() && reason != status => {
            format!("run       {id}  {status} ({reason})")
        }
        _ => format!("run       {id}  {status}"),
    }
}

fn list(store: &Store, json: bool, filter: &ListFilter, out: &mut impl Write) -> CommandResult {
    let stored = store.list_sessions().map_err(runtime_error)?;
    let any = !stored.is_empty();
    let sessions = filter.apply(stored, in_project);
    // JSON lines stay one session per line: no header, nothing when empty.
    if !json {
        let first = match (sessions.is_empty(), filter.project) {
            (false, _) => list_header(),
            (true, Some(root)) if any => no_sessions_here(root),
            (true, _) => NO_SESSIONS.to_string(),
        };
        writeln!(out, "{first}").map_err(runtime_error)?;
    }
    let shown = ShownIds::new(sessions.iter().flat_map(|meta| {
        let branched = meta.branch_of.as_ref().map(|b| b.session.as_str());
        std::iter::once(meta.id.as_str())
            .chain(meta.parent.as_deref())
            .chain(branched)
    }));
    for meta in &sessions {
        let line = if json {
            serde_json::to_string(meta).map_err(runtime_error)?
        } else {
            format_list_line(meta, &shown)
        };
        writeln!(out, "{line}").map_err(runtime_error)?;
    }
    Ok(())
}

/// A message as people read it in `sessions show`.
pub(crate) fn format_message(message: &Message) -> String {
    let role = match message.role {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let mut lines = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::Text { text } => lines.push(text.trim_end().to_string()),
            ContentBlock::Thinking { thinking, .. } => {
                lines.push(format!("(thinking) {}", preview(thinking)))
            }
            ContentBlock::RedactedThinking { .. } => lines.push("(redacted thinking)".into()),
            ContentBlock::ToolCall(call) => {
                lines.push(format!("→ {} {}", call.name, preview(&call.input)))
            }
            ContentBlock::ToolResult(result) => lines.push(format!(
                "{} {}",
                if result.is_error { "✗" } else { "←" },
                preview(&result.joined_text())
            )),
            ContentBlock::Image { media_type, .. } => lines.push(format!("(image {media_type})")),
        }
    }
    format!("[{role}] {}", lines.join("\n  "))
}

fn show(store: &Store, given: &str, out: &mut impl Write) -> CommandResult {
    let id = &session_id(store, given)?;
    let meta = meta_or_usage(store, id)?;
    let mut text = format!(
        "session   {}\ntitle     {}\ncwd       {}\nmodel     {} ({})\ncreated   {}\nupdated   {}\nmessages  {}\n",
        meta.id,
        meta.title,
        meta.cwd.display(),
        meta.model,
        meta.provider,
        meta.created.to_rfc3339(),
        meta.updated.to_rfc3339(),
        meta.message_count
    );
    if let Some(parent) = &meta.parent {
        text.push_str(&format!("parent    {parent}\n"));
    }
    if let Some(agent_path) = &meta.agent_path {
        text.push_str(&format!("agent     {agent_path}\n"));
    }
    if let Some(run_id) = &meta.run_id {
        text.push_str(&format!("from run  {run_id}\n"));
    }
    let runs = store.list_runs(Some(id)).map_err(runtime_error)?;
    let shown = ShownIds::new(runs.iter().map(|run| run.run_id.as_str()));
    for run in runs.iter().rev() {
        text.push_str(&format_run_line(run, &shown));
        text.push('\n');
    }
    let children = store.child_sessions(id).map_err(runtime_error)?;
    let shown = ShownIds::new(children.iter().map(|child| child.id.as_str()));
    for child in &children {
        text.push_str(&format_child_line(child, &shown));
        text.push('\n');
    }
    let loaded = store.load_history(id).map_err(runtime_error)?;
    for skipped in &loaded.skipped {
        text.push_str(&format!(
            "(record {} unreadable: {})\n",
            skipped.index, skipped.reason
        ));
    }
    text.push('\n');
    for message in &loaded.messages {
        text.push_str(&format_message(message));
        text.push('\n');
    }
    out.write_all(text.as_bytes()).map_err(runtime_error)
}

fn export(store: &Store, given: &str, out: &mut impl Write) -> CommandResult {
    let id = &session_id(store, given)?;
    meta_or_usage(store, id)?;
    store.export_jsonl(id, out).map_err(runtime_error)?;
    out.flush().map_err(runtime_error)
}

/// Removes a session and its children; returns the ids removed.
fn remove(store: &Store, given: &str, out: &mut impl Write) -> Result<Vec<String>, (u8, String)> {
    let id = &removable_session(store, given)?;
    let removed = store.remove_session(id).map_err(runtime_error)?;
    writeln!(out, "{}", removed_text(id, &removed)).map_err(runtime_error)?;
    Ok(removed)
}

/// The full id of the session `given` names, for removal: it must exist,
/// though its metadata may be damaged (listing and cleanup skip such a
/// session, so removing it is the only way its records go).
pub(crate) fn removable_session(store: &Store, given: &str) -> Result<String, (u8, String)> {
    let id = session_id(store, given)?;
    if !matches!(store.session(&id), Err(StoreError::Corrupt { .. })) {
        meta_or_usage(store, &id)?;
    }
    Ok(id)
}

/// What `sessions rm` says once `removed` (the session `id` and its child
/// sessions) are gone.
pub(crate) fn removed_text(id: &str, removed: &[String]) -> String {
    match removed.iter().filter(|removed| *removed != id).count() {
        0 => format!("removed session {id}"),
        1 => format!("removed session {id} and its 1 child session"),
        n => format!("removed session {id} and its {n} child sessions"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_protocol::model::{ToolCall, ToolResult};
    use troupe_store::RunState;

    #[test]
    fn messages_read_well() {
        let call = Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Text {
                    text: "Looking.".into(),
                },
                ContentBlock::ToolCall(ToolCall {
                    id: "1".into(),
                    name: "read_file".into(),
                    input: r#"{"path":"a"}"#.into(),
                }),
            ],
        };
        assert_eq!(
            format_message(&call),
            "[assistant] Looking.\n  → read_file {\"path\":\"a\"}"
        );
        let result = Message::tool_results(vec![ToolResult::text("1", "boom", true)]);
        assert_eq!(format_message(&result), "[tool] ✗ boom");
    }

    fn meta(id: &str, parent: Option<&str>, agent_path: Option<&str>) -> SessionMeta {
        let at = chrono::DateTime::parse_from_rfc3339("2026-11-01T09:30:00Z")
            .unwrap()
            .to_utc();
        SessionMeta {
            id: id.into(),
            title: "Explore the parser".into(),
            cwd: "/repo".into(),
            provider: "claude".into(),
            model: "claude-sonnet-4-5".into(),
            created: at,
            updated: at,
            message_count: 1,
            parent: parent.map(Into::into),
            agent_path: agent_path.map(Into::into),
            run_id: parent.map(|_| "r1".into()),
            fork_of: None,
            branch_of: None,
        }
    }

    #[test]
    fn branches_are_marked_with_the_session_they_were_rewound_from() {
        let mut branch = meta("b1", None, None);
        branch.branch_of = Some(troupe_store::Branch {
            session: "s1".into(),
            cut_len: 4,
            at: branch.created,
        });
        let line = format_list_line(&branch, &ShownIds::default());
        assert!(
            line.ends_with("Explore the parser  (branch of s1)"),
            "{line}"
        );
    }

    #[test]
    fn child_sessions_are_marked_with_their_parent() {
        let pad = " ".repeat(ID_COLUMN - 2);
        let top = format_list_line(&meta("s1", None, None), &ShownIds::default());
        assert_eq!(
            top,
            format!(
                "s1{pad}  2026-11-01 09:30      1  claude-sonnet-4-5         Explore the parser"
            )
        );
        let child = format_list_line(
            &meta("c1", Some("s1"), Some("main/explorer-1")),
            &ShownIds::default(),
        );
        assert_eq!(
            child,
            format!(
                "c1{pad}  2026-11-01 09:30      1  claude-sonnet-4-5         Explore the parser  ↳ s1 main/explorer-1"
            )
        );
        let unnamed = format_list_line(&meta("c2", Some("s1"), None), &ShownIds::default());
        assert!(unnamed.ends_with("Explore the parser  ↳ s1"), "{unnamed}");

        let shown = format_child_line(
            &meta("c1", Some("s1"), Some("main/explorer-1")),
            &ShownIds::default(),
        );
        assert_eq!(
            shown,
            "child     c1  main/explorer-1  1 message  Explore the parser"
        );
        let mut empty = meta("c2", Some("s1"), None);
        empty.title.clear();
        empty.message_count = 0;
        assert_eq!(
            format_child_line(&empty, &ShownIds::default()),
            "child     c2  -  0 messages"
        );
    }

    #[test]
    fn the_list_keeps_the_projects_top_level_sessions_up_to_the_limit() {
        let mut fork = meta("f1", None, None);
        fork.fork_of = Some(troupe_store::ForkBase {
            session: "s1".into(),
            len: 2,
        });
        let mut elsewhere = meta("o1", None, None);
        elsewhere.cwd = "/other".into();
        let mut below = meta("b1", None, None);
        below.cwd = "/repo/src".into();
        let sessions = vec![
            meta("s2", None, None),
            meta("c1", Some("s2"), Some("main/explorer-1")),
            fork,
            elsewhere,
            below,
            meta("s1", None, None),
        ];
        let ids = |filter: ListFilter| -> Vec<String> {
            filter
                .apply(sessions.clone(), |cwd, root| cwd.starts_with(root))
                .into_iter()
                .map(|meta| meta.id)
                .collect()
        };
        let root = Path::new("/repo");
        let here = ListFilter {
            project: Some(root),
            ..ListFilter::default()
        };
        assert_eq!(ids(here), ["s2", "b1", "s1"]);
        assert_eq!(
            ids(ListFilter {
                limit: Some(2),
                ..here
            }),
            ["s2", "b1"]
        );
        assert_eq!(
            ids(ListFilter { tree: true, ..here }),
            ["s2", "c1", "f1", "b1", "s1"]
        );
        assert_eq!(ids(ListFilter::default()), ["s2", "o1", "b1", "s1"]);
    }

    #[test]
    fn the_latest_session_is_the_first_json_line_or_a_usage_error() {
        let rendered = |code: u8, stdout: &str, stderr: &str| Rendered {
            code,
            stdout: stdout.into(),
            stderr: stderr.into(),
        };
        let root = Path::new("/repo");
        assert_eq!(
            latest_session_id(&rendered(0, "{\"id\":\"s2\"}\n", ""), root),
            Ok("s2".to_string())
        );
        let (code, message) = latest_session_id(&rendered(0, "", ""), root).unwrap_err();
        assert_eq!(code, EXIT_USAGE);
        assert!(
            message.contains("no session in the project /repo"),
            "{message}"
        );
        assert_eq!(
            latest_session_id(&rendered(1, "", "troupe: locked\n"), root),
            Err((1, "locked".to_string()))
        );
    }

    #[test]
    fn the_list_header_names_the_columns_above_them() {
        let header = list_header();
        let line = format_list_line(
            &meta("0193a1b2-0000-7000-8000-000000000000", None, None),
            &ShownIds::default(),
        );
        assert!(header.starts_with("ID  "), "{header}");
        for (column, value) in [
            ("UPDATED", "2026-11-01"),
            ("MODEL", "claude"),
            ("TITLE", "Explore"),
        ] {
            assert_eq!(
                header.find(column),
                line.find(value),
                "{column} above {value}:\n{header}\n{line}"
            );
        }
        // The message count is right-aligned under MSGS.
        assert_eq!(
            header.find("MSGS").map(|at| at + 4),
            line.find("  1  ").map(|at| at + 3)
        );
    }

    fn run_record(status: RunState, reason: Option<&str>) -> RunRecord {
        RunRecord {
            run_id: "r1".into(),
            session_id: "s1".into(),
            prompt: "p".into(),
            status,
            stop_reason: reason.map(Into::into),
            started: chrono::Utc::now(),
            ended: None,
            pid: 1,
            history: None,
        }
    }

    fn approval_event(kind: EventKind) -> RunEvent {
        RunEvent {
            seq: 1,
            ts: "2026-11-01T09:30:00Z".into(),
            run_id: RUN.into(),
            session_id: "s1".into(),
            agent_path: "main".into(),
            kind,
        }
    }

    const RUN: &str = "0193a1f2-0c4d-7e01-8a2b-3c4d5e6f7a8b";

    #[test]
    fn pending_approvals_are_listed_by_their_number_in_the_run() {
        let asked = |n: u32, command: &str| {
            approval_event(EventKind::ApprovalRequested {
                approval_id: format!("{RUN}-{n}"),
                tool: "bash".into(),
                args: format!("{{\"command\":\"{command}\"}}"),
                reason: "asks".into(),
                always_rule: None,
            })
        };
        let events = vec![
            asked(1, "ls"),
            approval_event(EventKind::ApprovalResolved {
                approval_id: format!("{RUN}-1"),
                outcome: troupe_protocol::events::ApprovalOutcome::Allow,
            }),
            asked(2, "rm x"),
        ];
        let lines = pending_approval_lines(RUN, &events);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("approval 2  bash wants to run: "),
            "{lines:?}"
        );
        assert!(
            lines[0].ends_with("(answer: troupe approve 5e6f7a8b 2 allow|deny)"),
            "{lines:?}"
        );
        assert!(pending_approval_lines(RUN, &events[..2]).is_empty());
    }

    #[test]
    fn run_lines_give_the_status_once_and_a_reason_only_when_it_adds_something() {
        use troupe_protocol::events::RunStatus;
        let finished = RunState::Ended(RunStatus::Finished);
        assert_eq!(
            format_run_line(
                &run_record(finished, Some("end_turn")),
                &ShownIds::default()
            ),
            "run       r1  finished (end_turn)"
        );
        let interrupted = RunState::Ended(RunStatus::Interrupted);
        assert_eq!(
            format_run_line(
                &run_record(interrupted, Some("interrupted")),
                &ShownIds::default()
            ),
            "run       r1  interrupted"
        );
        assert_eq!(
            format_run_line(&run_record(RunState::Running, None), &ShownIds::default()),
            "run       r1  running"
        );
    }
}
