//! Execution plan of one turn's tool calls (SPEC §3, §7): a maximal run of
//! consecutive read-only calls is one concurrent batch; a maximal run of
//! consecutive `agent` calls is one concurrent batch of sub-agents (how many
//! of them work at once is the run's slot limit, applied when they start);
//! every other call runs alone, in order. Results are stored by original
//! index by the caller.

/// How a call takes part in the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallClass {
    /// A read-only tool: runs concurrently with its read-only neighbours.
    ReadOnly,
    /// A tool with side effects, or an unknown tool: runs alone.
    SideEffect,
    /// The `agent` tool: runs concurrently with its `agent` neighbours.
    Agent,
}

/// A contiguous group of calls `[start, end)` executed together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExecutionGroup {
    /// First call index.
    pub start: usize,
    /// One past the last call index.
    pub end: usize,
    /// True for a batch whose calls run concurrently.
    pub concurrent: bool,
}

impl ExecutionGroup {
    /// The call indices of this group.
    pub(crate) fn indices(&self) -> std::ops::Range<usize> {
        self.start..self.end
    }
}

/// Groups calls by class: runs of read-only calls and runs of `agent` calls
/// become concurrent batches, everything else runs alone.
pub(crate) fn plan_execution(classes: &[CallClass]) -> Vec<ExecutionGroup> {
    let mut groups = Vec::new();
    let mut i = 0;
    while i < classes.len() {
        let class = classes[i];
        let start = i;
        i += 1;
        if class != CallClass::SideEffect {
            while i < classes.len() && classes[i] == class {
                i += 1;
            }
        }
        groups.push(ExecutionGroup {
            start,
            end: i,
            concurrent: class != CallClass::SideEffect,
        });
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::CallClass::{Agent as A, ReadOnly as R, SideEffect as S};
    use super::*;

    fn shape(classes: &[CallClass]) -> Vec<(usize, usize, bool)> {
        plan_execution(classes)
            .into_iter()
            .map(|g| (g.start, g.end, g.concurrent))
            .collect()
    }

    #[test]
    fn empty_plan() {
        assert!(plan_execution(&[]).is_empty());
    }

    #[test]
    fn all_read_only_is_one_batch() {
        assert_eq!(shape(&[R, R, R, R, R]), vec![(0, 5, true)]);
    }

    #[test]
    fn side_effects_split_batches_and_run_alone_in_order() {
        assert_eq!(
            shape(&[R, R, S, S, R, R, S]),
            vec![
                (0, 2, true),
                (2, 3, false),
                (3, 4, false),
                (4, 6, true),
                (6, 7, false)
            ]
        );
    }

    #[test]
    fn write_bash_read_is_three_groups() {
        assert_eq!(
            shape(&[S, S, R]),
            vec![(0, 1, false), (1, 2, false), (2, 3, true)]
        );
    }

    #[test]
    fn consecutive_agent_calls_are_one_batch_apart_from_reads() {
        assert_eq!(
            shape(&[A, A, A, R, R, A, S, A]),
            vec![
                (0, 3, true),
                (3, 5, true),
                (5, 6, true),
                (6, 7, false),
                (7, 8, true)
            ]
        );
    }
}
