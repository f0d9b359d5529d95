//! Transition tables of the run: each test feeds inputs and compares the
//! effects, written as short strings, with what the run must do. Compiled
//! for tests only (`#[cfg(test)]` on its declaration in `run/mod.rs`).

use std::time::Duration;

use chrono::TimeZone;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::RunAccount;
use crate::guard::Budget;
use troupe_hooks::HookEvent;
use troupe_hooks::verdict::HookReport;

const PROMPT: &str = "fix the build";
const WALL_CLOCK: Duration = Duration::from_secs(600);

fn setup() -> RunSetup {
    RunSetup {
        prompt: PROMPT.into(),
        job: RunJob::Prompt,
        last_active: None,
        wall_clock: WALL_CLOCK,
        rewind: None,
    }
}

fn at(hour: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 2, hour, 0, 0).unwrap()
}

/// Effects as short strings: `record:<prompt>`, `check-door`,
/// `open:<prompt>`, `emit:<type>` (`emit:error:<kind>`,
/// `emit:run_started:<prompt>`, `emit:run_finished:<status>:<reason>`),
/// `wall-clock:<secs>`, `spawn-main`, `stop:<cause>`, `cancel-tree`,
/// `cancel:<path>`, `deliver:<path>:<id>`, `answer:<id>`,
/// `refuse:<why>`, `write-end:<status>:<reason>`,
/// `free-session:<session>`, `finish:<status>:<reason>`.
fn show(effects: &[RunEffect]) -> Vec<String> {
    effects
        .iter()
        .map(|effect| match effect {
            RunEffect::RecordRun { prompt } => format!("record:{prompt}"),
            RunEffect::CheckDoor => "check-door".into(),
            RunEffect::OpenRun { prompt, .. } => format!("open:{prompt}"),
            RunEffect::Emit(EventKind::Error { kind, .. }) => format!("emit:error:{kind}"),
            RunEffect::Emit(EventKind::RunStarted { prompt }) => {
                format!("emit:run_started:{prompt}")
            }
            RunEffect::Emit(EventKind::RunFinished {
                status,
                stop_reason,
                ..
            }) => format!("emit:run_finished:{}:{stop_reason}", status.as_str()),
            RunEffect::Emit(kind) => format!("emit:{}", kind.type_name()),
            RunEffect::ArmWallClock { after } => format!("wall-clock:{}", after.as_secs()),
            RunEffect::SpawnMain => "spawn-main".into(),
            RunEffect::StopTree(StopCause::Cancelled) => "stop:cancelled".into(),
            RunEffect::StopTree(StopCause::Limit(hit)) => format!("stop:{}", hit.stop_reason()),
            RunEffect::CancelTree => "cancel-tree".into(),
            RunEffect::CancelAgent { path } => format!("cancel:{path}"),
            RunEffect::DeliverApproval {
                path, approval_id, ..
            } => format!("deliver:{path}:{approval_id}"),
            RunEffect::AnswerQuestion { approval_id, .. } => format!("answer:{approval_id}"),
            RunEffect::Refuse(RunRefusal::UnknownAgent(path)) => {
                format!("refuse:unknown-agent:{path}")
            }
            RunEffect::Refuse(RunRefusal::UnknownApproval(id)) => {
                format!("refuse:unknown-approval:{id}")
            }
            RunEffect::Refuse(RunRefusal::Gone) => "refuse:gone".into(),
            RunEffect::WriteEnd {
                status,
                stop_reason,
            } => format!("write-end:{}:{stop_reason}", status.as_str()),
            RunEffect::FreeSession { session } => format!(
                "free-session:{}",
                match session {
                    SessionBack::Unchanged => "unchanged",
                    SessionBack::LeftByMain => "left-by-main",
                    SessionBack::FromStore => "from-store",
                }
            ),
            RunEffect::Finish { outcome } => {
                format!("finish:{}:{}", outcome.status.as_str(), outcome.stop_reason)
            }
        })
        .collect()
}

fn s(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| item.to_string()).collect()
}

struct Fixture {
    machine: RunMachine,
}

impl Fixture {
    fn new(setup: RunSetup) -> Self {
        Self {
            machine: RunMachine::new(setup),
        }
    }

    fn step(&mut self, input: RunInput) -> Vec<String> {
        show(&self.machine.on(input))
    }

    /// A run without hooks at its door, opened and running, its main agent
    /// spawned and registered.
    fn working() -> Self {
        let mut f = Self::new(setup());
        let opening = f.step(RunInput::Submitted {
            door_hooks: false,
            now: at(9),
        });
        assert_eq!(opening, s(&["open:fix the build"]));
        assert_eq!(
            f.step(RunInput::Opened(Ok(()))),
            s(&["emit:run_started:fix the build", "wall-clock:600"])
        );
        assert_eq!(f.step(RunInput::Running), s(&["spawn-main"]));
        assert!(f.step(RunInput::MainSpawned(Ok(()))).is_empty());
        f.register("main");
        f
    }

    fn register(&mut self, path: &str) {
        assert!(
            self.step(RunInput::AgentStarted { path: path.into() })
                .is_empty()
        );
    }

    fn approve(&mut self, approval_id: &str) -> Vec<String> {
        self.step(RunInput::ApproveRequested {
            approval_id: approval_id.into(),
            outcome: ApprovalOutcome::Allow,
            reason: None,
        })
    }

    fn end_recorded(&mut self, recorded: Result<(), String>) -> Vec<RunEffect> {
        self.machine.on(RunInput::EndRecorded {
            recorded,
            usage: usage(),
        })
    }
}

fn usage() -> Usage {
    Usage {
        input: 120,
        output: 30,
        cache_read: 0,
        cache_write: 0,
    }
}

fn outcome(status: RunStatus, stop_reason: &str, final_text: &str) -> RunOutcome {
    RunOutcome {
        status,
        stop_reason: stop_reason.into(),
        final_text: final_text.into(),
        usage: Usage::default(),
    }
}

fn report(event: HookEvent, outcome: &'static str) -> HookReport {
    HookReport {
        event,
        command: "check.sh".into(),
        outcome,
        exit_code: Some(0),
        message: None,
        duration_ms: 4,
    }
}

/// The `run_finished` event and the finish of `effects`.
fn finished(effects: &[RunEffect]) -> (&EventKind, &RunOutcome) {
    let event = effects
        .iter()
        .find_map(|effect| match effect {
            RunEffect::Emit(kind @ EventKind::RunFinished { .. }) => Some(kind),
            _ => None,
        })
        .unwrap();
    let outcome = effects
        .iter()
        .find_map(|effect| match effect {
            RunEffect::Finish { outcome, .. } => Some(outcome),
            _ => None,
        })
        .unwrap();
    (event, outcome)
}

#[test]
fn a_run_without_door_hooks_opens_at_once_and_spawns_its_main_agent_once_running() {
    let mut f = Fixture::new(RunSetup {
        last_active: Some(at(1)),
        ..setup()
    });
    let effects = f.machine.on(RunInput::Submitted {
        door_hooks: false,
        now: at(9),
    });
    // The prompt joins the history after the pause note, durable before
    // anyone is told the run started.
    let [RunEffect::OpenRun { prompt, message }] = effects.as_slice() else {
        panic!("{effects:?}");
    };
    assert_eq!(prompt, PROMPT);
    let message = message.as_ref().unwrap();
    assert!(message.text().starts_with("(This session was paused for 8"));
    assert!(message.text().ends_with(PROMPT));
    // Not running yet: the main agent waits.
    assert_eq!(
        f.step(RunInput::Opened(Ok(()))),
        s(&["emit:run_started:fix the build", "wall-clock:600"])
    );
    assert_eq!(f.step(RunInput::Running), s(&["spawn-main"]));
    assert!(f.step(RunInput::Running).is_empty(), "spawned once");
}

fn pending_rewind() -> troupe_store::PendingRewind {
    troupe_store::PendingRewind {
        note: "(The conversation was rewound to the end of prompt 1.)".into(),
        to_run: 1,
        branch: "b".into(),
        removed_messages: 6,
        files_restored: false,
    }
}

#[test]
fn a_pending_rewind_goes_first_in_the_prompt_and_is_told_after_run_started() {
    let mut f = Fixture::new(RunSetup {
        last_active: Some(at(1)),
        rewind: Some(pending_rewind()),
        ..setup()
    });
    let effects = f.machine.on(RunInput::Submitted {
        door_hooks: false,
        now: at(9),
    });
    let [RunEffect::OpenRun { message, .. }] = effects.as_slice() else {
        panic!("{effects:?}");
    };
    let text = message.as_ref().unwrap().text();
    assert!(
        text.starts_with("(The conversation was rewound to the end of prompt 1.)"),
        "{text}"
    );
    assert_eq!(text.matches("rewound").count(), 1, "{text}");
    assert!(text.contains("paused for 8"), "{text}");
    assert!(text.ends_with(PROMPT), "{text}");
    assert_eq!(
        f.step(RunInput::Opened(Ok(()))),
        s(&[
            "emit:run_started:fix the build",
            "emit:rewound",
            "wall-clock:600"
        ])
    );
}

#[test]
fn a_compaction_run_leaves_a_pending_rewind_for_the_next_prompt() {
    let mut f = Fixture::new(RunSetup {
        prompt: "(compact the conversation)".into(),
        job: RunJob::Compact,
        rewind: Some(pending_rewind()),
        ..setup()
    });
    let effects = f.machine.on(RunInput::Submitted {
        door_hooks: false,
        now: at(9),
    });
    assert!(
        matches!(
            effects.as_slice(),
            [RunEffect::OpenRun { message: None, .. }]
        ),
        "{effects:?}"
    );
    let opened = f.step(RunInput::Opened(Ok(())));
    assert!(!opened.iter().any(|e| e == "emit:rewound"), "{opened:?}");
}

#[test]
fn a_compaction_run_adds_no_prompt_to_the_history() {
    let mut f = Fixture::new(RunSetup {
        prompt: "(compact the conversation)".into(),
        job: RunJob::Compact,
        ..setup()
    });
    let effects = f.machine.on(RunInput::Submitted {
        door_hooks: false,
        now: at(9),
    });
    assert!(matches!(
        effects.as_slice(),
        [RunEffect::OpenRun { message: None, .. }]
    ));
}

#[test]
fn the_prompt_is_withheld_while_the_door_hooks_check_it_then_joins_with_their_note() {
    let mut f = Fixture::new(setup());
    assert_eq!(
        f.step(RunInput::Submitted {
            door_hooks: true,
            now: at(9),
        }),
        s(&["record:(withheld: being checked by the hooks at the door)"])
    );
    assert_eq!(f.step(RunInput::Running), s(&["check-door"]));
    let verdict = HookVerdict {
        notes: vec!["the tests are slow".into()],
        reports: vec![
            report(HookEvent::SessionStart, "continue"),
            report(HookEvent::UserPromptSubmit, "continue"),
        ],
        ..HookVerdict::default()
    };
    let effects = f.machine.on(RunInput::DoorChecked {
        verdict,
        now: at(9),
    });
    let [RunEffect::OpenRun { prompt, message }] = effects.as_slice() else {
        panic!("{effects:?}");
    };
    assert_eq!(prompt, PROMPT);
    let text = message.as_ref().unwrap().text();
    assert!(text.starts_with("(Notes from hooks:"), "{text}");
    assert!(text.contains("the tests are slow"));
    // The hooks' reports follow `run_started`; running already: the main
    // agent starts at once.
    assert_eq!(
        f.step(RunInput::Opened(Ok(()))),
        s(&[
            "emit:run_started:fix the build",
            "emit:hook",
            "emit:hook",
            "wall-clock:600",
            "spawn-main"
        ])
    );
    // A second verdict changes nothing.
    assert!(
        f.step(RunInput::DoorChecked {
            verdict: HookVerdict::default(),
            now: at(9),
        })
        .is_empty()
    );
}

#[test]
fn a_prompt_blocked_at_the_door_is_never_recorded_and_ends_the_run_stopped() {
    let mut f = Fixture::new(setup());
    f.step(RunInput::Submitted {
        door_hooks: true,
        now: at(9),
    });
    assert_eq!(f.step(RunInput::Running), s(&["check-door"]));
    let verdict = HookVerdict {
        blocked: Some("no secrets".into()),
        reports: vec![report(HookEvent::UserPromptSubmit, "block")],
        ..HookVerdict::default()
    };
    let effects = f.machine.on(RunInput::DoorChecked {
        verdict,
        now: at(9),
    });
    assert_eq!(
        show(&effects),
        s(&[
            "record:(withheld: blocked by a UserPromptSubmit hook)",
            "emit:run_started:(withheld: blocked by a UserPromptSubmit hook)",
            "emit:hook",
            "emit:error:hook_blocked",
            "cancel-tree",
            "write-end:stopped:hook_blocked",
        ])
    );
    assert!(
        !effects.iter().any(|effect| matches!(
            effect,
            RunEffect::OpenRun { .. } | RunEffect::SpawnMain | RunEffect::ArmWallClock { .. }
        )),
        "the prompt never joins the history and no agent starts"
    );
    assert!(effects.contains(&RunEffect::Emit(EventKind::Error {
        kind: "hook_blocked".into(),
        message: "A UserPromptSubmit hook blocked the prompt: no secrets".into(),
    })));
    let effects = f.end_recorded(Ok(()));
    assert_eq!(
        show(&effects),
        s(&[
            "free-session:unchanged",
            "emit:run_finished:stopped:hook_blocked",
            "finish:stopped:hook_blocked"
        ])
    );
    let (_, outcome) = finished(&effects);
    assert_eq!(
        outcome.final_text,
        "A UserPromptSubmit hook blocked the prompt: no secrets"
    );
}

#[test]
fn a_run_whose_record_cannot_be_stored_ends_before_it_began() {
    let mut f = Fixture::new(setup());
    f.step(RunInput::Submitted {
        door_hooks: false,
        now: at(9),
    });
    assert_eq!(
        f.step(RunInput::Opened(Err("disk full".into()))),
        s(&[
            "emit:error:store",
            "cancel-tree",
            "write-end:error:store_error"
        ])
    );
    assert!(f.step(RunInput::Running).is_empty(), "no main agent");
    assert_eq!(
        show(&f.end_recorded(Ok(()))),
        s(&[
            "free-session:from-store",
            "emit:run_finished:error:store_error",
            "finish:error:store_error"
        ])
    );
}

#[test]
fn a_main_agent_failure_ends_the_run_with_an_error_and_the_tree_cancelled() {
    let mut f = Fixture::working();
    f.register("main/explorer-1");
    let effects = f.machine.on(RunInput::MainFailed {
        error: "index out of bounds".into(),
    });
    assert_eq!(
        show(&effects),
        s(&[
            "emit:error:agent_failed",
            "cancel-tree",
            "write-end:error:agent_failed"
        ])
    );
    assert_eq!(
        effects[0],
        RunEffect::Emit(EventKind::Error {
            kind: "agent_failed".into(),
            message: "the agent failed: index out of bounds".into(),
        })
    );
    // The session is repaired from the store on its next run.
    assert_eq!(
        show(&f.end_recorded(Ok(()))),
        s(&[
            "free-session:from-store",
            "emit:run_finished:error:agent_failed",
            "finish:error:agent_failed"
        ])
    );
}

#[test]
fn a_main_agent_that_cannot_start_ends_the_run_with_an_error() {
    let mut f = Fixture::new(setup());
    f.step(RunInput::Submitted {
        door_hooks: false,
        now: at(9),
    });
    f.step(RunInput::Opened(Ok(())));
    assert_eq!(f.step(RunInput::Running), s(&["spawn-main"]));
    assert_eq!(
        f.step(RunInput::MainSpawned(Err("no provider".into()))),
        s(&["cancel-tree", "write-end:error:agent_failed"])
    );
    let effects = f.end_recorded(Ok(()));
    let (_, outcome) = finished(&effects);
    assert_eq!(outcome.final_text, "the agent could not start: no provider");
}

#[test]
fn the_wall_clock_stops_every_agent_of_the_tree_once() {
    let mut f = Fixture::working();
    f.register("main/general-1");
    f.register("main/general-1/explorer-1");
    // The interpreter's tree: each agent's token hangs below its parent's,
    // the main agent's below the run's root.
    let mut account = RunAccount::new(
        Budget {
            tokens: 1_000,
            usd: None,
            wall_clock: WALL_CLOCK,
            tool_calls: 10,
        },
        at(9),
    );
    let root = CancellationToken::new();
    let main = root.child_token();
    let child = main.child_token();
    let grandchild = child.child_token();

    let effects = f.machine.on(RunInput::WallClockOver {
        tree_stopped: false,
    });
    assert_eq!(show(&effects), s(&["emit:notice", "stop:wall_clock"]));
    for effect in effects {
        if let RunEffect::StopTree(cause) = effect {
            account.stop(cause);
            root.cancel();
        }
    }
    assert!(main.is_cancelled() && child.is_cancelled() && grandchild.is_cancelled());
    assert_eq!(
        account.stop_cause(),
        Some(&StopCause::Limit(LimitHit::WallClock { limit: WALL_CLOCK }))
    );
    // Another agent stopped the tree first (a token budget): no notice.
    assert_eq!(
        f.step(RunInput::WallClockOver { tree_stopped: true }),
        s(&["stop:wall_clock"])
    );
    // Once the run ends, the watchdog is nothing to it.
    f.step(RunInput::MainFinished(outcome(
        RunStatus::Stopped,
        "wall_clock",
        "stopped",
    )));
    assert!(
        f.step(RunInput::WallClockOver {
            tree_stopped: false
        })
        .is_empty()
    );
}

#[test]
fn an_approval_goes_to_the_child_that_opened_it_and_unknown_ids_are_refused() {
    let mut f = Fixture::working();
    f.register("main/general-1");
    f.step(RunInput::ApprovalOpened {
        approval_id: "run-1".into(),
        path: "main/general-1".into(),
    });
    f.step(RunInput::ApprovalOpened {
        approval_id: "run-2".into(),
        path: "main".into(),
    });
    assert_eq!(f.approve("run-1"), s(&["deliver:main/general-1:run-1"]));
    assert_eq!(f.approve("run-2"), s(&["deliver:main:run-2"]));
    assert_eq!(f.approve("run-9"), s(&["refuse:unknown-approval:run-9"]));
    // Answers after the request closed are refused.
    f.step(RunInput::ApprovalsClosed {
        approval_ids: vec!["run-1".into()],
    });
    assert_eq!(f.approve("run-1"), s(&["refuse:unknown-approval:run-1"]));
    // The agent that asked is gone (a child that panicked never closed it).
    f.register("main/general-2");
    f.step(RunInput::ApprovalOpened {
        approval_id: "run-3".into(),
        path: "main/general-2".into(),
    });
    f.step(RunInput::AgentEnded {
        path: "main/general-2".into(),
    });
    assert_eq!(f.approve("run-3"), s(&["refuse:gone"]));
}

#[test]
fn a_question_is_answered_once_through_the_broker() {
    let mut f = Fixture::working();
    f.step(RunInput::QuestionOpened {
        approval_id: "run-4".into(),
    });
    let effects = f.machine.on(RunInput::ApproveRequested {
        approval_id: "run-4".into(),
        outcome: ApprovalOutcome::Deny,
        reason: Some("not now".into()),
    });
    assert_eq!(
        effects,
        vec![RunEffect::AnswerQuestion {
            approval_id: "run-4".into(),
            outcome: ApprovalOutcome::Deny,
            reason: Some("not now".into()),
        }]
    );
    assert_eq!(f.approve("run-4"), s(&["refuse:unknown-approval:run-4"]));
}

#[test]
fn cancel_during_a_child_reaches_it_by_path_and_the_run_ends_cancelled() {
    let mut f = Fixture::working();
    f.register("main/explorer-1");
    assert_eq!(
        f.machine.agents().collect::<Vec<_>>(),
        vec!["main", "main/explorer-1"]
    );
    assert_eq!(
        f.step(RunInput::CancelAgentRequested {
            path: "main/explorer-1".into()
        }),
        s(&["cancel:main/explorer-1"])
    );
    assert_eq!(
        f.step(RunInput::CancelAgentRequested {
            path: "main/explorer-7".into()
        }),
        s(&["refuse:unknown-agent:main/explorer-7"])
    );
    f.step(RunInput::AgentEnded {
        path: "main/explorer-1".into(),
    });
    assert_eq!(
        f.step(RunInput::CancelAgentRequested {
            path: "main/explorer-1".into()
        }),
        s(&["refuse:unknown-agent:main/explorer-1"])
    );
    // Cancelling the run while another child works stops the whole tree.
    f.register("main/explorer-2");
    assert_eq!(f.step(RunInput::CancelRequested), s(&["stop:cancelled"]));
    assert!(!f.machine.is_ended(), "the run ends with its main agent");
    assert_eq!(
        f.step(RunInput::MainFinished(outcome(
            RunStatus::Cancelled,
            "cancelled",
            "(cancelled)"
        ))),
        s(&["cancel-tree", "write-end:cancelled:cancelled"])
    );
    assert_eq!(
        show(&f.end_recorded(Ok(()))),
        s(&[
            "free-session:left-by-main",
            "emit:run_finished:cancelled:cancelled",
            "finish:cancelled:cancelled"
        ])
    );
}

#[test]
fn a_finish_whose_end_cannot_be_recorded_is_downgraded_to_a_store_error() {
    let mut f = Fixture::working();
    assert_eq!(
        f.step(RunInput::MainFinished(outcome(
            RunStatus::Finished,
            "end_turn",
            "done"
        ))),
        s(&["cancel-tree", "write-end:finished:end_turn"])
    );
    let effects = f.end_recorded(Err("disk full".into()));
    assert_eq!(
        show(&effects),
        s(&[
            "emit:error:store",
            "free-session:left-by-main",
            "emit:run_finished:error:store_error",
            "finish:error:store_error"
        ])
    );
    assert_eq!(
        effects[0],
        RunEffect::Emit(EventKind::Error {
            kind: "store".into(),
            message: "the end of the run could not be saved: disk full".into(),
        })
    );
    let (event, outcome) = finished(&effects);
    assert_eq!(
        event,
        &EventKind::RunFinished {
            status: RunStatus::Error,
            stop_reason: "store_error".into(),
            final_text: "done".into(),
            usage_total: usage(),
        }
    );
    assert_eq!(outcome.usage, usage(), "the whole tree's usage");
}

#[test]
fn a_run_that_did_not_finish_keeps_its_status_when_its_end_cannot_be_recorded() {
    let mut f = Fixture::working();
    f.step(RunInput::MainFinished(outcome(
        RunStatus::Stopped,
        "max_turns",
        "limit",
    )));
    assert_eq!(
        show(&f.end_recorded(Err("disk full".into()))),
        s(&[
            "emit:error:store",
            "free-session:left-by-main",
            "emit:run_finished:stopped:max_turns",
            "finish:stopped:max_turns"
        ])
    );
}

/// A client that sees `run_finished` may at once start the session's next
/// run: the session goes back to the runtime before the event is emitted
/// (the runtime's mailbox then has it before any such request).
#[test]
fn the_session_is_handed_back_before_run_finished_is_announced() {
    let mut f = Fixture::working();
    f.step(RunInput::MainFinished(outcome(
        RunStatus::Finished,
        "end_turn",
        "done",
    )));
    let effects = show(&f.end_recorded(Ok(())));
    let position = |prefix: &str| {
        effects
            .iter()
            .position(|effect| effect.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {effects:?}"))
    };
    assert!(position("free-session:") < position("emit:run_finished:"));
    assert!(position("emit:run_finished:") < position("finish:"));
}

#[test]
fn a_run_ends_once() {
    let mut f = Fixture::working();
    f.step(RunInput::MainFinished(outcome(
        RunStatus::Finished,
        "end_turn",
        "done",
    )));
    assert!(f.machine.is_ended());
    assert!(f.step(RunInput::MainSpawned(Err("late".into()))).is_empty());
    assert_eq!(f.end_recorded(Ok(())).len(), 3);
    assert!(
        f.end_recorded(Err("overdue".into())).is_empty(),
        "told once"
    );
}
