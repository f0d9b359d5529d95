//! Rewinding a session's conversation to the end of one of its runs.
//!
//! A session's runs are numbered from 1 in the order they started; each run
//! record says where it began and ended in the history ([`RunBounds`]) and
//! the store's order when it ended. Rewinding to run N:
//!
//! 1. copies the whole session (messages and their head, compaction markers,
//!    ledger, pending results, rules, memory, task plan) to a new branch
//!    session, listed with [`SessionMeta::branch_of`](crate::SessionMeta)
//!    naming the session, and moves the runs after N to it (the history
//!    they made is the branch's), with the child sessions they created (a
//!    fork's shared beginning is then read from the branch);
//! 2. removes from the session every compaction marker, ledger entry and
//!    pending result stored after run N ended (a higher order) or reaching
//!    past the cut, and its task plan when that was set after run N;
//! 3. cuts the history back to run N's end and leaves the note for the next
//!    prompt, in one batch into the `messages` tree.
//!
//! Each step is one batch into one tree (sled 0.34 can hang in transactions
//! over trees under sustained writes), in this order: a crash before the
//! branch's `sessions` record leaves records nobody lists; a crash after it
//! leaves the session whole or with only later decisions dropped (its
//! messages cut last), and rewinding again finishes the job. The messages
//! up to the cut are never rewritten: they stay byte for byte what run N
//! sent.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::layout::{self, check_id};
use super::records::{
    Branch, CompactionMarker, LedgerRecord, PendingRecord, PendingRewind, RunRecord, SessionRecord,
    StoredTaskPlan,
};
use super::sessions::HeadRewind;
use super::{Store, StoreError, decode_one, session_what};

/// Why a session's conversation cannot be rewound as asked. Nothing was
/// changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewindRefusal {
    /// The session has no run.
    #[error("session {session} has no run to rewind to")]
    NoRuns {
        /// The session.
        session: String,
    },
    /// There is no run with that number.
    #[error(
        "session {session} has runs 1 to {runs}: there is no run {to} (list them with `troupe rewind {session}`)"
    )]
    OutOfRange {
        /// The session.
        session: String,
        /// The number asked for.
        to: u64,
        /// How many runs the session has.
        runs: u64,
    },
    /// The run was recorded before run boundaries were kept, or has not
    /// ended.
    #[error(
        "run {to} ({run_id}) has no recorded end in the history (it ran before run boundaries were kept): the conversation cannot be rewound to it"
    )]
    NoBoundary {
        /// The number asked for.
        to: u64,
        /// Its run id.
        run_id: String,
    },
    /// A run of the session (or of one of its child sessions) is in
    /// progress.
    #[error(
        "run {run_id} is in progress in session {session}; wait for it to end or cancel it (`troupe cancel {run_id}`), then rewind"
    )]
    RunInProgress {
        /// The session the run belongs to.
        session: String,
        /// The run in progress.
        run_id: String,
    },
    /// Run N is where the conversation ends: there is nothing to cut.
    #[error("nothing to rewind: the conversation of session {session} ends with run {to}")]
    NothingToCut {
        /// The session.
        session: String,
        /// The number asked for.
        to: u64,
    },
}

/// What rewinding session `session` to run `to_run` would change (read by
/// [`Store::plan_rewind`], shown before it is done).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewindPlan {
    /// The session.
    pub session: String,
    /// The run rewound to (1-based).
    pub to_run: u64,
    /// Its id.
    pub run_id: String,
    /// The history's length at that run's end: messages `0..cut_len` stay.
    pub cut_len: u64,
    /// The store's order when that run ended.
    pub end_order: u64,
    /// The history's length now.
    pub message_count: u64,
    /// The runs after it, undone (oldest first).
    pub undone_runs: Vec<RunRecord>,
}

impl RewindPlan {
    /// How many messages the cut removes.
    pub fn removed_messages(&self) -> u64 {
        self.message_count.saturating_sub(self.cut_len)
    }
}

/// What a caller asks of [`Store::rewind_conversation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewindRequest {
    /// The session to rewind (it keeps its id).
    pub session: String,
    /// The run (1-based, in start order) whose end the conversation goes
    /// back to.
    pub to_run: u64,
    /// The id of the branch session that keeps the history from before.
    pub branch_id: String,
    /// The short note the next prompt carries for the model.
    pub note: String,
    /// Whether the files were restored too.
    pub files_restored: bool,
}

/// What a rewind did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationRewind {
    /// The rewound session.
    pub session: String,
    /// The run (1-based) rewound to.
    pub to_run: u64,
    /// Its id.
    pub run_id: String,
    /// Messages kept.
    pub cut_len: u64,
    /// Messages removed from the session (kept in the branch).
    pub removed_messages: u64,
    /// The runs undone (moved to the branch), oldest first.
    pub undone_runs: Vec<String>,
    /// The branch session holding the history from before.
    pub branch: String,
    /// Compaction markers removed.
    pub removed_markers: u64,
    /// Layer-1 ledger entries removed.
    pub removed_ledger_entries: u64,
    /// Pending tool results removed.
    pub removed_pending_results: u64,
    /// Whether the task plan was removed (it was set after the cut).
    pub removed_task_plan: bool,
    /// Child sessions of the undone runs moved to the branch.
    pub moved_children: u64,
    /// When it happened.
    pub at: DateTime<Utc>,
}

/// The runs of a session in start order (run 1 first).
pub fn in_start_order(mut runs: Vec<RunRecord>) -> Vec<RunRecord> {
    runs.sort_by(|a, b| {
        a.started
            .cmp(&b.started)
            .then_with(|| a.run_id.cmp(&b.run_id))
    });
    runs
}

/// The pure rule of a rewind: checks `to` against `runs` (the session's, in
/// start order), `family_running` (a run in progress of the session or of
/// its child sessions, with its session) and the history's length now.
pub fn plan_cut(
    session: &str,
    runs: &[RunRecord],
    family_running: Option<(&str, &str)>,
    to: u64,
    message_count: u64,
) -> Result<RewindPlan, RewindRefusal> {
    let running = family_running.or_else(|| {
        runs.iter()
            .find(|run| run.status.is_running())
            .map(|run| (run.session_id.as_str(), run.run_id.as_str()))
    });
    if let Some((owner, run_id)) = running {
        return Err(RewindRefusal::RunInProgress {
            session: owner.to_owned(),
            run_id: run_id.to_owned(),
        });
    }
    if runs.is_empty() {
        return Err(RewindRefusal::NoRuns {
            session: session.to_owned(),
        });
    }
    let count = runs.len() as u64;
    let Some(index) = to
        .checked_sub(1)
        .and_then(|i| usize::try_from(i).ok())
        .filter(|i| *i < runs.len())
    else {
        return Err(RewindRefusal::OutOfRange {
            session: session.to_owned(),
            to,
            runs: count,
        });
    };
    let run = &runs[index];
    let bounds = run.history.and_then(|b| Some((b.end?, b.end_order?)));
    let Some((end, end_order)) = bounds else {
        return Err(RewindRefusal::NoBoundary {
            to,
            run_id: run.run_id.clone(),
        });
    };
    let undone_runs = runs[index + 1..].to_vec();
    let cut_len = end.min(message_count);
    if undone_runs.is_empty() && cut_len >= message_count {
        return Err(RewindRefusal::NothingToCut {
            session: session.to_owned(),
            to,
        });
    }
    Ok(RewindPlan {
        session: session.to_owned(),
        to_run: to,
        run_id: run.run_id.clone(),
        cut_len,
        end_order,
        message_count,
        undone_runs,
    })
}

/// Whether a record stored with `order` (`None`: from before orders were
/// kept) was made after the cut's run ended: unknown counts as after.
fn made_after(order: Option<u64>, end_order: u64) -> bool {
    order.is_none_or(|order| order > end_order)
}

/// Whether a compaction marker stored with sequence `seq` goes in a cut at
/// `cut_len` whose run ended at `end_order`: made after it, or reaching past
/// the cut (an unreadable one goes too).
fn marker_goes(seq: u64, marker: Option<&CompactionMarker>, cut_len: u64, end_order: u64) -> bool {
    made_after(Some(seq), end_order) || marker.is_none_or(|marker| marker.first_kept > cut_len)
}

impl Store {
    /// The session's own runs in start order: run 1 first (child sessions'
    /// runs are not among them).
    pub fn session_runs(&self, session: &str) -> Result<Vec<RunRecord>, StoreError> {
        self.require_session(session)?;
        Ok(in_start_order(self.list_runs(Some(session))?))
    }

    /// What rewinding `session` to the end of its run `to` would change, or
    /// why it cannot be done. Reads only.
    pub fn plan_rewind(&self, session: &str, to: u64) -> Result<RewindPlan, StoreError> {
        let Some(record) = self.session_record(session)? else {
            return Err(StoreError::NotFound {
                what: session_what(session),
            });
        };
        let runs = self.session_runs(session)?;
        let mut family_running = None;
        for child in self.descendant_sessions(session)? {
            if let Some(run) = self
                .list_runs(Some(&child.id))?
                .into_iter()
                .find(|run| run.status.is_running())
            {
                family_running = Some((child.id, run.run_id));
                break;
            }
        }
        let running = family_running
            .as_ref()
            .map(|(owner, run)| (owner.as_str(), run.as_str()));
        Ok(plan_cut(
            session,
            &runs,
            running,
            to,
            record.meta.message_count,
        )?)
    }

    /// Rewinds the session's conversation to the end of its run
    /// `request.to_run` (see the module documentation): the history from
    /// before is kept whole as branch `request.branch_id`, the runs after
    /// are moved to it, and the session keeps its id, its first `cut_len`
    /// messages unchanged and the decisions made before the cut. Refused
    /// ([`StoreError::Rewind`], nothing changed) while a run of the session
    /// or of its child sessions is recorded running, and for a run that is
    /// not there or cannot be rewound to. Durable after [`Store::flush`].
    pub fn rewind_conversation(
        &self,
        request: &RewindRequest,
    ) -> Result<ConversationRewind, StoreError> {
        let session = request.session.as_str();
        check_id("session", &request.branch_id)?;
        let plan = self.plan_rewind(session, request.to_run)?;
        let Some(record) = self.session_record(session)? else {
            return Err(StoreError::NotFound {
                what: session_what(session),
            });
        };
        let at = self.now();
        self.copy_to_branch(&record, &request.branch_id, plan.cut_len, at)?;
        for run in &plan.undone_runs {
            let mut moved = run.clone();
            moved.session_id = request.branch_id.clone();
            self.put_run(&moved)?;
        }
        let moved_children = self.move_children_to_branch(session, &request.branch_id, &plan)?;
        let removed_markers = self.drop_markers_after(session, plan.cut_len, plan.end_order)?;
        let removed_ledger_entries = self.drop_ordered_after::<LedgerRecord>(
            &self.inner.ledger,
            layout::LEDGER_TREE,
            session,
            plan.end_order,
            |record| record.order,
        )?;
        let removed_pending_results = self.drop_ordered_after::<PendingRecord>(
            &self.inner.pending,
            layout::PENDING_TREE,
            session,
            plan.end_order,
            |record| record.order,
        )?;
        let removed_task_plan = self.drop_task_plan_after(session, plan.end_order)?;
        let pending = PendingRewind {
            note: request.note.clone(),
            to_run: plan.to_run,
            branch: request.branch_id.clone(),
            removed_messages: plan.removed_messages(),
            files_restored: request.files_restored,
        };
        self.rewrite_messages(
            session,
            [],
            Some(plan.cut_len),
            HeadRewind::Set(pending),
            "rewind a history",
        )?;
        tracing::info!(
            session,
            to_run = plan.to_run,
            cut_len = plan.cut_len,
            branch = %request.branch_id,
            "conversation rewound"
        );
        Ok(ConversationRewind {
            session: session.to_owned(),
            to_run: plan.to_run,
            run_id: plan.run_id.clone(),
            cut_len: plan.cut_len,
            removed_messages: plan.removed_messages(),
            undone_runs: plan.undone_runs.iter().map(|r| r.run_id.clone()).collect(),
            branch: request.branch_id.clone(),
            removed_markers,
            removed_ledger_entries,
            removed_pending_results,
            removed_task_plan,
            moved_children,
            at,
        })
    }

    /// The child sessions the undone runs created (sub-agents, forks) go
    /// with them to the branch: their parent becomes the branch, and a fork
    /// that begins with messages past the cut reads them from the branch,
    /// which keeps them at the same indexes. Returns how many moved.
    fn move_children_to_branch(
        &self,
        session: &str,
        branch_id: &str,
        plan: &RewindPlan,
    ) -> Result<u64, StoreError> {
        let undone: Vec<&str> = plan.undone_runs.iter().map(|r| r.run_id.as_str()).collect();
        let mut moved = 0u64;
        for child in self.child_sessions(session)? {
            let by_undone_run = child
                .run_id
                .as_deref()
                .is_some_and(|run| undone.contains(&run));
            let base_past_cut = child
                .fork_of
                .as_ref()
                .is_some_and(|base| base.session == session && base.len > plan.cut_len);
            if !by_undone_run && !base_past_cut {
                continue;
            }
            let Some(raw) = self
                .inner
                .sessions
                .get(child.id.as_bytes())
                .map_err(self.sled_err("read a session"))?
            else {
                continue;
            };
            let mut record: SessionRecord = decode_one(session_what(&child.id), &raw)?;
            record.meta.parent = Some(branch_id.to_owned());
            if let Some(base) = record.meta.fork_of.as_mut()
                && base.session == session
            {
                base.session = branch_id.to_owned();
            }
            self.inner
                .sessions
                .insert(child.id.as_bytes(), layout::encode(&record)?)
                .map_err(self.sled_err("move a child session"))?;
            moved += 1;
        }
        Ok(moved)
    }

    /// Copies every record of `record`'s session to a new session
    /// `branch_id` (one batch per tree), then creates the branch's
    /// `sessions` record, which makes it visible.
    fn copy_to_branch(
        &self,
        record: &SessionRecord,
        branch_id: &str,
        cut_len: u64,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let session = record.meta.id.as_str();
        let exists = self
            .inner
            .sessions
            .contains_key(branch_id.as_bytes())
            .map_err(self.sled_err("read a session"))?;
        if exists || branch_id == session {
            return Err(StoreError::AlreadyExists {
                what: session_what(branch_id),
            });
        }
        let from = layout::owner_prefix(session);
        let to = layout::owner_prefix(branch_id);
        let inner = &self.inner;
        for tree in [
            &inner.messages,
            &inner.markers,
            &inner.ledger,
            &inner.pending,
        ] {
            let mut batch = sled::Batch::default();
            for item in tree.scan_prefix(&from) {
                let (key, value) = item.map_err(self.sled_err("copy a session"))?;
                let mut copied = to.clone();
                copied.extend_from_slice(&key[from.len()..]);
                batch.insert(copied, value);
            }
            tree.apply_batch(batch)
                .map_err(self.sled_err("copy a session"))?;
        }
        for tree in [&inner.rules, &inner.memory, &inner.task_plans] {
            if let Some(value) = tree
                .get(session.as_bytes())
                .map_err(self.sled_err("copy a session"))?
            {
                tree.insert(branch_id.as_bytes(), value)
                    .map_err(self.sled_err("copy a session"))?;
            }
        }
        let mut branch = record.clone();
        branch.meta.id = branch_id.to_owned();
        branch.meta.created = at;
        branch.meta.branch_of = Some(Branch {
            session: session.to_owned(),
            cut_len,
            at,
        });
        branch.rewind = None;
        let swapped = inner
            .sessions
            .compare_and_swap(
                branch_id.as_bytes(),
                None as Option<&[u8]>,
                Some(layout::encode(&branch)?),
            )
            .map_err(self.sled_err("create a branch"))?;
        if swapped.is_err() {
            return Err(StoreError::AlreadyExists {
                what: session_what(branch_id),
            });
        }
        Ok(())
    }

    /// Removes the session's compaction markers that [`marker_goes`] says
    /// go, in one batch. Returns how many.
    fn drop_markers_after(
        &self,
        session: &str,
        cut_len: u64,
        end_order: u64,
    ) -> Result<u64, StoreError> {
        let mut batch = sled::Batch::default();
        let mut removed = 0u64;
        for item in self
            .inner
            .markers
            .scan_prefix(layout::owner_prefix(session))
        {
            let (key, value) = item.map_err(self.sled_err("read compaction markers"))?;
            let seq = layout::parse_numbered_key(session, &key);
            let marker = layout::decode::<CompactionMarker>(&value).ok();
            if seq.is_none_or(|seq| marker_goes(seq, marker.as_ref(), cut_len, end_order)) {
                batch.remove(key);
                removed += 1;
            }
        }
        if removed > 0 {
            self.inner
                .markers
                .apply_batch(batch)
                .map_err(self.sled_err("remove compaction markers"))?;
        }
        Ok(removed)
    }

    /// Removes the session's records of `tree` whose order is after
    /// `end_order` (an unreadable one too), in one batch. Returns how many.
    fn drop_ordered_after<T: serde::de::DeserializeOwned>(
        &self,
        tree: &sled::Tree,
        tree_name: &'static str,
        session: &str,
        end_order: u64,
        order: impl Fn(&T) -> u64,
    ) -> Result<u64, StoreError> {
        let mut batch = sled::Batch::default();
        let mut removed = 0u64;
        for item in tree.scan_prefix(layout::owner_prefix(session)) {
            let (key, value) = item.map_err(self.sled_err("read records"))?;
            let stored = layout::decode::<T>(&value)
                .ok()
                .map(|record| order(&record));
            if made_after(stored, end_order) {
                tracing::debug!(tree = tree_name, session, "record after the cut removed");
                batch.remove(key);
                removed += 1;
            }
        }
        if removed > 0 {
            tree.apply_batch(batch)
                .map_err(self.sled_err("remove records after a cut"))?;
        }
        Ok(removed)
    }

    /// Removes the session's task plan when it was set after `end_order`
    /// (or cannot be told: unstamped or unreadable). Returns whether it did.
    fn drop_task_plan_after(&self, session: &str, end_order: u64) -> Result<bool, StoreError> {
        let Some(raw) = self
            .inner
            .task_plans
            .get(session.as_bytes())
            .map_err(self.sled_err("read the task plan"))?
        else {
            return Ok(false);
        };
        let order = layout::decode::<StoredTaskPlan>(&raw)
            .ok()
            .and_then(|plan| plan.order());
        if !made_after(order, end_order) {
            return Ok(false);
        }
        self.inner
            .task_plans
            .remove(session.as_bytes())
            .map_err(self.sled_err("remove the task plan"))?;
        Ok(true)
    }

    /// Where a run begins: the session's history length now and no end
    /// yet (for a run's record as its prompt is added).
    pub fn run_start_bounds(&self, session: &str) -> Result<super::RunBounds, StoreError> {
        let count = self.session(session)?.map_or(0, |meta| meta.message_count);
        Ok(super::RunBounds {
            start: count,
            end: None,
            end_order: None,
        })
    }

    /// `bounds` closed now: the session's history length and the store's
    /// order (for a run's record as it ends).
    pub fn run_end_bounds(
        &self,
        session: &str,
        bounds: Option<super::RunBounds>,
    ) -> Result<super::RunBounds, StoreError> {
        let count = self.session(session)?.map_or(0, |meta| meta.message_count);
        Ok(super::RunBounds {
            start: bounds.map_or(count, |b| b.start),
            end: Some(count),
            end_order: Some(self.next_id()?),
        })
    }
}
