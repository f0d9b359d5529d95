//! An agent's task plan: the short list of steps the model keeps with the
//! `update_plan` tool and people watch (`plan_updated` events). Not to be
//! confused with the execution plan of one turn's tool calls.
//!
//! [`TaskPlan::validated`] is the one rule every plan passes before it is
//! kept: at most [`MAX_TASK_STEPS`] steps of one line each (no control
//! characters, not blank, at most [`MAX_STEP_CHARS`] characters), an
//! explanation of at most [`MAX_EXPLANATION_CHARS`] characters, and at most
//! one step in progress. A refused plan changes nothing.

use serde::{Deserialize, Serialize};

/// Most steps one plan holds.
pub const MAX_TASK_STEPS: usize = 50;
/// Most characters of a step's text and of its active form.
pub const MAX_STEP_CHARS: usize = 500;
/// Most characters of a plan's explanation.
pub const MAX_EXPLANATION_CHARS: usize = 1_000;

/// Where a step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Not started.
    Pending,
    /// Being worked on (at most one step of a plan).
    InProgress,
    /// Done.
    Completed,
}

impl StepStatus {
    /// The mark shown before a step: ✔ completed, ◼ in progress, ◻ pending.
    pub fn mark(self) -> char {
        match self {
            Self::Pending => '◻',
            Self::InProgress => '◼',
            Self::Completed => '✔',
        }
    }
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskStep {
    /// What the step does, imperative (`Run the tests`).
    pub step: String,
    /// Where it stands.
    pub status: StepStatus,
    /// The step as it is being done (`Running the tests`), shown while it
    /// is in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_form: Option<String>,
}

impl TaskStep {
    /// A step with no active form.
    pub fn new(step: impl Into<String>, status: StepStatus) -> Self {
        Self {
            step: step.into(),
            status,
            active_form: None,
        }
    }

    /// The step as one line: its mark and, while in progress, its active
    /// form when it has one.
    pub fn line(&self) -> String {
        let text = match (&self.active_form, self.status) {
            (Some(active), StepStatus::InProgress) if !active.trim().is_empty() => active,
            _ => &self.step,
        };
        format!("{} {text}", self.status.mark())
    }
}

/// An agent's plan: every call of `update_plan` replaces the whole of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskPlan {
    /// Why the plan is as it is now, when the model said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
    /// The steps, in order.
    #[serde(default)]
    pub plan: Vec<TaskStep>,
}

/// Why a plan was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskPlanError {
    /// More than [`MAX_TASK_STEPS`] steps.
    TooManySteps(usize),
    /// More than one step is in progress (their 1-based numbers).
    SeveralInProgress(Vec<usize>),
    /// Step `n` (1-based) has no text.
    BlankStep(usize),
    /// Step `n` (1-based) or its active form is longer than [`MAX_STEP_CHARS`].
    StepTooLong(usize),
    /// Step `n` (1-based) or its active form holds a control character
    /// (a line break, an escape).
    ControlCharacter(usize),
    /// The explanation is longer than [`MAX_EXPLANATION_CHARS`].
    ExplanationTooLong,
}

impl std::fmt::Display for TaskPlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooManySteps(n) => {
                write!(f, "{n} steps; a plan holds at most {MAX_TASK_STEPS}")
            }
            Self::SeveralInProgress(steps) => {
                let steps: Vec<String> = steps.iter().map(usize::to_string).collect();
                write!(
                    f,
                    "steps {} are all in_progress; at most one step may be in_progress",
                    steps.join(", ")
                )
            }
            Self::BlankStep(n) => write!(f, "step {n} has no text"),
            Self::StepTooLong(n) => write!(
                f,
                "step {n} is longer than {MAX_STEP_CHARS} characters; keep steps short"
            ),
            Self::ControlCharacter(n) => write!(
                f,
                "step {n} holds a line break or control character; a step is one line"
            ),
            Self::ExplanationTooLong => write!(
                f,
                "the explanation is longer than {MAX_EXPLANATION_CHARS} characters"
            ),
        }
    }
}

impl std::error::Error for TaskPlanError {}

impl TaskPlan {
    /// The plan, if it keeps the rules of the module docs (whitespace around
    /// step texts, active forms and the explanation is dropped; a blank
    /// explanation or active form is none).
    pub fn validated(self) -> Result<Self, TaskPlanError> {
        if self.plan.len() > MAX_TASK_STEPS {
            return Err(TaskPlanError::TooManySteps(self.plan.len()));
        }
        let explanation = trimmed_or_none(self.explanation);
        if explanation
            .as_ref()
            .is_some_and(|text| text.chars().count() > MAX_EXPLANATION_CHARS)
        {
            return Err(TaskPlanError::ExplanationTooLong);
        }
        let mut steps = Vec::with_capacity(self.plan.len());
        for (i, step) in self.plan.into_iter().enumerate() {
            let n = i + 1;
            let text = step.step.trim().to_owned();
            let active_form = trimmed_or_none(step.active_form);
            if text.is_empty() {
                return Err(TaskPlanError::BlankStep(n));
            }
            for part in std::iter::once(&text).chain(active_form.as_ref()) {
                if part.chars().count() > MAX_STEP_CHARS {
                    return Err(TaskPlanError::StepTooLong(n));
                }
                if part.chars().any(char::is_control) {
                    return Err(TaskPlanError::ControlCharacter(n));
                }
            }
            steps.push(TaskStep {
                step: text,
                status: step.status,
                active_form,
            });
        }
        let in_progress: Vec<usize> = steps
            .iter()
            .enumerate()
            .filter(|(_, step)| step.status == StepStatus::InProgress)
            .map(|(i, _)| i + 1)
            .collect();
        if in_progress.len() > 1 {
            return Err(TaskPlanError::SeveralInProgress(in_progress));
        }
        Ok(Self {
            explanation,
            plan: steps,
        })
    }

    /// The arguments of an `update_plan` call as a valid plan.
    pub fn from_arguments(input: &str) -> Result<Self, String> {
        let plan: Self = serde_json::from_str(input).map_err(|err| err.to_string())?;
        plan.validated().map_err(|err| err.to_string())
    }

    /// One line per step, in order.
    pub fn lines(&self) -> Vec<String> {
        self.plan.iter().map(TaskStep::line).collect()
    }

    /// How many steps are completed.
    pub fn completed(&self) -> usize {
        self.plan
            .iter()
            .filter(|step| step.status == StepStatus::Completed)
            .count()
    }
}

fn trimmed_or_none(text: Option<String>) -> Option<String> {
    text.map(|text| text.trim().to_owned())
        .filter(|text| !text.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(text: &str, status: StepStatus) -> TaskStep {
        TaskStep::new(text, status)
    }

    fn plan(steps: Vec<TaskStep>) -> TaskPlan {
        TaskPlan {
            explanation: None,
            plan: steps,
        }
    }

    #[test]
    fn a_plan_with_one_step_in_progress_is_kept_trimmed() {
        let mut first = step("  Read the code ", StepStatus::Completed);
        first.active_form = Some("  ".into());
        let mut second = step("Fix the bug", StepStatus::InProgress);
        second.active_form = Some("Fixing the bug".into());
        let valid = TaskPlan {
            explanation: Some(" found it ".into()),
            plan: vec![first, second, step("Run the tests", StepStatus::Pending)],
        }
        .validated()
        .unwrap();
        assert_eq!(valid.explanation.as_deref(), Some("found it"));
        assert_eq!(valid.plan[0].step, "Read the code");
        assert_eq!(valid.plan[0].active_form, None);
        assert_eq!(
            valid.lines(),
            ["✔ Read the code", "◼ Fixing the bug", "◻ Run the tests"]
        );
        assert_eq!(valid.completed(), 1);
        // An empty plan clears it.
        assert_eq!(plan(vec![]).validated().unwrap(), TaskPlan::default());
    }

    #[test]
    fn plans_that_break_a_rule_are_refused_with_the_reason() {
        let two = plan(vec![
            step("a", StepStatus::InProgress),
            step("b", StepStatus::Pending),
            step("c", StepStatus::InProgress),
        ]);
        assert_eq!(
            two.validated(),
            Err(TaskPlanError::SeveralInProgress(vec![1, 3]))
        );
        assert_eq!(
            plan(vec![
                step("a", StepStatus::Pending),
                step(" \t", StepStatus::Pending)
            ])
            .validated(),
            Err(TaskPlanError::BlankStep(2))
        );
        let many = plan(
            (0..=MAX_TASK_STEPS)
                .map(|_| step("x", StepStatus::Pending))
                .collect(),
        );
        assert_eq!(
            many.validated(),
            Err(TaskPlanError::TooManySteps(MAX_TASK_STEPS + 1))
        );
        let long = "é".repeat(MAX_STEP_CHARS + 1);
        assert_eq!(
            plan(vec![step(&long, StepStatus::Pending)]).validated(),
            Err(TaskPlanError::StepTooLong(1))
        );
        let at_limit = "é".repeat(MAX_STEP_CHARS);
        assert!(
            plan(vec![step(&at_limit, StepStatus::Pending)])
                .validated()
                .is_ok()
        );
        let mut active = step("a", StepStatus::InProgress);
        active.active_form = Some(long);
        assert_eq!(
            plan(vec![active]).validated(),
            Err(TaskPlanError::StepTooLong(1))
        );
        for hostile in ["a\nb", "\u{1b}[2Jwiped", "a\rb", "\u{9b}31m"] {
            assert_eq!(
                plan(vec![step(hostile, StepStatus::Pending)]).validated(),
                Err(TaskPlanError::ControlCharacter(1)),
                "{hostile:?}"
            );
        }
        let explained = TaskPlan {
            explanation: Some("x".repeat(MAX_EXPLANATION_CHARS + 1)),
            plan: vec![],
        };
        assert_eq!(
            explained.validated(),
            Err(TaskPlanError::ExplanationTooLong)
        );
    }

    #[test]
    fn arguments_are_parsed_and_validated() {
        let plan = TaskPlan::from_arguments(
            r#"{"plan":[{"step":"a","status":"completed"},{"step":"b","status":"in_progress","active_form":"doing b"}]}"#,
        )
        .unwrap();
        assert_eq!(plan.plan.len(), 2);
        assert_eq!(plan.plan[1].status, StepStatus::InProgress);
        let refused = TaskPlan::from_arguments(
            r#"{"plan":[{"step":"a","status":"in_progress"},{"step":"b","status":"in_progress"}]}"#,
        )
        .unwrap_err();
        assert!(
            refused.contains("at most one step may be in_progress"),
            "{refused}"
        );
        assert!(TaskPlan::from_arguments(r#"{"plan":[{"step":"a","status":"done"}]}"#).is_err());
        assert!(TaskPlan::from_arguments("not json").is_err());
    }

    #[test]
    fn serialises_as_the_tool_arguments() {
        let plan = TaskPlan {
            explanation: None,
            plan: vec![step("a", StepStatus::InProgress)],
        };
        assert_eq!(
            serde_json::to_value(&plan).unwrap(),
            serde_json::json!({"plan": [{"step": "a", "status": "in_progress"}]})
        );
    }
}
