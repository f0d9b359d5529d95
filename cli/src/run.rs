//! `troupe run`: one task to completion, on the running daemon when there is
//! one (see [`crate::client`]) and else on an embedded runtime (SPEC §1.1).
//!
//! Submits the prompt, renders the
//! run's events (prose on stderr, or JSON lines on stdout), answers approvals on
//! the terminal, cancels on Ctrl-C, SIGTERM or SIGHUP (a second one exits at
//! once), prints the final answer on stdout and exits with the run's status
//! code (128 + the signal's number for a run a signal cancelled).
//!
//! The prompt is the `PROMPT` argument, or all of stdin for `-`; an empty one
//! is a usage error.

use std::collections::HashSet;
use std::io::Read;
use std::sync::Arc;

use futures::future::BoxFuture;
use troupe_actors::{Approver, RunHandle, Runtime};
use troupe_loader::recover_interrupted_runs;
use troupe_protocol::api::{RunLimits, RunRequest};
use troupe_protocol::events::RunEvent;
use troupe_store::Store;
use troupe_tools::memory::MEMORY_SETTLE_LIMIT;

use crate::client::{DaemonClient, RemoteRun};
use crate::follow::{Answerer, Approvals, Followed, OnSignal, RunLink, follow};
use crate::ids::{self, IdKind};
use crate::project::{Locations, RunOptions, SetupError};
use crate::render::RenderStyle;
use crate::setup::Prepared;
use crate::signals::StopSignals;
use crate::{EXIT_RUNTIME, ResumeArgs, RunArgs, RunFlags};

/// SPEC §9: what `troupe resume ID` says when no prompt is given.
pub(crate) const CONTINUE_PROMPT: &str =
    "Continue where you left off. If the task is done, say so briefly.";

/// The prompt argument that means "read the prompt from stdin".
pub(crate) const STDIN_PROMPT: &str = "-";

/// The prompt a run gets from its `PROMPT` argument: the argument itself, or
/// for `-` everything `read_stdin` returns without its trailing line break.
/// A prompt that is empty or only whitespace is a usage error.
pub(crate) fn prompt_from(
    arg: &str,
    read_stdin: impl FnOnce() -> std::io::Result<String>,
) -> Result<String, SetupError> {
    if arg != STDIN_PROMPT {
        if arg.trim().is_empty() {
            return Err(SetupError::usage(
                "the prompt is empty: give the task as an argument, or `-` to read it from stdin",
            ));
        }
        return Ok(arg.to_string());
    }
    let text = read_stdin()
        .map_err(|err| SetupError::usage(format!("cannot read the prompt from stdin: {err}")))?;
    let text = text
        .strip_suffix('\n')
        .map(|rest| rest.strip_suffix('\r').unwrap_or(rest))
        .unwrap_or(&text);
    if text.trim().is_empty() {
        return Err(SetupError::usage(
            "the prompt read from stdin (`-`) is empty: pipe the task in, e.g. `echo TASK | troupe run -`",
        ));
    }
    Ok(text.to_string())
}

/// All of the process's stdin as text.
fn read_all_stdin() -> std::io::Result<String> {
    let mut text = String::new();
    std::io::stdin().lock().read_to_string(&mut text)?;
    Ok(text)
}

/// Runs `troupe run`; `color` says whether progress is coloured.
pub(crate) async fn run(args: RunArgs, color: bool) -> u8 {
    let prompt = match prompt_from(&args.prompt, read_all_stdin) {
        Ok(prompt) => prompt,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    start(prompt, args.session.as_deref(), &args.flags, color).await
}

/// Runs `troupe resume ID [PROMPT]`.
pub(crate) async fn resume(args: ResumeArgs, color: bool) -> u8 {
    let (id, prompt) = match resume_target(args.last, args.id, args.prompt) {
        Ok(target) => target,
        Err(message) => {
            eprintln!("troupe: {message}");
            return crate::EXIT_USAGE;
        }
    };
    let prompt = match prompt {
        Some(arg) => match prompt_from(&arg, read_all_stdin) {
            Ok(prompt) => prompt,
            Err(err) => {
                eprintln!("troupe: {err}");
                return err.code;
            }
        },
        None => CONTINUE_PROMPT.to_string(),
    };
    let id = match id {
        Some(id) => id,
        None => match latest_session(&args.flags).await {
            Ok(id) => id,
            Err((code, message)) => {
                eprintln!("troupe: {message}");
                return code;
            }
        },
    };
    start(prompt, Some(&id), &args.flags, color).await
}

/// The session id (`None`: the latest, `--last`) and the prompt of `troupe
/// resume`: with `--last` its one positional argument is the prompt.
fn resume_target(
    last: bool,
    id: Option<String>,
    prompt: Option<String>,
) -> Result<(Option<String>, Option<String>), String> {
    match (last, id, prompt) {
        (false, id, prompt) => Ok((id, prompt)),
        (true, said, None) => Ok((None, said)),
        (true, Some(_), Some(_)) => Err(
            "`troupe resume --last` takes what to say, not a session id; give one or the other"
                .into(),
        ),
        (true, None, Some(prompt)) => Ok((None, Some(prompt))),
    }
}

/// `resume --last`: the most recently updated top-level session of the
/// project of `--cwd` or the current directory.
async fn latest_session(flags: &RunFlags) -> Result<String, (u8, String)> {
    let current = std::env::current_dir().unwrap_or_default();
    let dir = match &flags.cwd {
        Some(dir) => current.join(dir),
        None => current,
    };
    let root = crate::sessions::project_of(&dir);
    let rendered =
        crate::sessions::rendered(&crate::sessions::latest_session_view(root.clone())).await?;
    crate::sessions::latest_session_id(&rendered, &root)
}

/// Opens the store, recovers interrupted runs, prepares and executes a run.
/// `session` is the id, or a unique prefix of the id, of a session to continue.
async fn start(prompt: String, session: Option<&str>, flags: &RunFlags, color: bool) -> u8 {
    let options = RunOptions::from_flags(flags);
    let locations = match Locations::from_process() {
        Ok(locations) => locations,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    // A continued session keeps its own directory unless --cwd moves it.
    let mut project_warnings = Vec::new();
    if session.is_none() || flags.cwd.is_some() {
        match crate::root_guard::check_project_dir(
            &locations,
            flags.cwd.as_deref(),
            flags.confirm_cwd,
        )
        .await
        {
            Ok(warnings) => project_warnings = warnings,
            Err(err) => {
                eprintln!("troupe: {}", crate::sanitize::for_terminal(&err.message));
                return err.code;
            }
        }
    }
    // Said once the data directory proved usable, with the run's other
    // start-up warnings.
    let warn_about_project = || {
        for warning in &project_warnings {
            eprintln!("troupe: {}", crate::sanitize::for_terminal(warning));
        }
    };
    if flags.no_daemon && flags.repository.is_some() {
        eprintln!(
            "troupe: --repository is checked out by a daemon; run it without --no-daemon and TROUPE_NO_DAEMON"
        );
        return crate::EXIT_USAGE;
    }
    if !flags.no_daemon {
        return match DaemonClient::locate_or_start(&locations).await {
            Ok(client) => {
                warn_about_project();
                start_remote(client, prompt, session, flags, color).await
            }
            Err(err) => {
                eprintln!("troupe: {err}");
                err.code
            }
        };
    }
    let store = match locations.open_store() {
        Ok(store) => store,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    warn_about_project();
    let session = match session.map(|given| ids::resolve(&store, IdKind::Session, given)) {
        None => None,
        Some(Ok(id)) => Some(id),
        Some(Err(err)) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    let session = session.as_deref();
    let telemetry = crate::telemetry::start(&store, crate::telemetry::terminal_log_style());
    report_recovered(&store, flags.json);
    let prepared = match crate::setup::prepare(&options, None, &store, &locations, session).await {
        Ok(prepared) => prepared,
        Err(err) => {
            eprintln!("troupe: {err}");
            telemetry.stop();
            return err.code;
        }
    };
    remove_old_sessions(&store, &locations, session);
    // On stderr also with --json: stdout stays the event stream, and what
    // was ignored at start-up is never silent.
    for warning in &prepared.warnings {
        eprintln!("troupe: {}", crate::sanitize::for_terminal(warning));
    }
    let approvals = Approvals::from_terminal();
    let style = RenderStyle {
        color,
        next_steps: true,
        dir: std::env::current_dir()
            .ok()
            .map(|current| match &flags.cwd {
                Some(dir) => current.join(dir),
                None => current,
            }),
    };
    let (code, _run_id) = execute(prepared, store, prompt, flags.json, style, approvals).await;
    telemetry.stop();
    code
}

/// The `POST /v1/runs` body of a run started from this shell: what the
/// command line says, this directory, and this environment, so the daemon
/// prepares it as an embedded run would be prepared here.
pub(crate) fn remote_request(
    prompt: &str,
    session: Option<&str>,
    flags: &RunFlags,
    current_dir: &std::path::Path,
    env: impl IntoIterator<Item = (String, String)>,
    interactive: bool,
) -> RunRequest {
    let cwd = match &flags.cwd {
        Some(dir) => current_dir.join(dir),
        None => current_dir.to_path_buf(),
    };
    RunRequest {
        prompt: prompt.to_string(),
        session_id: session.map(str::to_string),
        cwd,
        keep_session_cwd: flags.cwd.is_none(),
        mode: flags.mode,
        provider: flags.provider.clone(),
        model: flags.model.clone(),
        limits: RunLimits {
            max_turns: flags.max_turns,
            budget_tokens: flags.budget_tokens,
            timeout_secs: flags.timeout,
        },
        env: Some(env.into_iter().collect()),
        interactive,
        repository: flags.repository.clone(),
        revision: flags.revision.clone(),
    }
}

/// Submits the run to the daemon and follows it as an embedded run is
/// followed: same output, same approvals, same exit codes.
async fn start_remote(
    client: DaemonClient,
    prompt: String,
    session: Option<&str>,
    flags: &RunFlags,
    color: bool,
) -> u8 {
    let Some(mut signals) = StopSignals::listen_or_report() else {
        return EXIT_RUNTIME;
    };
    let current_dir = match std::env::current_dir() {
        Ok(dir) => dir,
        Err(err) => {
            eprintln!("troupe: cannot read the current directory: {err}");
            return crate::EXIT_USAGE;
        }
    };
    let approvals = Approvals::from_terminal();
    // A detached run's approvals wait for `troupe approve`.
    let interactive = flags.detach || approvals == Approvals::Terminal;
    let body = remote_request(
        &prompt,
        session,
        flags,
        &current_dir,
        // With the provider keys read at start-up, which are no longer in
        // this process's environment.
        troupe_process::secrets::process_vars(),
        interactive,
    );
    let submitted = match client.submit(&body).await {
        Ok(submitted) => submitted,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    for warning in &submitted.warnings {
        eprintln!("troupe: {}", crate::sanitize::for_terminal(warning));
    }
    if flags.detach {
        println!("{}", submitted.run_id);
        eprintln!(
            "troupe: started run {} in the daemon; follow it with: troupe runs attach {}",
            troupe_store::short_id(&submitted.run_id),
            troupe_store::short_id(&submitted.run_id)
        );
        return 0;
    }
    let events = match client.events(&submitted.run_id, 1, true).await {
        Ok(events) => events,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    let mut link = RemoteRun {
        client: Arc::new(client),
        run_id: submitted.run_id,
        events,
    };
    let style = RenderStyle {
        color,
        next_steps: true,
        dir: Some(body.cwd.clone()),
    };
    follow(
        &mut link,
        &mut signals,
        flags.json,
        style,
        approvals,
        OnSignal::Cancel,
    )
    .await
    .exit_code()
}

/// Marks runs a dead process left unfinished as interrupted (repairing their
/// sessions) and tells the person how to continue them.
pub(crate) fn report_recovered(store: &Store, json: bool) {
    match recover_interrupted_runs(store, chrono::Utc::now()) {
        Ok(recovered) => {
            for run in recovered {
                if !json {
                    let children = match run.children.len() {
                        0 => String::new(),
                        n => format!(" ({n} sub-agent session(s) repaired too)"),
                    };
                    eprintln!(
                        "troupe: run {} was interrupted (its process stopped){children}; continue it with: troupe resume {}",
                        troupe_store::short_id(&run.run.run_id),
                        troupe_store::short_id(&run.run.session_id)
                    );
                }
            }
        }
        Err(err) => eprintln!("troupe: could not recover interrupted runs: {err}"),
    }
}

/// SPEC §9: the retention policy (sessions older than `[store] keep_days`,
/// and beyond `max_bytes` the oldest) applied in the background, never to a
/// session in use: the session this run continues is in use before its run
/// record exists, and the store also keeps any session with a running run.
fn remove_old_sessions(store: &Store, locations: &Locations, continued: Option<&str>) {
    let store = store.clone();
    let locations = locations.clone();
    let in_use: HashSet<String> = continued.map(str::to_string).into_iter().collect();
    tokio::spawn(async move {
        let pass = tokio::task::spawn_blocking({
            let (store, locations, in_use) = (store.clone(), locations.clone(), in_use.clone());
            move || crate::retention::apply(&store, &locations, &in_use)
        });
        if pass.await.is_ok()
            && crate::retention::sweep_due(
                &locations.data_dir,
                crate::retention::EMBEDDED_SWEEP_PERIOD,
            )
        {
            crate::retention::sweep_checkpoints(&store, &locations, &in_use).await;
        }
    });
}

/// Submits `prompt` on a fresh embedded runtime and follows the run to its end,
/// rendering its events as `style` says (or as JSON lines).
/// Returns the exit code and the run id (when the run started).
pub(crate) async fn execute(
    prepared: Prepared,
    store: Store,
    prompt: String,
    json: bool,
    style: RenderStyle,
    approvals: Approvals,
) -> (u8, Option<String>) {
    // Installed before anything runs, so a stop signal always cancels cleanly.
    let Some(mut signals) = StopSignals::listen_or_report() else {
        return (EXIT_RUNTIME, None);
    };
    let runtime = match Runtime::start(store.clone()).await {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("troupe: {err}");
            return (EXIT_RUNTIME, None);
        }
    };
    // The run's MCP servers are closed when it ends, whatever the ending.
    let mcp = prepared.env.mcp().cloned();
    let memory = prepared.env.memory().clone();
    let submission = prepared.into_submission(
        prompt,
        match approvals {
            Approvals::Nobody => Approver::Absent,
            Approvals::Terminal | Approvals::AutoAllow => Approver::Present,
        },
    );
    let handle = match runtime.submit(submission).await {
        Ok(handle) => handle,
        Err(err) => {
            eprintln!("troupe: {err}");
            runtime.shutdown().await;
            shutdown_mcp(mcp).await;
            return (EXIT_RUNTIME, None);
        }
    };
    let run_id = handle.run_id.clone();
    let mut link = EmbeddedRun {
        runtime: runtime.clone(),
        handle,
    };
    let followed = follow(
        &mut link,
        &mut signals,
        json,
        style,
        approvals,
        OnSignal::Cancel,
    )
    .await;
    if let Followed::Abandoned(signal) = followed {
        shutdown_mcp(mcp).await;
        return (signal.exit_code(), Some(run_id));
    }
    runtime.shutdown().await;
    shutdown_mcp(mcp).await;
    // A background memory update still running gets a bounded chance to
    // finish before the process ends it.
    if !memory.settle(MEMORY_SETTLE_LIMIT).await {
        tracing::warn!("a background memory update did not finish before exit");
    }
    // Spans that ended after the run's last write (its root, the last model
    // call) go to the store too before the process exits.
    if let Err(err) = store.flush() {
        eprintln!("troupe: the store could not be flushed at exit: {err}");
    }
    (followed.exit_code(), Some(run_id))
}

/// Closes a run's MCP servers as the process exits: their sessions, then,
/// after [`troupe_mcp::EXIT_BUDGET`], whatever is left of their process
/// groups, which have exited when it returns.
async fn shutdown_mcp(mcp: Option<troupe_actors::McpHub>) {
    if let Some(hub) = mcp {
        hub.shutdown_within(troupe_mcp::EXIT_BUDGET).await;
        crate::await_killed_processes().await;
    }
}

/// A run on this process's runtime.
pub(crate) struct EmbeddedRun {
    /// The runtime.
    pub runtime: Runtime,
    /// The run.
    pub handle: RunHandle,
}

impl RunLink for EmbeddedRun {
    async fn next_event(&mut self) -> Option<RunEvent> {
        self.handle.events.recv().await
    }

    fn cancel(&self) -> BoxFuture<'static, ()> {
        let (runtime, run_id) = (self.runtime.clone(), self.handle.run_id.clone());
        Box::pin(async move {
            // A run that already ended needs no cancelling.
            let _ = runtime.cancel(&run_id).await;
        })
    }

    fn answerer(&self) -> Answerer {
        let (runtime, run_id) = (self.runtime.clone(), self.handle.run_id.clone());
        Arc::new(move |approval_id, outcome, reason| {
            let (runtime, run_id) = (runtime.clone(), run_id.clone());
            Box::pin(async move {
                // An approval the run no longer waits for is dropped.
                let _ = runtime
                    .approve(&run_id, &approval_id, outcome, reason)
                    .await;
            })
        })
    }

    fn send_message(&self, text: String) -> BoxFuture<'static, Result<(), String>> {
        let (runtime, run_id) = (self.runtime.clone(), self.handle.run_id.clone());
        Box::pin(async move {
            runtime
                .send_message(&run_id, &text)
                .await
                .map_err(|err| err.to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_last_takes_its_one_argument_as_the_prompt() {
        let some = |text: &str| Some(text.to_string());
        assert_eq!(
            resume_target(false, some("0193"), some("go on")),
            Ok((some("0193"), some("go on")))
        );
        assert_eq!(
            resume_target(true, some("go on"), None),
            Ok((None, some("go on")))
        );
        assert_eq!(resume_target(true, None, None), Ok((None, None)));
        assert!(resume_target(true, some("0193"), some("go on")).is_err());
    }

    fn flags() -> RunFlags {
        RunFlags {
            provider: None,
            model: None,
            mode: None,
            cwd: None,
            repository: None,
            revision: None,
            confirm_cwd: false,
            json: false,
            max_turns: None,
            budget_tokens: None,
            timeout: None,
            no_daemon: false,
            detach: false,
        }
    }

    #[test]
    fn a_daemon_request_carries_this_shells_directory_and_environment() {
        let here = std::path::Path::new("/work/project");
        let env = vec![("ANTHROPIC_API_KEY".to_string(), "k".to_string())];
        let body = serde_json::to_value(remote_request(
            "fix it",
            None,
            &flags(),
            here,
            env.clone(),
            true,
        ))
        .unwrap();
        assert_eq!(body["cwd"], "/work/project");
        assert_eq!(body["keep_session_cwd"], true);
        assert_eq!(body["env"]["ANTHROPIC_API_KEY"], "k");
        assert_eq!(body["interactive"], true);
        assert!(body["mode"].is_null());

        let mut given = flags();
        given.cwd = Some("sub".into());
        given.mode = Some(troupe_protocol::permission::PermissionMode::AcceptEdits);
        given.max_turns = Some(3);
        let body =
            serde_json::to_value(remote_request("x", Some("0193"), &given, here, env, false))
                .unwrap();
        assert_eq!(body["cwd"], "/work/project/sub");
        assert_eq!(body["keep_session_cwd"], false);
        assert_eq!(body["session_id"], "0193");
        assert_eq!(body["mode"], "accept-edits");
        assert_eq!(body["limits"]["max_turns"], 3);
        // What the daemon accepts.
        let parsed: RunRequest =
            crate::daemon::api::strict_from_slice(&serde_json::to_vec(&body).unwrap()).unwrap();
        assert_eq!(parsed.limits.max_turns, Some(3));
    }

    fn no_stdin() -> std::io::Result<String> {
        panic!("stdin is read only for `-`")
    }

    #[test]
    fn a_prompt_argument_is_taken_as_it_is() {
        assert_eq!(prompt_from("fix it\n", no_stdin).unwrap(), "fix it\n");
    }

    #[test]
    fn an_empty_or_blank_prompt_is_a_usage_error() {
        for arg in ["", "  ", "\n\t"] {
            let err = prompt_from(arg, no_stdin).unwrap_err();
            assert_eq!(err.code, crate::EXIT_USAGE);
            assert!(err.message.contains("prompt is empty"), "{err}");
        }
    }

    #[test]
    fn dash_reads_stdin_without_its_trailing_line_break() {
        let read = |text: &'static str| move || Ok(text.to_string());
        assert_eq!(prompt_from("-", read("fix it\n")).unwrap(), "fix it");
        assert_eq!(prompt_from("-", read("fix it\r\n")).unwrap(), "fix it");
        assert_eq!(
            prompt_from("-", read("line 1\nline 2")).unwrap(),
            "line 1\nline 2"
        );
        // Only the one line break that ends the input goes.
        assert_eq!(prompt_from("-", read("a\n\n")).unwrap(), "a\n");
    }

    #[test]
    fn an_empty_stdin_is_a_usage_error() {
        for text in ["", "\n", "  \n"] {
            let err = prompt_from("-", move || Ok(text.to_string())).unwrap_err();
            assert_eq!(err.code, crate::EXIT_USAGE);
            assert!(err.message.contains("stdin"), "{err}");
        }
        let err = prompt_from("-", || Err(std::io::Error::other("broken"))).unwrap_err();
        assert_eq!(err.code, crate::EXIT_USAGE);
    }
}
