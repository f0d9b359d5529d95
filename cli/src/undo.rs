//! `troupe undo` and `troupe checkpoints list`: the files of a session's
//! project brought back to before the last turn that changed them (and
//! forward again with `--redo`), and the session's checkpoints listed with
//! what each costs.
//!
//! The work is done where the session store is open: by the running daemon
//! (`POST /v1/sessions/{id}/undo`, `GET /v1/sessions/{id}/checkpoints`), else
//! here. [`undo_session`] decides and restores in one place for both. What
//! to restore is planned from the checkpoint records alone
//! (`troupe_checkpoint::undo`); files changed outside Troupe since the last
//! state Troupe recorded are named and never overwritten without `--force`;
//! effects the files cannot show (network calls, installs, pushes, processes
//! left running, writes outside the project) are listed as not restored.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use troupe_checkpoint::{
    AgentUndoRefusal, ChangeKind, Checkpoint, CheckpointDiff, CheckpointKind, CheckpointStore,
    SnapshotMeta, UndoRefusal, plan_agent_undo, plan_redo, plan_rewind_files, plan_undo,
    undo_history,
};
use troupe_protocol::model::{ContentBlock, Message};
use troupe_store::Store;

use crate::client::DaemonClient;
use crate::ids::{self, IdKind};
use crate::{EXIT_RUNTIME, EXIT_USAGE};

/// Exit code of an undo refused because files changed outside Troupe.
pub(crate) const EXIT_CONFLICT: u8 = 1;

/// What an undo request asks for (the body of `POST
/// /v1/sessions/{id}/undo`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UndoRequest {
    /// Bring back what the last undo replaced.
    #[serde(default)]
    pub redo: bool,
    /// Restore over files changed outside Troupe.
    #[serde(default)]
    pub force: bool,
    /// Restore (false: only say what a restore would change).
    #[serde(default)]
    pub apply: bool,
    /// Undo only this agent's latest turn that changed files (its path in
    /// the agent tree, `main/reviewer-1`), leaving every other file alone.
    #[serde(default)]
    pub agent: Option<String>,
    /// Instead of the last turn, go back to the files as the session's run
    /// number `rewind_to` (from 1) left them (`troupe rewind --code`).
    #[serde(default)]
    pub rewind_to: Option<u64>,
}

/// One file an undo changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UndoFile {
    /// Relative, `/`-separated.
    pub path: String,
    /// `added`, `removed` or `modified` (what the undo does to it).
    pub change: String,
    /// Lines added and removed (none for a binary file).
    pub lines: Option<(u64, u64)>,
}

/// What an undo does (or did).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UndoReport {
    /// The session.
    pub session_id: String,
    /// The project whose files change.
    pub project: PathBuf,
    /// `undo` or `redo`.
    pub action: String,
    /// Only the files of one agent's turn were (or would be) restored.
    #[serde(default)]
    pub only_agent: bool,
    /// For a rewind: the run whose end the files go back to.
    #[serde(default)]
    pub to_run: Option<u64>,
    /// For a rewind with nothing to restore: why.
    #[serde(default)]
    pub nothing_to_do: Option<String>,
    /// The checkpoint restored.
    pub checkpoint: u64,
    /// The run and turn it was taken before (an undo), or empty.
    pub run_id: String,
    /// The turn.
    pub turn: u64,
    /// The agent whose turn it preceded.
    pub agent_path: String,
    /// When it was taken.
    pub time: String,
    /// What changes, by file.
    pub files: Vec<UndoFile>,
    /// Files changed outside Troupe since its last record that the restore
    /// would overwrite.
    pub changed_outside: Vec<String>,
    /// Effects of the undone turns that restoring files cannot take back.
    pub not_restored: Vec<String>,
    /// The restore was made.
    pub applied: bool,
    /// The checkpoint of the state before the restore (`undo --redo`
    /// brings it back), once applied.
    pub before: Option<u64>,
}

impl UndoReport {
    /// How many files it adds, removes and modifies.
    pub(crate) fn change_counts(&self) -> (usize, usize, usize) {
        let count = |change: &str| {
            self.files
                .iter()
                .filter(|file| file.change == change)
                .count()
        };
        (count("added"), count("removed"), count("modified"))
    }
}

/// Why an undo did not happen, with its exit code.
type Refusal = (u8, String);

fn runtime(err: impl std::fmt::Display) -> Refusal {
    (EXIT_RUNTIME, err.to_string())
}

/// The project whose files a session's runs changed: the project root of
/// its directory, as the runs found it.
pub(crate) fn session_project(store: &Store, id: &str) -> Result<PathBuf, Refusal> {
    let meta = store
        .session(id)
        .map_err(runtime)?
        .ok_or_else(|| (EXIT_USAGE, format!("no session {id}")))?;
    Ok(crate::sessions::project_of(&meta.cwd))
}

/// Drops the checkpoints of the sessions `removed` (a removed session's
/// family) from the store of `project`, when it has one: checkpoints go
/// with their session. Failures are logged (their objects then go at the
/// store's next prune).
pub(crate) async fn forget_checkpoints(
    data_dir: &Path,
    project: Option<PathBuf>,
    removed: &[String],
) {
    let Some(project) = project else {
        return;
    };
    if !CheckpointStore::exists(data_dir, &project) {
        return;
    }
    let store = match CheckpointStore::open(data_dir, &project).await {
        Ok(store) => store,
        Err(err) => {
            tracing::warn!(%err, "the removed sessions' checkpoints could not be dropped");
            return;
        }
    };
    for id in removed {
        if let Err(err) = store.remove_session(id).await {
            tracing::warn!(%err, session = %id, "the removed session's checkpoints could not be dropped");
        }
    }
}

/// The project's checkpoint store and `session`'s checkpoints in order, or
/// `None` when the project has no store (opening one would create it).
async fn session_checkpoints(
    data_dir: &Path,
    project: &Path,
    session: &str,
) -> Result<Option<(CheckpointStore, Vec<Checkpoint>)>, Refusal> {
    if !CheckpointStore::exists(data_dir, project) {
        return Ok(None);
    }
    let store = CheckpointStore::open(data_dir, project)
        .await
        .map_err(runtime)?;
    let checkpoints = store.checkpoints(session).await.map_err(runtime)?;
    Ok(Some((store, checkpoints)))
}

/// Refuses when a run of session `id` is in progress: its record says it
/// runs (the process holding the store has marked the runs of dead
/// processes as ended; a run's end is recorded before it is announced).
fn refuse_busy(store: &Store, id: &str) -> Result<(), Refusal> {
    let runs = store.list_runs(Some(id)).map_err(runtime)?;
    if let Some(run) = runs.iter().find(|run| run.status.is_running()) {
        return Err((
            EXIT_CONFLICT,
            format!(
                "run {} of session {id} is in progress; undo once it has ended (or cancel it: `troupe runs cancel {}`)",
                run.run_id, run.run_id
            ),
        ));
    }
    Ok(())
}

/// Plans, and with `request.apply` makes, the undo (or redo) of session
/// `given` (an id or a unique prefix), in the process holding `store`.
pub(crate) async fn undo_session(
    store: &Store,
    data_dir: &Path,
    given: &str,
    request: UndoRequest,
) -> Result<UndoReport, Refusal> {
    let id = ids::resolve(store, IdKind::Session, given).map_err(|err| (err.code, err.message))?;
    refuse_busy(store, &id)?;
    let project = session_project(store, &id)?;
    let no_checkpoints = || {
        (
            EXIT_USAGE,
            format!(
                "session {id} has no checkpoints: no turn of it changed files while checkpoints were on"
            ),
        )
    };
    // A rewind without checkpoints still cuts the conversation: its files
    // part says what it could not do.
    let without = |id: &str, project: PathBuf| {
        match request.rewind_to {
        Some(to_run) => Ok(files_as_left(
            id,
            project,
            to_run,
            Some("the session has no checkpoints (no turn of it changed files while checkpoints were on)".to_owned()),
        )),
        None => Err(no_checkpoints()),
    }
    };
    let Some((checkpoints_store, checkpoints)) =
        session_checkpoints(data_dir, &project, &id).await?
    else {
        return without(&id, project);
    };
    if checkpoints.is_empty() {
        return without(&id, project);
    }
    let history = undo_history(&checkpoints);
    let current = checkpoints_store.work_tree_id().await.map_err(runtime)?;
    let refused = |refusal: UndoRefusal| (EXIT_USAGE, format!("session {id}: {refusal}"));
    // One agent's turn alone: only the files it changed are restored.
    let mut only: Option<Vec<PathBuf>> = None;
    let (target, undone, kind) = if let Some(to_run) = request.rewind_to {
        let runs = store.session_runs(&id).map_err(runtime)?;
        let run = usize::try_from(to_run)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|at| runs.get(at))
            .ok_or_else(|| {
                (
                    EXIT_USAGE,
                    format!("session {id} has {} run(s): no run {to_run}", runs.len()),
                )
            })?;
        let later: Vec<&str> = runs
            .iter()
            .skip(usize::try_from(to_run).unwrap_or(usize::MAX))
            .map(|run| run.run_id.as_str())
            .collect();
        let Some(plan) = plan_rewind_files(&checkpoints, &history, &run.run_id, &later) else {
            return Ok(files_as_left(&id, project, to_run, None));
        };
        let target = checkpoints[plan.target].number;
        (
            plan.target,
            plan.undone,
            CheckpointKind::BeforeRewind { to_run, target },
        )
    } else if let (Some(agent), false) = (&request.agent, request.redo) {
        let mut changed: Vec<Vec<PathBuf>> = vec![Vec::new(); checkpoints.len()];
        for &turn in &history.undoable {
            let after = checkpoints
                .get(turn + 1)
                .map_or(current.as_str(), Checkpoint::tree);
            changed[turn] = checkpoints_store
                .diff_tree_ids(checkpoints[turn].tree(), after)
                .await
                .map_err(runtime)?
                .files
                .into_iter()
                .map(|file| file.path)
                .collect();
        }
        let plan = plan_agent_undo(&checkpoints, &history, agent, &|turn| changed[turn].clone())
            .map_err(|refusal| agent_refusal(&id, &checkpoints, refusal))?;
        let target = checkpoints[plan.target].number;
        only = Some(plan.files);
        (
            plan.target,
            vec![plan.target],
            CheckpointKind::BeforeAgentUndo { target },
        )
    } else if request.redo {
        let at = plan_redo(&history).map_err(refused)?;
        (at, Vec::new(), CheckpointKind::BeforeRedo)
    } else {
        let plan = plan_undo(&checkpoints, &history, &current).map_err(refused)?;
        let target = checkpoints[plan.target].number;
        (
            plan.target,
            plan.undone,
            CheckpointKind::BeforeUndo { target },
        )
    };
    let target = &checkpoints[target];
    let mut changes = checkpoints_store
        .diff_tree_ids(&current, target.tree())
        .await
        .map_err(runtime)?;
    if let Some(only) = &only {
        changes.files.retain(|file| only.contains(&file.path));
    }
    let changed_outside = match &history.expected_tree {
        Some(expected) if *expected != current => {
            let outside = checkpoints_store
                .diff_tree_ids(expected, &current)
                .await
                .map_err(runtime)?;
            overwritten(&outside, &changes)
        }
        _ => Vec::new(),
    };
    let undone_calls: Vec<&str> = undone
        .iter()
        .flat_map(|&at| checkpoints[at].record.meta.tool_call_ids.iter())
        .map(String::as_str)
        .collect();
    let not_restored = not_restored_effects(store, &id, &undone_calls, &project);
    let mut report = UndoReport {
        session_id: id.clone(),
        project,
        action: match (request.rewind_to, request.redo) {
            (Some(_), _) => "rewind",
            (None, true) => "redo",
            (None, false) => "undo",
        }
        .to_owned(),
        only_agent: only.is_some(),
        to_run: request.rewind_to,
        nothing_to_do: None,
        checkpoint: target.number,
        run_id: target.record.meta.run.clone(),
        turn: target.record.meta.turn,
        agent_path: target.record.meta.agent_path.clone(),
        time: target.record.time.clone(),
        files: undo_files(&changes),
        changed_outside,
        not_restored,
        applied: false,
        before: None,
    };
    if !request.apply {
        return Ok(report);
    }
    if !report.changed_outside.is_empty() && !request.force {
        return Err((EXIT_CONFLICT, conflict_text(&report)));
    }
    let meta = SnapshotMeta {
        session: id,
        agent_path: report.action.clone(),
        kind,
        ..SnapshotMeta::default()
    };
    let restored = match &only {
        Some(paths) => checkpoints_store.restore_paths(target, paths, meta).await,
        None => checkpoints_store.restore(target, meta).await,
    }
    .map_err(runtime)?;
    report.applied = true;
    report.before = Some(restored.before.number);
    Ok(report)
}

/// The report of a rewind whose files need nothing done: `reason` says why
/// (`None`: no later turn changed any, they are as the run left them).
fn files_as_left(id: &str, project: PathBuf, to_run: u64, reason: Option<String>) -> UndoReport {
    UndoReport {
        session_id: id.to_owned(),
        project,
        action: "rewind".to_owned(),
        only_agent: false,
        to_run: Some(to_run),
        nothing_to_do: reason,
        checkpoint: 0,
        run_id: String::new(),
        turn: 0,
        agent_path: String::new(),
        time: String::new(),
        files: Vec::new(),
        changed_outside: Vec::new(),
        not_restored: Vec::new(),
        applied: false,
        before: None,
    }
}

/// An agent's undo refused: nothing to undo, or the later turns (agent,
/// turn, run) that changed the same files.
fn agent_refusal(id: &str, checkpoints: &[Checkpoint], refusal: AgentUndoRefusal) -> Refusal {
    match refusal {
        AgentUndoRefusal::NothingToUndo(agent) => (
            EXIT_USAGE,
            format!(
                "session {id}: agent {} has no turn left that changed files",
                crate::sanitize::for_terminal(&agent)
            ),
        ),
        AgentUndoRefusal::Conflicts(conflicts) => {
            let mut text = String::from(
                "later turns changed the same files, so this agent's turn cannot be undone alone (undo the later turns first, or undo everything with `troupe undo`):",
            );
            for (path, later) in conflicts {
                let meta = &checkpoints[later].record.meta;
                text.push_str(&format!(
                    "\n  {} changed by {} in turn {} of run {}",
                    crate::sanitize::for_terminal(&path.to_string_lossy()),
                    crate::sanitize::for_terminal(&meta.agent_path),
                    meta.turn,
                    troupe_store::short_id(&meta.run)
                ));
            }
            (EXIT_CONFLICT, text)
        }
    }
}

/// The files of `changes` (what the undo does) that `outside` (what
/// changed outside since the last record) also touched. Pure.
fn overwritten(outside: &CheckpointDiff, changes: &CheckpointDiff) -> Vec<String> {
    outside
        .files
        .iter()
        .filter(|file| changes.files.iter().any(|change| change.path == file.path))
        .map(|file| file.path.to_string_lossy().into_owned())
        .collect()
}

fn undo_files(changes: &CheckpointDiff) -> Vec<UndoFile> {
    changes
        .files
        .iter()
        .map(|file| UndoFile {
            path: file.path.to_string_lossy().into_owned(),
            change: match file.kind {
                ChangeKind::Added => "added",
                ChangeKind::Removed => "removed",
                ChangeKind::Modified => "modified",
            }
            .to_owned(),
            lines: file.lines_added.zip(file.lines_removed),
        })
        .collect()
}

/// The effects of the calls `call_ids` (found in session `id` and its child
/// sessions) that restoring the project's files cannot take back.
fn not_restored_effects(store: &Store, id: &str, call_ids: &[&str], project: &Path) -> Vec<String> {
    if call_ids.is_empty() {
        return Vec::new();
    }
    let mut sessions = vec![id.to_owned()];
    if let Ok(children) = store.descendant_sessions(id) {
        sessions.extend(children.into_iter().map(|meta| meta.id));
    }
    let mut found = Vec::new();
    for session in sessions {
        let Ok(loaded) = store.load_history(&session) else {
            continue;
        };
        for message in &loaded.messages {
            found.extend(
                calls_of(message)
                    .filter(|(call_id, _, _)| call_ids.contains(call_id))
                    .filter_map(|(_, name, input)| outside_effect(name, &input, project)),
            );
        }
    }
    found.dedup();
    found
}

fn calls_of(message: &Message) -> impl Iterator<Item = (&str, &str, serde_json::Value)> {
    message.content.iter().filter_map(|block| match block {
        ContentBlock::ToolCall(call) => Some((
            call.id.as_str(),
            call.name.as_str(),
            serde_json::from_str(&call.input).unwrap_or_default(),
        )),
        _ => None,
    })
}

/// Programs whose effects reach beyond the project's files.
const NETWORK_PROGRAMS: [&str; 8] = ["curl", "wget", "ssh", "scp", "rsync", "nc", "ftp", "sftp"];
const PACKAGE_MANAGERS: [&str; 10] = [
    "npm", "pnpm", "yarn", "pip", "pip3", "cargo", "apt", "apt-get", "brew", "gem",
];
const INSTALL_WORDS: [&str; 4] = ["install", "add", "i", "upgrade"];

/// What call `name(input)` did that restoring the files of `project` cannot
/// take back, in a line for people; `None` when nothing. Pure.
pub(crate) fn outside_effect(
    name: &str,
    input: &serde_json::Value,
    project: &Path,
) -> Option<String> {
    match name {
        "bash" => {
            let command = input.get("command")?.as_str()?;
            let effects = command_effects(command);
            (!effects.is_empty()).then(|| {
                format!(
                    "bash `{}`: {}",
                    crate::sanitize::for_terminal(&first_line(command)),
                    effects.join(", ")
                )
            })
        }
        "write_file" | "edit_file" => {
            let path = input.get("path")?.as_str()?;
            let path = Path::new(path);
            let absolute = if path.is_absolute() {
                path.to_path_buf()
            } else {
                project.join(path)
            };
            (!absolute.starts_with(project)).then(|| {
                format!(
                    "{name} {}: a file outside the project",
                    crate::sanitize::for_terminal(&absolute.to_string_lossy())
                )
            })
        }
        "web_fetch" => None,
        other if other.starts_with("mcp__") => Some(format!(
            "{}: an MCP tool's effects are its server's",
            crate::sanitize::for_terminal(other)
        )),
        _ => None,
    }
}

fn first_line(command: &str) -> String {
    let line = command.lines().next().unwrap_or_default();
    let mut short: String = line.chars().take(80).collect();
    if short.len() < line.len() || command.lines().nth(1).is_some() {
        short.push('…');
    }
    short
}

/// What a shell line does beyond the files. Pure.
fn command_effects(command: &str) -> Vec<&'static str> {
    let syntax = troupe_shell::bash_ast::analyse(command);
    let mut effects = Vec::new();
    let mut add = |effect: &'static str| {
        if !effects.contains(&effect) {
            effects.push(effect);
        }
    };
    for simple in &syntax.commands {
        let words: Vec<&str> = simple.words().map(Option::unwrap_or_default).collect();
        let Some(program) = words
            .first()
            .map(|word| word.rsplit('/').next().unwrap_or(word))
        else {
            continue;
        };
        let second = words.get(1).copied().unwrap_or_default();
        if NETWORK_PROGRAMS.contains(&program) {
            add("a network call");
        }
        if PACKAGE_MANAGERS.contains(&program) && INSTALL_WORDS.contains(&second) {
            add("a package install");
        }
        if program == "git" && words.contains(&"push") {
            add("git push");
        }
        if matches!(program, "nohup" | "setsid" | "disown" | "daemon") {
            add("a process left running");
        }
    }
    if syntax.runs_in_background() {
        add("a process left running");
    }
    effects
}

/// The refusal when files changed outside would be overwritten.
pub(crate) fn conflict_text(report: &UndoReport) -> String {
    let mut text = format!(
        "files of {} changed outside Troupe since its last checkpoint and would be overwritten:",
        report.project.display()
    );
    for path in &report.changed_outside {
        text.push_str(&format!("\n  {}", crate::sanitize::for_terminal(path)));
    }
    text.push_str("\nnothing was changed; run again with --force to overwrite them");
    text
}

/// What the undo changes, for people.
pub(crate) fn report_text(report: &UndoReport) -> String {
    let mut out = String::new();
    let short = troupe_store::short_id(&report.session_id);
    let to_run = report.to_run.unwrap_or_default();
    if let Some(reason) = &report.nothing_to_do {
        return format!("the files: not restored: {reason}\n");
    }
    if report.action == "rewind" && report.checkpoint == 0 {
        return format!(
            "the files: as run {to_run} left them already (no later turn changed files)\n"
        );
    }
    let what = if report.action == "rewind" {
        format!(
            "brings the files back to the end of its run {to_run} (checkpoint {})",
            report.checkpoint
        )
    } else if report.action == "redo" {
        format!(
            "brings back the files as they were before the last undo (checkpoint {})",
            report.checkpoint
        )
    } else {
        format!(
            "restores the files to before turn {} of {} (checkpoint {}, {})",
            report.turn,
            if report.agent_path.is_empty() {
                "main"
            } else {
                &report.agent_path
            },
            report.checkpoint,
            report.time
        )
    };
    let verb = if report.applied { "done" } else { "plan" };
    let what = if report.only_agent {
        format!("{what}, only the files that turn changed")
    } else {
        what
    };
    out.push_str(&format!(
        "{} ({verb}): session {short} {what}\n",
        report.action
    ));
    let (mut plus, mut minus) = (0, 0);
    for file in &report.files {
        let mark = match file.change.as_str() {
            "added" => "A",
            "removed" => "D",
            _ => "M",
        };
        let lines = match file.lines {
            Some((a, r)) => {
                plus += a;
                minus += r;
                format!("  +{a} -{r}")
            }
            None => "  (binary)".to_owned(),
        };
        out.push_str(&format!(
            "  {mark} {}{lines}\n",
            crate::sanitize::for_terminal(&file.path)
        ));
    }
    let (added, removed, modified) = report.change_counts();
    out.push_str(&format!(
        "  {} files: {added} added, {removed} removed, {modified} modified (+{plus} -{minus})\n",
        report.files.len()
    ));
    if !report.changed_outside.is_empty() {
        out.push_str(
            "changed outside Troupe since its last checkpoint (overwritten only with --force):\n",
        );
        for path in &report.changed_outside {
            out.push_str(&format!("  {}\n", crate::sanitize::for_terminal(path)));
        }
    }
    if !report.not_restored.is_empty() {
        out.push_str("not restored (outside the project's files):\n");
        for effect in &report.not_restored {
            out.push_str(&format!("  - {effect}\n"));
        }
    }
    if let Some(before) = report.before {
        out.push_str(&format!(
            "the state before is checkpoint {before}: `troupe undo {short} --redo` brings it back\n"
        ));
    }
    out
}

/// Runs the undo where the store is: through the daemon when one runs,
/// else here.
async fn undo_anywhere(given: &str, request: UndoRequest) -> Result<UndoReport, Refusal> {
    let locations =
        crate::project::Locations::from_process().map_err(|err| (err.code, err.message))?;
    match DaemonClient::locate(&locations).map_err(|err| (err.code, err.message))? {
        Some(client) => client
            .undo_session(given, &request)
            .await
            .map_err(|err| (err.code, err.message)),
        None => {
            let store = locations
                .open_store()
                .map_err(|err| (err.code, err.message))?;
            // Runs a dead process left unfinished are marked interrupted.
            crate::run::report_recovered(&store, false);
            undo_session(&store, &locations.data_dir, given, request).await
        }
    }
}

/// The latest session of the current project, when none is named.
async fn session_or_latest(given: Option<String>) -> Result<String, Refusal> {
    if let Some(given) = given {
        return Ok(given);
    }
    let root = crate::sessions::project_of(&std::env::current_dir().unwrap_or_default());
    let rendered =
        crate::sessions::rendered(&crate::sessions::latest_session_view(root.clone())).await?;
    crate::sessions::latest_session_id(&rendered, &root)
}

/// `troupe undo [SESSION] [--redo] [--yes] [--force] [--json]`.
pub(crate) async fn undo(args: UndoArgs) -> u8 {
    match undo_command(args).await {
        Ok(()) => 0,
        Err((code, message)) => {
            eprintln!("troupe: {message}");
            code
        }
    }
}

async fn undo_command(args: UndoArgs) -> Result<(), Refusal> {
    let given = session_or_latest(args.session).await?;
    let request = UndoRequest {
        redo: args.redo,
        force: args.force,
        apply: false,
        agent: args.agent,
        rewind_to: None,
    };
    let plan = undo_anywhere(&given, request.clone()).await?;
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            print!("{}", report_text(&plan));
            return Err((
                EXIT_USAGE,
                "nothing was changed: confirm on a terminal, or add --yes".to_owned(),
            ));
        }
        eprint!("{}", report_text(&plan));
        if !plan.changed_outside.is_empty() && !args.force {
            return Err((EXIT_CONFLICT, conflict_text(&plan)));
        }
        eprint!("{}? [y/N] ", plan.action);
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer).map_err(runtime)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            return Err((EXIT_CONFLICT, "nothing was changed".to_owned()));
        }
    }
    let done = undo_anywhere(
        &plan.session_id,
        UndoRequest {
            apply: true,
            ..request
        },
    )
    .await?;
    if args.json {
        println!("{}", serde_json::to_string(&done).map_err(runtime)?);
    } else {
        print!("{}", report_text(&done));
    }
    Ok(())
}

/// Arguments of `troupe undo`.
#[derive(Debug, clap::Args)]
pub(crate) struct UndoArgs {
    /// The session (an id or a unique prefix; default: the latest session of
    /// the current project).
    pub session: Option<String>,
    /// Bring back what the last undo replaced.
    #[arg(long)]
    pub redo: bool,
    /// Do it without asking (scripts).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Overwrite files changed outside Troupe since the last checkpoint.
    #[arg(long)]
    pub force: bool,
    /// Undo only this agent's latest turn that changed files (its path in
    /// the agent tree, as `troupe checkpoints list` shows it), when no later
    /// turn changed the same files.
    #[arg(long, conflicts_with = "redo")]
    pub agent: Option<String>,
    /// Print what was done as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// One checkpoint, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ListedCheckpoint {
    /// Its number in the session.
    pub number: u64,
    /// Why it was taken (`turn`, `run end`, `before undo`, ...).
    pub kind: String,
    /// When.
    pub time: String,
    /// The run and turn it preceded.
    pub run_id: String,
    /// The turn.
    pub turn: u64,
    /// The agent.
    pub agent_path: String,
    /// Files changed since the previous checkpoint.
    pub files_changed: usize,
    /// Paths it left out.
    pub skipped: usize,
    /// Bytes its new objects take in the store.
    pub bytes: u64,
}

/// The answer of `GET /v1/sessions/{id}/checkpoints`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CheckpointList {
    /// The session's checkpoints, oldest first.
    pub checkpoints: Vec<ListedCheckpoint>,
    /// The bytes the project's checkpoint store takes.
    pub store_bytes: u64,
    /// The files each run of the session changed, runs numbered from 1.
    #[serde(default)]
    pub runs: Vec<RunFiles>,
}

/// The files one run of a session changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RunFiles {
    /// Its number in the session, from 1.
    pub number: u64,
    /// The run.
    pub run_id: String,
    /// The files it changed (relative, sorted); none when it changed none.
    pub files: Vec<String>,
}

/// The files each run of `session` changed, from its checkpoints
/// (`opened`: the project's store and the session's checkpoints, when it
/// has a store): from a run's first checkpoint to the files as it left them
/// (its `run end` record, else the next record, else the work tree).
async fn run_files(
    store: &Store,
    session: &str,
    opened: Option<&(CheckpointStore, Vec<Checkpoint>)>,
) -> Result<Vec<RunFiles>, Refusal> {
    let runs = store.session_runs(session).map_err(runtime)?;
    let mut listed = Vec::with_capacity(runs.len());
    for (run, number) in runs.iter().zip(1..) {
        let mut files = Vec::new();
        if let Some((checkpoints_store, checkpoints)) = opened
            && let Some((from, to)) = run_span(checkpoints, &run.run_id)
        {
            let to = match to {
                Some(at) => checkpoints[at].tree().to_owned(),
                None => checkpoints_store.work_tree_id().await.map_err(runtime)?,
            };
            files = checkpoints_store
                .diff_tree_ids(checkpoints[from].tree(), &to)
                .await
                .map_err(runtime)?
                .files
                .into_iter()
                .map(|file| file.path.to_string_lossy().into_owned())
                .collect();
        }
        listed.push(RunFiles {
            number,
            run_id: run.run_id.clone(),
            files,
        });
    }
    Ok(listed)
}

/// The patch of each file run `run` of `session` changed, from its
/// checkpoints: from the files before its first checkpoint to the files as
/// it left them (its `run end` record, else the next record, else the work
/// tree, staged without making a checkpoint), within `limits`. `None` when
/// the project has no checkpoint store or the run took no checkpoint.
pub(crate) async fn run_patches(
    store: &Store,
    data_dir: &Path,
    session: &str,
    run: &str,
    limits: troupe_checkpoint::PatchLimits,
) -> Result<Option<troupe_checkpoint::FilePatches>, String> {
    let project = session_project(store, session).map_err(|(_, why)| why)?;
    let Some((checkpoints_store, checkpoints)) = session_checkpoints(data_dir, &project, session)
        .await
        .map_err(|(_, why)| why)?
    else {
        return Ok(None);
    };
    let Some((from, to)) = run_span(&checkpoints, run) else {
        return Ok(None);
    };
    let to = match to {
        Some(at) => checkpoints[at].tree().to_owned(),
        None => checkpoints_store
            .work_tree_id()
            .await
            .map_err(|err| err.to_string())?,
    };
    checkpoints_store
        .file_patches(checkpoints[from].tree(), &to, &[], limits)
        .await
        .map(Some)
        .map_err(|err| err.to_string())
}

/// The positions of run `run`'s first checkpoint and of the record of the
/// files as it left them (its `run end`, else the record after its last;
/// `None`: the work tree); `None` when the run took none. Pure.
fn run_span(checkpoints: &[Checkpoint], run: &str) -> Option<(usize, Option<usize>)> {
    let of_run = |checkpoint: &Checkpoint| checkpoint.record.meta.run == run;
    let first = checkpoints.iter().position(of_run)?;
    let last = checkpoints.iter().rposition(of_run)?;
    let end = if checkpoints[last].record.meta.kind == CheckpointKind::RunEnd {
        Some(last)
    } else {
        (last + 1 < checkpoints.len()).then_some(last + 1)
    };
    Some((first, end))
}

/// The files each run changed, for people: one line a run, at most five
/// names.
pub(crate) fn run_files_text(runs: &[RunFiles]) -> String {
    const SHOWN: usize = 5;
    let mut out = String::from("files each run changed:\n");
    for run in runs {
        let mut names: Vec<String> = run
            .files
            .iter()
            .take(SHOWN)
            .map(|name| crate::sanitize::for_terminal(name).into_owned())
            .collect();
        if run.files.len() > SHOWN {
            names.push(format!("(+{} more)", run.files.len() - SHOWN));
        }
        let names = if names.is_empty() {
            "(none)".to_owned()
        } else {
            names.join(", ")
        };
        out.push_str(&format!("{:>3}  {names}\n", run.number));
    }
    out
}

/// The checkpoints of session `given`, in order, with the store's size.
pub(crate) async fn list_checkpoints(
    store: &Store,
    data_dir: &Path,
    given: &str,
) -> Result<CheckpointList, Refusal> {
    let id = ids::resolve(store, IdKind::Session, given).map_err(|err| (err.code, err.message))?;
    let project = session_project(store, &id)?;
    let opened = session_checkpoints(data_dir, &project, &id).await?;
    let runs = run_files(store, &id, opened.as_ref()).await?;
    let Some((checkpoints_store, checkpoints)) = opened else {
        return Ok(CheckpointList {
            checkpoints: Vec::new(),
            store_bytes: 0,
            runs,
        });
    };
    let mut listed = Vec::with_capacity(checkpoints.len());
    let mut previous: Option<&Checkpoint> = None;
    for checkpoint in &checkpoints {
        let files_changed = match previous {
            Some(previous) => checkpoints_store
                .diff_tree_ids(previous.tree(), checkpoint.tree())
                .await
                .map_err(runtime)?
                .files
                .len(),
            None => 0,
        };
        listed.push(ListedCheckpoint {
            number: checkpoint.number,
            kind: checkpoint.record.meta.kind.label().to_owned(),
            time: checkpoint.record.time.clone(),
            run_id: checkpoint.record.meta.run.clone(),
            turn: checkpoint.record.meta.turn,
            agent_path: checkpoint.record.meta.agent_path.clone(),
            files_changed,
            skipped: checkpoint.record.skipped.len(),
            bytes: checkpoints_store
                .added_bytes(checkpoint)
                .await
                .map_err(runtime)?,
        });
        previous = Some(checkpoint);
    }
    let store_bytes = checkpoints_store.size().await.map_err(runtime)?;
    Ok(CheckpointList {
        checkpoints: listed,
        store_bytes,
        runs,
    })
}

/// The listing for people.
pub(crate) fn list_text(listed: &[ListedCheckpoint], store_bytes: u64) -> String {
    let mut out = String::from(
        "  #  KIND           TIME                      RUN       TURN  AGENT          FILES  SKIPPED  BYTES\n",
    );
    for checkpoint in listed {
        out.push_str(&format!(
            "{:>3}  {:<13}  {:<24}  {:<8}  {:>4}  {:<13}  {:>5}  {:>7}  {}\n",
            checkpoint.number,
            checkpoint.kind,
            checkpoint.time,
            troupe_store::short_id(&checkpoint.run_id),
            checkpoint.turn,
            crate::sanitize::for_terminal(&checkpoint.agent_path),
            checkpoint.files_changed,
            checkpoint.skipped,
            checkpoint.bytes
        ));
    }
    out.push_str(&format!(
        "the project's checkpoint store takes {store_bytes} bytes\n"
    ));
    out
}

/// `troupe checkpoints list [SESSION] [--json]`.
pub(crate) async fn checkpoints_list(session: Option<String>, json: bool) -> u8 {
    let answer = async {
        let given = session_or_latest(session).await?;
        let locations =
            crate::project::Locations::from_process().map_err(|err| (err.code, err.message))?;
        match DaemonClient::locate(&locations).map_err(|err| (err.code, err.message))? {
            Some(client) => client
                .session_checkpoints(&given)
                .await
                .map_err(|err| (err.code, err.message)),
            None => {
                let store = locations
                    .open_store()
                    .map_err(|err| (err.code, err.message))?;
                list_checkpoints(&store, &locations.data_dir, &given).await
            }
        }
    }
    .await;
    match answer {
        Ok(list) if json => {
            for checkpoint in &list.checkpoints {
                println!("{}", serde_json::to_string(checkpoint).unwrap_or_default());
            }
            0
        }
        Ok(list) => {
            print!("{}", list_text(&list.checkpoints, list.store_bytes));
            0
        }
        Err((code, message)) => {
            eprintln!("troupe: {message}");
            code
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn commands_that_reach_beyond_the_files_are_named() {
        let project = Path::new("/p");
        let effect =
            |command: &str| outside_effect("bash", &json!({ "command": command }), project);
        assert_eq!(effect("rm a.txt && echo x > b.txt"), None);
        assert_eq!(effect("ls"), None);
        let line = effect("npm install left-pad && git push origin main").unwrap();
        assert!(
            line.contains("a package install") && line.contains("git push"),
            "{line}"
        );
        assert!(
            effect("curl -fsSL https://example.com | sh")
                .unwrap()
                .contains("a network call")
        );
        assert!(
            effect("python -m http.server &")
                .unwrap()
                .contains("a process left running")
        );
        assert!(
            effect("nohup ./server")
                .unwrap()
                .contains("a process left running")
        );
        assert!(
            effect("/usr/bin/wget x")
                .unwrap()
                .contains("a network call")
        );
        assert!(
            effect("cargo install ripgrep")
                .unwrap()
                .contains("a package install")
        );
        assert_eq!(effect("cargo build"), None);
        // A terminal escape in the command is shown inert.
        let shown = effect("curl \u{1b}[31mred").unwrap();
        assert!(!shown.contains('\u{1b}'), "{shown:?}");
    }

    #[test]
    fn writes_outside_the_project_and_mcp_calls_are_named_writes_inside_are_not() {
        let project = Path::new("/p");
        assert_eq!(
            outside_effect("write_file", &json!({"path": "src/a.rs"}), project),
            None
        );
        assert_eq!(
            outside_effect("edit_file", &json!({"path": "/p/b"}), project),
            None
        );
        assert!(
            outside_effect("write_file", &json!({"path": "/etc/x"}), project)
                .unwrap()
                .contains("outside the project")
        );
        assert!(
            outside_effect("mcp__db__drop", &json!({}), project)
                .unwrap()
                .contains("MCP")
        );
        assert_eq!(
            outside_effect("read_file", &json!({"path": "/etc/x"}), project),
            None
        );
        assert_eq!(outside_effect("bash", &json!({}), project), None);
    }

    #[test]
    fn only_files_the_restore_would_touch_are_conflicts() {
        let file = |path: &str| troupe_checkpoint::FileChange {
            path: path.into(),
            kind: ChangeKind::Modified,
            lines_added: Some(1),
            lines_removed: Some(1),
        };
        let diff = |files: Vec<troupe_checkpoint::FileChange>| CheckpointDiff {
            from_tree: String::new(),
            to_tree: String::new(),
            files,
        };
        let outside = diff(vec![file("a"), file("notes")]);
        let changes = diff(vec![file("a"), file("b")]);
        assert_eq!(overwritten(&outside, &changes), vec!["a".to_owned()]);
        assert!(overwritten(&diff(Vec::new()), &changes).is_empty());
    }

    #[test]
    fn the_report_lists_files_with_a_diff_stat_and_what_is_not_restored() {
        let report = UndoReport {
            session_id: "0193abcd-0000".into(),
            project: "/p".into(),
            action: "undo".into(),
            only_agent: false,
            to_run: None,
            nothing_to_do: None,
            checkpoint: 2,
            run_id: "r".into(),
            turn: 1,
            agent_path: "main".into(),
            time: "t".into(),
            files: vec![
                UndoFile {
                    path: "a.txt".into(),
                    change: "added".into(),
                    lines: Some((1, 0)),
                },
                UndoFile {
                    path: "b.txt".into(),
                    change: "removed".into(),
                    lines: Some((0, 1)),
                },
            ],
            changed_outside: Vec::new(),
            not_restored: vec!["bash `git push`: git push".into()],
            applied: true,
            before: Some(4),
        };
        let text = report_text(&report);
        assert!(text.contains("  A a.txt  +1 -0"), "{text}");
        assert!(text.contains("  D b.txt  +0 -1"), "{text}");
        assert!(
            text.contains("2 files: 1 added, 1 removed, 0 modified (+1 -1)"),
            "{text}"
        );
        assert!(
            text.contains("not restored") && text.contains("git push"),
            "{text}"
        );
        assert!(text.contains("--redo"), "{text}");
    }
}
