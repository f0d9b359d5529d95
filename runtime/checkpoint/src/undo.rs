//! Undo and redo decided from a session's checkpoint records alone: which
//! turns can still be undone, which undos can be redone, which checkpoint
//! an undo restores and what the files should hold now. Pure: the caller
//! reads the records ([`crate::CheckpointStore::checkpoints`]) and the work
//! tree's tree id, then restores what the plan names.
//!
//! The records are the history: a turn's checkpoint (taken before the turn
//! changed anything) can be undone; an undo, a redo or a rewind is recorded
//! by the snapshot its restore takes first ([`CheckpointKind::BeforeUndo`],
//! [`CheckpointKind::BeforeRedo`], [`CheckpointKind::BeforeRewind`]), so
//! each further `undo` goes back one more turn, `redo` brings back what the
//! last undo replaced, and a new turn after an undo ends what can be redone.

use crate::record::{Checkpoint, CheckpointKind};

/// What a session's records say about undo and redo.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UndoHistory {
    /// Positions (in the records given) of the turn checkpoints that can
    /// still be undone, oldest first.
    pub undoable: Vec<usize>,
    /// What can be redone, the latest undo last: the position of the
    /// snapshot the undo took before restoring, and the turns it undid.
    pub redoable: Vec<(usize, Vec<usize>)>,
    /// The tree the work tree holds if nothing outside Troupe changed it
    /// since the last record; `None` when no record says (the last one was
    /// taken before a turn whose changes were never recorded).
    pub expected_tree: Option<String>,
}

/// Reads the undo history from a session's checkpoints, in order. Pure.
pub fn undo_history(checkpoints: &[Checkpoint]) -> UndoHistory {
    let mut history = UndoHistory::default();
    for (at, checkpoint) in checkpoints.iter().enumerate() {
        match checkpoint.record.meta.kind {
            CheckpointKind::Turn => {
                // New work ends what could be redone.
                history.redoable.clear();
                history.undoable.push(at);
                history.expected_tree = None;
            }
            CheckpointKind::RunEnd => {
                history.expected_tree = Some(checkpoint.tree().to_owned());
            }
            CheckpointKind::BeforeUndo { target } | CheckpointKind::BeforeRewind { target, .. } => {
                let keep = history
                    .undoable
                    .iter()
                    .position(|&turn| checkpoints[turn].number >= target)
                    .unwrap_or(history.undoable.len());
                let undone = history.undoable.split_off(keep);
                history.redoable.push((at, undone));
                history.expected_tree = checkpoints
                    .iter()
                    .find(|other| other.number == target)
                    .map(|other| other.tree().to_owned());
            }
            CheckpointKind::BeforeAgentUndo { target } => {
                let undone: Vec<usize> = history
                    .undoable
                    .iter()
                    .copied()
                    .filter(|&turn| checkpoints[turn].number == target)
                    .collect();
                history.undoable.retain(|turn| !undone.contains(turn));
                history.redoable.push((at, undone));
                // Only some files were restored: no record holds the
                // result.
                history.expected_tree = None;
            }
            CheckpointKind::BeforeRedo => {
                if let Some((before, undone)) = history.redoable.pop() {
                    history.undoable.extend(undone);
                    history.undoable.sort_unstable();
                    history.expected_tree = Some(checkpoints[before].tree().to_owned());
                }
            }
        }
    }
    history
}

/// What an undo restores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndoPlan {
    /// Position of the checkpoint to restore (a turn's).
    pub target: usize,
    /// Positions of the turns undone, oldest first (the target's turn and
    /// any later turn that changed nothing).
    pub undone: Vec<usize>,
}

/// Why there is nothing to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UndoRefusal {
    /// No turn that changed files is left to undo.
    #[error("no turn that changed files is left to undo")]
    NothingToUndo,
    /// No undo is left to redo.
    #[error("nothing to redo: no undo since the last turn that changed files")]
    NothingToRedo,
}

/// The undo to make now: the latest turn not yet undone whose files differ
/// from the state after it (the next record's tree, or `current_tree` for
/// the last record) and from the files now (restoring it must change
/// something). Pure.
pub fn plan_undo(
    checkpoints: &[Checkpoint],
    history: &UndoHistory,
    current_tree: &str,
) -> Result<UndoPlan, UndoRefusal> {
    for (depth, &turn) in history.undoable.iter().enumerate().rev() {
        let after = checkpoints
            .get(turn + 1)
            .map_or(current_tree, |next| next.tree());
        let tree = checkpoints[turn].tree();
        if tree != after && tree != current_tree {
            return Ok(UndoPlan {
                target: turn,
                undone: history.undoable[depth..].to_vec(),
            });
        }
    }
    Err(UndoRefusal::NothingToUndo)
}

/// What a rewind to the end of a run restores: the position of the
/// checkpoint holding the files as run `run` left them — its `run end`
/// record, else (it changed nothing) the first turn's record of a run in
/// `later` (the files before anything after it changed them) — and the
/// turns it undoes (those not undone yet from that checkpoint on); `None`
/// when neither record exists: no later turn changed files. Pure.
pub fn plan_rewind_files(
    checkpoints: &[Checkpoint],
    history: &UndoHistory,
    run: &str,
    later: &[&str],
) -> Option<UndoPlan> {
    fn meta(checkpoint: &Checkpoint) -> &crate::record::SnapshotMeta {
        &checkpoint.record.meta
    }
    let target = checkpoints
        .iter()
        .position(|checkpoint| {
            meta(checkpoint).kind == CheckpointKind::RunEnd && meta(checkpoint).run == run
        })
        .or_else(|| {
            checkpoints.iter().position(|checkpoint| {
                meta(checkpoint).kind == CheckpointKind::Turn
                    && later.contains(&meta(checkpoint).run.as_str())
            })
        })?;
    let number = checkpoints[target].number;
    let undone = history
        .undoable
        .iter()
        .copied()
        .filter(|&turn| checkpoints[turn].number >= number)
        .collect();
    Some(UndoPlan { target, undone })
}

/// What undoing one agent's turn alone restores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentUndoPlan {
    /// Position of the turn's checkpoint.
    pub target: usize,
    /// The files that turn changed (restored to the checkpoint's).
    pub files: Vec<std::path::PathBuf>,
}

/// Why one agent's turn cannot be undone alone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentUndoRefusal {
    /// The agent has no turn left that changed files.
    #[error("agent {0} has no turn left that changed files")]
    NothingToUndo(String),
    /// Later turns changed some of the same files: each file with the
    /// position of the later turn that changed it.
    #[error("later turns changed the same files")]
    Conflicts(Vec<(std::path::PathBuf, usize)>),
}

/// The undo of agent `agent`'s latest turn that changed files, alone:
/// `changed(position)` says which files the turn at that position of the
/// records changed (from its checkpoint to the state after it). Refused
/// when a later turn not undone changed any of the same files. Pure.
pub fn plan_agent_undo(
    checkpoints: &[Checkpoint],
    history: &UndoHistory,
    agent: &str,
    changed: &dyn Fn(usize) -> Vec<std::path::PathBuf>,
) -> Result<AgentUndoPlan, AgentUndoRefusal> {
    let (target, files) = history
        .undoable
        .iter()
        .rev()
        .filter(|&&turn| checkpoints[turn].record.meta.agent_path == agent)
        .map(|&turn| (turn, changed(turn)))
        .find(|(_, files)| !files.is_empty())
        .ok_or_else(|| AgentUndoRefusal::NothingToUndo(agent.to_owned()))?;
    let mut conflicts = Vec::new();
    for &later in history.undoable.iter().filter(|&&turn| turn > target) {
        for file in changed(later) {
            if files.contains(&file) {
                conflicts.push((file, later));
            }
        }
    }
    if conflicts.is_empty() {
        Ok(AgentUndoPlan { target, files })
    } else {
        Err(AgentUndoRefusal::Conflicts(conflicts))
    }
}

/// The redo to make now: the position of the snapshot the latest undo took
/// before restoring (restoring it brings the undone turns' files back).
/// Pure.
pub fn plan_redo(history: &UndoHistory) -> Result<usize, UndoRefusal> {
    history
        .redoable
        .last()
        .map(|(before, _)| *before)
        .ok_or(UndoRefusal::NothingToRedo)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{CheckpointRecord, SnapshotMeta};

    fn checkpoint(number: u64, tree: &str, kind: CheckpointKind) -> Checkpoint {
        Checkpoint {
            commit: format!("c{number}"),
            number,
            record: CheckpointRecord {
                meta: SnapshotMeta {
                    session: "s".into(),
                    kind,
                    ..Default::default()
                },
                time: String::new(),
                tree: tree.into(),
                parent: None,
                skipped: Vec::new(),
                unchanged: false,
            },
        }
    }

    use CheckpointKind::{BeforeRedo, BeforeUndo, RunEnd, Turn};

    #[test]
    fn an_undo_restores_the_last_turn_that_changed_files_and_the_next_goes_one_further() {
        // Turn 1 wrote a (tree A), turn 2 changed nothing, turn 3 wrote b.
        let mut records = vec![
            checkpoint(1, "empty", Turn),
            checkpoint(2, "A", Turn),
            checkpoint(3, "A", Turn),
            checkpoint(4, "AB", RunEnd),
        ];
        let history = undo_history(&records);
        assert_eq!(history.expected_tree.as_deref(), Some("AB"));
        let plan = plan_undo(&records, &history, "AB").unwrap();
        assert_eq!((plan.target, plan.undone.clone()), (2, vec![2]));
        // The undo restored checkpoint 3: its record comes next.
        records.push(checkpoint(5, "AB", BeforeUndo { target: 3 }));
        let history = undo_history(&records);
        assert_eq!(history.undoable, vec![0, 1]);
        assert_eq!(history.expected_tree.as_deref(), Some("A"));
        // Turn 2 changed nothing: the next undo goes past it to turn 1.
        let plan = plan_undo(&records, &history, "A").unwrap();
        assert_eq!((plan.target, plan.undone), (0, vec![0, 1]));
        records.push(checkpoint(6, "A", BeforeUndo { target: 1 }));
        let history = undo_history(&records);
        assert_eq!(
            plan_undo(&records, &history, "empty"),
            Err(UndoRefusal::NothingToUndo)
        );
        assert_eq!(history.expected_tree.as_deref(), Some("empty"));
        // Redo brings back what the last undo replaced, then the one before.
        assert_eq!(plan_redo(&history), Ok(5));
        records.push(checkpoint(7, "empty", BeforeRedo));
        let history = undo_history(&records);
        assert_eq!(history.expected_tree.as_deref(), Some("A"));
        assert_eq!(history.undoable, vec![0, 1]);
        assert_eq!(plan_redo(&history), Ok(4));
    }

    #[test]
    fn a_new_turn_after_an_undo_ends_what_can_be_redone() {
        let records = vec![
            checkpoint(1, "empty", Turn),
            checkpoint(2, "A", BeforeUndo { target: 1 }),
            checkpoint(3, "empty", Turn),
        ];
        let history = undo_history(&records);
        assert_eq!(plan_redo(&history), Err(UndoRefusal::NothingToRedo));
        assert_eq!(history.undoable, vec![2]);
        // The last turn's changes were never recorded: nothing is expected.
        assert_eq!(history.expected_tree, None);
        let plan = plan_undo(&records, &history, "C").unwrap();
        assert_eq!(plan.target, 2);
        assert_eq!(
            plan_undo(&records, &history, "empty"),
            Err(UndoRefusal::NothingToUndo)
        );
    }

    #[test]
    fn a_rewind_undoes_the_turns_after_its_target_and_can_be_redone() {
        let records = vec![
            checkpoint(1, "empty", Turn),
            checkpoint(2, "A", RunEnd),
            checkpoint(3, "A", Turn),
            checkpoint(4, "AB", RunEnd),
            checkpoint(
                5,
                "AB",
                CheckpointKind::BeforeRewind {
                    to_run: 1,
                    target: 2,
                },
            ),
        ];
        let history = undo_history(&records);
        assert_eq!(history.undoable, vec![0]);
        assert_eq!(history.expected_tree.as_deref(), Some("A"));
        assert_eq!(plan_redo(&history), Ok(4));
    }

    #[test]
    fn a_turn_whose_files_are_the_files_now_is_passed_over() {
        // The last turn's files changed after it (a run's end recorded
        // them), then went back by other means: undoing it would change
        // nothing, so the undo goes one further.
        let records = vec![
            checkpoint(1, "empty", Turn),
            checkpoint(2, "A", Turn),
            checkpoint(3, "A+tmp", RunEnd),
        ];
        let history = undo_history(&records);
        let plan = plan_undo(&records, &history, "A").unwrap();
        assert_eq!((plan.target, plan.undone), (0, vec![0, 1]));
    }

    fn turn_of(number: u64, tree: &str, agent: &str) -> Checkpoint {
        let mut turn = checkpoint(number, tree, Turn);
        turn.record.meta.agent_path = agent.into();
        turn
    }

    #[test]
    fn one_agents_turn_is_undone_alone_unless_a_later_turn_touched_its_files() {
        use std::path::PathBuf;
        // main wrote m.txt, the reviewer then wrote r.txt, main then
        // changed nothing, then main edited shared.txt after the tester
        // had.
        let records = vec![
            turn_of(1, "t0", "main"),
            turn_of(2, "t1", "main/reviewer"),
            turn_of(3, "t2", "main"),
            turn_of(4, "t2", "main/tester"),
            turn_of(5, "t3", "main"),
            checkpoint(6, "t4", RunEnd),
        ];
        let changed = |at: usize| -> Vec<PathBuf> {
            match at {
                0 => vec!["m.txt".into()],
                1 => vec!["r.txt".into()],
                3 => vec!["shared.txt".into()],
                4 => vec!["shared.txt".into(), "m2.txt".into()],
                _ => Vec::new(),
            }
        };
        let history = undo_history(&records);
        let plan = plan_agent_undo(&records, &history, "main/reviewer", &changed).unwrap();
        assert_eq!((plan.target, plan.files), (1, vec![PathBuf::from("r.txt")]));
        // The tester's edit of shared.txt was changed again by main later.
        assert_eq!(
            plan_agent_undo(&records, &history, "main/tester", &changed),
            Err(AgentUndoRefusal::Conflicts(vec![("shared.txt".into(), 4)]))
        );
        assert_eq!(
            plan_agent_undo(&records, &history, "main/other", &changed),
            Err(AgentUndoRefusal::NothingToUndo("main/other".into()))
        );
        // Once undone, the reviewer's turn is out of the history; a redo
        // puts it back in order.
        let mut records = records;
        records.push(checkpoint(
            7,
            "t4",
            CheckpointKind::BeforeAgentUndo { target: 2 },
        ));
        let history = undo_history(&records);
        assert_eq!(history.undoable, vec![0, 2, 3, 4]);
        assert_eq!(history.expected_tree, None);
        records.push(checkpoint(8, "t5", BeforeRedo));
        assert_eq!(undo_history(&records).undoable, vec![0, 1, 2, 3, 4]);
    }

    fn of_run(mut checkpoint: Checkpoint, run: &str) -> Checkpoint {
        checkpoint.record.meta.run = run.into();
        checkpoint
    }

    #[test]
    fn a_rewind_restores_the_runs_end_or_else_the_files_before_the_next_run_changed_them() {
        let records = vec![
            of_run(checkpoint(1, "empty", Turn), "r1"),
            of_run(checkpoint(2, "A", RunEnd), "r1"),
            // r2 changed nothing; r3 did.
            of_run(checkpoint(3, "A", Turn), "r3"),
            of_run(checkpoint(4, "AB", RunEnd), "r3"),
        ];
        let history = undo_history(&records);
        let plan = plan_rewind_files(&records, &history, "r1", &["r2", "r3"]).unwrap();
        assert_eq!((plan.target, plan.undone), (1, vec![2]));
        let plan = plan_rewind_files(&records, &history, "r2", &["r3"]).unwrap();
        assert_eq!((plan.target, plan.undone), (2, vec![2]));
        // After the last run that changed files, nothing to restore.
        assert_eq!(plan_rewind_files(&records, &history, "r4", &[]), None);
    }

    #[test]
    fn no_records_leave_nothing_to_undo_or_redo() {
        let history = undo_history(&[]);
        assert_eq!(
            plan_undo(&[], &history, "x"),
            Err(UndoRefusal::NothingToUndo)
        );
        assert_eq!(plan_redo(&history), Err(UndoRefusal::NothingToRedo));
    }
}
