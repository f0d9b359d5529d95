//! How the agents' task plans (`plan_updated` events) are shown: the whole
//! plan the first time an agent shows one, then only the lines that changed
//! ([`plan_change_lines`], pure), and every agent's current plan for the
//! chat's `/steps` ([`TaskPlans::summary`]). Step texts come from the model:
//! they pass through `sanitize::for_terminal` before anything is printed.

use std::collections::BTreeMap;

use troupe_protocol::task_plan::{StepStatus, TaskStep};

use crate::sanitize::for_terminal;

/// The lines that show `plan` (with its `explanation`) after `previous`
/// (`None`: the agent showed no plan yet): a heading with how many steps are
/// done, then every step the first time, or only the steps that differ from
/// the step at the same place before, and how many steps were dropped.
/// Steps are indented by two spaces; nothing changed, no lines.
pub(crate) fn plan_change_lines(
    previous: Option<&[TaskStep]>,
    plan: &[TaskStep],
    explanation: Option<&str>,
) -> Vec<String> {
    if plan.is_empty() {
        return match previous {
            Some([]) => Vec::new(),
            _ => vec!["plan cleared".to_owned()],
        };
    }
    let unchanged = previous == Some(plan);
    if unchanged && explanation.is_none() {
        return Vec::new();
    }
    let done = completed(plan);
    let mut heading = format!("plan ({done}/{} done)", plan.len());
    if let Some(explanation) = explanation {
        heading.push_str(": ");
        heading.push_str(&for_terminal(explanation).replace('\n', " "));
    }
    let mut lines = vec![heading];
    for (i, step) in plan.iter().enumerate() {
        let before = previous.and_then(|previous| previous.get(i));
        if previous.is_none() || before != Some(step) {
            lines.push(format!("  {}", for_terminal(&step.line())));
        }
    }
    let dropped = previous.map_or(0, |previous| previous.len().saturating_sub(plan.len()));
    if dropped > 0 {
        lines.push(format!(
            "  ({dropped} step{} dropped)",
            if dropped == 1 { "" } else { "s" }
        ));
    }
    lines
}

/// How many of `plan`'s steps are completed.
fn completed(plan: &[TaskStep]) -> usize {
    plan.iter()
        .filter(|step| step.status == StepStatus::Completed)
        .count()
}

/// The current plan of each agent that showed one, by agent path.
#[derive(Debug, Default)]
pub(crate) struct TaskPlans(BTreeMap<String, Vec<TaskStep>>);

impl TaskPlans {
    /// Keeps `plan` as the plan of `agent_path`; returns the lines that show
    /// the change ([`plan_change_lines`]).
    pub(crate) fn update(
        &mut self,
        agent_path: &str,
        plan: &[TaskStep],
        explanation: Option<&str>,
    ) -> Vec<String> {
        let lines = plan_change_lines(self.0.get(agent_path).map(Vec::as_slice), plan, explanation);
        self.0.insert(agent_path.to_owned(), plan.to_vec());
        lines
    }

    /// The step `agent_path` is working on, with how far its plan is
    /// (`◼ Fixing the bug (1/3)`), for the chat's status line; `None`
    /// when no step of its plan is in progress.
    pub(crate) fn current_step(&self, agent_path: &str) -> Option<String> {
        let plan = self.0.get(agent_path)?;
        let current = plan
            .iter()
            .find(|step| step.status == StepStatus::InProgress)?;
        let done = completed(plan);
        Some(format!(
            "{} ({done}/{})",
            for_terminal(&current.line()),
            plan.len()
        ))
    }

    /// Every plan in full, each under its agent path (the main agent's
    /// first), or a line saying there is none.
    pub(crate) fn summary(&self) -> String {
        let mut paths: Vec<&String> = self.0.keys().collect();
        paths.sort_by_key(|path| (path.as_str() != "main", path.as_str()));
        let mut text = Vec::new();
        for path in paths {
            let plan = &self.0[path];
            if plan.is_empty() {
                continue;
            }
            text.push(format!("{}:", for_terminal(path)));
            text.extend(plan_change_lines(None, plan, None).into_iter().skip(1));
        }
        if text.is_empty() {
            "(no plan yet: the agent makes one with update_plan)".to_owned()
        } else {
            text.join("\n")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(text: &str, status: StepStatus) -> TaskStep {
        TaskStep::new(text, status)
    }

    #[test]
    fn the_first_plan_is_shown_whole_and_later_ones_by_their_changed_lines() {
        let first = vec![
            step("Read", StepStatus::InProgress),
            step("Fix", StepStatus::Pending),
            step("Test", StepStatus::Pending),
        ];
        assert_eq!(
            plan_change_lines(None, &first, Some("start")),
            ["plan (0/3 done): start", "  ◼ Read", "  ◻ Fix", "  ◻ Test"]
        );
        let mut fixing = step("Fix", StepStatus::InProgress);
        fixing.active_form = Some("Fixing".into());
        let second = vec![
            step("Read", StepStatus::Completed),
            fixing,
            step("Test", StepStatus::Pending),
        ];
        assert_eq!(
            plan_change_lines(Some(&first), &second, None),
            ["plan (1/3 done)", "  ✔ Read", "  ◼ Fixing"]
        );
        assert!(plan_change_lines(Some(&second), &second, None).is_empty());
        let shorter = vec![step("Read", StepStatus::Completed)];
        assert_eq!(
            plan_change_lines(Some(&second), &shorter, None),
            ["plan (1/1 done)", "  (2 steps dropped)"]
        );
        assert_eq!(
            plan_change_lines(Some(&second), &[], None),
            ["plan cleared"]
        );
        assert!(plan_change_lines(Some(&[]), &[], None).is_empty());
    }

    #[test]
    fn plan_text_cannot_drive_the_terminal() {
        let hostile = vec![step("\u{1b}]52;c;aGk=\u{7}x", StepStatus::Pending)];
        let lines = plan_change_lines(None, &hostile, Some("a\u{1b}[2J\nb"));
        for line in &lines {
            assert!(!line.contains('\u{1b}'), "{line:?}");
            assert!(!line.contains('\n'), "{line:?}");
        }
    }

    #[test]
    fn the_summary_lists_every_agent_main_first() {
        let mut plans = TaskPlans::default();
        assert!(plans.summary().starts_with("(no plan yet"));
        plans.update(
            "main/explorer-1",
            &[step("Look", StepStatus::Pending)],
            None,
        );
        let lines = plans.update("main", &[step("Do", StepStatus::InProgress)], None);
        assert_eq!(lines, ["plan (0/1 done)", "  ◼ Do"]);
        assert_eq!(plans.current_step("main").as_deref(), Some("◼ Do (0/1)"));
        assert_eq!(plans.current_step("main/explorer-1"), None);
        assert_eq!(plans.current_step("main/other"), None);
        assert_eq!(plans.summary(), "main:\n  ◼ Do\nmain/explorer-1:\n  ◻ Look");
    }
}
