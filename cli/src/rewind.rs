//! `troupe rewind SESSION [--to N] [--code|--conversation|--both] [--yes]`:
//! without `--to`, the session's runs numbered from 1 (start time, first
//! words of the prompt, the messages each added) and its branches; with
//! `--to N`, what going back to the end of run N changes, asked on a
//! terminal (`--yes` for scripts), then done: the conversation is cut back
//! (`troupe_store::Store::rewind_conversation`, the history from before kept
//! as a branch session) and the files restored.
//!
//! While a daemon holds the store, the listing and the preview are its views
//! (`POST /v1/views`) and the rewind is `POST /v1/sessions/{id}/rewind`
//! (refused while a run of the session is in progress); without one, the
//! store is opened here, after the runs a dead process left are marked
//! interrupted.

use std::io::{IsTerminal, Write};

use troupe_protocol::api::{RewindSession, SessionRewound, View};
use troupe_protocol::events::preview;
use troupe_store::{
    ConversationRewind, RewindRefusal, RewindRequest, RunRecord, SessionMeta, Store, StoreError,
    short_id,
};

use troupe_actors::{Runtime, RuntimeError};

use crate::client::DaemonClient;
use crate::ids::{self, IdKind};
use crate::project::Locations;
use crate::{EXIT_RUNTIME, EXIT_USAGE};

/// `troupe rewind`'s options.
#[derive(Debug, clap::Args)]
pub(crate) struct RewindArgs {
    /// Session id (or its short id, or a unique prefix of one).
    pub(crate) session: String,
    /// Go back to the end of this run of the session (1 is its first
    /// prompt); without it, its runs are listed.
    #[arg(long, value_name = "N")]
    pub(crate) to: Option<u64>,
    /// Restore the files only.
    #[arg(long, conflicts_with_all = ["conversation", "both"])]
    pub(crate) code: bool,
    /// Cut the conversation back only.
    #[arg(long, conflicts_with_all = ["code", "both"])]
    pub(crate) conversation: bool,
    /// Both the conversation and the files (the default).
    #[arg(long, conflicts_with_all = ["code", "conversation"])]
    pub(crate) both: bool,
    /// Rewind without asking (for scripts).
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
    /// Restore over files changed outside Troupe since the last checkpoint.
    #[arg(long)]
    pub(crate) force: bool,
}

/// What a rewind goes back on: the conversation, the files, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RewindScope {
    /// Restore the files to the end of the run.
    pub(crate) code: bool,
    /// Cut the conversation back to the end of the run.
    pub(crate) conversation: bool,
    /// Restore over files changed outside Troupe.
    pub(crate) force: bool,
}

impl RewindScope {
    /// The scope of the flags `--code` and `--conversation`: one of them
    /// alone is that part only; neither (or `--both`) is both.
    pub(crate) fn from_flags(code: bool, conversation: bool) -> Self {
        let (code, conversation) = match (code, conversation) {
            (true, false) => (true, false),
            (false, true) => (false, true),
            _ => (true, true),
        };
        Self {
            code,
            conversation,
            force: false,
        }
    }
}

/// A command's error: exit code and message.
type Failure = (u8, String);

/// The note the session's next prompt carries for the model: where the
/// conversation went back to, and the files only when they were restored.
pub(crate) fn rewind_note(to_run: u64, files_restored: bool) -> String {
    if files_restored {
        format!(
            "(The conversation was rewound to the end of prompt {to_run}; files were restored to that point.)"
        )
    } else {
        format!("(The conversation was rewound to the end of prompt {to_run}.)")
    }
}

/// What the files part of a rewind did.
pub(crate) struct FilesRewound {
    /// The line saying it.
    pub(crate) line: String,
    /// Files were restored (the model's note says so only then).
    pub(crate) restored: bool,
}

/// Restores the project's files of `session` to the end of its run
/// `to_run` (`force`: over files changed outside Troupe), in the process
/// holding `store`. A rewind's undo record (`before rewind`) is taken
/// first, so `troupe undo --redo` brings the files back. A session
/// without checkpoints has nothing to restore from, and says so.
pub(crate) async fn restore_code_to_run_end(
    store: &Store,
    data_dir: &std::path::Path,
    session: &str,
    to_run: u64,
    force: bool,
) -> Result<FilesRewound, Failure> {
    let report = crate::undo::undo_session(
        store,
        data_dir,
        session,
        crate::undo::UndoRequest {
            apply: true,
            force,
            rewind_to: Some(to_run),
            ..crate::undo::UndoRequest::default()
        },
    )
    .await?;
    Ok(FilesRewound {
        line: files_line(&report),
        restored: report.applied,
    })
}

/// What a rewind did to the files, in one line.
fn files_line(report: &crate::undo::UndoReport) -> String {
    if let Some(reason) = &report.nothing_to_do {
        return format!("the files were not restored: {reason}");
    }
    if !report.applied {
        return "the files were already as that run left them".to_owned();
    }
    let (added, removed, modified) = report.change_counts();
    format!(
        "the files: {added} added, {removed} removed, {modified} modified (the state before is checkpoint {}: `troupe undo {} --redo` brings it back)",
        report.before.unwrap_or_default(),
        short_id(&report.session_id)
    )
}

/// The exit code and message of a store error met while rewinding: a
/// refusal or an unknown session is the person's to fix.
pub(crate) fn failure(err: StoreError) -> Failure {
    let code = match &err {
        StoreError::Rewind(_) | StoreError::NotFound { .. } | StoreError::InvalidId { .. } => {
            EXIT_USAGE
        }
        _ => EXIT_RUNTIME,
    };
    (code, err.to_string())
}

/// Whether a store error is the refusal of a session with a run in
/// progress (the daemon answers 409).
pub(crate) fn is_busy(err: &StoreError) -> bool {
    matches!(err, StoreError::Rewind(RewindRefusal::RunInProgress { .. }))
}

/// The request that cuts `session` back to run `to`, with a new branch id
/// and the note saying whether the files were restored.
pub(crate) fn conversation_request(session: &str, to: u64, files_restored: bool) -> RewindRequest {
    RewindRequest {
        session: session.to_owned(),
        to_run: to,
        branch_id: uuid::Uuid::now_v7().to_string(),
        note: rewind_note(to, files_restored),
        files_restored,
    }
}

/// What a rewind did, as the daemon answers it and the command prints it.
pub(crate) fn rewound_answer(
    session: &str,
    to: u64,
    conversation: Option<&ConversationRewind>,
    files: Option<&str>,
) -> SessionRewound {
    let mut text = format!(
        "Rewound session {} to the end of run {to}",
        short_id(session)
    );
    let mut parts = Vec::new();
    if let Some(files) = files {
        parts.push(files.to_owned());
    }
    if let Some(done) = conversation {
        parts.push(format!(
            "the conversation: {} message(s) removed, {} run(s) undone; the conversation from before is kept as session {} (resume it with `troupe resume {}`)",
            done.removed_messages,
            done.undone_runs.len(),
            done.branch,
            short_id(&done.branch)
        ));
    }
    if !parts.is_empty() {
        text.push_str(": ");
        text.push_str(&parts.join("; "));
    }
    text.push('.');
    SessionRewound {
        session_id: session.to_owned(),
        to_run: to,
        branch: conversation.map(|done| done.branch.clone()),
        removed_messages: conversation.map_or(0, |done| done.removed_messages),
        undone_runs: conversation.map_or_else(Vec::new, |done| done.undone_runs.clone()),
        text,
    }
}

/// Why a rewind through a runtime failed.
#[derive(Debug)]
pub(crate) enum RewindError {
    /// The store refused or failed (a refusal changed nothing).
    Store(StoreError),
    /// The files could not be restored (the conversation was not touched).
    Files(Failure),
    /// The runtime is gone or refused otherwise.
    Runtime(RuntimeError),
}

impl RewindError {
    /// The exit code and message for the person.
    pub(crate) fn failure(self) -> Failure {
        match self {
            Self::Store(err) => failure(err),
            Self::Files(failed) => failed,
            Self::Runtime(err) => (EXIT_RUNTIME, err.to_string()),
        }
    }
}

/// The rewind of `session` to run `to` where a runtime holds the sessions
/// (the daemon, an embedded chat): the runtime cuts the conversation (the
/// session leaves its memory). See [`rewind_with`].
pub(crate) async fn rewind_on_runtime(
    runtime: &Runtime,
    store: &Store,
    data_dir: &std::path::Path,
    session: &str,
    to: u64,
    scope: RewindScope,
) -> Result<SessionRewound, RewindError> {
    rewind_with(store, data_dir, session, to, scope, |request| async move {
        runtime.rewind(request).await.map_err(|err| match err {
            RuntimeError::Store(err) => RewindError::Store(err),
            err => RewindError::Runtime(err),
        })
    })
    .await
}

/// The rewind on the store opened here (no daemon holds it): the cut is
/// made durable before the answer. See [`rewind_with`].
async fn rewind_here(
    store: &Store,
    data_dir: &std::path::Path,
    session: &str,
    to: u64,
    scope: RewindScope,
) -> Result<SessionRewound, Failure> {
    rewind_with(store, data_dir, session, to, scope, |request| async move {
        let done = store
            .rewind_conversation(&request)
            .map_err(RewindError::Store)?;
        store.flush().map_err(RewindError::Store)?;
        Ok(done)
    })
    .await
    .map_err(RewindError::failure)
}

/// A rewind: a run in progress (and, for the conversation, any refusal of
/// the cut) is found before anything changes; then the files go back, then
/// `cut` cuts the conversation, its note saying files were restored only
/// when they were.
async fn rewind_with<Cut, Cutting>(
    store: &Store,
    data_dir: &std::path::Path,
    session: &str,
    to: u64,
    scope: RewindScope,
    cut: Cut,
) -> Result<SessionRewound, RewindError>
where
    Cut: FnOnce(RewindRequest) -> Cutting,
    Cutting: std::future::Future<Output = Result<ConversationRewind, RewindError>>,
{
    match store.plan_rewind(session, to) {
        Err(err) if is_busy(&err) || scope.conversation => return Err(RewindError::Store(err)),
        _ => {}
    }
    let files = if scope.code {
        Some(
            restore_code_to_run_end(store, data_dir, session, to, scope.force)
                .await
                .map_err(RewindError::Files)?,
        )
    } else {
        None
    };
    let conversation = if scope.conversation {
        let restored = files.as_ref().is_some_and(|files| files.restored);
        Some(cut(conversation_request(session, to, restored)).await?)
    } else {
        None
    };
    Ok(rewound_answer(
        session,
        to,
        conversation.as_ref(),
        files.as_ref().map(|files| files.line.as_str()),
    ))
}

/// Messages `start..end` of a run as listed (`?` when unknown, `…` while it
/// runs).
fn messages_column(run: &RunRecord) -> String {
    match run.history {
        Some(bounds) => match bounds.end {
            Some(end) => format!("{}-{}", bounds.start, end),
            None => format!("{}-…", bounds.start),
        },
        None => "?".to_owned(),
    }
}

/// One line of the listing: number, start time, messages, status and the
/// first words of the prompt.
pub(crate) fn run_line(number: usize, run: &RunRecord) -> String {
    format!(
        "{number:>3}  {}  {:<9}  {:<11}  {}",
        run.started.format("%Y-%m-%d %H:%M"),
        messages_column(run),
        run.status.as_str(),
        preview(&run.prompt)
    )
}

/// The sessions that are branches of `session`, oldest first.
fn branches_of(store: &Store, session: &str) -> Result<Vec<SessionMeta>, StoreError> {
    let mut branches: Vec<SessionMeta> = store
        .list_sessions()?
        .into_iter()
        .filter(|meta| {
            meta.branch_of
                .as_ref()
                .is_some_and(|branch| branch.session == session)
        })
        .collect();
    branches.sort_by_key(|branch| branch.created);
    Ok(branches)
}

/// Writes the `rewind` view: the runs of session `given` and its branches,
/// or, with `to`, what rewinding to run `to` changes.
pub(crate) fn write_view(
    store: &Store,
    given: &str,
    to: Option<u64>,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let id = ids::resolve(store, IdKind::Session, given).map_err(|err| (err.code, err.message))?;
    let text = match to {
        None => listing(store, &id).map_err(failure)?,
        Some(to) => preview_text(store, &id, to).map_err(failure)?,
    };
    out.write_all(text.as_bytes())
        .map_err(|err| (EXIT_RUNTIME, err.to_string()))
}

/// The runs of `session`, numbered, and its branches.
fn listing(store: &Store, session: &str) -> Result<String, StoreError> {
    let runs = store.session_runs(session)?;
    let mut text = format!("session {session}\n");
    if runs.is_empty() {
        text.push_str("no runs yet\n");
    } else {
        text.push_str("  #  STARTED           MESSAGES   STATUS       PROMPT\n");
        for (i, run) in runs.iter().enumerate() {
            text.push_str(&run_line(i + 1, run));
            text.push('\n');
        }
    }
    for branch in branches_of(store, session)? {
        if let Some(of) = &branch.branch_of {
            text.push_str(&format!(
                "branch {} (the conversation before a rewind to {} message(s), {})\n",
                branch.id,
                of.cut_len,
                of.at.format("%Y-%m-%d %H:%M")
            ));
        }
    }
    if !runs.is_empty() {
        text.push_str(&format!(
            "go back to the end of run N with: troupe rewind {} --to N\n",
            short_id(session)
        ));
    }
    Ok(text)
}

/// What rewinding `session` to run `to` changes in its conversation.
fn preview_text(store: &Store, session: &str, to: u64) -> Result<String, StoreError> {
    let plan = store.plan_rewind(session, to)?;
    let runs = store.session_runs(session)?;
    let target = runs
        .iter()
        .find(|run| run.run_id == plan.run_id)
        .map(|run| {
            format!(
                " ({}, \"{}\")",
                run.started.format("%Y-%m-%d %H:%M"),
                preview(&run.prompt)
            )
        })
        .unwrap_or_default();
    let mut text = format!(
        "Rewinding session {session} to the end of run {to}{target}:\n  the conversation: {} of {} message(s) removed",
        plan.removed_messages(),
        plan.message_count
    );
    if plan.undone_runs.is_empty() {
        text.push('\n');
    } else {
        text.push_str(&format!(", {} run(s) undone:\n", plan.undone_runs.len()));
        let first = usize::try_from(to).unwrap_or(0) + 1;
        for (i, run) in plan.undone_runs.iter().enumerate() {
            text.push_str(&format!("  {}\n", run_line(first + i, run)));
        }
    }
    text.push_str("  the conversation from before is kept as a branch session\n");
    Ok(text)
}

/// How the command reaches the store: through the daemon that holds it,
/// or opened here.
enum Backend {
    Daemon(DaemonClient),
    /// The store opened here, and the data directory (its checkpoints).
    Here(Store, std::path::PathBuf),
}

impl Backend {
    fn find() -> Result<Self, Failure> {
        let locations = Locations::from_process().map_err(|err| (err.code, err.message))?;
        match DaemonClient::locate(&locations).map_err(|err| (err.code, err.message))? {
            Some(client) => Ok(Self::Daemon(client)),
            None => {
                let store = locations
                    .open_store()
                    .map_err(|err| (err.code, err.message))?;
                // Runs a dead process left unfinished are interrupted, not
                // in progress.
                crate::run::report_recovered(&store, false);
                Ok(Self::Here(store, locations.data_dir.clone()))
            }
        }
    }

    async fn view(&self, view: &View) -> Result<String, Failure> {
        let rendered = match self {
            Self::Daemon(client) => client
                .view(view)
                .await
                .map_err(|err| (err.code, err.message))?,
            Self::Here(store, _) => crate::sessions::render_view(store, view),
        };
        match crate::sessions::rendered_failure(&rendered) {
            Some(failed) => Err(failed),
            None => Ok(rendered.stdout),
        }
    }

    /// The session's checkpoints and the files each run changed.
    async fn checkpoints(&self, given: &str) -> Result<crate::undo::CheckpointList, Failure> {
        match self {
            Self::Daemon(client) => client
                .session_checkpoints(given)
                .await
                .map_err(|err| (err.code, err.message)),
            Self::Here(store, data_dir) => {
                crate::undo::list_checkpoints(store, data_dir, given).await
            }
        }
    }

    /// What restoring the files to the end of run `to` changes (nothing is
    /// changed).
    async fn files_preview(
        &self,
        given: &str,
        to: u64,
        force: bool,
    ) -> Result<crate::undo::UndoReport, Failure> {
        let request = crate::undo::UndoRequest {
            force,
            rewind_to: Some(to),
            ..crate::undo::UndoRequest::default()
        };
        match self {
            Self::Daemon(client) => client
                .undo_session(given, &request)
                .await
                .map_err(|err| (err.code, err.message)),
            Self::Here(store, data_dir) => {
                crate::undo::undo_session(store, data_dir, given, request).await
            }
        }
    }

    async fn rewind(
        &self,
        given: &str,
        to: u64,
        scope: RewindScope,
    ) -> Result<SessionRewound, Failure> {
        match self {
            Self::Daemon(client) => client
                .rewind_session(
                    given,
                    &RewindSession {
                        to,
                        conversation: scope.conversation,
                        code: scope.code,
                        force: scope.force,
                    },
                )
                .await
                .map_err(|err| (err.code, err.message)),
            Self::Here(store, data_dir) => {
                let id = ids::resolve(store, IdKind::Session, given)
                    .map_err(|err| (err.code, err.message))?;
                rewind_here(store, data_dir, &id, to, scope).await
            }
        }
    }
}

/// Asks on the terminal whether to go on; `None` when there is none to ask
/// on.
async fn confirmed() -> Option<bool> {
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return None;
    }
    let answer = tokio::task::spawn_blocking(|| crate::root_guard::ask("Rewind? [y/N] "))
        .await
        .ok()
        .flatten();
    Some(answer.as_deref().is_some_and(crate::root_guard::is_yes))
}

/// Runs `troupe rewind`; returns the exit code.
pub(crate) async fn rewind(args: RewindArgs) -> u8 {
    match rewind_command(args).await {
        Ok(()) => 0,
        Err((code, message)) => {
            eprintln!("troupe: {message}");
            code
        }
    }
}

async fn rewind_command(args: RewindArgs) -> Result<(), Failure> {
    let backend = Backend::find()?;
    let scope = RewindScope {
        force: args.force,
        ..RewindScope::from_flags(args.code, args.conversation)
    };
    let view = |to| View::Rewind {
        id: args.session.clone(),
        to,
    };
    let Some(to) = args.to else {
        let mut listing = backend.view(&view(None)).await?;
        listing.push_str(&crate::undo::run_files_text(
            &backend.checkpoints(&args.session).await?.runs,
        ));
        return std::io::stdout()
            .lock()
            .write_all(listing.as_bytes())
            .map_err(|err| (EXIT_RUNTIME, err.to_string()));
    };
    // What will change: refused here (nothing changed) when it cannot be.
    let preview = if scope.conversation {
        backend.view(&view(Some(to))).await?
    } else {
        String::new()
    };
    let files = if scope.code {
        let plan = backend
            .files_preview(&args.session, to, scope.force)
            .await?;
        if !plan.changed_outside.is_empty() && !scope.force {
            // Refused before anything changes, with the files named.
            return Err((
                crate::undo::EXIT_CONFLICT,
                crate::undo::conflict_text(&plan),
            ));
        }
        crate::undo::report_text(&plan)
    } else {
        String::new()
    };
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(preview.as_bytes());
    let _ = stdout.write_all(files.as_bytes());
    let _ = stdout.flush();
    drop(stdout);
    if !args.yes {
        match confirmed().await {
            Some(true) => {}
            Some(false) => return Err((EXIT_USAGE, "not rewound".to_owned())),
            None => {
                return Err((
                    EXIT_USAGE,
                    "not rewound: there is no terminal to ask on; add --yes to rewind".to_owned(),
                ));
            }
        }
    }
    let done = backend.rewind(&args.session, to, scope).await?;
    println!("{}", done.text);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_flag_is_that_part_and_none_is_both() {
        let both = RewindScope {
            code: true,
            conversation: true,
            force: false,
        };
        assert_eq!(RewindScope::from_flags(false, false), both);
        assert_eq!(RewindScope::from_flags(true, true), both);
        assert_eq!(
            RewindScope::from_flags(false, true),
            RewindScope {
                code: false,
                conversation: true,
                force: false,
            }
        );
        assert_eq!(
            RewindScope::from_flags(true, false),
            RewindScope {
                code: true,
                conversation: false,
                force: false,
            }
        );
    }

    #[test]
    fn the_note_names_files_only_when_they_were_restored() {
        assert!(!rewind_note(1, false).contains("file"));
        assert!(rewind_note(2, true).contains("files were restored"));
        assert!(rewind_note(2, true).contains("prompt 2"));
    }

    #[test]
    fn a_refusal_is_a_usage_error_and_a_run_in_progress_is_busy() {
        let busy = StoreError::Rewind(RewindRefusal::RunInProgress {
            session: "s".into(),
            run_id: "r".into(),
        });
        assert!(is_busy(&busy));
        assert_eq!(failure(busy).0, EXIT_USAGE);
        let out_of_range = StoreError::Rewind(RewindRefusal::OutOfRange {
            session: "s".into(),
            to: 9,
            runs: 2,
        });
        assert!(!is_busy(&out_of_range));
        assert_eq!(failure(out_of_range).0, EXIT_USAGE);
    }
}
