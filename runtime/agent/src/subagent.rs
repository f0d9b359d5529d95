//! Sub-agents and forks as pure decisions (SPEC §7): whether an `agent` call
//! may start a child and who that child is, the starting history of a fork,
//! and how a child's ending becomes its parent's tool result.
//!
//! Nothing here spawns anything: the actor that runs the parent turns a
//! [`ChildPlan`] into a child agent and reports the child's [`RunOutcome`]
//! back through [`child_result`].

use crate::agent_tool::AgentCallArgs;
use crate::roles::{Role, RoleSet, RoleTools, SUBAGENT_MAX_TURNS};
use crate::{AgentSpec, RunOutcome, UNKNOWN_TOOL_TURNS_SUBAGENT};
use troupe_protocol::events::RunStatus;
use troupe_protocol::model::SystemPrompt;
use troupe_protocol::model::{Message, Role as MessageRole, ToolResult};

/// SPEC §7: nesting depth of sub-agents (the main agent is depth 0).
pub const MAX_DEPTH: u32 = 2;

/// SPEC §7: a fork's report is at most this many words.
pub(crate) const FORK_REPORT_MAX_WORDS: usize = 500;

/// The role name used in agent paths and events for forks.
pub(crate) const FORK_ROLE: &str = "fork";

/// The role used when an `agent` call names none.
pub(crate) const DEFAULT_ROLE: &str = "general";

/// SPEC §7: what a fork is told after the copy of its parent's conversation.
pub(crate) const FORK_PREAMBLE: &str = "You are a forked worker: a copy of the agent above, started to \
carry out one subtask of its plan while it waits. Work only on the task below and stay in its \
scope. Do not fork or start other agents, and do not ask questions: nobody will answer them, so \
make reasonable assumptions and state them. When you are done, end with a report that starts \
with \"Scope:\" (what you were asked to do), then what you found or changed, with file paths; at \
most 500 words.\n\nYour task:";

/// Placeholder result, in a fork's copy, of the call that started the fork.
pub(crate) const FORK_OWN_CALL_RESULT: &str =
    "(This call started you, the forked worker. Its result will be your report.)";

/// Placeholder result, in a fork's copy, of the other calls still running in the parent.
pub(crate) const FORK_SIBLING_CALL_RESULT: &str =
    "(Still running in the parent agent; its result is not available to this fork.)";

/// Refusal for an `agent` call made by a fork.
pub const FORK_CANNOT_START_AGENTS: &str = "Not run: a forked worker cannot start agents. Do \
this part of the work yourself and end with your \"Scope:\" report.";

/// What the child of an `agent` call starts from, apart from its place in the tree.
#[derive(Debug, Clone, PartialEq)]
pub enum ChildKind {
    /// A fork: the parent's exact system prompt and tool definitions.
    Fork,
    /// A role: its own prompt (with the parent's environment part), tools and model.
    Role {
        /// The role's system prompt (the stable part of the child's prompt).
        prompt: String,
        /// The tools the role may use.
        tools: RoleTools,
        /// A model other than the parent's, when the role names one.
        model: Option<String>,
    },
}

/// Everything that decides a child agent, before it exists.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildPlan {
    /// The child's spec; its `path` is set by the parent when it starts it.
    pub spec: AgentSpec,
    /// The short label the model gave the task.
    pub description: String,
    /// The task.
    pub task: String,
    /// Fork or role.
    pub kind: ChildKind,
    /// The child's starting history (the task for a role; the parent's
    /// conversation, placeholders and the task for a fork).
    pub history: Vec<Message>,
    /// How many leading messages of `history` are the parent's history as it
    /// was (a fork's copy); 0 for a role.
    pub shared_prefix: usize,
}

impl ChildPlan {
    /// The name used in the child's path: the role, or `fork`.
    pub fn label(&self) -> &str {
        &self.spec.role
    }

    /// How many leading messages the child's session may read from its
    /// parent's instead of storing them: a fork's whole copy, when the parent
    /// has at least that many messages stored at their own index
    /// (`parent_stored`, `None` when its history starts with a summary).
    pub fn shared_with_parent(&self, parent_stored: Option<usize>) -> Option<usize> {
        match (&self.kind, parent_stored) {
            (ChildKind::Fork, Some(stored))
                if self.shared_prefix > 0 && stored >= self.shared_prefix =>
            {
                Some(self.shared_prefix)
            }
            _ => None,
        }
    }

    /// The child's system prompt: a fork's is its parent's, exactly (its
    /// first request repeats the parent's prefix); a role's is the role's
    /// prompt with the parent's environment part.
    pub fn system_prompt(&self, parent: &SystemPrompt) -> SystemPrompt {
        match &self.kind {
            ChildKind::Fork => parent.clone(),
            ChildKind::Role { prompt, .. } => SystemPrompt {
                stable: prompt.clone(),
                environment: parent.environment.clone(),
            },
        }
    }
}

/// Decides whether `parent` may start the child `args` asks for, and plans it.
/// `call_id` is the id of the `agent` call; `history` is the parent's history
/// (ending with the assistant message holding the call). The error is the
/// reason the model sees.
pub fn plan_child(
    parent: &AgentSpec,
    roles: &RoleSet,
    args: &AgentCallArgs,
    call_id: &str,
    history: &[Message],
) -> Result<ChildPlan, String> {
    if parent.is_fork {
        return Err(FORK_CANNOT_START_AGENTS.to_string());
    }
    if parent.depth >= MAX_DEPTH {
        return Err(format!(
            "Not run: sub-agents may nest at most {MAX_DEPTH} levels deep and this agent is \
             already at that depth. Do this part of the work yourself."
        ));
    }
    let task = args.prompt.trim().to_string();
    if args.fork {
        let spec = child_spec(parent, FORK_ROLE, SUBAGENT_MAX_TURNS, true);
        return Ok(ChildPlan {
            spec,
            description: args.description.clone(),
            history: fork_history(history, call_id, &task),
            shared_prefix: history.len(),
            task,
            kind: ChildKind::Fork,
        });
    }
    let name = args.role.as_deref().unwrap_or(DEFAULT_ROLE);
    let Some(role) = roles.get(name) else {
        let known: Vec<&str> = roles.iter().map(|role| role.name.as_str()).collect();
        return Err(format!(
            "Not run: there is no role \"{name}\". Available roles: {}. Or set \"fork\": true.",
            known.join(", ")
        ));
    };
    Ok(role_plan(parent, role, args, task))
}

fn role_plan(parent: &AgentSpec, role: &Role, args: &AgentCallArgs, task: String) -> ChildPlan {
    let max_turns = role.max_turns.unwrap_or(SUBAGENT_MAX_TURNS);
    ChildPlan {
        spec: child_spec(parent, &role.name, max_turns, false),
        description: args.description.clone(),
        history: vec![Message::user_text(task.clone())],
        shared_prefix: 0,
        task,
        kind: ChildKind::Role {
            prompt: role.prompt.clone(),
            tools: role.tools.clone(),
            model: role.model.clone(),
        },
    }
}

fn child_spec(parent: &AgentSpec, role: &str, max_turns: u32, is_fork: bool) -> AgentSpec {
    AgentSpec {
        path: parent.path.clone(),
        role: role.to_string(),
        max_turns,
        unknown_tool_limit: UNKNOWN_TOOL_TURNS_SUBAGENT,
        depth: parent.depth + 1,
        is_fork,
    }
}

/// The path of a parent's `n`-th child (1-based) with `label`:
/// `main/fork-2`, `main/explorer-1/general-1`.
pub(crate) fn child_path(parent_path: &str, label: &str, n: u32) -> String {
    format!("{parent_path}/{label}-{n}")
}

/// SPEC §7: a fork's starting history — a deep copy of its parent's, with the
/// parent's unanswered calls given placeholder results (so the copy is a
/// valid conversation), then the preamble and the task. Everything before the
/// placeholders is byte-identical to the parent's last request, so the
/// provider's prompt cache serves it.
pub(crate) fn fork_history(parent: &[Message], own_call_id: &str, task: &str) -> Vec<Message> {
    let mut history = parent.to_vec();
    let unanswered: Vec<ToolResult> = match history.last() {
        Some(last) if last.role == MessageRole::Assistant => last
            .tool_calls()
            .map(|call| {
                let text = if call.id == own_call_id {
                    FORK_OWN_CALL_RESULT
                } else {
                    FORK_SIBLING_CALL_RESULT
                };
                ToolResult::text(call.id.clone(), text, false)
            })
            .collect(),
        _ => Vec::new(),
    };
    if !unanswered.is_empty() {
        history.push(Message::tool_results(unanswered));
    }
    history.push(Message::user_text(format!("{FORK_PREAMBLE}\n{task}")));
    history
}

/// SPEC §7: a fork's report cut to [`FORK_REPORT_MAX_WORDS`] words, with a
/// note saying so. Shorter reports are returned unchanged.
pub(crate) fn truncate_report(text: &str) -> String {
    let mut words = 0;
    let mut in_word = false;
    for (at, ch) in text.char_indices() {
        if ch.is_whitespace() {
            in_word = false;
        } else if !in_word {
            in_word = true;
            words += 1;
            if words > FORK_REPORT_MAX_WORDS {
                return format!(
                    "{}\n\n[The report was cut at {FORK_REPORT_MAX_WORDS} words; the fork's full \
                     transcript is kept in its session.]",
                    text[..at].trim_end()
                );
            }
        }
    }
    text.to_string()
}

/// The tool result a parent gets when its child at `path` ends with `outcome`:
/// the child's final text for a finished child (a fork's report truncated),
/// an error result saying why otherwise. Returns `(text, is_error)`.
pub fn child_result(path: &str, is_fork: bool, outcome: &RunOutcome) -> (String, bool) {
    let said = outcome.final_text.trim();
    match outcome.status {
        RunStatus::Finished if said.is_empty() => (
            format!("(The sub-agent {path} finished without a report.)"),
            false,
        ),
        RunStatus::Finished if is_fork => (truncate_report(said), false),
        RunStatus::Finished => (said.to_string(), false),
        RunStatus::Stopped => (
            format!(
                "The sub-agent {path} stopped before finishing ({}). {said}",
                outcome.stop_reason
            ),
            true,
        ),
        RunStatus::Cancelled => (format!("The sub-agent {path} was cancelled."), true),
        RunStatus::Error | RunStatus::Interrupted => (
            format!(
                "The sub-agent {path} failed ({}). {said}",
                outcome.stop_reason
            ),
            true,
        ),
    }
}

/// The error result a parent gets when its child at `path` failed outright
/// (its actor panicked with `panic`) instead of ending its loop.
pub fn child_panicked(path: &str, panic: &str) -> String {
    format!(
        "The sub-agent {path} failed: it panicked ({panic}). Its work so far is in its session."
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate_history;
    use troupe_protocol::model::{ContentBlock, ToolCall, Usage};

    fn args(prompt: &str, role: Option<&str>, fork: bool) -> AgentCallArgs {
        AgentCallArgs {
            description: "look around".into(),
            prompt: prompt.into(),
            role: role.map(str::to_string),
            fork,
        }
    }

    fn parent_history() -> Vec<Message> {
        vec![
            Message::user_text("review the crate"),
            Message {
                role: MessageRole::Assistant,
                content: vec![
                    ContentBlock::Text {
                        text: "Splitting it up.".into(),
                    },
                    ContentBlock::ToolCall(ToolCall {
                        id: "c1".into(),
                        name: "agent".into(),
                        input: r#"{"prompt":"a","fork":true}"#.into(),
                    }),
                    ContentBlock::ToolCall(ToolCall {
                        id: "c2".into(),
                        name: "agent".into(),
                        input: r#"{"prompt":"b","fork":true}"#.into(),
                    }),
                ],
            },
        ]
    }

    fn outcome(status: RunStatus, text: &str) -> RunOutcome {
        RunOutcome {
            status,
            stop_reason: match status {
                RunStatus::Finished => "end_turn".into(),
                RunStatus::Stopped => "max_turns".into(),
                _ => "provider_error".into(),
            },
            final_text: text.into(),
            usage: Usage::default(),
        }
    }

    #[test]
    fn a_fork_copies_the_history_answers_open_calls_and_adds_the_task() {
        let parent = parent_history();
        let forked = fork_history(&parent, "c2", "check module b");
        assert_eq!(&forked[..2], &parent[..]);
        let results: Vec<_> = forked[2].tool_results_iter().collect();
        assert_eq!(results.len(), 2);
        assert_eq!(results[0].joined_text(), FORK_SIBLING_CALL_RESULT);
        assert_eq!(results[1].joined_text(), FORK_OWN_CALL_RESULT);
        assert_eq!(forked[3].role, MessageRole::User);
        assert!(forked[3].text().starts_with(FORK_PREAMBLE));
        assert!(forked[3].text().ends_with("check module b"));
        validate_history(&forked[..3]).unwrap();
    }

    #[test]
    fn plans_a_fork_a_role_and_the_default_role() {
        let main = AgentSpec::main(25);
        let roles = RoleSet::builtin();
        let history = parent_history();
        let fork = plan_child(&main, &roles, &args("b", None, true), "c2", &history).unwrap();
        assert_eq!(fork.kind, ChildKind::Fork);
        assert!(fork.spec.is_fork);
        assert_eq!(fork.spec.depth, 1);
        assert_eq!(fork.label(), "fork");
        assert_eq!(fork.spec.unknown_tool_limit, UNKNOWN_TOOL_TURNS_SUBAGENT);
        assert_eq!(fork.history.len(), 4);
        assert_eq!(fork.shared_prefix, history.len());
        assert_eq!(&fork.history[..fork.shared_prefix], &history[..]);

        let explorer = plan_child(
            &main,
            &roles,
            &args(" find x ", Some("explorer"), false),
            "c1",
            &history,
        )
        .unwrap();
        assert_eq!(explorer.label(), "explorer");
        assert_eq!(explorer.task, "find x");
        assert_eq!(explorer.history, vec![Message::user_text("find x")]);
        assert!(matches!(
            explorer.kind,
            ChildKind::Role {
                tools: RoleTools::ReadOnly,
                ..
            }
        ));

        let general = plan_child(&main, &roles, &args("x", None, false), "c1", &history).unwrap();
        assert_eq!(general.label(), DEFAULT_ROLE);
    }

    #[test]
    fn refuses_fork_of_fork_depth_and_unknown_roles_with_reasons() {
        let roles = RoleSet::builtin();
        let history = parent_history();
        let main = AgentSpec::main(25);
        let fork = plan_child(&main, &roles, &args("b", None, true), "c2", &history)
            .unwrap()
            .spec;
        let err =
            plan_child(&fork, &roles, &args("again", None, true), "c9", &history).unwrap_err();
        assert_eq!(err, FORK_CANNOT_START_AGENTS);
        // A fork may not start role agents either.
        assert!(
            plan_child(
                &fork,
                &roles,
                &args("x", Some("explorer"), false),
                "c9",
                &history
            )
            .is_err()
        );

        let general = plan_child(&main, &roles, &args("x", None, false), "c1", &history)
            .unwrap()
            .spec;
        let deep = plan_child(&general, &roles, &args("y", None, false), "c3", &history)
            .unwrap()
            .spec;
        assert_eq!(deep.depth, MAX_DEPTH);
        let err = plan_child(&deep, &roles, &args("z", None, false), "c4", &history).unwrap_err();
        assert!(err.contains("at most 2 levels"), "{err}");

        let err = plan_child(
            &main,
            &roles,
            &args("x", Some("nope"), false),
            "c1",
            &history,
        )
        .unwrap_err();
        assert!(err.contains("no role \"nope\""), "{err}");
        assert!(err.contains("general, explorer"), "{err}");
    }

    #[test]
    fn a_fork_shares_its_copy_when_the_parent_stored_it_and_a_role_never() {
        let main = AgentSpec::main(25);
        let roles = RoleSet::builtin();
        let history = parent_history();
        let fork = plan_child(&main, &roles, &args("b", None, true), "c2", &history).unwrap();
        assert_eq!(fork.shared_with_parent(Some(2)), Some(2));
        assert_eq!(fork.shared_with_parent(Some(5)), Some(2));
        // Not all of it stored yet, or a history starting with a summary.
        assert_eq!(fork.shared_with_parent(Some(1)), None);
        assert_eq!(fork.shared_with_parent(None), None);
        let role = plan_child(&main, &roles, &args("x", None, false), "c1", &history).unwrap();
        assert_eq!(role.shared_with_parent(Some(2)), None);

        let parent = SystemPrompt {
            stable: "parent rules".into(),
            environment: "cwd: /repo".into(),
        };
        assert_eq!(fork.system_prompt(&parent), parent);
        let general = role.system_prompt(&parent);
        assert_eq!(general.environment, parent.environment);
        assert_ne!(general.stable, parent.stable);
        assert!(!general.stable.is_empty());
    }

    #[test]
    fn paths_number_children_of_one_parent() {
        assert_eq!(child_path("main", "fork", 2), "main/fork-2");
        assert_eq!(
            child_path("main/general-1", "explorer", 1),
            "main/general-1/explorer-1"
        );
    }

    #[test]
    fn reports_over_500_words_are_cut_with_a_note() {
        let short = "Scope: a. All fine.";
        assert_eq!(truncate_report(short), short);
        let long: String = (0..600).map(|i| format!("w{i} ")).collect();
        let cut = truncate_report(&long);
        assert!(cut.contains("w499"));
        assert!(!cut.contains("w500 "));
        assert!(cut.contains("cut at 500 words"));
        // Multi-byte text is cut on a character boundary.
        let wide: String = "é ".repeat(700);
        assert!(truncate_report(&wide).contains("cut at 500 words"));
    }

    #[test]
    fn child_outcomes_become_results_saying_why() {
        let (text, error) = child_result(
            "main/fork-1",
            true,
            &outcome(RunStatus::Finished, "Scope: x"),
        );
        assert_eq!((text.as_str(), error), ("Scope: x", false));
        let (text, error) =
            child_result("main/general-1", false, &outcome(RunStatus::Finished, ""));
        assert!(text.contains("without a report") && !error);
        let (text, error) = child_result(
            "main/general-1",
            false,
            &outcome(RunStatus::Stopped, "(Stopped: limit.)"),
        );
        assert!(
            error && text.contains("stopped before finishing (max_turns)"),
            "{text}"
        );
        let (text, error) =
            child_result("main/general-1", false, &outcome(RunStatus::Cancelled, ""));
        assert!(error && text.contains("was cancelled"));
        let (text, error) = child_result(
            "main/general-1",
            false,
            &outcome(RunStatus::Error, "(The model request failed.)"),
        );
        assert!(error && text.contains("failed (provider_error)"), "{text}");
        let text = child_panicked("main/fork-2", "boom");
        assert!(text.contains("main/fork-2") && text.contains("panicked (boom)"));
    }
}
