//! Transition tables of the loop: each test feeds inputs and compares the
//! effects, written as short strings, with what the loop must do. Compiled
//! for tests only (`#[cfg(test)]` on its declaration in `machine/mod.rs`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::agent::agent_tool::agent_tool_definition;
use crate::agent::guard::Budget;
use crate::agent::roles::{RoleSet, RoleTools};
use crate::agent::subagent::{FORK_CANNOT_START_AGENTS, FORK_PREAMBLE};
use crate::agent::{AgentSpec, StopCause, validate_history};
use crate::config::{PermissionMode, PermissionSettings};
use crate::events::RunStatus;
use crate::model::{Message, Role, StopReason, Usage};
use crate::sandbox::PathSandbox;

struct Fixture {
    machine: AgentLoop,
    account: Arc<RunAccount>,
    _dir: tempfile::TempDir,
}

struct Options {
    mode: PermissionMode,
    approver: Approver,
    spec: AgentSpec,
    tools: RoleTools,
    tokens: u64,
    tool_calls: u32,
    task: Option<String>,
    allow: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            mode: PermissionMode::Bypass,
            approver: Approver::Present,
            spec: AgentSpec::main(25),
            tools: RoleTools::All,
            tokens: 1_000_000,
            tool_calls: 500,
            task: None,
            allow: Vec::new(),
        }
    }
}

fn fixture(options: Options) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Arc::new(PathSandbox::new(dir.path(), &[], None).unwrap());
    let settings = PermissionSettings {
        mode: options.mode,
        allow: options
            .allow
            .iter()
            .map(|rule| crate::config::RuleEntry {
                rule: rule.clone(),
                source: crate::config::RuleSource::Project,
            })
            .collect(),
        ..PermissionSettings::default()
    };
    let permissions = Arc::new(PermissionEngine::new(&settings, sandbox).unwrap());
    let roles = RoleSet::builtin();
    let catalogue = ToolCatalogue::for_role(
        &crate::tools::builtin_registry(),
        &options.tools,
        Some(agent_tool_definition(&roles)),
    )
    .unwrap();
    let account = Arc::new(RunAccount::new(
        Budget {
            tokens: options.tokens,
            usd: None,
            wall_clock: Duration::from_secs(3600),
            tool_calls: options.tool_calls,
        },
        CancellationToken::new(),
        8,
    ));
    let mut transcript = Transcript::new();
    transcript.push(Message::user_text("do the task"));
    let machine = AgentLoop::new(LoopSetup {
        spec: options.spec,
        run_id: "run".into(),
        session_id: "session".into(),
        task: options.task,
        system: SystemPrompt {
            stable: "stable".into(),
            environment: "env".into(),
        },
        catalogue: Arc::new(catalogue),
        roles: Arc::new(roles),
        permissions,
        account: account.clone(),
        approver: options.approver,
        provider_name: "p".into(),
        model: "m".into(),
        price: None,
        capture: ContentCapture::default(),
        transcript,
        token: account.root().child_token(),
        parent_span: Span::none(),
    });
    Fixture {
        machine,
        account,
        _dir: dir,
    }
}

/// Effects as short strings: `emit:<type>`, `save`, `pending:<i>`, `rules`,
/// `model:<epoch>`, `tool:<i>:<name>`, `agent:<i>:<path>`, `await`, `closed`,
/// `grace`, `finished:<status>:<reason>`.
fn show(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .map(|effect| match effect {
            Effect::Emit(kind) => format!("emit:{}", kind.type_name()),
            Effect::Save => "save".into(),
            Effect::SavePending { index, .. } => format!("pending:{index}"),
            Effect::SaveRules(_) => "rules".into(),
            Effect::CallModel { epoch, .. } => format!("model:{epoch}"),
            Effect::RunTool(launch) => format!("tool:{}:{}", launch.index, launch.tool.name()),
            Effect::StartAgent(launch) => {
                format!("agent:{}:{}", launch.index, launch.child.spec.path)
            }
            Effect::AwaitApproval { .. } => "await".into(),
            Effect::ApprovalsClosed(_) => "closed".into(),
            Effect::ArmCleanupGrace { .. } => "grace".into(),
            Effect::Finished(outcome) => {
                format!(
                    "finished:{}:{}",
                    outcome.status.as_str(),
                    outcome.stop_reason
                )
            }
        })
        .collect()
}

fn s(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| item.to_string()).collect()
}

impl Fixture {
    fn on(&mut self, input: Input) -> Vec<Effect> {
        self.machine.on(input)
    }

    fn step(&mut self, input: Input) -> Vec<String> {
        show(&self.on(input))
    }

    /// Begin and the first save: the first model call is running.
    fn started(mut self) -> Self {
        assert_eq!(self.step(Input::Begin), s(&["save"]));
        assert_eq!(
            self.step(Input::Saved(Ok(()))),
            s(&["emit:iteration", "model:1"])
        );
        self
    }

    fn epoch(&self) -> u64 {
        self.machine.epoch
    }

    /// The current model call answers with `calls` (name, JSON arguments).
    fn respond(&mut self, calls: &[(&str, serde_json::Value)]) -> Vec<String> {
        let epoch = self.epoch();
        for (i, (name, args)) in calls.iter().enumerate() {
            let event = StreamEvent::ToolCall(ToolCall {
                id: format!("c{epoch}-{i}"),
                name: (*name).into(),
                input: args.to_string(),
            });
            assert!(self.on(Input::Model { epoch, event }).is_empty());
        }
        self.on(Input::Model {
            epoch,
            event: StreamEvent::Usage(Usage {
                input: 10,
                output: 5,
                cache_read: 0,
                cache_write: 0,
            }),
        });
        self.step(Input::ModelEnded { epoch })
    }

    fn answer_text(&mut self, text: &str) -> Vec<String> {
        let epoch = self.epoch();
        let deltas = self.step(Input::Model {
            epoch,
            event: StreamEvent::TextDelta(text.into()),
        });
        assert_eq!(deltas, s(&["emit:text_delta"]));
        self.step(Input::ModelEnded { epoch })
    }

    /// Call `index` finished with `text`; its pending result is saved at
    /// once, as the interpreter does (the effects of both steps).
    fn done(&mut self, index: usize, text: &str) -> Vec<String> {
        self.finish_call(index, ToolOutput::ok(text), None)
    }

    fn finish_call(
        &mut self,
        index: usize,
        output: ToolOutput,
        error: Option<ToolErrorKind>,
    ) -> Vec<String> {
        let epoch = self.epoch();
        let mut effects = self.step(Input::CallFinished {
            epoch,
            index,
            output,
            duration: Duration::from_millis(3),
            error,
        });
        if effects.first().is_some_and(|e| e.starts_with("pending:")) {
            effects.extend(self.step(Input::PendingSaved {
                epoch,
                index,
                result: Ok(()),
            }));
        }
        effects
    }

    fn history(&self) -> &[Message] {
        self.machine.transcript().messages()
    }

    fn last_results(&self) -> Vec<(String, bool)> {
        self.history()
            .iter()
            .rev()
            .find(|m| m.role == Role::Tool)
            .map(|m| {
                m.tool_results_iter()
                    .map(|r| (r.joined_text(), r.is_error))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn read(path: &str) -> (&'static str, serde_json::Value) {
    ("read_file", json!({ "path": path }))
}

fn bash(command: &str) -> (&'static str, serde_json::Value) {
    ("bash", json!({ "command": command }))
}

fn fork(prompt: &str) -> (&'static str, serde_json::Value) {
    (
        "agent",
        json!({"description": "part", "prompt": prompt, "fork": true}),
    )
}

/// The history is valid and ends with an assistant message without calls.
fn assert_closed(history: &[Message]) {
    validate_history(history).unwrap();
    let last = history.last().unwrap();
    assert_eq!(last.role, Role::Assistant, "{history:#?}");
    assert!(last.tool_calls().next().is_none());
}

#[test]
fn a_plain_answer_saves_then_finishes() {
    let mut f = fixture(Options::default()).started();
    assert_eq!(f.machine.status().phase, "streaming");
    assert_eq!(f.answer_text("hello"), s(&["emit:usage", "save"]));
    assert_eq!(f.machine.status().phase, "saving");
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:finished:end_turn"])
    );
    assert!(f.machine.is_done());
    assert!(
        f.machine.token().is_cancelled(),
        "a finished loop releases what is below it"
    );
    assert_closed(f.history());
}

#[test]
fn a_read_only_batch_then_a_side_effect_in_order() {
    let mut f = fixture(Options::default()).started();
    assert_eq!(
        f.respond(&[read("a"), read("b"), bash("ls")]),
        s(&["emit:usage", "save"])
    );
    // The calls are durable before any runs; then the read batch starts.
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&[
            "emit:tool_started",
            "emit:tool_started",
            "tool:0:read_file",
            "tool:1:read_file"
        ])
    );
    assert_eq!(f.machine.status().phase, "executing");
    // Results out of order: nothing is reported until the batch is complete.
    assert_eq!(f.done(1, "B"), s(&["pending:1"]));
    assert_eq!(
        f.done(0, "A"),
        s(&[
            "pending:0",
            "emit:tool_finished",
            "emit:tool_finished",
            "emit:tool_started",
            "tool:2:bash"
        ])
    );
    assert_eq!(
        f.done(2, "listing"),
        s(&["pending:2", "emit:tool_finished", "save"])
    );
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["emit:iteration", "model:3"])
    );
    assert_eq!(
        f.last_results(),
        vec![
            ("A".to_string(), false),
            ("B".to_string(), false),
            ("listing".to_string(), false)
        ]
    );
}

#[test]
fn late_messages_of_an_earlier_step_are_ignored() {
    let mut f = fixture(Options::default()).started();
    f.respond(&[read("a")]);
    f.step(Input::Saved(Ok(())));
    let stale = f.epoch() - 1;
    assert!(
        f.on(Input::Model {
            epoch: stale,
            event: StreamEvent::TextDelta("late".into())
        })
        .is_empty()
    );
    assert!(f.on(Input::ModelEnded { epoch: stale }).is_empty());
    assert!(
        f.on(Input::CallFinished {
            epoch: stale,
            index: 0,
            output: ToolOutput::ok("x"),
            duration: Duration::ZERO,
            error: None
        })
        .is_empty()
    );
    assert!(
        f.on(Input::CleanupGraceOver { epoch: f.epoch() })
            .is_empty()
    );
    assert_eq!(f.machine.status().phase, "executing");
}

#[test]
fn approvals_pending_inside_a_group_then_allowed_denied_and_remembered() {
    let mut f = fixture(Options {
        mode: PermissionMode::Default,
        ..Options::default()
    })
    .started();
    f.respond(&[bash("make"), bash("make test")]);
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["emit:tool_started", "emit:approval_requested", "await"])
    );
    let status = f.machine.status();
    assert_eq!(status.phase, "awaiting_approval");
    assert_eq!(status.pending_approvals, vec!["run-1".to_string()]);
    // An unknown id changes nothing.
    assert!(
        f.on(Input::Approval {
            approval_id: "run-99".into(),
            outcome: ApprovalOutcome::Allow,
            reason: None
        })
        .is_empty()
    );
    assert_eq!(
        f.step(Input::Approval {
            approval_id: "run-1".into(),
            outcome: ApprovalOutcome::AllowAlways,
            reason: None
        }),
        s(&["closed", "emit:approval_resolved", "rules", "tool:0:bash"])
    );
    assert_eq!(
        f.done(0, "built"),
        s(&[
            "pending:0",
            "emit:tool_finished",
            "emit:tool_started",
            "emit:approval_requested",
            "await"
        ])
    );
    assert_eq!(
        f.step(Input::Approval {
            approval_id: "run-2".into(),
            outcome: ApprovalOutcome::Deny,
            reason: Some(" not now ".into())
        }),
        s(&[
            "closed",
            "emit:approval_resolved",
            "emit:tool_finished",
            "save"
        ])
    );
    assert_eq!(
        f.last_results()[1],
        ("The user denied this call: not now".to_string(), true)
    );
}

/// The `(index, outside_read_approved)` of every tool launch in `effects`.
fn launches(effects: &[Effect]) -> Vec<(usize, bool)> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::RunTool(launch) => Some((launch.index, launch.outside_read_approved)),
            _ => None,
        })
        .collect()
}

#[test]
fn outside_reads_named_by_an_allow_rule_or_an_always_answer_launch_granted() {
    let outside = tempfile::tempdir().unwrap();
    let outside = crate::sandbox::resolve_path(outside.path()).unwrap();
    let named = outside.join("named.txt").display().to_string();
    let other = outside.join("other.txt").display().to_string();
    let mut f = fixture(Options {
        mode: PermissionMode::Default,
        allow: vec![format!("Read({named})")],
        ..Options::default()
    })
    .started();
    // Allowed by the configured rule: the tool may read there, no question.
    f.respond(&[read(&named), read("inside.txt")]);
    let effects = f.on(Input::Saved(Ok(())));
    assert_eq!(launches(&effects), vec![(0, true), (1, false)]);
    f.done(0, "named");
    f.done(1, "inside");
    f.step(Input::Saved(Ok(())));

    // Not named: asked; "always" launches it and remembers it ...
    f.respond(&[read(&other)]);
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["emit:tool_started", "emit:approval_requested", "await"])
    );
    let effects = f.on(Input::Approval {
        approval_id: "run-1".into(),
        outcome: ApprovalOutcome::AllowAlways,
        reason: None,
    });
    assert_eq!(launches(&effects), vec![(0, true)]);
    f.done(0, "other");
    f.step(Input::Saved(Ok(())));

    // ... so the identical read runs next time without asking, still granted.
    f.respond(&[read(&other)]);
    let effects = f.on(Input::Saved(Ok(())));
    assert_eq!(
        show(&effects),
        s(&["emit:tool_started", "tool:0:read_file"])
    );
    assert_eq!(launches(&effects), vec![(0, true)]);
}

#[test]
fn nobody_to_ask_becomes_a_reasoned_denial() {
    let mut f = fixture(Options {
        mode: PermissionMode::Default,
        approver: Approver::Absent,
        ..Options::default()
    })
    .started();
    f.respond(&[bash("make")]);
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["emit:tool_started", "emit:tool_finished", "save"])
    );
    assert!(f.last_results()[0].0.contains("nobody can answer"));
}

#[test]
fn a_denial_with_nobody_to_ask_advises_what_works_in_the_current_mode() {
    let mut f = fixture(Options {
        mode: PermissionMode::AcceptEdits,
        approver: Approver::Absent,
        ..Options::default()
    })
    .started();
    f.respond(&[bash("cargo test --all")]);
    f.step(Input::Saved(Ok(())));
    let (text, is_error) = f.last_results()[0].clone();
    assert!(is_error);
    assert!(text.contains("nobody can answer"), "{text}");
    assert!(text.contains("`--mode bypass`"), "{text}");
    assert!(!text.contains("accept-edits`"), "{text}");
    assert!(
        text.contains("`allow = [\"Bash(cargo test --all)\"]` under `[permissions]` in `"),
        "{text}"
    );
    assert!(
        text.contains("/.troupe/config.toml` (this project, once trusted"),
        "{text}"
    );
}

#[test]
fn cancellation_mid_batch_waits_for_running_calls_then_closes() {
    let mut f = fixture(Options::default()).started();
    f.respond(&[read("a"), read("b"), bash("ls")]);
    f.step(Input::Saved(Ok(())));
    assert_eq!(f.done(0, "A"), s(&["pending:0"]));
    f.account.stop(StopCause::Cancelled);
    assert_eq!(f.step(Input::Interrupted), s(&["grace"]));
    assert_eq!(f.machine.status().phase, "cancelling");
    // The running call reports once it stopped; the group's finish events
    // follow, the never-started call is answered "(cancelled)".
    assert_eq!(
        f.finish_call(
            1,
            ToolOutput::error("(cancelled)"),
            Some(ToolErrorKind::Cancelled)
        ),
        s(&[
            "pending:1",
            "emit:tool_finished",
            "emit:tool_finished",
            "save"
        ])
    );
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:cancelled:cancelled"])
    );
    assert_eq!(
        f.last_results(),
        vec![
            ("A".to_string(), false),
            ("(cancelled)".to_string(), true),
            ("(cancelled)".to_string(), true)
        ]
    );
    assert_closed(f.history());
}

#[test]
fn cancellation_with_approvals_pending_resolves_them() {
    let mut f = fixture(Options {
        mode: PermissionMode::Default,
        ..Options::default()
    })
    .started();
    f.respond(&[bash("make")]);
    f.step(Input::Saved(Ok(())));
    assert_eq!(
        f.step(Input::Interrupted),
        s(&[
            "emit:approval_resolved",
            "closed",
            "emit:tool_finished",
            "save"
        ])
    );
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:cancelled:cancelled"])
    );
    assert_closed(f.history());
}

#[test]
fn a_call_that_never_stops_is_given_up_after_the_grace() {
    let mut f = fixture(Options::default()).started();
    f.respond(&[bash("sleep 1000")]);
    f.step(Input::Saved(Ok(())));
    assert_eq!(f.step(Input::Interrupted), s(&["grace"]));
    let epoch = f.epoch();
    assert_eq!(
        f.step(Input::CleanupGraceOver { epoch }),
        s(&["emit:tool_finished", "save"])
    );
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:cancelled:cancelled"])
    );
    // A report after the end changes nothing.
    assert!(f.done(0, "late").is_empty());
    assert_closed(f.history());
}

#[test]
fn cancellation_while_streaming_keeps_the_partial_text() {
    let mut f = fixture(Options::default()).started();
    let epoch = f.epoch();
    f.step(Input::Model {
        epoch,
        event: StreamEvent::TextDelta("half an ans".into()),
    });
    assert_eq!(f.step(Input::Interrupted), s(&["save"]));
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:cancelled:cancelled"])
    );
    assert!(f.history().iter().any(|m| m.text().contains("half an ans")));
    assert_closed(f.history());
}

#[test]
fn an_interruption_during_a_save_waits_for_it() {
    let mut f = fixture(Options::default()).started();
    f.respond(&[bash("rm -r build")]);
    // The calls are being saved when the run is cancelled.
    assert!(f.on(Input::Interrupted).is_empty());
    assert_eq!(f.step(Input::Saved(Ok(()))), s(&["save"]));
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:cancelled:cancelled"])
    );
    assert_eq!(f.last_results(), vec![("(cancelled)".to_string(), true)]);
    assert_closed(f.history());
}

#[test]
fn a_wall_clock_stop_from_above_ends_as_a_limit() {
    let mut f = fixture(Options::default()).started();
    f.account
        .stop(StopCause::Limit(crate::agent::LimitHit::WallClock {
            limit: Duration::from_secs(1),
        }));
    assert_eq!(f.step(Input::Interrupted), s(&["save"]));
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:stopped:wall_clock"])
    );
    assert!(f.history().last().unwrap().text().contains("time budget"));
}

#[test]
fn tokens_spent_by_another_agent_stop_this_one_before_its_next_call() {
    let mut f = fixture(Options {
        tokens: 100,
        ..Options::default()
    })
    .started();
    f.respond(&[read("a")]);
    f.step(Input::Saved(Ok(())));
    // A sibling of the same run spends the rest of the budget.
    f.account.add_usage(
        &Usage {
            input: 100,
            output: 0,
            cache_read: 0,
            cache_write: 0,
        },
        None,
    );
    assert_eq!(
        f.done(0, "A"),
        s(&["pending:0", "emit:tool_finished", "save"])
    );
    assert_eq!(f.step(Input::Saved(Ok(()))), s(&["emit:notice", "save"]));
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:stopped:budget_tokens"])
    );
    assert!(matches!(
        f.account.stop_cause(),
        Some(StopCause::Limit(
            crate::agent::LimitHit::BudgetTokens { .. }
        ))
    ));
    assert!(
        f.account.root().is_cancelled(),
        "every agent of the run hears of it"
    );
}

#[test]
fn spent_tokens_refuse_the_calls_of_the_response_that_spent_them() {
    let mut f = fixture(Options {
        tokens: 10,
        ..Options::default()
    })
    .started();
    f.respond(&[read("a")]);
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&[
            "emit:tool_started",
            "emit:notice",
            "emit:tool_finished",
            "save"
        ])
    );
    assert!(
        f.last_results()[0]
            .0
            .starts_with("Not run. (Stopped: the token budget")
    );
    assert!(f.account.root().is_cancelled());
    assert!(f.on(Input::Interrupted).is_empty());
    assert_eq!(f.step(Input::Saved(Ok(()))), s(&["save"]));
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:stopped:budget_tokens"])
    );
    assert_closed(f.history());
}

#[test]
fn the_tool_call_budget_is_checked_before_every_call() {
    let mut f = fixture(Options {
        tool_calls: 2,
        ..Options::default()
    })
    .started();
    f.respond(&[bash("a"), bash("b"), bash("c")]);
    f.step(Input::Saved(Ok(())));
    f.done(0, "a");
    assert_eq!(
        f.done(1, "b"),
        s(&[
            "pending:1",
            "emit:tool_finished",
            "emit:tool_started",
            "emit:notice",
            "emit:tool_finished",
            "save"
        ])
    );
    assert!(
        f.last_results()[2]
            .0
            .starts_with("Not run. (Stopped: the budget of 2 tool calls")
    );
    assert!(f.account.root().is_cancelled());
    // The loop hears of the stop through its token and ends as a limit.
    assert_eq!(f.step(Input::Interrupted), s(&[]));
    assert_eq!(f.step(Input::Saved(Ok(()))), s(&["save"]));
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:stopped:max_tool_calls"])
    );
}

#[test]
fn an_explorer_is_offered_read_only_tools_and_a_write_counts_as_unknown() {
    let mut spec = AgentSpec::main(25);
    spec.path = "main/explorer-1".into();
    spec.depth = 1;
    spec.unknown_tool_limit = crate::agent::UNKNOWN_TOOL_TURNS_SUBAGENT;
    let mut f = fixture(Options {
        tools: RoleTools::ReadOnly,
        spec,
        task: Some("look".into()),
        ..Options::default()
    });
    assert_eq!(f.step(Input::Begin), s(&["emit:subagent_started", "save"]));
    let effects = f.on(Input::Saved(Ok(())));
    let Some(Effect::CallModel { request, .. }) = effects.last() else {
        panic!("model call expected");
    };
    let offered: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert!(offered.contains(&"read_file") && !offered.contains(&"write_file"));
    assert!(!offered.contains(&"agent"));
    let write = ("write_file", json!({"path": "x", "content": "y"}));
    assert_eq!(
        f.respond(std::slice::from_ref(&write)),
        s(&["emit:usage", "save"])
    );
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["emit:tool_started", "emit:tool_finished", "save"])
    );
    assert!(
        f.last_results()[0]
            .0
            .starts_with("Unknown tool \"write_file\"")
    );
    f.step(Input::Saved(Ok(())));
    assert_eq!(
        f.respond(&[write]),
        s(&["emit:usage", "emit:notice", "save"])
    );
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["emit:subagent_finished", "finished:stopped:unknown_tools"])
    );
}

#[test]
fn consecutive_agent_calls_start_together_with_numbered_paths() {
    let mut f = fixture(Options::default()).started();
    f.respond(&[fork("a"), fork("b"), fork("c"), read("x")]);
    let effects = f.on(Input::Saved(Ok(())));
    assert_eq!(
        show(&effects),
        s(&[
            "emit:tool_started",
            "emit:tool_started",
            "emit:tool_started",
            "agent:0:main/fork-1",
            "agent:1:main/fork-2",
            "agent:2:main/fork-3"
        ])
    );
    let Effect::StartAgent(launch) = &effects[4] else {
        panic!("agent launch expected");
    };
    let child = &launch.child;
    assert!(child.spec.is_fork && child.spec.depth == 1);
    // The fork starts from the parent's history, byte for byte, then the
    // placeholders and its task.
    let parent = f.history();
    assert_eq!(&child.history[..parent.len()], parent);
    let placeholders: Vec<String> = child.history[parent.len()]
        .tool_results_iter()
        .map(|r| r.joined_text())
        .collect();
    assert_eq!(placeholders.len(), 4);
    assert!(placeholders[1].contains("This call started you"));
    assert!(
        child
            .history
            .last()
            .unwrap()
            .text()
            .starts_with(FORK_PREAMBLE)
    );
    // Children report in any order; the batch reports in call order.
    assert_eq!(f.done(2, "Scope: c"), s(&["pending:2"]));
    f.done(0, "Scope: a");
    assert_eq!(
        f.done(1, "Scope: b"),
        s(&[
            "pending:1",
            "emit:tool_finished",
            "emit:tool_finished",
            "emit:tool_finished",
            "emit:tool_started",
            "tool:3:read_file"
        ])
    );
}

#[test]
fn a_fork_may_not_fork_and_depth_is_limited() {
    let mut spec = AgentSpec::main(25);
    spec.path = "main/fork-1".into();
    spec.depth = 1;
    spec.is_fork = true;
    let mut f = fixture(Options {
        spec,
        ..Options::default()
    })
    .started();
    f.respond(&[fork("again")]);
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["emit:tool_started", "emit:tool_finished", "save"])
    );
    assert_eq!(
        f.last_results()[0],
        (FORK_CANNOT_START_AGENTS.to_string(), true)
    );

    let mut spec = AgentSpec::main(25);
    spec.path = "main/general-1/general-1".into();
    spec.depth = 2;
    let mut f = fixture(Options {
        spec,
        ..Options::default()
    })
    .started();
    f.respond(&[("agent", json!({"description": "d", "prompt": "p"}))]);
    f.step(Input::Saved(Ok(())));
    assert!(f.last_results()[0].0.contains("at most 2 levels"));
}

#[test]
fn five_thousand_refused_calls_settle_in_one_step_without_recursion() {
    let mut f = fixture(Options {
        mode: PermissionMode::Plan,
        tool_calls: 100_000,
        ..Options::default()
    })
    .started();
    let calls: Vec<(&str, serde_json::Value)> =
        (0..5_000).map(|i| bash(&format!("echo {i}"))).collect();
    assert_eq!(f.respond(&calls), s(&["emit:usage", "save"]));
    let effects = show(&f.on(Input::Saved(Ok(()))));
    assert_eq!(effects.len(), 10_001);
    assert_eq!(effects.last().map(String::as_str), Some("save"));
    assert_eq!(f.last_results().len(), 5_000);
    assert!(f.last_results()[4_999].0.contains("plan mode"));
}

#[test]
fn a_refused_save_ends_the_loop_with_a_store_error() {
    let mut f = fixture(Options::default());
    assert_eq!(f.step(Input::Begin), s(&["save"]));
    assert_eq!(
        f.step(Input::Saved(Err("disk full".into()))),
        s(&["emit:error", "finished:error:store_error"])
    );
    assert_closed(f.history());

    // A refused pending result stops the running calls, ends without saving.
    let mut f = fixture(Options::default()).started();
    f.respond(&[read("a"), read("b")]);
    f.step(Input::Saved(Ok(())));
    let epoch = f.epoch();
    assert_eq!(
        f.step(Input::CallFinished {
            epoch,
            index: 0,
            output: ToolOutput::ok("A"),
            duration: Duration::ZERO,
            error: None
        }),
        s(&["pending:0"])
    );
    assert_eq!(
        f.step(Input::PendingSaved {
            epoch,
            index: 0,
            result: Err("disk full".into())
        }),
        s(&["emit:error", "grace"])
    );
    assert_eq!(
        f.done(1, "B"),
        s(&[
            "pending:1",
            "emit:tool_finished",
            "emit:tool_finished",
            "finished:error:store_error"
        ])
    );
    assert_closed(f.history());
}

#[test]
fn a_failed_model_call_keeps_what_arrived_and_ends_with_an_error() {
    let mut f = fixture(Options::default()).started();
    let epoch = f.epoch();
    f.step(Input::Model {
        epoch,
        event: StreamEvent::TextDelta("partial".into()),
    });
    let error =
        crate::llm::ProviderError::new("p", crate::llm::ProviderErrorKind::StreamBroken, "reset");
    assert_eq!(
        f.step(Input::ModelFailed { epoch, error }),
        s(&["emit:error", "save"])
    );
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:error:provider_error"])
    );
    assert_closed(f.history());
}

#[test]
fn repeated_identical_calls_stop_the_loop() {
    let mut f = fixture(Options::default()).started();
    for _ in 0..2 {
        f.respond(&[read("same")]);
        f.step(Input::Saved(Ok(())));
        f.done(0, "x");
        f.step(Input::Saved(Ok(())));
    }
    assert_eq!(
        f.respond(&[read("same")]),
        s(&["emit:usage", "emit:notice", "save"])
    );
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:stopped:repeated_calls"])
    );
    assert_closed(f.history());
}

#[test]
fn the_turn_limit_stops_before_the_next_call() {
    let mut f = fixture(Options {
        spec: AgentSpec::main(1),
        ..Options::default()
    })
    .started();
    f.respond(&[read("a")]);
    f.step(Input::Saved(Ok(())));
    f.done(0, "x");
    assert_eq!(f.step(Input::Saved(Ok(()))), s(&["emit:notice", "save"]));
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:stopped:max_turns"])
    );
    let _ = StopReason::EndTurn;
    let _ = RunStatus::Finished;
}

#[test]
fn a_retried_model_request_is_a_coded_notice_and_the_answer_follows() {
    let mut f = fixture(Options::default()).started();
    let epoch = f.epoch();
    let retrying = crate::llm::retry::Retrying {
        retry: 1,
        max_retries: 4,
        kind: crate::llm::ProviderErrorKind::Overloaded,
        status: Some(529),
        delay: std::time::Duration::from_millis(500),
    };
    let effects = f.on(Input::Model {
        epoch,
        event: StreamEvent::Retrying(retrying),
    });
    let [Effect::Emit(EventKind::Notice { text, code })] = effects.as_slice() else {
        panic!("one notice expected: {:?}", show(&effects));
    };
    assert_eq!(
        text,
        "retrying model request (retry 1/4): 529 overloaded; next in 0.5 s"
    );
    assert_eq!(code.as_deref(), Some(crate::events::NOTICE_MODEL_RETRY));
    assert_eq!(f.answer_text("hello"), s(&["emit:usage", "save"]));
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:finished:end_turn"])
    );
    assert_eq!(
        f.history().last().map(Message::text).as_deref(),
        Some("hello")
    );
}
