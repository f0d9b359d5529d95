//! The runtime event model (SPEC §1.4): one ordered stream of events per run,
//! used unchanged by the CLI renderer, `--json`, the daemon API and the store.
//!
//! Serialised, an event is one flat JSON object: the envelope (`seq`, `run_id`,
//! `session_id`, `agent_path`, `ts`) plus `type` and that type's fields at the top
//! level. Sequence numbers are assigned by the run's event log, never here.

use serde::{Deserialize, Serialize};

use crate::model::Usage;

/// SPEC §1.4: length of `args_preview` / `output_preview`, in characters.
pub(crate) const PREVIEW_CHARS: usize = 200;

/// `notice.code` of a failed model request that is about to be sent again.
pub const NOTICE_MODEL_RETRY: &str = "model_retry";

/// The code of the notice that a turn goes on without the checkpoint that
/// should have preceded it (the snapshot failed; the turn cannot be
/// undone).
pub const NOTICE_CHECKPOINT_FAILED: &str = "checkpoint_failed";

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// The model finished its answer.
    Finished,
    /// A limit stopped the run (turns, budget, repeated calls, unknown tools).
    Stopped,
    /// Someone cancelled the run.
    Cancelled,
    /// A provider or runtime error ended the run.
    Error,
    /// The process died while the run was active (found on restart).
    Interrupted,
}

impl RunStatus {
    /// SPEC §1.1 exit code of `troupe run` for this status.
    pub fn exit_code(self) -> i32 {
        match self {
            Self::Finished => 0,
            Self::Error | Self::Interrupted => 1,
            Self::Stopped => 3,
            Self::Cancelled => 130,
        }
    }

    /// The name used in events.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Finished => "finished",
            Self::Stopped => "stopped",
            Self::Cancelled => "cancelled",
            Self::Error => "error",
            Self::Interrupted => "interrupted",
        }
    }
}

/// Outcome of an approval request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalOutcome {
    /// Allow this call once.
    Allow,
    /// Allow this call and remember a rule for the session.
    AllowAlways,
    /// Deny, with an optional reason passed to the model.
    Deny,
    /// Cancel the run.
    Cancel,
}

impl ApprovalOutcome {
    /// The name used in events and the API.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::AllowAlways => "allow_always",
            Self::Deny => "deny",
            Self::Cancel => "cancel",
        }
    }

    /// Parses the CLI/API spelling (`allow`, `allow-always`, `allow_always`, `deny`, `cancel`).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "allow" => Some(Self::Allow),
            "allow-always" | "allow_always" => Some(Self::AllowAlways),
            "deny" => Some(Self::Deny),
            "cancel" => Some(Self::Cancel),
            _ => None,
        }
    }
}

/// The type-specific part of an event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// The run began.
    RunStarted {
        /// The prompt as submitted.
        prompt: String,
    },
    /// A ReAct iteration began.
    Iteration {
        /// 1-based iteration number within the user message.
        n: u32,
    },
    /// Answer text, in order.
    TextDelta {
        /// The text piece.
        text: String,
    },
    /// Thinking text, in order.
    ThinkingDelta {
        /// The text piece.
        text: String,
    },
    /// A tool call is about to run (or be refused).
    ToolStarted {
        /// Call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// The arguments, shortened to one line.
        args_preview: String,
        /// What the call is about (a path, a command, a pattern, an agent's
        /// role and label); absent when the tool names nothing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
    },
    /// A tool call finished.
    ToolFinished {
        /// Call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// True when the result is an error.
        is_error: bool,
        /// The output, shortened to one line.
        output_preview: String,
        /// Lines of the full output.
        #[serde(default)]
        output_lines: u64,
        /// Execution time.
        duration_ms: u64,
    },
    /// A call waits for a person.
    ApprovalRequested {
        /// Id to answer with.
        approval_id: String,
        /// Tool name.
        tool: String,
        /// The full arguments.
        args: String,
        /// Why the call needs approval.
        reason: String,
        /// The allow rule an "always" answer keeps for the rest of the
        /// session (`Write(src/a.rs)`, `Bash(cargo test)`); absent when
        /// "always" keeps no rule (a server's question).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        always_rule: Option<String>,
    },
    /// An approval was answered.
    ApprovalResolved {
        /// The approval id.
        approval_id: String,
        /// The answer.
        outcome: ApprovalOutcome,
    },
    /// Token usage of one model response.
    Usage {
        /// Uncached input tokens.
        input: u64,
        /// Output tokens.
        output: u64,
        /// Cache reads.
        cache_read: u64,
        /// Cache writes.
        cache_write: u64,
    },
    /// Context compaction progress.
    Compaction {
        /// `started`, `finished`, `failed`, or `skipped` (no summary applied:
        /// none could shrink the history by the margin, or the one made
        /// would not have; a notice says why).
        phase: String,
        /// Why: `auto` (the threshold), `manual` (asked for), `resume` (a
        /// stored session continued near the window), `emergency` (the
        /// provider refused the prompt as too long).
        #[serde(default)]
        trigger: String,
        /// Estimated tokens before.
        before_tokens: u64,
        /// Estimated tokens after (0 until finished).
        after_tokens: u64,
    },
    /// A sub-agent started (the envelope's `agent_path` is the child's).
    SubagentStarted {
        /// Role name.
        role: String,
        /// The task given.
        task: String,
    },
    /// A sub-agent finished (the envelope's `agent_path` is the child's).
    SubagentFinished {
        /// How it ended.
        status: RunStatus,
    },
    /// Text the person wrote while the run worked joined the history; the
    /// next model call sees it (main agent only).
    UserMessage {
        /// What the person wrote.
        text: String,
    },
    /// Text for people; never added to history.
    Notice {
        /// The text.
        text: String,
        /// What the notice is about, for programs (see [`NOTICE_MODEL_RETRY`]);
        /// absent for plain notices.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<String>,
    },
    /// A hook ran (see the hooks documentation).
    Hook {
        /// The event (`PreToolUse`, …).
        event: String,
        /// The command.
        command: String,
        /// `continue`, `block`, `error` or `timeout`.
        outcome: String,
        /// The block reason or what went wrong.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// How long it ran.
        duration_ms: u64,
    },
    /// The agent's task plan changed (`update_plan`): the whole plan as it
    /// is now. Each agent has its own (the envelope's `agent_path`).
    PlanUpdated {
        /// Why the plan is as it is now, when the model said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        explanation: Option<String>,
        /// Every step, in order.
        plan: Vec<crate::task_plan::TaskStep>,
    },
    /// The project's files were captured before a turn that can change
    /// them (see the checkpoints documentation); a turn whose files equal
    /// the last checkpoint's makes none.
    CheckpointCreated {
        /// Its number in the session (`refs/troupe/SESSION/NUMBER`).
        number: u64,
        /// The commit of the checkpoint store holding the files.
        commit: String,
        /// The agent's turn it precedes.
        turn: u64,
        /// The tool calls it precedes.
        tool_call_ids: Vec<String>,
        /// How many paths the snapshot left out (large files, crowded
        /// directories, build folders).
        skipped: u64,
    },
    /// The session's conversation was rewound to the end of an earlier run
    /// before this run (`troupe rewind`): told once, by the session's next
    /// run, right after `run_started`.
    Rewound {
        /// The run (1-based, in start order) the conversation went back to.
        to_run: u64,
        /// The branch session keeping the history from before.
        branch: String,
        /// How many messages were removed.
        removed_messages: u64,
        /// Whether the files were restored too.
        files_restored: bool,
    },
    /// The run went on on another node of the cluster: the node that ran it
    /// (`from_node`) stopped answering and its lease lapsed; `to_node`
    /// loaded its session, repaired it and continues it under the same run
    /// id and sequence numbers.
    RunMoved {
        /// The node that ran the run until then.
        from_node: String,
        /// The node that runs it from now on.
        to_node: String,
    },
    /// An error.
    Error {
        /// Machine-readable kind.
        kind: String,
        /// Explanation.
        message: String,
    },
    /// The run ended; always the last event.
    RunFinished {
        /// How it ended.
        status: RunStatus,
        /// The stop reason (`end_turn`, `max_turns`, `cancelled`, ...).
        stop_reason: String,
        /// The final answer text.
        final_text: String,
        /// Usage summed over every response of the run.
        usage_total: Usage,
    },
}

/// The `type` of every event kind, as [`EventKind::type_name`] gives it.
pub const EVENT_TYPES: [&str; 21] = [
    "run_started",
    "iteration",
    "text_delta",
    "thinking_delta",
    "tool_started",
    "tool_finished",
    "approval_requested",
    "approval_resolved",
    "usage",
    "compaction",
    "subagent_started",
    "subagent_finished",
    "user_message",
    "notice",
    "hook",
    "plan_updated",
    "checkpoint_created",
    "rewound",
    "run_moved",
    "error",
    "run_finished",
];

impl EventKind {
    /// A plain notice (no code).
    pub fn notice(text: impl Into<String>) -> Self {
        Self::Notice {
            text: text.into(),
            code: None,
        }
    }

    /// A usage event from a usage value.
    pub fn usage(usage: &Usage) -> Self {
        Self::Usage {
            input: usage.input,
            output: usage.output,
            cache_read: usage.cache_read,
            cache_write: usage.cache_write,
        }
    }

    /// The `type` name.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::RunStarted { .. } => "run_started",
            Self::Iteration { .. } => "iteration",
            Self::TextDelta { .. } => "text_delta",
            Self::ThinkingDelta { .. } => "thinking_delta",
            Self::ToolStarted { .. } => "tool_started",
            Self::ToolFinished { .. } => "tool_finished",
            Self::ApprovalRequested { .. } => "approval_requested",
            Self::ApprovalResolved { .. } => "approval_resolved",
            Self::Usage { .. } => "usage",
            Self::Compaction { .. } => "compaction",
            Self::SubagentStarted { .. } => "subagent_started",
            Self::SubagentFinished { .. } => "subagent_finished",
            Self::UserMessage { .. } => "user_message",
            Self::Notice { .. } => "notice",
            Self::Hook { .. } => "hook",
            Self::PlanUpdated { .. } => "plan_updated",
            Self::CheckpointCreated { .. } => "checkpoint_created",
            Self::Rewound { .. } => "rewound",
            Self::RunMoved { .. } => "run_moved",
            Self::Error { .. } => "error",
            Self::RunFinished { .. } => "run_finished",
        }
    }
}

/// One event with its envelope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEvent {
    /// Position in the run, from 1.
    pub seq: u64,
    /// The run.
    pub run_id: String,
    /// The session the run belongs to.
    pub session_id: String,
    /// Which agent emitted it (`main`, `main/explorer-2`).
    pub agent_path: String,
    /// When it was recorded (RFC 3339).
    pub ts: String,
    /// Type and fields.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// Shortens text to one line of at most `PREVIEW_CHARS` characters, cutting on
/// a character boundary and marking the cut with `…`.
pub fn preview(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(PREVIEW_CHARS * 4));
    let mut chars = 0usize;
    let mut last_was_space = false;
    for ch in text.chars() {
        let ch = if ch.is_whitespace() { ' ' } else { ch };
        if ch == ' ' && last_was_space {
            continue;
        }
        last_was_space = ch == ' ';
        if chars == PREVIEW_CHARS {
            out.push('…');
            return out.trim().to_string();
        }
        out.push(ch);
        chars += 1;
    }
    out.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_type_is_listed_once() {
        let mut names = EVENT_TYPES.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), EVENT_TYPES.len());
        for kind in [
            EventKind::notice("n".to_string()),
            EventKind::Iteration { n: 1 },
            EventKind::TextDelta { text: "t".into() },
            EventKind::RunMoved {
                from_node: "a".into(),
                to_node: "b".into(),
            },
        ] {
            assert!(EVENT_TYPES.contains(&kind.type_name()));
        }
    }

    #[test]
    fn serialises_flat_with_type() {
        let event = RunEvent {
            seq: 7,
            run_id: "r".into(),
            session_id: "s".into(),
            agent_path: "main".into(),
            ts: "2026-11-30T00:00:00Z".into(),
            kind: EventKind::ToolStarted {
                call_id: "c".into(),
                name: "read_file".into(),
                args_preview: "{}".into(),
                target: None,
            },
        };
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["type"], "tool_started");
        assert_eq!(json["seq"], 7);
        assert_eq!(json["call_id"], "c");
        assert_eq!(json["agent_path"], "main");
        let back: RunEvent = serde_json::from_value(json).unwrap();
        assert_eq!(back, event);
        assert_eq!(event.kind.type_name(), "tool_started");
    }

    #[test]
    fn run_finished_shape() {
        let kind = EventKind::RunFinished {
            status: RunStatus::Stopped,
            stop_reason: "max_turns".into(),
            final_text: "x".into(),
            usage_total: Usage::default(),
        };
        let json = serde_json::to_value(&kind).unwrap();
        assert_eq!(json["status"], "stopped");
        assert_eq!(json["usage_total"]["cache_read"], 0);
    }

    #[test]
    fn exit_codes_follow_the_spec() {
        assert_eq!(RunStatus::Finished.exit_code(), 0);
        assert_eq!(RunStatus::Error.exit_code(), 1);
        assert_eq!(RunStatus::Stopped.exit_code(), 3);
        assert_eq!(RunStatus::Cancelled.exit_code(), 130);
    }

    #[test]
    fn preview_is_one_line_and_cut_on_char_boundaries() {
        assert_eq!(preview("a\n\n  b"), "a b");
        let long: String = "é".repeat(500);
        let p = preview(&long);
        assert_eq!(p.chars().count(), PREVIEW_CHARS + 1);
        assert!(p.ends_with('…'));
    }

    #[test]
    fn approval_outcome_parsing() {
        assert_eq!(
            ApprovalOutcome::parse("allow-always"),
            Some(ApprovalOutcome::AllowAlways)
        );
        assert_eq!(ApprovalOutcome::parse("nope"), None);
    }
}
