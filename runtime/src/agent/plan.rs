//! Execution plan of one turn's tool calls (SPEC §3): a maximal run of
//! consecutive read-only calls is one concurrent batch; every other call runs
//! alone, in order. Results are stored by original index by the caller.

/// A contiguous group of calls `[start, end)` executed together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecutionGroup {
    /// First call index.
    pub start: usize,
    /// One past the last call index.
    pub end: usize,
    /// True for a batch of read-only calls that run concurrently.
    pub concurrent: bool,
}

impl ExecutionGroup {
    /// The call indices of this group.
    pub fn indices(&self) -> std::ops::Range<usize> {
        self.start..self.end
    }
}

/// Groups calls given whether each is read-only (unknown tools count as not
/// read-only: they run alone and fail at once).
pub fn plan_execution(read_only: &[bool]) -> Vec<ExecutionGroup> {
    let mut groups = Vec::new();
    let mut i = 0;
    while i < read_only.len() {
        if read_only[i] {
            let start = i;
            while i < read_only.len() && read_only[i] {
                i += 1;
            }
            groups.push(ExecutionGroup {
                start,
                end: i,
                concurrent: true,
            });
        } else {
            groups.push(ExecutionGroup {
                start: i,
                end: i + 1,
                concurrent: false,
            });
            i += 1;
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(read_only: &[bool]) -> Vec<(usize, usize, bool)> {
        plan_execution(read_only)
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
        assert_eq!(shape(&[true, true, true, true, true]), vec![(0, 5, true)]);
    }

    #[test]
    fn side_effects_split_batches_and_run_alone_in_order() {
        // read, read, write, bash, read, read, write
        assert_eq!(
            shape(&[true, true, false, false, true, true, false]),
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
            shape(&[false, false, true]),
            vec![(0, 1, false), (1, 2, false), (2, 3, true)]
        );
    }
}
