//! What the run page shows, folded from a run's events: the agent tree and
//! each agent's state, the approvals still waiting, the latest plan, the
//! tokens used and the files the run changed. Pure: the same fold serves the
//! page's first render (from the stored events) and its live updates (one
//! event at a time).

use std::collections::BTreeMap;

use troupe_protocol::events::{EventKind, RunEvent, RunStatus};
use troupe_protocol::model::Usage;
use troupe_protocol::task_plan::TaskStep;

/// An agent of a run as its events tell it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AgentView {
    /// Where it sits in the tree (`main`, `main/fork-1`).
    pub path: String,
    /// Its role, for a sub-agent.
    pub role: Option<String>,
    /// Its task, for a sub-agent.
    pub task: Option<String>,
    /// How it ended; `None` while it runs.
    pub ended: Option<RunStatus>,
    /// Tool calls started.
    pub tool_calls: u64,
}

impl AgentView {
    fn new(path: &str) -> Self {
        Self {
            path: path.to_string(),
            role: None,
            task: None,
            ended: None,
            tool_calls: 0,
        }
    }

    /// How deep it sits below `main` (0 for `main`).
    pub(crate) fn depth(&self) -> usize {
        self.path.matches('/').count()
    }
}

/// An approval waiting for an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PendingApproval {
    /// Its id.
    pub approval_id: String,
    /// The agent asking.
    pub agent_path: String,
    /// The tool.
    pub tool: String,
    /// The call's arguments as shown.
    pub args: String,
    /// Why it needs an answer.
    pub reason: String,
    /// The rule "Always" would add.
    pub always_rule: Option<String>,
}

/// A file the run changed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct ChangedFile {
    /// The path as the call named it, or relative to the project.
    pub path: String,
    /// How it changed (`added`, `removed`, `modified`), where the
    /// checkpoints tell.
    pub change: Option<&'static str>,
    /// Why no diff is shown (a binary or too large file).
    pub note: Option<String>,
    /// The tools that wrote it, in order.
    pub tools: Vec<String>,
    /// The agents that wrote it.
    pub agents: Vec<String>,
    /// The ids of the calls that wrote it, in order.
    pub calls: Vec<String>,
    /// What each call changed, as diff lines, where the call's arguments
    /// are known (see [`attach_diffs`]).
    pub diffs: Vec<Vec<crate::diff::DiffLine>>,
}

/// The files a run page shows, and a note on where they come from when it
/// is not the checkpoints (their store failed or was slow to answer).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FilesShown {
    /// The files.
    pub files: Vec<ChangedFile>,
    /// Why they come from the tool calls although checkpoints exist.
    pub note: Option<String>,
}

/// Fills in each file's diffs from the arguments of the calls that wrote
/// it: an `edit_file` call as the change from its `old_string` to its
/// `new_string`, a `write_file` call as its whole `content` added. Calls
/// whose arguments are unknown or unreadable add nothing.
pub(crate) fn attach_diffs(
    files: &mut [ChangedFile],
    calls: &std::collections::HashMap<String, troupe_protocol::model::ToolCall>,
) {
    use crate::diff::{CONTEXT_LINES, MAX_DIFF_LINES, unified_diff};
    for file in files.iter_mut() {
        file.diffs = file
            .calls
            .iter()
            .filter_map(|id| calls.get(id))
            .filter_map(|call| {
                let input = call.input_value().ok()?;
                let text = |name: &str| input.get(name).and_then(|value| value.as_str());
                let (old, new) = match call.name.as_str() {
                    "edit_file" => (text("old_string")?, text("new_string")?),
                    "write_file" => ("", text("content")?),
                    _ => return None,
                };
                Some(unified_diff(
                    &file.path,
                    old,
                    new,
                    CONTEXT_LINES,
                    MAX_DIFF_LINES,
                ))
            })
            .collect();
    }
}

/// Where the list of a run's changed files comes from: the checkpoints
/// where the run took any, otherwise its tool calls.
pub(crate) trait ChangeSource {
    /// The files the run changed.
    fn changed_files(&self, run: &RunView) -> Vec<ChangedFile>;
}

/// The changed files the run's own tool calls name.
pub(crate) struct FromToolCalls;

impl ChangeSource for FromToolCalls {
    fn changed_files(&self, run: &RunView) -> Vec<ChangedFile> {
        run.written.values().cloned().collect()
    }
}

/// The changed files the run's checkpoints hold: every file that differs
/// from before its first checkpoint to the files as it left them, whatever
/// changed it (a `bash` command's files too), each with git's patch. The
/// tools and agents are those of the run's writing calls that named the
/// file, where any did.
pub(crate) struct FromCheckpoints<'a> {
    /// The patches read from the checkpoint store.
    pub patches: &'a troupe_checkpoint::FilePatches,
}

impl ChangeSource for FromCheckpoints<'_> {
    fn changed_files(&self, run: &RunView) -> Vec<ChangedFile> {
        use troupe_checkpoint::{ChangeKind, PatchBody};
        self.patches
            .files
            .iter()
            .map(|patch| {
                let path = patch.path.to_string_lossy().into_owned();
                let written = run
                    .written
                    .get(&path)
                    .or_else(|| {
                        run.written
                            .iter()
                            .find(|(named, _)| same_file(named, &path))
                            .map(|(_, file)| file)
                    })
                    .cloned()
                    .unwrap_or_default();
                let (diffs, note) = match &patch.body {
                    PatchBody::Text { patch } => (
                        vec![crate::diff::patch_lines(patch, crate::diff::MAX_DIFF_LINES)],
                        None,
                    ),
                    PatchBody::Binary => (Vec::new(), Some("binary".to_string())),
                    PatchBody::TooLarge { bytes } => (
                        Vec::new(),
                        Some(format!("too large to show ({bytes} bytes)")),
                    ),
                };
                ChangedFile {
                    path,
                    change: Some(match patch.kind {
                        ChangeKind::Added => "added",
                        ChangeKind::Removed => "removed",
                        ChangeKind::Modified => "modified",
                    }),
                    note,
                    diffs,
                    ..written
                }
            })
            .collect()
    }
}

/// Whether a path a tool call named (relative, `./`-prefixed or absolute)
/// is the file at `relative` in the project. Pure.
pub(crate) fn same_file(named: &str, relative: &str) -> bool {
    let named = named.trim_start_matches("./");
    named == relative
        || named
            .strip_suffix(relative)
            .is_some_and(|head| head.ends_with('/'))
}

/// The tools that write the file their target names.
pub(crate) const WRITING_TOOLS: [&str; 2] = ["write_file", "edit_file"];

/// The tokens a `usage` event reports; `None` for other events.
pub(crate) fn usage_of(kind: &EventKind) -> Option<Usage> {
    match kind {
        EventKind::Usage {
            input,
            output,
            cache_read,
            cache_write,
        } => Some(Usage {
            input: *input,
            output: *output,
            cache_read: *cache_read,
            cache_write: *cache_write,
        }),
        _ => None,
    }
}

/// An event of run `r` in session `s`, for the dashboard's tests.
#[cfg(test)]
pub(crate) fn test_event(seq: u64, agent: &str, kind: EventKind) -> RunEvent {
    RunEvent {
        seq,
        run_id: "r".into(),
        session_id: "s".into(),
        agent_path: agent.into(),
        ts: String::new(),
        kind,
    }
}

/// The run as its events so far tell it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RunView {
    /// The agents, in the order they appeared.
    pub agents: Vec<AgentView>,
    /// Approvals asked and not answered yet, oldest first.
    pub pending: Vec<PendingApproval>,
    /// The latest plan: its explanation and steps.
    pub plan: Option<(Option<String>, Vec<TaskStep>)>,
    /// Tokens used, summed over every response.
    pub usage: Usage,
    /// How the run ended, once it has.
    pub finished: Option<RunStatus>,
    /// The last event's sequence number.
    pub last_seq: u64,
    /// Files written by tool calls, by path.
    written: BTreeMap<String, ChangedFile>,
    /// Tool calls started and not finished: call id → (tool, target).
    open_calls: BTreeMap<String, (String, Option<String>)>,
}

impl RunView {
    /// The view of `events`, applied in order.
    pub(crate) fn of(events: &[RunEvent]) -> Self {
        let mut view = Self::default();
        for event in events {
            view.apply(event);
        }
        view
    }

    fn agent(&mut self, path: &str) -> &mut AgentView {
        let index = match self.agents.iter().position(|agent| agent.path == path) {
            Some(index) => index,
            None => {
                self.agents.push(AgentView::new(path));
                self.agents.len() - 1
            }
        };
        &mut self.agents[index]
    }

    /// Applies one event. Returns whether what the state panel shows
    /// (agents, approvals, plan, status, files) changed; an agent is known
    /// from its first event of any kind.
    pub(crate) fn apply(&mut self, event: &RunEvent) -> bool {
        let known = self.agents.len();
        self.agent(&event.agent_path);
        self.apply_known(event) || self.agents.len() > known
    }

    /// The lane of agent `path`: its place among the agents.
    pub(crate) fn lane_of(&self, path: &str) -> Option<usize> {
        self.agents.iter().position(|agent| agent.path == path)
    }

    fn apply_known(&mut self, event: &RunEvent) -> bool {
        self.last_seq = self.last_seq.max(event.seq);
        let path = event.agent_path.as_str();
        match &event.kind {
            EventKind::RunStarted { .. } => {
                self.agent(path);
                true
            }
            EventKind::SubagentStarted { role, task } => {
                let agent = self.agent(path);
                agent.role = Some(role.clone());
                agent.task = Some(task.clone());
                true
            }
            EventKind::SubagentFinished { status } => {
                self.agent(path).ended = Some(*status);
                true
            }
            EventKind::ToolStarted {
                call_id,
                name,
                target,
                ..
            } => {
                self.agent(path).tool_calls += 1;
                self.open_calls
                    .insert(call_id.clone(), (name.clone(), target.clone()));
                false
            }
            EventKind::ToolFinished {
                call_id, is_error, ..
            } => {
                let Some((name, target)) = self.open_calls.remove(call_id) else {
                    return false;
                };
                match target {
                    Some(target) if !is_error && WRITING_TOOLS.contains(&name.as_str()) => {
                        let file =
                            self.written
                                .entry(target.clone())
                                .or_insert_with(|| ChangedFile {
                                    path: target,
                                    ..ChangedFile::default()
                                });
                        file.tools.push(name);
                        file.calls.push(call_id.clone());
                        if !file.agents.iter().any(|agent| agent == path) {
                            file.agents.push(path.to_string());
                        }
                        true
                    }
                    _ => false,
                }
            }
            EventKind::ApprovalRequested {
                approval_id,
                tool,
                args,
                reason,
                always_rule,
            } => {
                self.pending.push(PendingApproval {
                    approval_id: approval_id.clone(),
                    agent_path: path.to_string(),
                    tool: tool.clone(),
                    args: args.clone(),
                    reason: reason.clone(),
                    always_rule: always_rule.clone(),
                });
                true
            }
            EventKind::ApprovalResolved { approval_id, .. } => {
                self.pending
                    .retain(|pending| &pending.approval_id != approval_id);
                true
            }
            EventKind::Usage { .. } => {
                if let Some(usage) = usage_of(&event.kind) {
                    self.usage.add(&usage);
                }
                false
            }
            // The files a checkpoint holds may have changed (a command's
            // too).
            EventKind::CheckpointCreated { .. } => true,
            EventKind::PlanUpdated { explanation, plan } => {
                self.plan = Some((explanation.clone(), plan.clone()));
                true
            }
            EventKind::RunFinished { status, .. } => {
                if path == "main" {
                    self.finished = Some(*status);
                    self.pending.clear();
                }
                self.agent(path).ended = Some(*status);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use troupe_protocol::events::ApprovalOutcome;
    use troupe_protocol::task_plan::StepStatus;

    use super::*;

    use super::test_event as event;

    fn tool(seq: u64, agent: &str, id: &str, name: &str, target: &str) -> [RunEvent; 2] {
        [
            event(
                seq,
                agent,
                EventKind::ToolStarted {
                    call_id: id.into(),
                    name: name.into(),
                    args_preview: String::new(),
                    target: Some(target.into()),
                },
            ),
            event(
                seq + 1,
                agent,
                EventKind::ToolFinished {
                    call_id: id.into(),
                    name: name.into(),
                    is_error: false,
                    output_preview: String::new(),
                    output_lines: 1,
                    duration_ms: 3,
                },
            ),
        ]
    }

    #[test]
    fn checkpoint_files_name_every_change_and_the_calls_that_wrote_some() {
        use troupe_checkpoint::{ChangeKind, FilePatch, FilePatches, PatchBody};
        let view = RunView::of(&tool(1, "main", "c1", "write_file", "./notes.txt"));
        let patch = |path: &str, kind, body| FilePatch {
            path: path.into(),
            kind,
            body,
        };
        let patches = FilePatches {
            files: vec![
                patch(
                    "notes.txt",
                    ChangeKind::Added,
                    PatchBody::Text {
                        patch: "--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1 @@\n+one\n".into(),
                    },
                ),
                patch("gone.bin", ChangeKind::Removed, PatchBody::Binary),
                patch(
                    "big.txt",
                    ChangeKind::Modified,
                    PatchBody::TooLarge { bytes: 9 },
                ),
            ],
            omitted: 0,
        };
        let files = FromCheckpoints { patches: &patches }.changed_files(&view);
        assert_eq!(files.len(), 3);
        assert_eq!(files[0].change, Some("added"));
        assert_eq!(
            (files[0].tools.clone(), files[0].agents.clone()),
            (vec!["write_file".to_string()], vec!["main".to_string()])
        );
        assert!(files[0].diffs[0].contains(&crate::diff::DiffLine::Added("one".into())));
        assert_eq!(files[1].note.as_deref(), Some("binary"));
        assert!(files[1].tools.is_empty() && files[1].diffs.is_empty());
        assert_eq!(
            files[2].note.as_deref(),
            Some("too large to show (9 bytes)")
        );
        assert!(same_file("/work/p/src/a.rs", "src/a.rs"));
        assert!(!same_file("/work/p/xsrc/a.rs", "src/a.rs"));
        assert!(!same_file("a.rs.bak", "a.rs"));
    }

    #[test]
    fn agents_approvals_plan_usage_and_files_follow_the_events() {
        let mut events = vec![
            event(1, "main", EventKind::RunStarted { prompt: "p".into() }),
            event(
                2,
                "main/fork-1",
                EventKind::SubagentStarted {
                    role: "fork".into(),
                    task: "look".into(),
                },
            ),
            event(
                3,
                "main/fork-1",
                EventKind::ApprovalRequested {
                    approval_id: "a1".into(),
                    tool: "bash".into(),
                    args: "ls".into(),
                    reason: "asks".into(),
                    always_rule: None,
                },
            ),
            event(
                4,
                "main",
                EventKind::PlanUpdated {
                    explanation: None,
                    plan: vec![TaskStep::new("Do it", StepStatus::InProgress)],
                },
            ),
            event(
                5,
                "main",
                EventKind::Usage {
                    input: 10,
                    output: 5,
                    cache_read: 0,
                    cache_write: 0,
                },
            ),
        ];
        events.extend(tool(6, "main", "c1", "write_file", "notes.txt"));
        events.extend(tool(8, "main/fork-1", "c2", "read_file", "other.txt"));
        let view = RunView::of(&events);
        assert_eq!(view.agents.len(), 2);
        assert_eq!(view.agents[1].role.as_deref(), Some("fork"));
        assert_eq!(view.agents[1].depth(), 1);
        assert_eq!(view.pending.len(), 1);
        assert_eq!(view.pending[0].agent_path, "main/fork-1");
        assert!(view.plan.is_some());
        assert_eq!(view.usage.output, 5);
        let mut files = FromToolCalls.changed_files(&view);
        assert_eq!(files.len(), 1, "a read is no change: {files:?}");
        assert_eq!(files[0].path, "notes.txt");
        assert_eq!(files[0].calls, ["c1"]);
        let calls = std::collections::HashMap::from([(
            "c1".to_string(),
            troupe_protocol::model::ToolCall {
                id: "c1".into(),
                name: "write_file".into(),
                input: r#"{"path":"notes.txt","content":"one\ntwo\n"}"#.into(),
            },
        )]);
        attach_diffs(&mut files, &calls);
        assert_eq!(files[0].diffs.len(), 1);
        assert!(
            files[0].diffs[0]
                .iter()
                .any(|line| *line == crate::diff::DiffLine::Added("two".into())),
            "{:?}",
            files[0].diffs
        );
        let mut unknown = FromToolCalls.changed_files(&view);
        attach_diffs(&mut unknown, &std::collections::HashMap::new());
        assert!(unknown[0].diffs.is_empty());

        let mut live = view.clone();
        assert!(live.apply(&event(
            10,
            "main/fork-1",
            EventKind::ApprovalResolved {
                approval_id: "a1".into(),
                outcome: ApprovalOutcome::Allow,
            },
        )));
        assert!(live.pending.is_empty());
        assert_eq!(live.last_seq, 10);
        assert!(!live.apply(&event(
            11,
            "main",
            EventKind::TextDelta { text: "x".into() }
        )));
        assert!(live.apply(&event(
            12,
            "main/fork-1",
            EventKind::SubagentFinished {
                status: RunStatus::Finished
            },
        )));
        assert_eq!(live.agents[1].ended, Some(RunStatus::Finished));
        assert!(live.finished.is_none());
    }
}
