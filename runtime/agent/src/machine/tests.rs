//! Transition tables of the loop: each test feeds inputs and compares the
//! effects, written as short strings, with what the loop must do. Compiled
//! for tests only (`#[cfg(test)]` on its declaration in `machine/mod.rs`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use std::sync::Mutex;

use super::*;
use crate::agent_tool::agent_tool_definition;
use crate::compact::estimate::TokenEstimate;
use crate::guard::Budget;
use crate::roles::{RoleSet, RoleTools};
use crate::subagent::{FORK_CANNOT_START_AGENTS, FORK_PREAMBLE};
use crate::{AgentSpec, RunAccount, StopCause, validate_history};
use troupe_config::PermissionSettings;
use troupe_paths::sandbox::PathSandbox;
use troupe_protocol::events::RunStatus;
use troupe_protocol::model::{ContentBlock, Message, Role, StopReason, Usage};
use troupe_protocol::permission::{Decision, PermissionMode};

/// The project root of every fixture.
const PROJECT: &str = "/work/project";

struct Fixture {
    machine: AgentLoop,
    account: Arc<Mutex<RunAccount>>,
    spans: SpanLedger,
}

/// The spans a loop opened, as an interpreter's table would hold them,
/// checked as they come: ids are fresh, parents are open, nothing is noted
/// or closed twice or before it opened, and a finished loop left nothing
/// open.
#[derive(Default)]
struct SpanLedger {
    /// Every span ever opened: parent and kind.
    opened: std::collections::BTreeMap<SpanId, (Option<SpanId>, SpanKind)>,
    /// Those still open.
    open: std::collections::BTreeSet<SpanId>,
    /// Notes, in order.
    notes: Vec<(SpanId, SpanNote)>,
}

impl SpanLedger {
    fn apply(&mut self, effects: &[Effect]) {
        for effect in effects {
            match effect {
                Effect::Span(SpanOp::Open { id, parent, kind }) => {
                    assert!(!self.opened.contains_key(id), "{id:?} opened twice");
                    if let Some(parent) = parent {
                        assert!(
                            self.open.contains(parent),
                            "{id:?}: parent {parent:?} not open"
                        );
                    } else {
                        assert!(
                            self.opened.is_empty(),
                            "only the agent's span hangs at the root"
                        );
                    }
                    self.opened.insert(*id, (*parent, kind.clone()));
                    self.open.insert(*id);
                }
                Effect::Span(SpanOp::Note { id, note }) => {
                    assert!(
                        self.open.contains(id),
                        "note on {id:?}, which is not open: {note:?}"
                    );
                    self.notes.push((*id, note.clone()));
                }
                Effect::Span(SpanOp::Close { id }) => {
                    assert!(self.open.remove(id), "{id:?} closed but not open");
                }
                Effect::CallModel { span, .. }
                | Effect::Summarise { span, .. }
                | Effect::RunTool(ToolLaunch { span, .. })
                | Effect::StartAgent(AgentLaunch { span, .. }) => {
                    assert!(
                        self.open.contains(span),
                        "work runs in {span:?}, which is not open"
                    );
                }
                Effect::Finished(_) => {
                    assert!(self.open.is_empty(), "spans left open: {:?}", self.open);
                }
                _ => {}
            }
        }
    }

    /// The kinds of the spans opened, in order, as short names.
    fn kinds(&self) -> Vec<String> {
        self.opened
            .values()
            .map(|(_, kind)| match kind {
                SpanKind::Agent { agent, .. } => format!("agent:{agent}"),
                SpanKind::Chat { model, .. } => format!("chat:{model}"),
                SpanKind::Tool { tool, .. } => format!("tool:{tool}"),
                SpanKind::Approval { tool, .. } => format!("approval:{tool}"),
                SpanKind::Compaction { trigger, .. } => format!("compact:{trigger}"),
            })
            .collect()
    }
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
    window: u64,
    work_ahead: bool,
    resumed: bool,
    compact_only: bool,
    /// Messages before the task (a continued session's history).
    history: Vec<Message>,
    hooks: Vec<troupe_hooks::Hook>,
    /// Where newer tools come from before each model request.
    catalogue_source: Option<Arc<dyn crate::CatalogueSource>>,
    /// Content goes on spans.
    capture: bool,
    /// The stable part of the system prompt.
    stable: String,
    /// Checkpoints before turns that can change files.
    checkpoints: bool,
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
            window: 0,
            work_ahead: false,
            resumed: false,
            compact_only: false,
            history: Vec::new(),
            hooks: Vec::new(),
            catalogue_source: None,
            capture: false,
            stable: "stable".into(),
            checkpoints: false,
        }
    }
}

fn fixture(options: Options) -> Fixture {
    // Paths are resolved in a file system held in memory: the loop's
    // decisions read no disk.
    let files = troupe_paths::view::MemoryFileSystem::new();
    files.dir(PROJECT).dir("/elsewhere");
    let sandbox =
        Arc::new(PathSandbox::with_view(Arc::new(files), Path::new(PROJECT), &[], None).unwrap());
    let settings = PermissionSettings {
        mode: options.mode,
        allow: options
            .allow
            .iter()
            .map(|rule| troupe_protocol::permission::RuleEntry {
                rule: rule.clone(),
                source: troupe_protocol::permission::RuleSource::Project,
            })
            .collect(),
        ..PermissionSettings::default()
    };
    let permissions = Arc::new(PermissionEngine::new(&settings, sandbox).unwrap());
    let roles = RoleSet::builtin();
    let catalogue = ToolCatalogue::for_role(
        &troupe_tools::builtin_registry(),
        &options.tools,
        Some(agent_tool_definition(&roles)),
    )
    .unwrap();
    let account = Arc::new(Mutex::new(RunAccount::new(
        Budget {
            tokens: options.tokens,
            usd: None,
            wall_clock: Duration::from_secs(3600),
            tool_calls: options.tool_calls,
        },
        fixed_now(),
    )));
    let mut transcript = Transcript::new();
    for message in options.history {
        transcript.push(message);
    }
    transcript.push(Message::user_text("do the task"));
    let machine = AgentLoop::new(LoopSetup {
        spec: options.spec,
        run_id: "run".into(),
        session_id: "session".into(),
        cache_key: "session".into(),
        task: options.task,
        system: SystemPrompt {
            stable: options.stable,
            environment: "env".into(),
        },
        catalogue: Arc::new(catalogue),
        catalogue_source: options.catalogue_source,
        roles: Arc::new(roles),
        permissions,
        account: account.clone(),
        approver: options.approver,
        provider_name: "p".into(),
        provider_system: "anthropic".into(),
        model: "m".into(),
        price: None,
        capture: ContentCapture::new(options.capture),
        transcript,
        context: ContextSetup {
            window: options.window,
            work_ahead: options.work_ahead,
            resumed: options.resumed,
            compact_only: options.compact_only,
            ..ContextSetup::default()
        },
        hooks: Arc::new(troupe_hooks::HookSet::new(options.hooks)),
        checkpoints: options.checkpoints,
    });
    Fixture {
        machine,
        account,
        spans: SpanLedger::default(),
    }
}

/// Effects as short strings: `emit:<type>`, `save`, `pending:<i>`, `rules`,
/// `model:<epoch>`, `tool:<i>:<name>`, `agent:<i>:<path>`, `await`, `closed`,
/// `grace`, `memory`, `finished:<status>:<reason>`.
fn show(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .filter(|effect| !matches!(effect, Effect::Span(_)))
        .map(|effect| match effect {
            Effect::Emit(kind) => format!("emit:{}", kind.type_name()),
            Effect::Save { .. } => "save".into(),
            Effect::SavePending { index, .. } => format!("pending:{index}"),
            Effect::SaveRules(_) => "rules".into(),
            Effect::SaveTaskPlan(plan) => format!("task_plan {}", plan.plan.len()),
            Effect::Offload(plan) => format!("offload:{}:{}", plan.spill.len(), plan.kept.len()),
            Effect::Summarise { epoch, .. } => format!("summarise:{epoch}"),
            Effect::SaveMarker(_) => "marker".into(),
            Effect::CallModel { epoch, .. } => format!("model:{epoch}"),
            Effect::Checkpoint { epoch, meta, .. } => {
                format!("checkpoint:{epoch}:{}", meta.tool_call_ids.len())
            }
            Effect::RunTool(launch) => format!("tool:{}:{}", launch.index, launch.tool.name()),
            Effect::StartAgent(launch) => {
                format!("agent:{}:{}", launch.index, launch.child.spec.path)
            }
            Effect::AwaitApproval { .. } => "await".into(),
            Effect::Cancel { epoch } => format!("cancel:{epoch}"),
            Effect::StopTree => "stop_tree".into(),
            Effect::StopBelow => "stop_below".into(),
            Effect::Span(_) => unreachable!("spans are shown apart"),
            Effect::ApprovalsClosed(_) => "closed".into(),
            Effect::ArmCleanupGrace { .. } => "grace".into(),
            Effect::ArmSaveDeadline { save, .. } => format!("deadline:{save}"),
            Effect::UpdateMemory { .. } => "memory".into(),
            Effect::RunHooks(request) => format!("hooks:{}", request.event),
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

/// The time every input of these tests happens at.
fn fixed_now() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(1_764_633_600, 0).expect("a valid instant")
}

impl Fixture {
    fn on(&mut self, input: Input) -> Vec<Effect> {
        let effects = self.machine.on(fixed_now(), input);
        self.spans.apply(&effects);
        effects
    }

    /// The effects of `input`, shown; save deadlines (timers armed once the
    /// agent is interrupted) are left out: `deadlines` shows them.
    fn step(&mut self, input: Input) -> Vec<String> {
        show(&self.on(input))
            .into_iter()
            .filter(|effect| !effect.starts_with("deadline:"))
            .collect()
    }

    /// The save deadlines `input` arms.
    fn deadlines(&mut self, input: Input) -> Vec<u64> {
        self.on(input)
            .iter()
            .filter_map(|effect| match effect {
                Effect::ArmSaveDeadline { save, .. } => Some(*save),
                _ => None,
            })
            .collect()
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
        let effects = self.respond_effects(calls);
        show(&effects)
    }

    /// [`Fixture::respond`], returning the effects themselves.
    fn respond_effects(&mut self, calls: &[(&str, serde_json::Value)]) -> Vec<Effect> {
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
        self.on(Input::ModelEnded { epoch })
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

    /// Call `index` finishes with `text`: its effects, a pending save left
    /// unanswered.
    fn on_done(&mut self, index: usize, text: &str) -> Vec<Effect> {
        let epoch = self.epoch();
        self.on(Input::CallFinished {
            epoch,
            index,
            output: ToolOutput::ok(text),
            duration: Duration::from_millis(3),
            error: None,
        })
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
    assert_closed(f.history());
}

#[test]
fn a_save_carries_what_the_store_lacks_and_marks_it_stored_once_durable() {
    let mut f = fixture(Options::default());
    let effects = f.on(Input::Begin);
    let Some(Effect::Save { upto, messages }) = effects
        .iter()
        .find(|effect| !matches!(effect, Effect::Span(_)))
    else {
        panic!("the first effect saves: {:?}", show(&effects));
    };
    assert_eq!(*upto, f.machine.transcript().len());
    let indices: Vec<u64> = messages.iter().map(|(index, _)| *index).collect();
    assert_eq!(indices, (0..*upto as u64).collect::<Vec<_>>());
    assert!(
        !f.machine.transcript().is_saved(),
        "not before it is durable"
    );
    f.on(Input::Saved(Ok(())));
    assert!(f.machine.transcript().is_saved());
    // The answer joins the history; a failed save leaves it unstored.
    assert_eq!(f.answer_text("hello"), s(&["emit:usage", "save"]));
    assert!(!f.machine.transcript().is_saved());
    f.on(Input::Saved(Err("disk full".into())));
    assert!(!f.machine.transcript().is_saved());
}

#[test]
fn a_read_only_batch_then_a_side_effect_in_order() {
    let mut f = fixture(Options::default()).started();
    assert_eq!(
        f.respond(&[read("a"), read("b"), bash("make")]),
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
    // The last call's result is saved with the turn's tool message: one
    // write, and its finish event once that write is durable.
    assert_eq!(f.done(2, "listing"), s(&["save"]));
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["emit:tool_finished", "emit:iteration", "model:3"])
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

fn checkpointed(f: &mut Fixture, epoch: u64, result: Result<(), String>) -> Vec<String> {
    f.step(Input::Checkpointed { epoch, result })
}

fn recorded(turn: u64, result: Result<CheckpointTaken, String>) -> Input {
    Input::CheckpointRecorded {
        turn,
        tool_call_ids: vec!["c4-0".into(), "c4-1".into()],
        result,
    }
}

fn taken(number: u64, unchanged: bool) -> CheckpointTaken {
    CheckpointTaken {
        number,
        commit: format!("c{number}"),
        unchanged,
        skipped: 1,
    }
}

#[test]
fn a_turn_that_can_change_files_waits_for_its_files_to_be_captured_and_reads_never_do() {
    let mut f = fixture(Options {
        checkpoints: true,
        ..Options::default()
    })
    .started();
    // Reads alone: no checkpoint, the read starts at once.
    let reads = f.respond(&[read("a")]);
    assert!(reads.contains(&"tool:0:read_file".to_string()), "{reads:?}");
    assert!(!reads.iter().any(|effect| effect.starts_with("checkpoint")));
    f.done(0, "A");
    f.step(Input::Saved(Ok(())));
    // A read then a command: the checkpoint comes first, covers both calls,
    // and nothing starts until the files are captured.
    f.respond(&[read("b"), bash("rm -rf build")]);
    assert_eq!(f.step(Input::Saved(Ok(()))), s(&["checkpoint:4:2"]));
    assert_eq!(f.machine.status().phase, "checkpointing");
    // An answer of another epoch changes nothing.
    assert!(checkpointed(&mut f, 3, Ok(())).is_empty());
    assert_eq!(
        checkpointed(&mut f, 4, Ok(())),
        s(&["emit:tool_started", "tool:0:read_file"])
    );
    // Answered twice: ignored.
    assert!(checkpointed(&mut f, 4, Ok(())).is_empty());
    // The record follows while the calls run: announced with the turn and
    // calls it precedes.
    let effects = f.on(recorded(2, Ok(taken(1, false))));
    let Effect::Emit(EventKind::CheckpointCreated {
        number,
        turn,
        tool_call_ids,
        skipped,
        commit,
    }) = &effects[0]
    else {
        panic!("{:?}", show(&effects));
    };
    assert_eq!(
        (
            *number,
            *turn,
            tool_call_ids.len(),
            *skipped,
            commit.as_str()
        ),
        (1, 2, 2, 1, "c1")
    );
    assert_eq!(effects.len(), 1);
    // One equal to the last is not announced.
    assert!(f.step(recorded(3, Ok(taken(1, true)))).is_empty());
}

#[test]
fn a_failed_checkpoint_lets_the_turn_go_on_and_is_told_once() {
    let mut f = fixture(Options {
        checkpoints: true,
        ..Options::default()
    })
    .started();
    f.respond(&[bash("make install")]);
    assert_eq!(f.step(Input::Saved(Ok(()))), s(&["checkpoint:2:1"]));
    let effects = f.on(Input::Checkpointed {
        epoch: 2,
        result: Err("disk full".into()),
    });
    let Effect::Emit(EventKind::Notice { text, code }) = &effects[0] else {
        panic!("{:?}", show(&effects));
    };
    assert!(
        text.contains("disk full") && text.contains("cannot be undone"),
        "{text}"
    );
    assert_eq!(code.as_deref(), Some("checkpoint_failed"));
    assert_eq!(
        show(&effects)[1..],
        s(&["emit:tool_started", "tool:0:bash"])
    );
    // After a failure the agent asks for no more: the next command starts
    // at once, and a late failure of a record is not told again.
    f.done(0, "installed");
    f.step(Input::Saved(Ok(())));
    f.respond(&[bash("make clean")]);
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["emit:tool_started", "tool:0:bash"])
    );
    assert!(f.step(recorded(1, Err("no space".into()))).is_empty());

    // A record that fails is told, and ends the agent's checkpoints too.
    let mut f = fixture(Options {
        checkpoints: true,
        ..Options::default()
    })
    .started();
    f.respond(&[bash("make")]);
    f.step(Input::Saved(Ok(())));
    checkpointed(&mut f, 2, Ok(()));
    assert_eq!(
        f.step(recorded(1, Err("cannot write the ref".into()))),
        s(&["emit:notice"])
    );
    f.done(0, "built");
    f.step(Input::Saved(Ok(())));
    f.respond(&[bash("make install")]);
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["emit:tool_started", "tool:0:bash"])
    );
}

#[test]
fn an_interruption_while_a_checkpoint_is_taken_starts_nothing() {
    let mut f = fixture(Options {
        checkpoints: true,
        ..Options::default()
    })
    .started();
    f.respond(&[bash("make")]);
    assert_eq!(f.step(Input::Saved(Ok(()))), s(&["checkpoint:2:1"]));
    f.account.lock().unwrap().stop(StopCause::Cancelled);
    assert_eq!(f.step(Input::Interrupted), s(&["stop_below", "save"]));
    assert!(checkpointed(&mut f, 2, Ok(())).is_empty());
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:cancelled:cancelled"])
    );
    assert_eq!(f.last_results(), vec![("(cancelled)".to_string(), true)]);
    assert_closed(f.history());
}

#[test]
fn without_checkpoints_a_command_starts_at_once() {
    let mut f = fixture(Options::default()).started();
    f.respond(&[bash("make")]);
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["emit:tool_started", "tool:0:bash"])
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
    let outside = Path::new("/elsewhere");
    let named = outside.join("named.txt").display().to_string();
    let other = outside.join("other.txt").display().to_string();
    let mut f = fixture(Options {
        mode: PermissionMode::Default,
        allow: vec![format!("Read({named})")],
        ..Options::default()
    })
    .started();
    // Allowed by the configured rule: the tool may read there, no question.
    let effects = f.respond_effects(&[read(&named), read("inside.txt")]);
    assert_eq!(launches(&effects), vec![(0, true), (1, false)]);
    f.done(0, "named");
    f.done(1, "inside");
    f.step(Input::Saved(Ok(())));

    // Not named: asked; "always" launches it and remembers it ...
    assert_eq!(
        f.respond(&[read(&other)]),
        s(&[
            "emit:usage",
            "emit:tool_started",
            "emit:approval_requested",
            "await"
        ])
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
    let effects = f.respond_effects(&[read(&other)]);
    assert_eq!(
        show(&effects),
        s(&["emit:usage", "emit:tool_started", "tool:0:read_file"])
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
    f.respond(&[read("a"), read("b"), bash("make")]);
    f.step(Input::Saved(Ok(())));
    assert_eq!(f.done(0, "A"), s(&["pending:0"]));
    f.account.lock().unwrap().stop(StopCause::Cancelled);
    assert_eq!(f.step(Input::Interrupted), s(&["stop_below", "grace"]));
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
            "stop_below",
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
fn every_step_opens_its_span_below_the_agents_and_closes_it_when_it_ends() {
    let mut f = fixture(Options {
        mode: PermissionMode::Default,
        ..Options::default()
    })
    .started();
    f.respond(&[bash("make")]);
    f.step(Input::Saved(Ok(())));
    let effects = f.on(Input::Approval {
        approval_id: "run-1".into(),
        outcome: ApprovalOutcome::Allow,
        reason: None,
    });
    let Some(Effect::RunTool(launch)) = effects
        .iter()
        .find(|effect| matches!(effect, Effect::RunTool(_)))
    else {
        panic!("the call runs once allowed: {:?}", show(&effects));
    };
    let tool_span = launch.span;
    f.done(0, "built");
    f.step(Input::Saved(Ok(())));
    f.answer_text("done");
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:finished:end_turn"])
    );
    assert_eq!(
        f.spans.kinds(),
        s(&[
            "agent:main",
            "chat:m",
            "tool:bash",
            "approval:bash",
            "chat:m"
        ])
    );
    let parent = |id: u64| f.spans.opened[&SpanId(id)].0;
    assert_eq!(parent(0), None, "the agent's span hangs below its parent");
    assert_eq!(parent(1), Some(SpanId(0)));
    assert_eq!(
        tool_span,
        SpanId(2),
        "the call runs in its execute_tool span"
    );
    assert_eq!(parent(2), Some(SpanId(0)));
    assert_eq!(parent(3), Some(SpanId(2)), "the wait is below its call");
    let notes_of = |id: u64| -> Vec<&SpanNote> {
        f.spans
            .notes
            .iter()
            .filter(|(span, _)| *span == SpanId(id))
            .map(|(_, note)| note)
            .collect()
    };
    assert!(matches!(
        notes_of(2)[..],
        [SpanNote::Permission(Decision::Ask { .. })]
    ));
    assert_eq!(
        notes_of(3),
        vec![&SpanNote::Approval(ApprovalOutcome::Allow)]
    );
    assert!(matches!(notes_of(1)[0], SpanNote::Usage(_)));
    assert_eq!(notes_of(0), vec![&SpanNote::RunEnd(RunStatus::Finished)]);
    assert!(f.spans.open.is_empty());
}

#[test]
fn content_is_noted_on_spans_only_when_capture_is_on() {
    let mut f = fixture(Options::default()).started();
    f.answer_text("hello");
    f.step(Input::Saved(Ok(())));
    assert!(f.spans.notes.iter().all(|(_, note)| !matches!(
        note,
        SpanNote::SystemInstructions(_)
            | SpanNote::InputMessages(_)
            | SpanNote::OutputMessage { .. }
    )));

    let mut f = fixture(Options {
        capture: true,
        ..Options::default()
    })
    .started();
    f.answer_text("hello");
    f.step(Input::Saved(Ok(())));
    let chat: Vec<&SpanNote> = f
        .spans
        .notes
        .iter()
        .filter(|(span, _)| *span == SpanId(1))
        .map(|(_, note)| note)
        .collect();
    assert!(matches!(chat[0], SpanNote::SystemInstructions(text) if text == "stable\n\nenv"));
    assert!(matches!(chat[1], SpanNote::InputMessages(messages) if messages.len() == 1));
    assert!(matches!(
        chat.last().unwrap(),
        SpanNote::OutputMessage { message, .. } if message.text() == "hello"
    ));
}

#[test]
fn a_call_that_never_stops_is_given_up_after_the_grace() {
    let mut f = fixture(Options::default()).started();
    f.respond(&[bash("sleep 1000")]);
    f.step(Input::Saved(Ok(())));
    assert_eq!(f.step(Input::Interrupted), s(&["stop_below", "grace"]));
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
    assert_eq!(f.step(Input::Interrupted), s(&["stop_below", "save"]));
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
    // The calls are being saved when the run is cancelled: the agent waits
    // for the save, at most the save deadline; so does every later save.
    let first = f.deadlines(Input::Interrupted);
    assert_eq!(first.len(), 1);
    let second = f.deadlines(Input::Saved(Ok(())));
    assert_eq!(second.len(), 1);
    assert!(second[0] > first[0]);
    // The deadline of the answered save is ignored.
    assert!(f.on(Input::SaveOverdue { save: first[0] }).is_empty());
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:cancelled:cancelled"])
    );
    assert_eq!(f.last_results(), vec![("(cancelled)".to_string(), true)]);
    assert_closed(f.history());
}

#[test]
fn the_last_result_of_a_turn_is_saved_with_its_tool_message_and_announced_once_durable() {
    // One call: its result goes to the store with the turn's tool message,
    // in one write; the finish event is seen only once that write is
    // durable, then the model is called.
    let mut f = fixture(Options::default()).started();
    f.respond(&[bash("make")]);
    f.step(Input::Saved(Ok(())));
    assert_eq!(f.done(0, "A"), s(&["save"]));
    assert_eq!(f.last_results(), vec![("A".to_string(), false)]);
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["emit:tool_finished", "emit:iteration", "model:3"])
    );

    // A write that fails announces nothing: the run ends on the store's
    // error, and no finish event claims a result the store lacks.
    let mut f = fixture(Options::default()).started();
    f.respond(&[bash("make")]);
    f.step(Input::Saved(Ok(())));
    assert_eq!(f.done(0, "A"), s(&["save"]));
    assert_eq!(
        f.step(Input::Saved(Err("disk full".into()))),
        s(&["emit:error", "finished:error:store_error"])
    );

    // Cancelled while that write is under way: the agent waits for it, then
    // announces the result it holds and ends.
    let mut f = fixture(Options::default()).started();
    f.respond(&[bash("make")]);
    f.step(Input::Saved(Ok(())));
    assert_eq!(f.done(0, "A"), s(&["save"]));
    assert_eq!(f.deadlines(Input::Interrupted).len(), 1);
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["stop_below", "emit:tool_finished", "save"])
    );
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:cancelled:cancelled"])
    );
    assert_closed(f.history());

    // Cancelled while that write never answers: the agent ends as
    // cancelled once the deadline passes; the closing save carries the
    // result, and no finish event claims it.
    let mut f = fixture(Options::default()).started();
    f.respond(&[bash("make")]);
    f.step(Input::Saved(Ok(())));
    assert_eq!(f.done(0, "A"), s(&["save"]));
    let save = f.deadlines(Input::Interrupted)[0];
    let effects = f.step(Input::SaveOverdue { save });
    assert!(
        !effects.iter().any(|e| e == "emit:tool_finished"),
        "{effects:?}"
    );
    assert_eq!(
        effects.last().map(String::as_str),
        Some("save"),
        "{effects:?}"
    );
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:cancelled:cancelled"])
    );

    // Of two calls that change things, the first is saved on its own as it
    // finishes (the other may run long); the last one rides with the tool
    // message.
    let mut f = fixture(Options::default()).started();
    f.respond(&[bash("make"), bash("make test")]);
    f.step(Input::Saved(Ok(())));
    let epoch = f.epoch();
    assert_eq!(show(&f.on_done(0, "built")), s(&["pending:0"]));
    assert_eq!(
        f.step(Input::PendingSaved {
            epoch,
            index: 0,
            result: Ok(()),
        }),
        s(&["emit:tool_finished", "emit:tool_started", "tool:1:bash"])
    );
    assert_eq!(f.done(1, "tested"), s(&["save"]));
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["emit:tool_finished", "emit:iteration", "model:3"])
    );
}

#[test]
fn a_response_that_only_reads_runs_at_once_and_is_saved_with_its_results() {
    // Its calls start as the response ends; no result is saved on its own,
    // and one write carries the response and the tool message.
    let mut f = fixture(Options::default()).started();
    assert_eq!(
        f.respond(&[read("a"), read("b")]),
        s(&[
            "emit:usage",
            "emit:tool_started",
            "emit:tool_started",
            "tool:0:read_file",
            "tool:1:read_file"
        ])
    );
    let stored = f.machine.transcript().len() - 1;
    assert!(f.done(1, "B").is_empty());
    let effects = f.on_done(0, "A");
    let Some(Effect::Save { upto, messages }) = effects
        .iter()
        .find(|effect| matches!(effect, Effect::Save { .. }))
    else {
        panic!("the results are saved: {:?}", show(&effects));
    };
    let roles: Vec<Role> = messages.iter().map(|(_, m)| m.role).collect();
    assert_eq!(roles, [Role::Assistant, Role::Tool]);
    assert_eq!(messages[0].0, stored as u64);
    assert_eq!(*upto, stored + 2);
    // Both finish events once that write is durable, then the next request.
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&[
            "emit:tool_finished",
            "emit:tool_finished",
            "emit:iteration",
            "model:3"
        ])
    );

    // That write failing announces no result.
    let mut f = fixture(Options::default()).started();
    f.respond(&[read("a")]);
    assert_eq!(f.done(0, "A"), s(&["save"]));
    assert_eq!(
        f.step(Input::Saved(Err("disk full".into()))),
        s(&["emit:error", "finished:error:store_error"])
    );

    // Stopped while a read runs: the closing save carries the response and
    // its results, the unfinished one answered as cancelled.
    let mut f = fixture(Options::default()).started();
    f.respond(&[read("a")]);
    let stopped = f.step(Input::Interrupted);
    assert!(stopped.contains(&"stop_below".to_string()), "{stopped:?}");
    let closing = f.done(0, "A");
    assert_eq!(
        closing.last().map(String::as_str),
        Some("save"),
        "{closing:?}"
    );
    f.step(Input::Saved(Ok(())));
    assert!(f.machine.is_done());
    assert_closed(f.history());
    validate_history(f.history()).unwrap();

    // A read beside a change, or a read a PreToolUse hook could rewrite,
    // waits for its response to be durable.
    let mut f = fixture(Options::default()).started();
    assert_eq!(
        f.respond(&[read("a"), bash("make")]),
        s(&["emit:usage", "save"])
    );
    let mut f = hooked(vec![hook(
        troupe_hooks::HookEvent::PreToolUse,
        Some("read_file"),
    )]);
    assert_eq!(f.respond(&[read("a")]), s(&["emit:usage", "save"]));
}

#[test]
fn an_interruption_does_not_wait_for_a_save_that_never_answers() {
    let mut f = fixture(Options::default()).started();
    f.respond(&[bash("rm -r build")]);
    let save = f.deadlines(Input::Interrupted)[0];
    let effects = f.step(Input::SaveOverdue { save });
    assert_eq!(effects, s(&["emit:error", "finished:error:store_error"]));
    assert!(f.machine.is_done());
    // The save that answers late changes nothing.
    assert!(f.on(Input::Saved(Ok(()))).is_empty());
}

#[test]
fn a_final_save_that_never_answers_ends_the_agent_once_interrupted() {
    let mut f = fixture(Options::default()).started();
    assert_eq!(f.answer_text("hello"), s(&["emit:usage", "save"]));
    let save = f.deadlines(Input::Interrupted)[0];
    assert_eq!(
        f.step(Input::SaveOverdue { save }),
        s(&["emit:error", "finished:error:store_error"])
    );
}

#[test]
fn a_wall_clock_stop_from_above_ends_as_a_limit() {
    let mut f = fixture(Options::default()).started();
    f.account
        .lock()
        .unwrap()
        .stop(StopCause::Limit(crate::LimitHit::WallClock {
            limit: Duration::from_secs(1),
        }));
    assert_eq!(f.step(Input::Interrupted), s(&["stop_below", "save"]));
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
    f.account.lock().unwrap().add_usage(
        &Usage {
            input: 100,
            output: 0,
            cache_read: 0,
            cache_write: 0,
        },
        None,
    );
    assert_eq!(f.done(0, "A"), s(&["save"]));
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["emit:tool_finished", "stop_tree", "emit:notice", "save"])
    );
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:stopped:budget_tokens"])
    );
    assert!(matches!(
        f.account.lock().unwrap().stop_cause(),
        Some(StopCause::Limit(crate::LimitHit::BudgetTokens { .. }))
    ));
}

#[test]
fn spent_tokens_refuse_the_calls_of_the_response_that_spent_them() {
    let mut f = fixture(Options {
        tokens: 10,
        ..Options::default()
    })
    .started();
    f.respond(&[bash("make")]);
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&[
            "emit:tool_started",
            "stop_tree",
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
    assert!(f.step(Input::Interrupted).is_empty());
    assert_eq!(f.step(Input::Saved(Ok(()))), s(&["stop_below", "save"]));
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
    f.respond(&[bash("a"), bash("b"), bash("c"), bash("d")]);
    f.step(Input::Saved(Ok(())));
    f.done(0, "a");
    assert_eq!(
        f.done(1, "b"),
        s(&[
            "pending:1",
            "emit:tool_finished",
            "emit:tool_started",
            "stop_tree",
            "emit:notice",
            "emit:tool_finished",
            "stop_below",
            "save"
        ])
    );
    assert!(
        f.last_results()[2]
            .0
            .starts_with("Not run. (Stopped: the budget of 2 tool calls")
    );
    // The next call is not started: the stop closes the history at once and
    // the loop ends as a limit once that is saved (the token's cancellation
    // arrives while it saves).
    assert_eq!(f.step(Input::Interrupted), s(&[]));
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:stopped:max_tool_calls"])
    );
    // The call after the refused one never started either, and says why.
    let results = f.last_results();
    assert_eq!(results.len(), 4);
    assert!(
        results[3]
            .0
            .starts_with("Not run. (Stopped: the budget of 2 tool calls"),
        "{results:?}"
    );
    assert_closed(f.history());
}

#[test]
fn calls_left_by_a_stop_say_whether_a_budget_or_a_cancel_stopped_them() {
    use super::ending::unfinished_result;
    let hit = crate::LimitHit::MaxToolCalls { limit: 500 };
    assert_eq!(
        unfinished_result(Some(&StopCause::Limit(hit.clone()))),
        format!("Not run. {}", hit.notice())
    );
    assert_eq!(
        unfinished_result(Some(&StopCause::Cancelled)),
        troupe_tools::CANCELLED_RESULT
    );
    assert_eq!(unfinished_result(None), troupe_tools::CANCELLED_RESULT);
}

/// A source that has a newer catalogue once, when asked.
struct NewerOnce(std::sync::Mutex<Option<Arc<ToolCatalogue>>>);

impl crate::CatalogueSource for NewerOnce {
    fn latest(&self, _current: &Arc<ToolCatalogue>) -> Option<Arc<ToolCatalogue>> {
        self.0.lock().unwrap().take()
    }
}

#[test]
fn tools_that_changed_are_offered_from_the_next_request_and_calls_checked_against_them() {
    let read_only = ToolCatalogue::for_role(
        &troupe_tools::builtin_registry(),
        &RoleTools::ReadOnly,
        None,
    )
    .unwrap();
    let mut f = fixture(Options {
        catalogue_source: Some(Arc::new(NewerOnce(std::sync::Mutex::new(Some(Arc::new(
            read_only,
        )))))),
        ..Options::default()
    });
    assert_eq!(f.step(Input::Begin), s(&["save"]));
    let effects = f.on(Input::Saved(Ok(())));
    let Some(Effect::CallModel { request, .. }) = effects.last() else {
        panic!("model call expected");
    };
    let offered: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert!(offered.contains(&"read_file"), "{offered:?}");
    assert!(!offered.contains(&"write_file") && !offered.contains(&"agent"));
    // A call to a tool the request did not offer is unknown.
    let write = ("write_file", json!({"path": "x", "content": "y"}));
    f.respond(std::slice::from_ref(&write));
    f.on(Input::Saved(Ok(())));
    let result = f.history().iter().rev().find_map(|m| {
        m.content.iter().find_map(|block| match block {
            ContentBlock::ToolResult(result) => Some(result.clone()),
            _ => None,
        })
    });
    assert!(result.unwrap().is_error);
}

#[test]
fn an_explorer_is_offered_read_only_tools_and_a_write_counts_as_unknown() {
    let mut spec = AgentSpec::main(25);
    spec.path = "main/explorer-1".into();
    spec.depth = 1;
    spec.unknown_tool_limit = crate::UNKNOWN_TOOL_TURNS_SUBAGENT;
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
    // The second fork's start.
    let Some(Effect::StartAgent(launch)) = effects
        .iter()
        .filter(|effect| matches!(effect, Effect::StartAgent(_)))
        .nth(1)
    else {
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
        (0..5_000).map(|i| bash(&format!("printf {i}"))).collect();
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
    f.respond(&[read("a"), read("b"), bash("make")]);
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
        s(&["emit:error", "stop_below", "grace"])
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
    let error = troupe_llm::ProviderError::new(
        "p",
        troupe_protocol::model::ProviderErrorKind::StreamBroken,
        "reset",
    );
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
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["emit:tool_finished", "emit:notice", "save"])
    );
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
    let retrying = troupe_llm::retry::Retrying {
        retry: 1,
        max_retries: 4,
        kind: troupe_protocol::model::ProviderErrorKind::Overloaded,
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
    assert_eq!(
        code.as_deref(),
        Some(troupe_protocol::events::NOTICE_MODEL_RETRY)
    );
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

#[test]
fn text_written_during_a_run_is_saved_then_sent_with_the_next_model_call() {
    let mut f = fixture(Options::default()).started();
    let written = |text: &str| Input::UserMessage { text: text.into() };
    assert!(f.step(written("also check b")).is_empty());
    assert!(
        f.step(written("   ")).is_empty(),
        "blank text is no message"
    );
    assert_eq!(
        f.respond(&[read("a")]),
        s(&["emit:usage", "emit:tool_started", "tool:0:read_file"])
    );
    assert!(f.step(written("and c")).is_empty());
    assert_eq!(f.done(0, "A"), s(&["save"]));
    // The written text joins the history after the results, durably, before
    // the model is called.
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&[
            "emit:tool_finished",
            "emit:user_message",
            "emit:user_message",
            "save"
        ])
    );
    let last = f.history().last().unwrap();
    assert_eq!(last.role, Role::User);
    assert_eq!(last.content.len(), 2);
    assert_eq!(last.text(), "also check band c");
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["emit:iteration", "model:3"])
    );
    validate_history(f.history()).unwrap();
    // Nothing is queued twice.
    assert_eq!(f.answer_text("done"), s(&["emit:usage", "save"]));
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:finished:end_turn"])
    );
}

#[test]
fn text_written_as_the_loop_ends_is_not_taken() {
    let mut f = fixture(Options::default()).started();
    assert!(
        f.step(Input::UserMessage {
            text: "one more thing".into()
        })
        .is_empty()
    );
    // The answer ends the loop: no model call takes the text, no event says
    // it was taken, so its sender knows to send it as a new prompt.
    assert_eq!(f.answer_text("hello"), s(&["emit:usage", "save"]));
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:finished:end_turn"])
    );
    assert!(
        f.step(Input::UserMessage {
            text: "later".into()
        })
        .is_empty()
    );
    assert!(f.history().iter().all(|m| !m.text().contains("one more")));
}

// ---- compaction ----

impl Fixture {
    /// The current model call answers with one `read_file` call and reports
    /// `input` tokens of usage.
    fn respond_read(&mut self, path: &str, input: u64) -> Vec<String> {
        let epoch = self.epoch();
        let event = StreamEvent::ToolCall(ToolCall {
            id: format!("c{epoch}-0"),
            name: "read_file".into(),
            input: json!({ "path": path }).to_string(),
        });
        assert!(self.on(Input::Model { epoch, event }).is_empty());
        self.on(Input::Model {
            epoch,
            event: StreamEvent::Usage(Usage {
                input,
                output: 10,
                cache_read: 0,
                cache_write: 0,
            }),
        });
        self.step(Input::ModelEnded { epoch })
    }

    /// One turn: a read answered with `size` characters; returns the effects
    /// after the results were saved (the start of the next model call).
    fn read_turn(&mut self, path: &str, size: usize, input: u64) -> Vec<String> {
        // A response that only reads runs at once; it is saved with its
        // result, and the finish event waits for that save.
        assert_eq!(
            self.respond_read(path, input),
            s(&["emit:usage", "emit:tool_started", "tool:0:read_file"])
        );
        assert_eq!(self.done(0, &"r".repeat(size)), s(&["save"]));
        let mut saved = self.step(Input::Saved(Ok(())));
        assert_eq!(
            saved.first().map(String::as_str),
            Some("emit:tool_finished")
        );
        saved.remove(0);
        saved
    }

    fn request_of(effects: &[Effect]) -> Option<&ChatRequest> {
        effects.iter().find_map(|effect| match effect {
            Effect::CallModel { request, .. } | Effect::Summarise { request, .. } => Some(request),
            _ => None,
        })
    }

    fn summarise_epoch(effects: &[Effect]) -> u64 {
        effects
            .iter()
            .find_map(|effect| match effect {
                Effect::Summarise { epoch, .. } => Some(*epoch),
                _ => None,
            })
            .expect("a summary call")
    }
}

fn windowed(window: u64) -> Fixture {
    fixture(Options {
        window,
        ..Options::default()
    })
    .started()
}

#[test]
fn a_large_result_is_offloaded_once_and_every_later_request_carries_the_same_preview() {
    let mut f = windowed(200_000);
    assert_eq!(f.read_turn("big.log", 60_000, 100), s(&["offload:1:0"]));
    let effects = f.on(Input::Offloaded {
        spilled: vec![("c1-0".into(), "/spill/result-c1-0".into())],
    });
    assert_eq!(show(&effects), s(&["emit:iteration", "model:3"]));
    let first = Fixture::request_of(&effects).unwrap().messages.clone();
    let preview = first[2].tool_results_iter().next().unwrap().joined_text();
    assert!(preview.starts_with("[content offloaded] original size: 60000 bytes"));
    assert!(preview.contains("/spill/result-c1-0"));
    // The stored history keeps the result whole.
    assert_eq!(
        f.history()[2]
            .tool_results_iter()
            .next()
            .unwrap()
            .joined_text()
            .len(),
        60_000
    );
    // The next turn: a small result, kept; the old preview is byte-identical.
    assert_eq!(f.read_turn("small.rs", 10, 100), s(&["offload:0:1"]));
    let effects = f.on(Input::Offloaded { spilled: vec![] });
    let second = &Fixture::request_of(&effects).unwrap().messages;
    assert_eq!(
        &second[..first.len()],
        &first[..],
        "the prefix never changes"
    );
}

#[test]
fn a_failed_spill_is_tried_again_next_turn() {
    let mut f = windowed(200_000);
    assert_eq!(f.read_turn("big.log", 60_000, 100), s(&["offload:1:0"]));
    // Nothing could be written: the request carries the whole result.
    let effects = f.on(Input::Offloaded { spilled: vec![] });
    let request = Fixture::request_of(&effects).unwrap();
    assert_eq!(
        request.messages[2]
            .tool_results_iter()
            .next()
            .unwrap()
            .joined_text()
            .len(),
        60_000
    );
    // The next turn decides it again (and the new small result).
    assert_eq!(f.read_turn("small.rs", 10, 100), s(&["offload:1:1"]));
}

#[test]
fn at_the_threshold_the_older_history_is_summarised_and_the_tail_kept() {
    // Window 40,000: summaries from 7,000 tokens.
    let mut f = windowed(40_000);
    for (turn, path) in ["a.rs", "b.rs", "c.rs"].iter().enumerate() {
        let effects = f.read_turn(path, 14_000, 100);
        assert_eq!(effects, s(&["offload:0:1"]), "turn {turn}");
        let effects = f.step(Input::Offloaded { spilled: vec![] });
        assert_eq!(effects[0], "emit:iteration", "turn {turn}: {effects:?}");
    }
    // The fourth result crosses the threshold with a history long enough to cut.
    assert_eq!(f.read_turn("d.rs", 14_000, 6_000), s(&["offload:0:1"]));
    let effects = f.on(Input::Offloaded { spilled: vec![] });
    let epoch = Fixture::summarise_epoch(&effects);
    assert_eq!(
        show(&effects),
        s(&["emit:compaction", &format!("summarise:{epoch}")])
    );
    let request = Fixture::request_of(&effects).unwrap();
    assert!(
        request.tools.is_empty(),
        "a summary request offers no tools"
    );
    assert!(
        request
            .messages
            .last()
            .unwrap()
            .text()
            .contains("<summary>")
    );
    let before = f.history().len();
    let effects = f.step(Input::Summarised {
        epoch,
        result: Ok("<analysis>x</analysis><summary>Read four files.</summary>".into()),
        usage: Usage {
            input: 5_000,
            output: 300,
            cache_read: 0,
            cache_write: 0,
        },
    });
    assert_eq!(effects, s(&["emit:compaction", "marker"]));
    assert!(f.history().len() < before);
    let summary = f.history()[0].text();
    assert!(summary.contains("Read four files."), "{summary}");
    assert!(
        summary.contains("### a.rs"),
        "the recovery attachment has a file read before the cut"
    );
    assert!(
        !summary.contains("### d.rs"),
        "a file read in the kept tail is not repeated"
    );
    assert!(summary.contains("- read_file:"), "and the tools offered");
    validate_history(f.history()).unwrap();
    // Durable, then the model is called with the compacted history.
    let effects = f.on(Input::Saved(Ok(())));
    assert_eq!(
        show(&effects),
        s(&["emit:iteration", &format!("model:{}", epoch + 1)])
    );
    let request = Fixture::request_of(&effects).unwrap();
    assert!(request.messages[0].text().contains("Read four files."));
    assert!(!request.tools.is_empty());
}

#[test]
fn a_failing_summary_is_counted_by_the_breaker_and_the_turn_goes_on() {
    let mut f = windowed(40_000);
    for path in ["a.rs", "b.rs", "c.rs"] {
        f.read_turn(path, 14_000, 100);
        f.step(Input::Offloaded { spilled: vec![] });
    }
    f.read_turn("d.rs", 14_000, 6_000);
    let effects = f.on(Input::Offloaded { spilled: vec![] });
    let epoch = Fixture::summarise_epoch(&effects);
    // Too long: asked again with the oldest group left out.
    let too_long = troupe_llm::ProviderError::new(
        "p",
        troupe_protocol::model::ProviderErrorKind::PromptTooLong,
        "too long",
    );
    let effects = f.step(Input::Summarised {
        epoch,
        result: Err(too_long),
        usage: Usage::default(),
    });
    assert_eq!(effects, s(&[format!("summarise:{}", epoch + 1).as_str()]));
    let broken = troupe_llm::ProviderError::new(
        "p",
        troupe_protocol::model::ProviderErrorKind::StreamBroken,
        "reset",
    );
    let effects = f.step(Input::Summarised {
        epoch: epoch + 1,
        result: Err(broken),
        usage: Usage::default(),
    });
    assert_eq!(
        effects,
        s(&[
            "emit:compaction",
            "emit:notice",
            "emit:iteration",
            &format!("model:{}", epoch + 2)
        ])
    );
    assert!(!f.machine.context.breaker_is_open());
}

#[test]
fn prompt_too_long_compacts_once_then_retries_and_a_second_refusal_ends_the_turn() {
    let mut f = windowed(40_000);
    for path in ["a.rs", "b.rs", "c.rs", "d.rs"] {
        f.read_turn(path, 14_000, 100);
        f.step(Input::Offloaded { spilled: vec![] });
    }
    let epoch = f.epoch();
    let too_long = || {
        troupe_llm::ProviderError::new(
            "p",
            troupe_protocol::model::ProviderErrorKind::PromptTooLong,
            "prompt is too long",
        )
    };
    let effects = f.on(Input::ModelFailed {
        epoch,
        error: too_long(),
    });
    let summarise = Fixture::summarise_epoch(&effects);
    assert_eq!(
        show(&effects),
        s(&["emit:compaction", &format!("summarise:{summarise}")])
    );
    let effects = f.step(Input::Summarised {
        epoch: summarise,
        result: Ok("<summary>short</summary>".into()),
        usage: Usage::default(),
    });
    assert_eq!(effects, s(&["emit:compaction", "marker"]));
    let effects = f.step(Input::Saved(Ok(())));
    assert_eq!(
        effects,
        s(&["emit:iteration", &format!("model:{}", summarise + 1)])
    );
    // Refused again in the same turn: the error ends the run, history valid.
    let effects = f.step(Input::ModelFailed {
        epoch: summarise + 1,
        error: too_long(),
    });
    assert_eq!(effects, s(&["emit:error", "save"]));
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:error:provider_error"])
    );
    validate_history(f.history()).unwrap();
}

#[test]
fn a_window_of_zero_never_compacts() {
    let mut f = windowed(0);
    assert_eq!(
        f.read_turn("big.log", 60_000, 100),
        s(&["emit:iteration", "model:3"])
    );
}

// ---- work ahead, manual compaction, compaction before resume ----

/// The triggers of the `compaction` events among `effects`, as
/// `phase:trigger`.
fn compaction_events(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Emit(EventKind::Compaction { phase, trigger, .. }) => {
                Some(format!("{phase}:{trigger}"))
            }
            _ => None,
        })
        .collect()
}

/// Working ahead, after an earlier message of ~4,000 tokens (what a summary
/// prepared ahead covers, with the task).
fn working_ahead(window: u64) -> Fixture {
    fixture(Options {
        window,
        work_ahead: true,
        history: vec![Message::user_text(format!(
            "context: {}",
            "x".repeat(14_000)
        ))],
        ..Options::default()
    })
    .started()
}

/// Window 40,000 (threshold 7,000, work ahead from 4,900): three reads of
/// ~4,000 tokens, the third answered with 1,000 tokens of usage, bring the
/// estimate to ~5,000: the summary of the earlier message and the task (the
/// tail keeps the three reads) is asked for beside the next model call.
/// Returns the epoch of the preparation.
fn prepare_ahead(f: &mut Fixture) -> u64 {
    for path in ["a.rs", "b.rs"] {
        assert_eq!(f.read_turn(path, 14_000, 100), s(&["offload:0:1"]));
        let effects = f.step(Input::Offloaded { spilled: vec![] });
        assert_eq!(effects[0], "emit:iteration", "{effects:?}");
        assert_eq!(effects.len(), 2, "nothing prepared below 70%: {effects:?}");
    }
    assert_eq!(f.read_turn("c.rs", 14_000, 1_000), s(&["offload:0:1"]));
    let effects = f.on(Input::Offloaded { spilled: vec![] });
    let epoch = Fixture::summarise_epoch(&effects);
    assert_eq!(
        show(&effects),
        s(&[
            "emit:iteration",
            &format!("summarise:{epoch}"),
            &format!("model:{}", epoch + 1)
        ]),
        "the summary request goes out beside the agent's, not before it"
    );
    assert!(compaction_events(&effects).is_empty(), "no event yet");
    let request = Fixture::request_of(&effects).unwrap();
    assert!(request.tools.is_empty());
    assert_eq!(f.machine.context.prepared(), Some(false));
    epoch
}

fn summary_answer(epoch: u64, text: &str) -> Input {
    Input::Summarised {
        epoch,
        result: Ok(format!("<summary>{text}</summary>")),
        usage: Usage {
            input: 3_000,
            output: 200,
            cache_read: 0,
            cache_write: 0,
        },
    }
}

#[test]
fn a_summary_prepared_ahead_is_swapped_in_at_the_threshold_with_no_model_call() {
    let mut f = working_ahead(40_000);
    let prepared = prepare_ahead(&mut f);
    let anchor = f.machine.context.estimate();
    // The answer arrives while the agent's call streams: nothing happens to
    // the agent, its history or its estimate.
    let history = f.history().to_vec();
    assert!(
        f.step(summary_answer(prepared, "Prepared ahead."))
            .is_empty()
    );
    assert_eq!(f.machine.context.prepared(), Some(true));
    assert_eq!(f.history(), &history[..]);
    assert_eq!(f.machine.context.estimate(), anchor, "never an anchor");
    assert_eq!(f.machine.status().phase, "streaming");
    // The fourth read crosses the threshold: swapped in, no summary call.
    assert_eq!(f.read_turn("d.rs", 14_000, 6_000), s(&["offload:0:1"]));
    let effects = f.on(Input::Offloaded { spilled: vec![] });
    assert_eq!(
        show(&effects),
        s(&["emit:compaction", "emit:compaction", "marker"])
    );
    assert_eq!(
        compaction_events(&effects),
        s(&["started:auto", "finished:auto"])
    );
    assert_eq!(f.machine.context.estimate(), TokenEstimate::reset());
    assert!(f.history()[0].text().contains("Prepared ahead."));
    validate_history(f.history()).unwrap();
    let effects = f.on(Input::Saved(Ok(())));
    assert_eq!(show(&effects)[0], "emit:iteration");
    let request = Fixture::request_of(&effects).unwrap();
    assert!(request.messages[0].text().contains("Prepared ahead."));
    assert!(!request.tools.is_empty());
    assert_eq!(f.machine.context.prepared(), None);
}

#[test]
fn a_preparation_still_on_its_way_at_the_threshold_is_waited_for_not_asked_again() {
    let mut f = working_ahead(40_000);
    let prepared = prepare_ahead(&mut f);
    assert_eq!(f.read_turn("d.rs", 14_000, 6_000), s(&["offload:0:1"]));
    let effects = f.on(Input::Offloaded { spilled: vec![] });
    assert_eq!(show(&effects), s(&["emit:compaction"]), "no second request");
    assert_eq!(f.machine.status().phase, "compacting");
    let effects = f.on(summary_answer(prepared, "Prepared ahead."));
    assert_eq!(compaction_events(&effects), s(&["finished:auto"]));
    assert_eq!(show(&effects), s(&["emit:compaction", "marker"]));
    assert!(f.history()[0].text().contains("Prepared ahead."));
}

#[test]
fn a_preparation_answered_after_another_compaction_is_stale_and_discarded() {
    let mut f = working_ahead(40_000);
    let prepared = prepare_ahead(&mut f);
    // The provider refuses the agent's call: an emergency summary, made now.
    let effects = f.on(Input::ModelFailed {
        epoch: prepared + 1,
        error: troupe_llm::ProviderError::new(
            "p",
            troupe_protocol::model::ProviderErrorKind::PromptTooLong,
            "prompt is too long",
        ),
    });
    let emergency = Fixture::summarise_epoch(&effects);
    assert_ne!(emergency, prepared);
    assert_eq!(compaction_events(&effects), s(&["started:emergency"]));
    let effects = f.on(summary_answer(emergency, "Made in the emergency."));
    assert_eq!(compaction_events(&effects), s(&["finished:emergency"]));
    f.step(Input::Saved(Ok(())));
    // The preparation answers now: its prefix is gone, it is discarded.
    let history = f.history().to_vec();
    assert!(
        f.step(summary_answer(prepared, "Prepared ahead."))
            .is_empty()
    );
    assert_eq!(f.machine.context.prepared(), None);
    assert_eq!(f.history(), &history[..]);
}

#[test]
fn a_ready_summary_whose_prefix_another_compaction_replaced_is_discarded() {
    let mut f = working_ahead(40_000);
    let prepared = prepare_ahead(&mut f);
    assert!(
        f.step(summary_answer(prepared, "Prepared ahead."))
            .is_empty()
    );
    let effects = f.on(Input::ModelFailed {
        epoch: prepared + 1,
        error: troupe_llm::ProviderError::new(
            "p",
            troupe_protocol::model::ProviderErrorKind::PromptTooLong,
            "prompt is too long",
        ),
    });
    let emergency = Fixture::summarise_epoch(&effects);
    f.step(summary_answer(emergency, "Made in the emergency."));
    f.step(Input::Saved(Ok(())));
    assert_eq!(f.machine.context.prepared(), None, "stale: discarded");
    // At the threshold a summary is asked for.
    assert_eq!(f.read_turn("d.rs", 14_000, 6_000), s(&["offload:0:1"]));
    let effects = f.on(Input::Offloaded { spilled: vec![] });
    let fresh = Fixture::summarise_epoch(&effects);
    assert_eq!(
        show(&effects),
        s(&["emit:compaction", &format!("summarise:{fresh}")])
    );
    let effects = f.on(summary_answer(fresh, "Made at the threshold."));
    assert_eq!(compaction_events(&effects), s(&["finished:auto"]));
    let first = f.history()[0].text();
    assert!(first.contains("Made at the threshold."), "{first}");
    assert!(
        f.history()
            .iter()
            .all(|m| !m.text().contains("Prepared ahead."))
    );
}

#[test]
fn a_preparation_still_running_when_it_no_longer_fits_is_cancelled() {
    let mut f = working_ahead(40_000);
    let prepared = prepare_ahead(&mut f);
    let effects = f.on(Input::ModelFailed {
        epoch: prepared + 1,
        error: troupe_llm::ProviderError::new(
            "p",
            troupe_protocol::model::ProviderErrorKind::PromptTooLong,
            "prompt is too long",
        ),
    });
    let emergency = Fixture::summarise_epoch(&effects);
    f.step(summary_answer(emergency, "Made in the emergency."));
    f.step(Input::Saved(Ok(())));
    // The preparation has not answered; at the threshold its prefix is gone:
    // its request is stopped and a fresh summary asked for.
    assert_eq!(f.read_turn("d.rs", 14_000, 6_000), s(&["offload:0:1"]));
    let effects = f.on(Input::Offloaded { spilled: vec![] });
    let fresh = Fixture::summarise_epoch(&effects);
    assert_eq!(
        show(&effects),
        s(&[
            &format!("cancel:{prepared}"),
            "emit:compaction",
            &format!("summarise:{fresh}")
        ])
    );
    // Its late answer changes nothing.
    assert!(
        f.step(summary_answer(prepared, "Prepared ahead."))
            .is_empty()
    );
}

#[test]
fn without_work_ahead_nothing_is_prepared() {
    let mut f = windowed(40_000);
    for (path, input) in [("a.rs", 100), ("b.rs", 100), ("c.rs", 1_000)] {
        f.read_turn(path, 14_000, input);
        let effects = f.step(Input::Offloaded { spilled: vec![] });
        assert_eq!(effects.len(), 2, "{effects:?}");
    }
    assert_eq!(f.machine.context.prepared(), None);
}

/// A stored history of `turns` exchanges of ~`size` characters each.
fn long_history(turns: usize, size: usize) -> Vec<Message> {
    (0..turns)
        .flat_map(|i| {
            [
                Message::user_text(format!("request {i} {}", "x".repeat(size))),
                Message::assistant_text(format!("answer {i}")),
            ]
        })
        .collect()
}

#[test]
fn a_manual_compaction_summarises_whatever_the_breaker_says_and_finishes() {
    let mut f = fixture(Options {
        window: 40_000,
        compact_only: true,
        history: long_history(10, 7_000),
        ..Options::default()
    });
    assert_eq!(f.step(Input::Begin), s(&["save"]));
    let effects = f.on(Input::Saved(Ok(())));
    let epoch = Fixture::summarise_epoch(&effects);
    assert_eq!(compaction_events(&effects), s(&["started:manual"]));
    assert!(Fixture::request_of(&effects).unwrap().tools.is_empty());
    let effects = f.on(summary_answer(epoch, "Ten requests."));
    assert_eq!(compaction_events(&effects), s(&["finished:manual"]));
    assert_eq!(show(&effects), s(&["emit:compaction", "marker"]));
    assert_eq!(f.machine.context.estimate(), TokenEstimate::reset());
    let effects = f.on(Input::Saved(Ok(())));
    assert_eq!(show(&effects), s(&["finished:finished:compacted"]));
    let Some(Effect::Finished(outcome)) = effects.last() else {
        panic!("finished");
    };
    assert!(outcome.final_text.starts_with("Compacted the conversation"));
    assert_eq!(f.machine.status().turns, 0, "no model turn");
    assert!(f.history()[0].text().contains("Ten requests."));
}

#[test]
fn a_manual_compaction_of_a_short_history_is_refused_and_a_failed_one_says_why() {
    let mut f = fixture(Options {
        window: 40_000,
        compact_only: true,
        ..Options::default()
    });
    f.step(Input::Begin);
    assert_eq!(f.step(Input::Saved(Ok(()))), s(&["emit:error", "save"]));
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:error:nothing_to_compact"])
    );
    let mut f = fixture(Options {
        window: 40_000,
        compact_only: true,
        history: long_history(10, 7_000),
        ..Options::default()
    });
    f.step(Input::Begin);
    let effects = f.on(Input::Saved(Ok(())));
    let epoch = Fixture::summarise_epoch(&effects);
    let effects = f.on(Input::Summarised {
        epoch,
        result: Err(troupe_llm::ProviderError::new(
            "p",
            troupe_protocol::model::ProviderErrorKind::StreamBroken,
            "reset",
        )),
        usage: Usage::default(),
    });
    assert_eq!(compaction_events(&effects), s(&["failed:manual"]));
    assert_eq!(
        show(&effects),
        s(&["emit:compaction", "emit:error", "save"])
    );
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:error:compaction_failed"])
    );
}

#[test]
fn a_continued_session_near_the_window_is_compacted_before_its_first_request() {
    // ~34,000 tokens of stored history: above 40,000 − 8,000.
    let history = long_history(10, 12_000);
    let mut f = fixture(Options {
        window: 40_000,
        resumed: true,
        history: history.clone(),
        ..Options::default()
    });
    assert_eq!(f.step(Input::Begin), s(&["save"]));
    let effects = f.on(Input::Saved(Ok(())));
    let epoch = Fixture::summarise_epoch(&effects);
    assert_eq!(compaction_events(&effects), s(&["started:resume"]));
    let effects = f.on(summary_answer(epoch, "Ten earlier requests."));
    assert_eq!(compaction_events(&effects), s(&["finished:resume"]));
    assert_eq!(f.machine.context.estimate(), TokenEstimate::reset());
    // Then the first request, from the summary and the kept tail (the task).
    let effects = f.on(Input::Saved(Ok(())));
    assert_eq!(
        show(&effects),
        s(&["emit:iteration", &format!("model:{}", epoch + 1)])
    );
    let request = Fixture::request_of(&effects).unwrap();
    assert!(request.messages[0].text().contains("Ten earlier requests."));
    assert_eq!(request.messages.last().unwrap().text(), "do the task");
    // A continued session well inside the window starts at once.
    let mut f = fixture(Options {
        window: 40_000,
        resumed: true,
        history: long_history(2, 1_000),
        ..Options::default()
    });
    f.step(Input::Begin);
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["emit:iteration", "model:1"])
    );
    // A long first history of a new session is an automatic summary.
    let mut f = fixture(Options {
        window: 40_000,
        history,
        ..Options::default()
    });
    f.step(Input::Begin);
    let effects = f.on(Input::Saved(Ok(())));
    assert_eq!(compaction_events(&effects), s(&["started:auto"]));
}

#[test]
fn the_estimate_is_reset_after_every_kind_of_compaction() {
    // Auto and emergency: the estimate had an anchor before.
    let mut f = windowed(40_000);
    for path in ["a.rs", "b.rs", "c.rs"] {
        f.read_turn(path, 14_000, 100);
        f.step(Input::Offloaded { spilled: vec![] });
    }
    f.read_turn("d.rs", 14_000, 6_000);
    assert_ne!(f.machine.context.estimate(), TokenEstimate::reset());
    let effects = f.on(Input::Offloaded { spilled: vec![] });
    let epoch = Fixture::summarise_epoch(&effects);
    f.step(summary_answer(epoch, "auto"));
    assert_eq!(f.machine.context.estimate(), TokenEstimate::reset());
    f.step(Input::Saved(Ok(())));
    f.read_turn("e.rs", 100, 2_000);
    let effects = f.on(Input::Offloaded { spilled: vec![] });
    let model = f.epoch();
    assert_eq!(show(&effects)[0], "emit:iteration");
    assert_ne!(f.machine.context.estimate(), TokenEstimate::reset());
    let effects = f.on(Input::ModelFailed {
        epoch: model,
        error: troupe_llm::ProviderError::new(
            "p",
            troupe_protocol::model::ProviderErrorKind::PromptTooLong,
            "prompt is too long",
        ),
    });
    let epoch = Fixture::summarise_epoch(&effects);
    f.step(summary_answer(epoch, "emergency"));
    assert_eq!(f.machine.context.estimate(), TokenEstimate::reset());
    // Manual and resume are checked in their own tests above.
}

// ---- compactions that must shrink the history ----

impl Fixture {
    /// The current model call answers with one `read_file` call per path;
    /// its usage is what the provider would count for the request just sent
    /// (the estimate of it), so that estimates before and after a
    /// compaction compare.
    fn respond_reads(&mut self, paths: &[&str]) -> Vec<String> {
        let epoch = self.epoch();
        let input = self.machine.estimated_tokens();
        for (i, path) in paths.iter().enumerate() {
            let event = StreamEvent::ToolCall(ToolCall {
                id: format!("c{epoch}-{i}"),
                name: "read_file".into(),
                input: json!({ "path": path }).to_string(),
            });
            assert!(self.on(Input::Model { epoch, event }).is_empty());
        }
        self.on(Input::Model {
            epoch,
            event: StreamEvent::Usage(Usage {
                input,
                output: 10,
                cache_read: 0,
                cache_write: 0,
            }),
        });
        self.step(Input::ModelEnded { epoch })
    }

    /// One turn of the model reading `paths` at once, each answered with
    /// `size` characters; returns the effects after the results were saved.
    fn read_batch(&mut self, paths: &[&str], size: usize) -> Vec<String> {
        let started = self.respond_reads(paths);
        assert_eq!(
            started.iter().filter(|e| e.starts_with("tool:")).count(),
            paths.len(),
            "{started:?}"
        );
        // Nothing is saved on its own: the response and every result go to
        // the store together once the last one is in.
        for index in 0..paths.len() {
            let effects = self.done(index, &format!("{index}{}", "r".repeat(size - 1)));
            let expected = if index + 1 == paths.len() {
                s(&["save"])
            } else {
                Vec::new()
            };
            assert_eq!(effects, expected);
        }
        let mut saved = self.step(Input::Saved(Ok(())));
        let finished = saved
            .iter()
            .take_while(|e| *e == "emit:tool_finished")
            .count();
        assert_eq!(finished, paths.len(), "{saved:?}");
        saved.drain(..finished);
        saved
    }

    /// Call ids of the results an offload effect among `effects` spills.
    fn spill_ids(effects: &[Effect]) -> Vec<String> {
        effects
            .iter()
            .find_map(|effect| match effect {
                Effect::Offload(plan) => {
                    Some(plan.spill.iter().map(|o| o.call_id.clone()).collect())
                }
                _ => None,
            })
            .expect("an offload")
    }

    /// Every result of `ids` written to a spill file.
    fn spilled(ids: &[String]) -> Input {
        Input::Offloaded {
            spilled: ids
                .iter()
                .map(|id| (id.clone(), format!("/spill/result-{id}")))
                .collect(),
        }
    }
}

/// The five files of one large batch.
const BATCH: [&str; 5] = ["a.rs", "b.rs", "c.rs", "d.rs", "e.rs"];

/// The scenario of a defect: in a 120,000-token window (threshold 87,000),
/// the task, two small reads, then five ~50 KB reads in one response. The
/// history before the cut is only the task: a summary of it (with its
/// recovery attachment) grew the history and was reported `finished`. Now
/// no summary is asked for: the recent batch is offloaded, and the next
/// request is well under the peak.
#[test]
fn five_large_reads_in_one_response_are_offloaded_not_summarised_into_a_larger_history() {
    let mut f = fixture(Options {
        window: 120_000,
        // A system prompt of ~28,600 tokens, as a real one with its rules.
        stable: "s".repeat(100_000),
        ..Options::default()
    })
    .started();
    for path in ["Cargo.toml", "README.md"] {
        assert_eq!(f.read_batch(&[path], 2_000), s(&["offload:0:1"]));
        let effects = f.step(Input::Offloaded { spilled: vec![] });
        assert_eq!(effects[0], "emit:iteration", "{effects:?}");
    }
    // 250,000 bytes in one message: the usual rule spills the largest.
    assert_eq!(f.read_batch(&BATCH, 50_000), s(&["offload:1:4"]));
    let first = f
        .history()
        .last()
        .unwrap()
        .tool_results_iter()
        .next()
        .unwrap()
        .call_id
        .clone();
    let effects = f.on(Fixture::spilled(std::slice::from_ref(&first)));
    let peak = f.machine.estimated_tokens();
    assert!(peak >= 87_000, "over the threshold: {peak}");
    assert_eq!(
        f.machine.summary_cut(),
        Some(1),
        "a summary would cover the task alone"
    );
    // Not a summary: the four results still whole go to spill files.
    assert_eq!(show(&effects), s(&["offload:4:0"]));
    let ids = Fixture::spill_ids(&effects);
    assert_eq!(ids.len(), 4);
    assert!(!ids.contains(&first));
    let history = f.history().to_vec();
    let effects = f.on(Fixture::spilled(&ids));
    let epoch = f.epoch();
    assert_eq!(
        show(&effects),
        s(&["emit:notice", "emit:iteration", &format!("model:{epoch}")])
    );
    assert_eq!(f.history(), &history[..], "no summary applied");
    let after = f.machine.estimated_tokens();
    assert!(
        after * 100 < peak * 60,
        "the next request, {after} tokens, is under 60% of the peak, {peak}"
    );
    // The request carries the previews, the stored history the results.
    let request = Fixture::request_of(&effects).unwrap();
    let sent: usize = request.messages.iter().map(Message::char_len).sum();
    let stored: usize = history.iter().map(Message::char_len).sum();
    assert!(sent * 10 < stored, "{sent} of {stored} characters sent");
    let previews = request.messages.last().unwrap();
    assert!(
        previews
            .tool_results_iter()
            .all(|r| r.joined_text().starts_with("[content offloaded]"))
    );
    // Later turns keep it small: the next request grows by its new result.
    assert_eq!(f.read_batch(&["f.rs"], 1_000), s(&["offload:0:1"]));
    let effects = f.on(Input::Offloaded { spilled: vec![] });
    assert_eq!(show(&effects)[0], "emit:iteration");
    assert!(f.machine.estimated_tokens() * 100 < peak * 60);
}

/// A history that is one huge recent batch after the task: nothing precedes
/// the tail. Its large results are offloaded; when no spill works either,
/// the compaction is skipped — no summary request — and counted by the
/// breaker.
#[test]
fn one_huge_recent_batch_is_offloaded_and_skipped_when_no_spill_works() {
    let huge = || {
        let mut f = fixture(Options {
            window: 120_000,
            stable: "s".repeat(100_000),
            ..Options::default()
        })
        .started();
        assert_eq!(f.read_batch(&BATCH, 50_000), s(&["offload:1:4"]));
        f
    };
    let mut f = huge();
    let effects = f.on(Input::Offloaded { spilled: vec![] });
    assert_eq!(f.machine.summary_cut(), None);
    let ids = Fixture::spill_ids(&effects);
    assert_eq!(ids.len(), 5, "the usual rule's failed spill is tried again");
    let effects = f.on(Fixture::spilled(&ids));
    assert_eq!(show(&effects)[..2], s(&["emit:notice", "emit:iteration"]));
    assert!(f.machine.estimated_tokens() < 87_000 / 2);

    let mut f = huge();
    assert_eq!(
        show(&f.on(Input::Offloaded { spilled: vec![] })),
        s(&["offload:5:0"])
    );
    let effects = f.on(Input::Offloaded { spilled: vec![] });
    let epoch = f.epoch();
    assert_eq!(
        show(&effects),
        s(&[
            "emit:compaction",
            "emit:notice",
            "emit:iteration",
            &format!("model:{epoch}")
        ]),
        "no summary request"
    );
    assert_eq!(compaction_events(&effects), s(&["skipped:auto"]));
    let notice = effects.iter().find_map(|effect| match effect {
        Effect::Emit(EventKind::Notice { text, .. }) => Some(text.clone()),
        _ => None,
    });
    assert!(
        notice
            .unwrap()
            .contains("nothing precedes the recent messages"),
        "the reason is said"
    );
    // Three skips in a row open the breaker, as three failures do.
    for turn in 0..2 {
        // The usual rule's spill is tried again with the new result's decision.
        assert_eq!(f.read_batch(&["f.rs"], 100), s(&["offload:1:1"]));
        let effects = f.on(Input::Offloaded { spilled: vec![] });
        assert_eq!(show(&effects), s(&["offload:5:0"]), "turn {turn}");
        let effects = f.on(Input::Offloaded { spilled: vec![] });
        assert_eq!(compaction_events(&effects), s(&["skipped:auto"]));
    }
    assert!(f.machine.context.breaker_is_open());
    assert!(
        f.history()[0].text() == "do the task",
        "the history is as it was"
    );
}

/// Older history worth summarising, then a batch that alone is over the
/// threshold: its results are offloaded first (layer 1), then, the estimate
/// still at the threshold, the older history is summarised (layer 2).
#[test]
fn a_tail_that_alone_exceeds_the_threshold_is_offloaded_before_the_summary() {
    // Window 60,000: threshold 27,000. ~24,000 tokens of older history.
    let mut f = fixture(Options {
        window: 60_000,
        history: long_history(2, 42_000),
        ..Options::default()
    })
    .started();
    // Five results of 20,000 bytes: kept by the usual rule; ~28,600 tokens,
    // over the threshold alone.
    assert_eq!(f.read_batch(&BATCH, 20_000), s(&["offload:0:5"]));
    let effects = f.on(Input::Offloaded { spilled: vec![] });
    let before = f.machine.estimated_tokens();
    assert!(before >= 27_000, "{before}");
    assert_eq!(f.machine.summary_cut(), Some(2));
    assert_eq!(show(&effects), s(&["offload:5:0"]), "layer 1 first");
    let ids = Fixture::spill_ids(&effects);
    let effects = f.on(Fixture::spilled(&ids));
    let relieved = f.machine.estimated_tokens();
    assert!(relieved < before && relieved >= 27_000, "{relieved}");
    let epoch = Fixture::summarise_epoch(&effects);
    assert_eq!(
        show(&effects),
        s(&[
            "emit:notice",
            "emit:compaction",
            &format!("summarise:{epoch}")
        ]),
        "then layer 2"
    );
    let request = Fixture::request_of(&effects).unwrap();
    assert!(request.messages[0].text().starts_with("request 0"));
    let effects = f.on(summary_answer(epoch, "Two requests."));
    assert_eq!(compaction_events(&effects), s(&["finished:auto"]));
    let after = match effects.iter().find_map(|effect| match effect {
        Effect::Emit(EventKind::Compaction { after_tokens, .. }) => Some(*after_tokens),
        _ => None,
    }) {
        Some(after) => after,
        None => panic!("a finished event"),
    };
    assert!(after < 27_000 && after * 100 < before * 60, "{after}");
    assert!(!f.machine.context.breaker_is_open());
    validate_history(f.history()).unwrap();
}

/// The answer to a summary request that would leave the history larger is
/// discarded: the compaction is skipped, counted by the breaker, and the
/// turn goes on with the history as it was.
#[test]
fn a_summary_that_would_grow_the_history_is_discarded_and_skipped() {
    let mut f = windowed(40_000);
    for path in ["a.rs", "b.rs", "c.rs"] {
        f.read_turn(path, 14_000, 100);
        f.step(Input::Offloaded { spilled: vec![] });
    }
    f.read_turn("d.rs", 14_000, 6_000);
    let effects = f.on(Input::Offloaded { spilled: vec![] });
    let epoch = Fixture::summarise_epoch(&effects);
    let history = f.history().to_vec();
    // A summary longer than what it replaces.
    let effects = f.on(summary_answer(epoch, &"long ".repeat(4_000)));
    assert_eq!(
        show(&effects),
        s(&[
            "emit:compaction",
            "emit:notice",
            "emit:iteration",
            &format!("model:{}", epoch + 1)
        ]),
        "no marker"
    );
    assert_eq!(compaction_events(&effects), s(&["skipped:auto"]));
    assert_eq!(f.history(), &history[..]);
    let request = Fixture::request_of(&effects).unwrap();
    assert_eq!(request.messages[0].text(), "do the task");
    let closed = f
        .spans
        .notes
        .iter()
        .any(|(_, note)| matches!(note, SpanNote::Error("no_shrink")));
    assert!(closed, "the compaction span says why");
}

/// The provider refuses a request that is one huge recent batch (the
/// estimate was under the threshold): no summary is worth making, so the
/// batch is offloaded and the call made again.
#[test]
fn a_refused_request_that_is_one_huge_batch_is_offloaded_and_tried_again() {
    let mut f = fixture(Options {
        window: 200_000,
        stable: "s".repeat(100_000),
        ..Options::default()
    })
    .started();
    assert_eq!(f.read_batch(&BATCH, 50_000), s(&["offload:1:4"]));
    let first = f
        .history()
        .last()
        .unwrap()
        .tool_results_iter()
        .next()
        .unwrap()
        .call_id
        .clone();
    let effects = f.step(Fixture::spilled(std::slice::from_ref(&first)));
    let epoch = f.epoch();
    assert_eq!(effects, s(&["emit:iteration", &format!("model:{epoch}")]));
    let before = f.machine.estimated_tokens();
    let effects = f.on(Input::ModelFailed {
        epoch,
        error: troupe_llm::ProviderError::new(
            "p",
            troupe_protocol::model::ProviderErrorKind::PromptTooLong,
            "prompt is too long",
        ),
    });
    assert_eq!(show(&effects), s(&["offload:4:0"]));
    let ids = Fixture::spill_ids(&effects);
    let effects = f.step(Fixture::spilled(&ids));
    assert_eq!(
        effects,
        s(&[
            "emit:notice",
            "emit:iteration",
            &format!("model:{}", epoch + 1)
        ])
    );
    assert!(f.machine.estimated_tokens() * 100 < before * 60);
    validate_history(f.history()).unwrap();
}

/// Work ahead does not prepare a summary whose cut holds nothing worth
/// summarising (here: the task alone before three reads).
#[test]
fn work_ahead_prepares_no_summary_of_the_task_alone() {
    let mut f = fixture(Options {
        window: 40_000,
        work_ahead: true,
        ..Options::default()
    })
    .started();
    for (path, input) in [("a.rs", 100), ("b.rs", 100), ("c.rs", 1_000)] {
        assert_eq!(f.read_turn(path, 14_000, input), s(&["offload:0:1"]));
        let effects = f.step(Input::Offloaded { spilled: vec![] });
        assert_eq!(effects.len(), 2, "{effects:?}");
    }
    assert!(
        f.machine.estimated_tokens() >= 4_900,
        "in the work-ahead band"
    );
    assert_eq!(f.machine.summary_cut(), Some(1));
    assert_eq!(f.machine.context.prepared(), None);
}

// ---- hooks ----

fn hook(event: troupe_hooks::HookEvent, matcher: Option<&str>) -> troupe_hooks::Hook {
    troupe_hooks::Hook::new(
        event,
        matcher,
        "./hook.sh",
        None,
        false,
        troupe_protocol::permission::RuleSource::User,
    )
    .unwrap()
}

fn hooked(hooks: Vec<troupe_hooks::Hook>) -> Fixture {
    fixture(Options {
        hooks,
        ..Options::default()
    })
    .started()
}

fn blocked(reason: &str) -> troupe_hooks::HookVerdict {
    troupe_hooks::HookVerdict {
        blocked: Some(reason.into()),
        ..Default::default()
    }
}

/// The hook requests among `effects`.
fn hook_requests(effects: &[Effect]) -> Vec<&HookRequest> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::RunHooks(request) => Some(request.as_ref()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_pre_tool_hook_blocks_only_the_calls_it_matches_and_the_model_reads_why() {
    use troupe_hooks::HookEvent;
    let mut f = hooked(vec![hook(HookEvent::PreToolUse, Some("bash"))]);
    assert_eq!(
        f.respond(&[bash("rm -rf build")]),
        s(&["emit:usage", "save"])
    );
    let effects = f.on(Input::Saved(Ok(())));
    assert_eq!(show(&effects), s(&["hooks:PreToolUse"]));
    let request = hook_requests(&effects)[0];
    assert_eq!(request.subject.as_deref(), Some("bash"));
    assert_eq!(request.payload.tool_name.as_deref(), Some("bash"));
    assert_eq!(
        request.payload.tool_input,
        Some(json!({"command": "rm -rf build"}))
    );
    assert_eq!(request.payload.agent_path, "main");
    let epoch = f.epoch();
    // Nothing runs while the hook decides.
    assert_eq!(f.machine.status().phase, "executing");
    let mut verdict = blocked("no deletes on Fridays");
    verdict.reports.push(troupe_hooks::verdict::HookReport {
        event: HookEvent::PreToolUse,
        command: "./hook.sh".into(),
        outcome: "block",
        exit_code: Some(2),
        message: Some("no deletes on Fridays".into()),
        duration_ms: 4,
    });
    let effects = f.step(Input::HooksRan {
        call: HookCall::PreTool { epoch, index: 0 },
        verdict,
    });
    assert_eq!(
        effects,
        // The hook's event follows the call it blocked.
        s(&[
            "emit:tool_started",
            "emit:hook",
            "emit:tool_finished",
            "save"
        ])
    );
    assert_eq!(
        f.last_results(),
        vec![(
            "Blocked by a PreToolUse hook: no deletes on Fridays".to_string(),
            true
        )]
    );
    // A read in the next response matches no hook and runs at once, before
    // its response is durable: no hook can turn it into a change.
    f.step(Input::Saved(Ok(())));
    assert_eq!(
        f.respond(&[read("a")]),
        s(&["emit:usage", "emit:tool_started", "tool:0:read_file"])
    );
}

#[test]
fn a_rewrite_is_validated_and_decided_like_the_models_arguments() {
    use troupe_hooks::HookEvent;
    let mut f = hooked(vec![hook(HookEvent::PreToolUse, None)]);
    f.respond(&[bash("make"), bash("make test")]);
    let effects = f.step(Input::Saved(Ok(())));
    // Two side-effect calls: one group each; the first group's hook first.
    assert_eq!(effects, s(&["hooks:PreToolUse"]));
    let epoch = f.epoch();
    let rewrite = |input: serde_json::Value| troupe_hooks::HookVerdict {
        updated_input: input.as_object().cloned(),
        ..Default::default()
    };
    let effects = f.on(Input::HooksRan {
        call: HookCall::PreTool { epoch, index: 0 },
        verdict: rewrite(json!({"command": "make all"})),
    });
    let launched = effects
        .iter()
        .find_map(|effect| match effect {
            Effect::RunTool(launch) => Some(launch.args.clone()),
            _ => None,
        })
        .expect("the rewritten call runs");
    assert_eq!(launched, json!({"command": "make all"}));
    // The history keeps what the model wrote.
    let asked = f.history()[f.history().len() - 1]
        .tool_calls()
        .next()
        .unwrap()
        .input
        .clone();
    assert_eq!(asked, json!({"command": "make"}).to_string());
    // The second call's hook rewrites it into arguments the tool refuses.
    let effects = f.done(0, "listing");
    assert!(
        effects.contains(&"hooks:PreToolUse".to_string()),
        "{effects:?}"
    );
    let effects = f.step(Input::HooksRan {
        call: HookCall::PreTool { epoch, index: 1 },
        verdict: rewrite(json!({"cmd": 3})),
    });
    assert!(
        !effects.iter().any(|e| e.starts_with("tool:")),
        "{effects:?}"
    );
    let results = f.last_results();
    assert!(results[1].1, "{results:?}");
    assert!(results[1].0.contains("command"), "{results:?}");
}

#[test]
fn a_rewrite_into_a_side_effect_takes_the_call_out_of_its_read_only_batch() {
    use troupe_hooks::HookEvent;
    let mut f = hooked(vec![hook(HookEvent::PreToolUse, None)]);
    f.respond(&[bash("ls"), bash("cat a"), bash("wc -l a")]);
    // Three read-only commands: one concurrent group, a hook for each.
    let effects = f.step(Input::Saved(Ok(())));
    assert_eq!(
        effects,
        s(&["hooks:PreToolUse", "hooks:PreToolUse", "hooks:PreToolUse"])
    );
    let epoch = f.epoch();
    f.on(Input::HooksRan {
        call: HookCall::PreTool { epoch, index: 0 },
        verdict: troupe_hooks::HookVerdict::default(),
    });
    f.on(Input::HooksRan {
        call: HookCall::PreTool { epoch, index: 1 },
        verdict: troupe_hooks::HookVerdict {
            updated_input: json!({"command": "touch a"}).as_object().cloned(),
            ..Default::default()
        },
    });
    let effects = show(&f.on(Input::HooksRan {
        call: HookCall::PreTool { epoch, index: 2 },
        verdict: troupe_hooks::HookVerdict::default(),
    }));
    // The rewritten call has side effects now: `ls` runs alone, then the
    // rewritten call alone, then `wc`, and no hook runs twice.
    let tools: Vec<&String> = effects.iter().filter(|e| e.starts_with("tool:")).collect();
    assert_eq!(tools, ["tool:0:bash"], "{effects:?}");
    let effects = f.done(0, "listing");
    let tools: Vec<&String> = effects.iter().filter(|e| e.starts_with("tool:")).collect();
    assert_eq!(tools, ["tool:1:bash"], "{effects:?}");
    assert!(
        !effects.iter().any(|e| e.starts_with("hooks:")),
        "{effects:?}"
    );
    let effects = f.done(1, "touched");
    let tools: Vec<&String> = effects.iter().filter(|e| e.starts_with("tool:")).collect();
    assert_eq!(tools, ["tool:2:bash"], "{effects:?}");
    assert!(
        !effects.iter().any(|e| e.starts_with("hooks:")),
        "{effects:?}"
    );
}

#[test]
fn a_post_tool_hook_note_is_appended_before_the_result_is_stored() {
    use troupe_hooks::HookEvent;
    let mut f = hooked(vec![hook(HookEvent::PostToolUse, Some("read_file"))]);
    assert_eq!(
        f.respond(&[read("a")]),
        s(&["emit:usage", "emit:tool_started", "tool:0:read_file"])
    );
    let epoch = f.epoch();
    let effects = f.on(Input::CallFinished {
        epoch,
        index: 0,
        output: ToolOutput::ok("contents"),
        duration: Duration::from_millis(2),
        error: None,
    });
    assert_eq!(show(&effects), s(&["hooks:PostToolUse"]));
    let request = hook_requests(&effects)[0];
    assert_eq!(request.payload.tool_result.as_deref(), Some("contents"));
    assert_eq!(request.payload.tool_is_error, Some(false));
    // The call counts as running until its hooks answer.
    assert_eq!(f.machine.status().phase, "executing");
    let effects = f.step(Input::HooksRan {
        call: HookCall::PostTool { epoch, index: 0 },
        verdict: troupe_hooks::HookVerdict {
            notes: vec!["a.txt is generated; edit a.in".into()],
            ..Default::default()
        },
    });
    assert_eq!(effects, s(&["save"]));
    f.step(Input::Saved(Ok(())));
    assert_eq!(
        f.last_results(),
        vec![(
            "contents\nNote from a hook: a.txt is generated; edit a.in".to_string(),
            false
        )]
    );
}

#[test]
fn a_stop_hook_makes_the_agent_go_on_once_with_the_reason() {
    use troupe_hooks::HookEvent;
    let mut f = hooked(vec![hook(HookEvent::Stop, None)]);
    // The final answer is durable before the hook runs.
    assert_eq!(f.answer_text("done"), s(&["emit:usage", "save"]));
    let effects = f.on(Input::Saved(Ok(())));
    assert_eq!(show(&effects), s(&["hooks:Stop"]));
    let request = hook_requests(&effects)[0];
    assert_eq!(request.payload.last_message.as_deref(), Some("done"));
    assert_eq!(request.payload.stop_hook_active, Some(false));
    assert_eq!(f.machine.status().phase, "hooking");
    assert_eq!(
        f.step(Input::HooksRan {
            call: HookCall::Stop,
            verdict: blocked("the tests fail"),
        }),
        s(&["emit:notice", "save"])
    );
    let last = f.history().last().unwrap();
    assert_eq!(last.role, Role::User);
    assert_eq!(
        last.text(),
        "A Stop hook asked you to continue before finishing: the tests fail"
    );
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["emit:iteration", "model:2"])
    );
    // Once only: the second final answer ends the run without asking again.
    assert_eq!(f.answer_text("fixed"), s(&["emit:usage", "save"]));
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:finished:end_turn"])
    );
    assert_closed(f.history());
}

#[test]
fn a_stop_hook_that_lets_go_ends_the_run_and_an_interrupt_while_it_runs_closes() {
    use troupe_hooks::HookEvent;
    let mut f = hooked(vec![hook(HookEvent::Stop, None)]);
    f.answer_text("done");
    f.step(Input::Saved(Ok(())));
    assert_eq!(
        f.step(Input::HooksRan {
            call: HookCall::Stop,
            verdict: Default::default(),
        }),
        s(&["save"])
    );
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:finished:end_turn"])
    );

    let mut f = hooked(vec![hook(HookEvent::Stop, None)]);
    f.answer_text("done");
    f.step(Input::Saved(Ok(())));
    let effects = f.step(Input::Interrupted);
    assert_eq!(effects, s(&["stop_below", "save"]));
    assert_eq!(
        f.step(Input::Saved(Ok(()))),
        s(&["finished:cancelled:cancelled"])
    );
    assert_closed(f.history());
}

#[test]
fn sub_agents_run_subagent_stop_hooks_matched_on_their_role() {
    use troupe_hooks::HookEvent;
    let mut f = fixture(Options {
        hooks: vec![
            hook(HookEvent::Stop, None),
            hook(HookEvent::SubagentStop, Some("explorer")),
        ],
        spec: AgentSpec {
            depth: 1,
            role: "explorer".into(),
            path: "main/explorer-1".into(),
            ..AgentSpec::main(25)
        },
        task: Some("look".into()),
        ..Options::default()
    });
    assert_eq!(f.step(Input::Begin), s(&["emit:subagent_started", "save"]));
    f.step(Input::Saved(Ok(())));
    f.answer_text("found it");
    let effects = f.on(Input::Saved(Ok(())));
    let requests = hook_requests(&effects);
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].event, HookEvent::SubagentStop);
    assert_eq!(requests[0].subject.as_deref(), Some("explorer"));
    assert_eq!(requests[0].payload.agent_path, "main/explorer-1");
}

#[test]
fn an_approval_that_waits_runs_notification_hooks() {
    use troupe_hooks::HookEvent;
    let mut f = fixture(Options {
        mode: PermissionMode::Default,
        hooks: vec![hook(HookEvent::Notification, None)],
        ..Options::default()
    })
    .started();
    f.respond(&[bash("make")]);
    let effects = f.on(Input::Saved(Ok(())));
    let requests = hook_requests(&effects);
    assert_eq!(requests.len(), 1, "{:?}", show(&effects));
    assert_eq!(requests[0].call, HookCall::Report);
    let message = requests[0].payload.message.clone().unwrap();
    assert!(
        message.starts_with("Troupe needs your approval for bash"),
        "{message}"
    );
    assert!(show(&effects).contains(&"await".to_string()));
}

#[test]
fn an_interrupt_while_pre_tool_hooks_run_answers_every_call() {
    use troupe_hooks::HookEvent;
    let mut f = hooked(vec![hook(HookEvent::PreToolUse, None)]);
    f.respond(&[bash("make")]);
    assert_eq!(f.step(Input::Saved(Ok(()))), s(&["hooks:PreToolUse"]));
    let epoch = f.epoch();
    let effects = f.step(Input::Interrupted);
    assert!(effects.contains(&"save".to_string()), "{effects:?}");
    // The late verdict changes nothing.
    f.step(Input::Saved(Ok(())));
    assert!(
        f.step(Input::HooksRan {
            call: HookCall::PreTool { epoch, index: 0 },
            verdict: Default::default(),
        })
        .iter()
        .all(|e| e == "emit:hook")
    );
    assert_closed(f.history());
}

#[test]
fn compaction_hooks_run_around_manual_and_automatic_compactions() {
    use troupe_hooks::HookEvent;
    let hooks = || {
        vec![
            hook(HookEvent::PreCompact, None),
            hook(HookEvent::PostCompact, Some("manual|emergency")),
        ]
    };
    let mut f = fixture(Options {
        window: 40_000,
        compact_only: true,
        history: long_history(10, 7_000),
        hooks: hooks(),
        ..Options::default()
    });
    f.step(Input::Begin);
    let effects = f.on(Input::Saved(Ok(())));
    let requests = hook_requests(&effects);
    assert_eq!(requests.len(), 1, "{:?}", show(&effects));
    assert_eq!(requests[0].event, HookEvent::PreCompact);
    assert_eq!(requests[0].payload.trigger.as_deref(), Some("manual"));
    assert!(requests[0].payload.tokens_before.unwrap() > 0);
    // They only report: the summary call goes out at once.
    assert!(show(&effects).iter().any(|e| e.starts_with("summarise:")));
    let epoch = Fixture::summarise_epoch(&effects);
    let effects = f.on(summary_answer(epoch, "Ten requests."));
    let requests = hook_requests(&effects);
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].event, HookEvent::PostCompact);
    assert_eq!(requests[0].call, HookCall::Report);
    assert!(requests[0].payload.tokens_after.is_some());
    assert_eq!(requests[0].payload.message, None);

    // A failed manual compaction runs the PostCompact hooks too, saying so.
    let mut f = fixture(Options {
        window: 40_000,
        compact_only: true,
        history: long_history(10, 7_000),
        hooks: hooks(),
        ..Options::default()
    });
    f.step(Input::Begin);
    let effects = f.on(Input::Saved(Ok(())));
    let epoch = Fixture::summarise_epoch(&effects);
    let effects = f.on(Input::Summarised {
        epoch,
        result: Err(troupe_llm::ProviderError::new(
            "p",
            troupe_protocol::model::ProviderErrorKind::StreamBroken,
            "reset",
        )),
        usage: Usage::default(),
    });
    let requests = hook_requests(&effects);
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].payload.message.as_deref(),
        Some("the compaction failed")
    );
}

/// The request of the model call among `effects`, if one started.
fn model_request(effects: Vec<Effect>) -> Option<ChatRequest> {
    effects.into_iter().find_map(|effect| match effect {
        Effect::CallModel { request, .. } => Some(request),
        _ => None,
    })
}

#[test]
fn plan_mode_requests_offer_read_only_tools_and_the_reminder_of_their_iteration() {
    let mut f = fixture(Options {
        mode: PermissionMode::Plan,
        ..Options::default()
    });
    assert_eq!(f.step(Input::Begin), s(&["save"]));
    let mut requests = vec![model_request(f.on(Input::Saved(Ok(())))).unwrap()];
    for i in 0..5 {
        f.respond(&[read(&format!("file{i}"))]);
        f.step(Input::Saved(Ok(())));
        let epoch = f.epoch();
        f.on(Input::CallFinished {
            epoch,
            index: 0,
            output: ToolOutput::ok("text"),
            duration: Duration::ZERO,
            error: None,
        });
        f.on(Input::PendingSaved {
            epoch,
            index: 0,
            result: Ok(()),
        });
        requests.push(model_request(f.on(Input::Saved(Ok(())))).unwrap());
    }
    assert_eq!(requests.len(), 6);
    let registry = troupe_tools::builtin_registry();
    for (i, request) in requests.iter().enumerate() {
        let iteration = i as u32 + 1;
        assert_eq!(
            request.system.stable, "stable",
            "the cached prefix is untouched"
        );
        let expected = crate::prompt::plan_reminder(PermissionMode::Plan, iteration).unwrap();
        assert_eq!(request.system.environment, format!("env\n\n{expected}"));
        assert!(!request.tools.is_empty());
        for tool in &request.tools {
            assert!(registry.is_read_only(&tool.name), "{} offered", tool.name);
        }
    }
    let full = crate::prompt::PLAN_REMINDER_FULL;
    let fulls: Vec<bool> = requests
        .iter()
        .map(|r| r.system.environment.ends_with(full))
        .collect();
    assert_eq!(fulls, [true, false, false, false, true, false]);

    // Leaving plan mode during the run: the next request has no reminder and
    // every tool again.
    f.machine.permissions().set_mode(PermissionMode::Bypass);
    f.respond(&[read("last")]);
    f.step(Input::Saved(Ok(())));
    let epoch = f.epoch();
    f.on(Input::CallFinished {
        epoch,
        index: 0,
        output: ToolOutput::ok("text"),
        duration: Duration::ZERO,
        error: None,
    });
    f.on(Input::PendingSaved {
        epoch,
        index: 0,
        result: Ok(()),
    });
    let request = model_request(f.on(Input::Saved(Ok(())))).unwrap();
    assert_eq!(request.system.environment, "env");
    assert!(request.tools.iter().any(|tool| tool.name == "bash"));
}

/// Runs one turn that reads `path`, up to the next model call; returns the
/// effects of the response's end (before the calls run).
fn read_turn(f: &mut Fixture, path: &str) -> Vec<String> {
    let ended = f.respond(&[read(path)]);
    f.done(0, "text");
    f.step(Input::Saved(Ok(())));
    ended
}

#[test]
fn every_fifth_completed_turn_of_the_main_agent_asks_for_a_memory_update() {
    let mut f = fixture(Options::default()).started();
    let mut updates = Vec::new();
    for turn in 1..=11 {
        let ended = read_turn(&mut f, &format!("f{turn}"));
        if ended.contains(&"memory".to_string()) {
            assert_eq!(
                ended,
                s(&[
                    "emit:usage",
                    "memory",
                    "emit:tool_started",
                    "tool:0:read_file"
                ])
            );
            updates.push(turn);
        }
    }
    assert_eq!(updates, [5, 10]);

    // The digest is the conversation's words; the update answers nothing
    // back, so the history and the context estimate are the loop's own.
    let mut f = fixture(Options::default()).started();
    for turn in 1..=4 {
        read_turn(&mut f, &format!("f{turn}"));
    }
    let before = f.history().len();
    let effects = f.on(Input::ModelEnded { epoch: f.epoch() });
    let digest = effects
        .iter()
        .find_map(|effect| match effect {
            Effect::UpdateMemory { digest } => Some(digest.clone()),
            _ => None,
        })
        .unwrap();
    assert!(digest.starts_with("User: do the task"), "{digest}");
    assert!(!digest.contains("text"), "tool output stays out: {digest}");
    assert_eq!(f.history().len(), before + 1);

    // A continued session counts its earlier turns too.
    let history: Vec<Message> = (0..3)
        .flat_map(|i| {
            [
                Message::user_text(format!("q{i}")),
                Message::assistant_text(format!("a{i}")),
            ]
        })
        .collect();
    let mut f = fixture(Options {
        history,
        ..Options::default()
    })
    .started();
    assert!(!read_turn(&mut f, "x").contains(&"memory".to_string()));
    assert!(read_turn(&mut f, "y").contains(&"memory".to_string()));
}

#[test]
fn sub_agents_and_forks_never_update_the_memory() {
    for spec in [
        AgentSpec {
            path: "main/explorer-1".into(),
            role: "explorer".into(),
            max_turns: 25,
            unknown_tool_limit: 2,
            depth: 1,
            is_fork: false,
        },
        AgentSpec {
            path: "main/fork-1".into(),
            role: "main".into(),
            max_turns: 25,
            unknown_tool_limit: 2,
            depth: 1,
            is_fork: true,
        },
    ] {
        let mut f = fixture(Options {
            spec,
            ..Options::default()
        })
        .started();
        for turn in 1..=5 {
            let ended = read_turn(&mut f, &format!("f{turn}"));
            assert!(!ended.contains(&"memory".to_string()), "{ended:?}");
        }
    }
}

fn update_plan(steps: &[(&str, &str)]) -> (&'static str, serde_json::Value) {
    let plan: Vec<serde_json::Value> = steps
        .iter()
        .map(|(step, status)| json!({"step": step, "status": status}))
        .collect();
    ("update_plan", json!({ "plan": plan }))
}

#[test]
fn a_successful_update_plan_call_keeps_announces_and_stores_the_plan_a_refused_one_nothing() {
    let mut f = fixture(Options::default()).started();
    // Read-only: it runs before its response is saved, with its result.
    assert_eq!(
        f.respond(&[update_plan(&[
            ("Read", "completed"),
            ("Fix", "in_progress")
        ])]),
        s(&["emit:usage", "emit:tool_started", "tool:0:update_plan"])
    );
    let effects = f.finish_call(0, ToolOutput::ok("Plan updated."), None);
    assert_eq!(effects, s(&["emit:plan_updated", "task_plan 2", "save"]));
    let kept = f.machine.transcript().task_plan().cloned().unwrap();
    assert_eq!(kept.lines(), ["✔ Read", "◼ Fix"]);
    // Refused by the tool: no event, nothing stored, the plan unchanged.
    f.step(Input::Saved(Ok(())));
    f.respond(&[update_plan(&[("A", "in_progress"), ("B", "in_progress")])]);
    let effects = f.finish_call(0, ToolOutput::error("Plan not updated."), None);
    assert!(!effects.iter().any(|e| e.contains("plan")), "{effects:?}");
    assert_eq!(f.machine.transcript().task_plan(), Some(&kept));
    // The history shows the call: no reminder rides in the next request.
    let effects = f.on(Input::Saved(Ok(())));
    let Some(Effect::CallModel { request, .. }) = effects
        .iter()
        .find(|e| matches!(e, Effect::CallModel { .. }))
    else {
        panic!("a model call: {effects:?}");
    };
    assert_eq!(request.system.environment, "env");
}

#[test]
fn of_two_plans_in_one_response_the_later_call_wins_whatever_finishes_first() {
    let mut f = fixture(Options::default()).started();
    f.respond(&[
        update_plan(&[("First", "pending")]),
        update_plan(&[("Second", "pending"), ("Third", "pending")]),
    ]);
    assert_eq!(
        f.finish_call(1, ToolOutput::ok("Plan updated."), None),
        s(&["emit:plan_updated", "task_plan 2"])
    );
    let effects = f.finish_call(0, ToolOutput::ok("Plan updated."), None);
    assert!(!effects.iter().any(|e| e.contains("plan")), "{effects:?}");
    let kept = f.machine.transcript().task_plan().unwrap();
    assert_eq!(kept.lines(), ["◻ Second", "◻ Third"]);
}

#[test]
fn a_task_plan_the_history_no_longer_shows_rides_in_the_request() {
    let mut f = fixture(Options::default());
    let plan = troupe_protocol::task_plan::TaskPlan::from_arguments(
        r#"{"plan":[{"step":"Read","status":"completed"},{"step":"Fix","status":"pending"}]}"#,
    )
    .unwrap();
    f.machine.transcript.set_task_plan(plan);
    assert_eq!(show(&f.on(Input::Begin)), s(&["save"]));
    let effects = f.on(Input::Saved(Ok(())));
    let Some(Effect::CallModel { request, .. }) = effects
        .iter()
        .find(|e| matches!(e, Effect::CallModel { .. }))
    else {
        panic!("a model call: {effects:?}");
    };
    assert_eq!(
        request.system.environment,
        "env\n\n# Your current plan (update_plan)\n✔ Read\n◻ Fix"
    );
    assert_eq!(request.system.stable, "stable");
}
