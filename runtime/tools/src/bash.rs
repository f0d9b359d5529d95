//! `bash` (SPEC §4): `bash -c` in the project root, in its own process group,
//! stdin from /dev/null, only the session's reduced environment. Timeout
//! (default 120 s, max 600 s) or cancellation stops the whole group (SIGTERM,
//! SIGKILL after 2 s); processes the command leaves running in its group are
//! stopped when it exits, so long-lived processes belong in
//! `run_in_background`. Output is stdout and stderr combined in arrival order,
//! tail-limited and spilled (see `output`). Non-zero exit is an error result.
//!
//! Whether a command may run is the permission engine's decision, not this
//! module's.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::output::{OutputCollector, OutputLimits, spill_file_name};
use super::{PermissionSubject, ToolContext, ToolOutput};
use crate::builtin::{Builtin, BuiltinTool, ToolClass};
use troupe_process::{DriveOutcome, Ending, KILL_GRACE, KillOutcome};

/// SPEC §4: default timeout of a command.
pub(crate) const DEFAULT_TIMEOUT_SECS: u64 = 120;

/// SPEC §4: largest timeout; larger values are clamped (and the result says so).
pub(crate) const MAX_TIMEOUT_SECS: u64 = 600;

/// Added to the command's timeout for the per-call timeout of the agent, so
/// that the tool's own timeout, the group's grace period and draining the
/// pipe always finish first and the result keeps its output.
pub(crate) const OUTER_TIMEOUT_SLACK: Duration = Duration::from_secs(5);

/// Prefix of the spill files of foreground commands.
const SPILL_PREFIX: &str = "bash";

/// The `bash` tool.
#[derive(Debug)]
pub(crate) struct Bash;

/// The arguments; the tool's schema is derived from them.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Args {
    /// Shell command line
    command: String,
    /// Default 120, max 600
    #[schemars(range(min = 1))]
    timeout_secs: Option<u64>,
    /// Start as a background task, returning its id at once
    #[serde(default)]
    run_in_background: bool,
}

impl Bash {
    /// The tool, with the schema of its arguments.
    pub(crate) fn new() -> Builtin<Self> {
        Builtin::new(Self)
    }
}

/// The effective timeout and whether the requested one was clamped.
pub(crate) fn effective_timeout(requested: Option<u64>) -> (Duration, bool) {
    let secs = requested.unwrap_or(DEFAULT_TIMEOUT_SECS).max(1);
    if secs > MAX_TIMEOUT_SECS {
        (Duration::from_secs(MAX_TIMEOUT_SECS), true)
    } else {
        (Duration::from_secs(secs), false)
    }
}

impl BuiltinTool for Bash {
    type Args = Args;
    const NAME: &'static str = "bash";
    const CLASS: ToolClass = ToolClass::EXECUTE;

    fn description(&self) -> &str {
        "Run `bash -c` in the project root, stdin empty, a minimal environment (no API keys); \
         stdout and stderr together. Its processes are stopped on timeout and when it exits: \
         start servers and watchers with run_in_background (then task_output/task_kill). \
         Output over 2000 lines or 50 KB keeps the end and saves the whole to a file for \
         read_file. Non-zero exit is an error."
    }

    fn target(&self, args: &Value) -> PermissionSubject {
        PermissionSubject::Command {
            command: args
                .get("command")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        }
    }

    fn timeout(&self, args: &Value) -> Option<Duration> {
        if args.get("run_in_background").and_then(Value::as_bool) == Some(true) {
            return None;
        }
        let (timeout, _) = effective_timeout(args.get("timeout_secs").and_then(Value::as_u64));
        Some(
            timeout
                + KILL_GRACE
                + troupe_process::KILL_CONFIRM
                + troupe_process::DRAIN_TIMEOUT
                + OUTER_TIMEOUT_SLACK,
        )
    }

    fn run<'a>(&'a self, args: Self::Args, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            if args.command.trim().is_empty() {
                return ToolOutput::error("command is empty.");
            }
            if ctx.cancel.is_cancelled() {
                return ToolOutput::error("cancelled before the command started.");
            }
            if args.run_in_background {
                return start_background(&args.command, ctx);
            }
            run_foreground(&args.command, args.timeout_secs, ctx).await
        })
    }
}

fn start_background(command: &str, ctx: &ToolContext) -> ToolOutput {
    match ctx.background.start(
        command,
        ctx.sandbox.project_root(),
        &ctx.child_env,
        &ctx.spill_dir,
        &ctx.os_sandbox,
    ) {
        Ok(id) => ToolOutput::ok(format!(
            "Started background task {id}. Read its output with task_output {{\"id\": \"{id}\"}}; \
             stop it with task_kill."
        )),
        Err(err) => ToolOutput::error(format!("Could not start the background task: {err}.")),
    }
}

async fn run_foreground(command: &str, timeout_secs: Option<u64>, ctx: &ToolContext) -> ToolOutput {
    let (timeout, clamped) = effective_timeout(timeout_secs);
    let mut shell = match troupe_process::spawn_shell_confined(
        command,
        ctx.sandbox.project_root(),
        &ctx.child_env,
        &ctx.os_sandbox,
    ) {
        Ok(shell) => shell,
        Err(err) => return ToolOutput::error(format!("Could not run the command: {err}.")),
    };
    let spill = ctx
        .spill_dir
        .join(spill_file_name(SPILL_PREFIX, &ctx.call_id));
    let mut collector = OutputCollector::new(spill, OutputLimits::COMMAND);
    let outcome = troupe_process::drive(&mut shell, Some(timeout), &ctx.cancel, |chunk| {
        collector.push(chunk)
    })
    .await;
    collector.flush();
    let set_aside = shell.group.set_aside_created_protected();
    render(
        &collector,
        &outcome,
        timeout,
        clamped.then_some(timeout_secs).flatten(),
        &set_aside,
    )
}

/// Builds the result text from the output and what happened.
fn render(
    collector: &OutputCollector,
    outcome: &DriveOutcome,
    timeout: Duration,
    clamped_from: Option<u64>,
    set_aside: &[troupe_process::os_sandbox::SetAside],
) -> ToolOutput {
    let rendered = collector.render();
    let mut text = rendered.text;
    if collector.total_bytes() == 0 {
        text.push_str("(no output)");
    }
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let mut notes: Vec<String> = Vec::new();
    if let Some(requested) = clamped_from {
        notes.push(format!(
            "timeout_secs {requested} is over the maximum; {MAX_TIMEOUT_SECS} s was used"
        ));
    }
    let stopped_how = match outcome.stopped {
        Some(KillOutcome::Killed) => "; SIGKILL was needed after the 2 s grace",
        _ => "",
    };
    let is_error = match outcome.ending {
        Ending::TimedOut => {
            notes.push(format!(
                "timed out after {} s; the command and its child processes were stopped{stopped_how}",
                timeout.as_secs()
            ));
            true
        }
        Ending::Cancelled => {
            notes.push(format!(
                "cancelled; the command and its child processes were stopped{stopped_how}"
            ));
            true
        }
        Ending::Exited => {
            if outcome.stopped.is_some() {
                notes.push(
                    "processes it left running were stopped; use run_in_background for \
                     long-lived processes"
                        .to_string(),
                );
            }
            !matches!(outcome.status.and_then(|s| s.code()), Some(0))
        }
    };
    if !outcome.output_complete {
        notes.push(
            "output may be incomplete: a process outside the command's group kept it open"
                .to_string(),
        );
    }
    match outcome.status {
        Some(status) => match (status.code(), status.signal()) {
            (Some(code), _) => notes.push(format!("exit code {code}")),
            (None, Some(signal)) if outcome.ending == Ending::Exited => {
                notes.push(format!("killed by signal {signal}"));
            }
            _ => {}
        },
        None => notes.push("exit status unknown".to_string()),
    }
    notes.extend(set_aside.iter().map(|done| done.note("command")));
    for note in notes {
        text.push('[');
        text.push_str(&note);
        text.push_str("]\n");
    }
    let text = text.trim_end_matches('\n').to_string();
    if is_error {
        ToolOutput::error(text)
    } else {
        ToolOutput::ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tool;
    use serde_json::json;

    #[test]
    fn the_schema_is_derived_from_the_arguments() {
        crate::testing::assert_schema_matches::<Args>(Bash::new().input_schema());
    }

    #[test]
    fn timeouts_default_and_clamp() {
        assert_eq!(effective_timeout(None), (Duration::from_secs(120), false));
        assert_eq!(effective_timeout(Some(5)), (Duration::from_secs(5), false));
        assert_eq!(
            effective_timeout(Some(600)),
            (Duration::from_secs(600), false)
        );
        assert_eq!(
            effective_timeout(Some(601)),
            (Duration::from_secs(600), true)
        );
        assert_eq!(effective_timeout(Some(0)), (Duration::from_secs(1), false));
    }

    #[test]
    fn outer_timeout_covers_the_command_timeout() {
        let bash = Bash::new();
        let t = bash
            .timeout(&json!({"command": "x", "timeout_secs": 300}))
            .unwrap();
        assert!(t > Duration::from_secs(300) + KILL_GRACE);
        let t = bash.timeout(&json!({"command": "x"})).unwrap();
        assert!(t > Duration::from_secs(DEFAULT_TIMEOUT_SECS));
        let t = bash
            .timeout(&json!({"command": "x", "timeout_secs": 10_000}))
            .unwrap();
        assert!(t < Duration::from_secs(MAX_TIMEOUT_SECS + 60));
        assert_eq!(
            bash.timeout(&json!({"command": "x", "run_in_background": true})),
            None
        );
    }
}
