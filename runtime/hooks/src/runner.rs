//! Runs hooks: each as `bash -c COMMAND` in the project root, in its own
//! process group, contained and confined by the OS sandbox like the `bash`
//! tool's commands, with the
//! payload on stdin, the reduced environment plus `TROUPE_PROJECT_DIR`,
//! `TROUPE_HOOK_EVENT` and `TRACEPARENT` (never provider keys), and a
//! timeout after which the whole group is killed. Whatever a hook left
//! running is killed when it exits. Each run is a `hook {event}` span.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tracing::Span;

use super::verdict::{HOOK_OUTPUT_CAP, interpret};
use super::{Hook, HookEvent, HookExit, HookOutcome, HookPayload, HookPlace, HookSet, HookVerdict};
use troupe_process::os_sandbox::CommandSandbox;
use troupe_process::process_tree::containment;
use troupe_process::{ChildStdio, SpawnedCommand, spawn_bash};
use troupe_telemetry::genai;
use troupe_telemetry::propagation::{TRACEPARENT_ENV, traceparent_of};

/// How long the output of a hook that exited may take to arrive.
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// Variable naming the project root in a hook's environment.
pub(crate) const PROJECT_DIR_ENV: &str = "TROUPE_PROJECT_DIR";

/// Variable naming the event in a hook's environment.
pub(crate) const HOOK_EVENT_ENV: &str = "TROUPE_HOOK_EVENT";

/// Where and how hooks of one agent run.
#[derive(Debug, Clone)]
pub struct HookContext {
    /// The agent, run, session and project root.
    pub place: HookPlace,
    /// The reduced environment of child processes.
    pub child_env: Arc<Vec<(String, String)>>,
    /// Parent of the `hook` spans.
    pub parent_span: Span,
    /// Cancelled when the run stops: a hook still running is killed.
    pub cancel: CancellationToken,
    /// The OS sandbox hooks run in, as the `bash` tool's commands do.
    pub sandbox: Arc<CommandSandbox>,
}

/// Runs the hooks of `hooks` that match `event` on `subject`, one after the
/// other in configuration order, each reading `payload`; a PreToolUse hook
/// that rewrites the arguments hands the new ones to the next. Stops at the
/// first block. Never fails: what went wrong is in the reports.
pub async fn fire(
    hooks: &HookSet,
    event: HookEvent,
    subject: Option<&str>,
    mut payload: HookPayload,
    ctx: &HookContext,
) -> HookVerdict {
    let mut verdict = HookVerdict::default();
    for hook in hooks.matching(event, subject) {
        let bytes = match serde_json::to_vec(&payload) {
            Ok(bytes) => bytes,
            Err(err) => {
                tracing::warn!(error = %err, "hook payload not serialisable");
                break;
            }
        };
        let started = Instant::now();
        let span = genai::hook_span(&ctx.parent_span, event.as_str(), &hook.command);
        let exit = run_one(&hook, &bytes, ctx, &span).await;
        let outcome = interpret(&hook, &exit);
        let outcome_name = if exit.timed_out {
            "timeout"
        } else {
            outcome.as_str()
        };
        genai::record_hook(&span, exit.code, outcome_name);
        log_outcome(&hook, &exit, &outcome);
        if let HookOutcome::Proceed {
            updated_input: Some(input),
            ..
        } = &outcome
        {
            payload.tool_input = Some(serde_json::Value::Object(input.clone()));
        }
        if !verdict.add(&hook, &exit, outcome, started.elapsed()) {
            break;
        }
    }
    verdict
}

fn log_outcome(hook: &Hook, exit: &HookExit, outcome: &HookOutcome) {
    match outcome {
        HookOutcome::Warn { message } => tracing::warn!(event = %hook.event, "{message}"),
        _ => tracing::debug!(
            event = %hook.event,
            command = %hook.command,
            code = ?exit.code,
            outcome = outcome.as_str(),
            "hook ran"
        ),
    }
    if !exit.stdout.trim().is_empty() && !exit.stdout.trim_start().starts_with('{') {
        tracing::info!(event = %hook.event, stdout = %exit.stdout.trim(), "hook output");
    }
}

/// The environment of a hook: the reduced set, its own `TRACEPARENT`, the
/// project directory and the event.
pub(crate) fn hook_environment(
    child_env: &[(String, String)],
    traceparent: Option<String>,
    place: &HookPlace,
    event: HookEvent,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = child_env
        .iter()
        .filter(|(name, _)| {
            name != TRACEPARENT_ENV && name != PROJECT_DIR_ENV && name != HOOK_EVENT_ENV
        })
        .cloned()
        .collect();
    if let Some(traceparent) = traceparent {
        env.push((TRACEPARENT_ENV.to_owned(), traceparent));
    }
    env.push((
        PROJECT_DIR_ENV.to_owned(),
        place.cwd.to_string_lossy().into_owned(),
    ));
    env.push((HOOK_EVENT_ENV.to_owned(), event.as_str().to_owned()));
    env
}

/// Runs one hook to its end, its timeout or the run's cancellation.
async fn run_one(hook: &Hook, payload: &[u8], ctx: &HookContext, span: &Span) -> HookExit {
    let env = hook_environment(&ctx.child_env, traceparent_of(span), &ctx.place, hook.event);
    let stdio = [ChildStdio::Piped, ChildStdio::Piped, ChildStdio::Piped];
    let spawned = spawn_bash(
        &hook.command,
        &ctx.place.cwd,
        &env,
        stdio,
        containment(),
        Some(&ctx.sandbox),
    );
    let SpawnedCommand {
        mut child,
        group,
        stdin,
        stdout,
        stderr,
    } = match spawned {
        Ok(spawned) => spawned,
        Err(err) => {
            return HookExit {
                spawn_error: Some(err.to_string()),
                ..HookExit::default()
            };
        }
    };
    // The payload is written and the output read in this task, beside the
    // wait: no task of its own for each (waking another worker thread
    // costs more than a no-op hook's whole exchange).
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut exit = HookExit::default();
    {
        let exchange = async {
            tokio::join!(
                write_payload(stdin, payload),
                read_capped(stdout, &mut out),
                read_capped(stderr, &mut err)
            );
        };
        tokio::pin!(exchange);
        let mut exchanged = false;
        {
            let waited = tokio::time::timeout(hook.timeout, child.wait());
            tokio::pin!(waited);
            loop {
                tokio::select! {
                    biased;
                    () = ctx.cancel.cancelled() => {
                        exit.spawn_error = Some("the run stopped".to_owned());
                        break;
                    }
                    waited = &mut waited => {
                        match waited {
                            Ok(Ok(status)) => exit.code = status.code(),
                            Ok(Err(err)) => {
                                exit.spawn_error = Some(format!("waiting for it failed: {err}"));
                            }
                            Err(_) => exit.timed_out = true,
                        }
                        break;
                    }
                    // Both pipes closed before the exit was seen.
                    () = &mut exchange, if !exchanged => exchanged = true,
                }
            }
        }
        // Whatever it started dies with it; its pipes close.
        group.kill_now();
        let _ = tokio::time::timeout(OUTPUT_GRACE, child.wait()).await;
        if !exchanged {
            // What arrived by then is kept.
            let _ = tokio::time::timeout(OUTPUT_GRACE, exchange).await;
        }
    }
    exit.stdout = String::from_utf8_lossy(&out).into_owned();
    exit.stderr = String::from_utf8_lossy(&err).into_owned();
    exit
}

/// Writes the payload to a hook's stdin and closes it. A hook that does not
/// read it cannot stall the run: the write ends when the hook does.
async fn write_payload<W: AsyncWrite + Unpin>(stdin: Option<W>, payload: &[u8]) {
    if let Some(mut stdin) = stdin {
        let _ = stdin.write_all(payload).await;
    }
}

/// Reads everything into `kept`, keeping the first [`HOOK_OUTPUT_CAP`]
/// bytes; nothing without a reader.
async fn read_capped<R: AsyncRead + Unpin>(reader: Option<R>, kept: &mut Vec<u8>) {
    let Some(mut reader) = reader else {
        return;
    };
    let mut chunk = [0u8; 8192];
    loop {
        match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = HOOK_OUTPUT_CAP.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use troupe_protocol::permission::RuleSource;

    fn place(dir: &std::path::Path) -> HookPlace {
        HookPlace {
            session_id: "s1".into(),
            run_id: "r1".into(),
            agent_path: "main".into(),
            cwd: dir.to_path_buf(),
        }
    }

    fn context(dir: &std::path::Path) -> HookContext {
        HookContext {
            place: place(dir),
            child_env: Arc::new(vec![
                ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
                ("TRACEPARENT".into(), "stale".into()),
            ]),
            parent_span: Span::none(),
            cancel: CancellationToken::new(),
            sandbox: Arc::new(CommandSandbox::off()),
        }
    }

    fn set(event: HookEvent, commands: &[(&str, Option<u64>)]) -> HookSet {
        HookSet::new(
            commands
                .iter()
                .map(|(command, timeout)| {
                    Hook::new(event, None, command, *timeout, false, RuleSource::User).unwrap()
                })
                .collect(),
        )
    }

    fn payload(dir: &std::path::Path, event: HookEvent) -> HookPayload {
        let mut payload = HookPayload::new(event, &place(dir));
        payload.tool_name = Some("bash".into());
        payload.tool_input = Some(serde_json::json!({"command": "ls"}));
        payload
    }

    #[test]
    fn the_environment_is_reduced_and_names_the_project() {
        let env = hook_environment(
            &[
                ("PATH".into(), "/bin".into()),
                ("TRACEPARENT".into(), "old".into()),
            ],
            Some("00-abc-def-01".into()),
            &place(&PathBuf::from("/p")),
            HookEvent::Stop,
        );
        assert_eq!(
            env,
            vec![
                ("PATH".to_owned(), "/bin".to_owned()),
                ("TRACEPARENT".to_owned(), "00-abc-def-01".to_owned()),
                ("TROUPE_PROJECT_DIR".to_owned(), "/p".to_owned()),
                ("TROUPE_HOOK_EVENT".to_owned(), "Stop".to_owned()),
            ]
        );
    }

    #[tokio::test]
    async fn a_hook_reads_its_payload_and_its_rewrite_reaches_the_next_hook() {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("seen.jsonl");
        let first = format!(
            "{{ cat; echo; }} >> {rec}; echo '{{\"updated_input\": {{\"command\": \"ls -la\"}}}}'",
            rec = record.display()
        );
        let second = format!("{{ cat; echo; }} >> {rec}", rec = record.display());
        let hooks = set(
            HookEvent::PreToolUse,
            &[(first.as_str(), None), (second.as_str(), None)],
        );
        let ctx = context(dir.path());
        let verdict = fire(
            &hooks,
            HookEvent::PreToolUse,
            Some("bash"),
            payload(dir.path(), HookEvent::PreToolUse),
            &ctx,
        )
        .await;
        assert_eq!(verdict.blocked, None);
        assert_eq!(
            verdict.updated_input,
            serde_json::json!({"command": "ls -la"})
                .as_object()
                .cloned()
        );
        let seen: Vec<serde_json::Value> = std::fs::read_to_string(&record)
            .unwrap()
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0]["event"], "PreToolUse");
        assert_eq!(seen[0]["session_id"], "s1");
        assert_eq!(seen[0]["tool_input"]["command"], "ls");
        assert_eq!(seen[1]["tool_input"]["command"], "ls -la");
        assert_eq!(verdict.reports.len(), 2);
    }

    #[tokio::test]
    async fn exit_two_blocks_with_stderr_and_later_hooks_do_not_run() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let second = format!("touch {}", marker.display());
        let hooks = set(
            HookEvent::PreToolUse,
            &[
                ("echo 'not on main' >&2; exit 2", None),
                (second.as_str(), None),
            ],
        );
        let verdict = fire(
            &hooks,
            HookEvent::PreToolUse,
            Some("bash"),
            payload(dir.path(), HookEvent::PreToolUse),
            &context(dir.path()),
        )
        .await;
        assert_eq!(verdict.blocked.as_deref(), Some("not on main"));
        assert_eq!(verdict.reports.len(), 1);
        assert!(!marker.exists());
    }

    #[tokio::test]
    async fn a_hanging_hook_is_killed_at_its_timeout_with_its_children() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("child.pid");
        // The hook starts a child that would outlive it, then hangs.
        let command = format!("sleep 600 & echo $! > {}; wait", pid_file.display());
        let hooks = set(HookEvent::PreToolUse, &[(command.as_str(), Some(1))]);
        let verdict = fire(
            &hooks,
            HookEvent::PreToolUse,
            Some("bash"),
            payload(dir.path(), HookEvent::PreToolUse),
            &context(dir.path()),
        )
        .await;
        assert_eq!(verdict.blocked, None);
        assert_eq!(verdict.reports[0].outcome, "timeout");
        let pid: u32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let gone = (0..200).any(|_| {
            if troupe_process::process_is_alive(pid) {
                std::thread::sleep(Duration::from_millis(10));
                false
            } else {
                true
            }
        });
        assert!(gone, "the hook's child {pid} survived");
    }

    #[tokio::test]
    async fn crashing_missing_and_silent_hooks_warn_and_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let hooks = set(
            HookEvent::PostToolUse,
            &[
                ("kill -SEGV $$", None),
                ("exit 7", None),
                ("/nonexistent/hook", None),
                ("echo '{\"note\": \"checked\"}'", None),
            ],
        );
        let verdict = fire(
            &hooks,
            HookEvent::PostToolUse,
            Some("bash"),
            payload(dir.path(), HookEvent::PostToolUse),
            &context(dir.path()),
        )
        .await;
        let outcomes: Vec<_> = verdict.reports.iter().map(|r| r.outcome).collect();
        assert_eq!(outcomes, ["error", "error", "error", "continue"]);
        assert_eq!(verdict.reports[1].exit_code, Some(7));
        assert_eq!(verdict.reports[2].exit_code, Some(127));
        assert_eq!(verdict.note_text().as_deref(), Some("checked"));
    }

    #[tokio::test]
    async fn a_hook_that_ignores_a_large_payload_neither_stalls_nor_loses_its_output() {
        let dir = tempfile::tempdir().unwrap();
        // Ten pipe buffers of payload the hooks never read, and a child left
        // holding the pipes open, which dies with its hook (a runner that
        // waited for the pipes to close would hang until the timeout).
        let big = "x".repeat(640 * 1024);
        let blocking = set(
            HookEvent::PreToolUse,
            &[("sleep 30 & echo 'not read' >&2; exit 2", Some(20))],
        );
        let mut pre = payload(dir.path(), HookEvent::PreToolUse);
        pre.tool_input = Some(serde_json::json!({ "command": big }));
        let verdict = fire(
            &blocking,
            HookEvent::PreToolUse,
            Some("bash"),
            pre,
            &context(dir.path()),
        )
        .await;
        let report = &verdict.reports[0];
        assert_eq!((report.outcome, report.exit_code), ("block", Some(2)));
        assert_eq!(report.message.as_deref(), Some("not read"));
        let noting = set(
            HookEvent::PostToolUse,
            &[("echo '{\"note\": \"noted\"}'; sleep 30 &", Some(20))],
        );
        let mut post = payload(dir.path(), HookEvent::PostToolUse);
        post.tool_result = Some(big);
        let verdict = fire(
            &noting,
            HookEvent::PostToolUse,
            Some("bash"),
            post,
            &context(dir.path()),
        )
        .await;
        assert_eq!(verdict.reports[0].outcome, "continue");
        assert_eq!(verdict.note_text().as_deref(), Some("noted"));
    }

    #[tokio::test]
    async fn a_hook_sees_the_reduced_environment_and_no_key() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("env");
        let command = format!("env > {}", out.display());
        let hooks = set(HookEvent::Stop, &[(command.as_str(), None)]);
        fire(
            &hooks,
            HookEvent::Stop,
            None,
            HookPayload::new(HookEvent::Stop, &place(dir.path())),
            &context(dir.path()),
        )
        .await;
        let env = std::fs::read_to_string(&out).unwrap();
        assert!(env.contains(&format!("TROUPE_PROJECT_DIR={}", dir.path().display())));
        assert!(env.contains("TROUPE_HOOK_EVENT=Stop"));
        assert!(!env.contains("TRACEPARENT=stale"), "{env}");
        assert!(!env.contains("ANTHROPIC_API_KEY"));
    }

    #[tokio::test]
    async fn a_cancelled_run_kills_its_hook() {
        let dir = tempfile::tempdir().unwrap();
        let hooks = set(HookEvent::Stop, &[("sleep 600", None)]);
        let ctx = context(dir.path());
        ctx.cancel.cancel();
        let verdict = fire(
            &hooks,
            HookEvent::Stop,
            None,
            HookPayload::new(HookEvent::Stop, &place(dir.path())),
            &ctx,
        )
        .await;
        assert_eq!(verdict.reports[0].outcome, "error");
        assert_eq!(verdict.blocked, None);
    }
}
