//! Opening stored sessions for another run, saving a live agent's
//! transcript, and recovering runs a dead process left behind (SPEC §9), with
//! the child sessions their sub-agents and forks wrote. Joins the store with
//! the pure repairs of `troupe_agent::resume`: a repair is written back once,
//! so the next load is clean.

use chrono::{DateTime, Utc};

use troupe_agent::resume::{RepairReport, repair_history};
use troupe_agent::session::{OpenedSession, Transcript};
use troupe_protocol::events::{EventKind, RunEvent, RunStatus};
use troupe_protocol::model::Usage;
use troupe_store::{RunRecord, RunState, Store, StoreError};

/// Loads session `id`, repairs what a killed process left (unanswered calls,
/// orphan results, unreadable records), and writes the repair back once.
/// `None` when the session does not exist.
pub fn open_session(store: &Store, id: &str) -> Result<Option<OpenedSession>, StoreError> {
    if store.session(id)?.is_none() {
        return Ok(None);
    }
    let loaded = store.load_history(id)?;
    let pending = store.pending_results(id)?;
    let mut history = loaded.messages;
    let report = repair_history(&mut history, &pending);
    let stored_len = loaded.next_index - loaded.first_index;
    let kept = (history.len() - loaded.summary_len.min(history.len())) as u64;
    let must_write = !report.is_clean() || !loaded.skipped.is_empty() || kept != stored_len;
    if must_write {
        let own = &history[loaded.summary_len.min(history.len())..];
        store.replace_history(id, loaded.first_index, own)?;
    }
    if must_write || !pending.is_empty() {
        store.clear_pending_results(id)?;
        store.flush()?;
    }
    Ok(Some(OpenedSession {
        history,
        summary_len: loaded.summary_len,
        first_index: loaded.first_index,
        report,
        skipped: loaded.skipped,
        last_updated: loaded.last_updated,
        rules: store.session_rules(id)?,
        // A plan that cannot be read is no reason to refuse the session.
        task_plan: store.task_plan(id).unwrap_or_else(|err| {
            tracing::warn!(%err, session = id, "the stored task plan was left out");
            None
        }),
        rewind: store.pending_rewind(id)?,
    }))
}

/// Writes the messages of `transcript` not yet stored in session `id`; with
/// `flush`, makes everything written so far durable before returning.
pub fn save_transcript(
    transcript: &mut Transcript,
    store: &Store,
    id: &str,
    flush: bool,
) -> Result<(), StoreError> {
    store.put_messages(id, transcript.unsaved())?;
    transcript.mark_saved(transcript.len());
    if flush {
        store.flush()?;
    }
    Ok(())
}

/// A run found unfinished at start-up and marked interrupted.
#[derive(Debug, Clone, PartialEq)]
pub struct RecoveredRun {
    /// The run as it is now stored.
    pub run: RunRecord,
    /// What the repair of its session changed.
    pub report: RepairReport,
    /// The child sessions the run created (sub-agents, forks, at any depth),
    /// each repaired the same way, oldest first.
    pub children: Vec<RecoveredChild>,
}

/// A child session of an interrupted run, repaired with it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecoveredChild {
    /// The child session's id.
    pub session_id: String,
    /// Where its agent sat in the run's agent tree (`main/explorer-1`).
    pub agent_path: Option<String>,
    /// What the repair of its history changed.
    pub report: RepairReport,
    /// The session held no message (the process stopped between creating it
    /// and writing its task) and was removed.
    pub removed_empty: bool,
}

/// What the interrupted run's event stream ends with.
const INTERRUPTED_RUN_TEXT: &str = "(The process running this run stopped before it finished; the session was repaired and can be continued.)";

/// SPEC §9: marks every run still recorded as running — its process is gone,
/// since this one holds the store — as interrupted, repairs its session's
/// history and the history of every child session the run created (each
/// session whose [`SessionMeta::run_id`](troupe_store::SessionMeta::run_id) is
/// the run's id: its sub-agents, their sub-agents, forks), and closes its event
/// stream with `run_finished{interrupted}`. Started calls are answered
/// "interrupted before completion", never re-run. Child sessions of other runs
/// are not touched. The run is marked last, so recovery cut short is done
/// again, whole, by the next process.
pub fn recover_interrupted_runs(
    store: &Store,
    now: DateTime<Utc>,
) -> Result<Vec<RecoveredRun>, StoreError> {
    let runs = store.unfinished_runs()?;
    if runs.is_empty() {
        return Ok(Vec::new());
    }
    // One pass over the metadata finds every run's child sessions.
    let mut sessions = store.list_sessions()?;
    sessions.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.id.cmp(&b.id)));
    let mut recovered = Vec::new();
    for mut run in runs {
        let report = open_session(store, &run.session_id)?
            .map(|session| session.report)
            .unwrap_or_default();
        let mut children = Vec::new();
        let created_by_run = sessions.iter().filter(|meta| {
            meta.id != run.session_id && meta.run_id.as_deref() == Some(run.run_id.as_str())
        });
        for child in created_by_run {
            if child.message_count == 0 && store.load_history(&child.id)?.messages.is_empty() {
                // Created, then the process stopped before the child's task
                // was written: nothing happened in it.
                store.remove_session(&child.id)?;
                children.push(RecoveredChild {
                    session_id: child.id.clone(),
                    agent_path: child.agent_path.clone(),
                    report: RepairReport::default(),
                    removed_empty: true,
                });
                continue;
            }
            if let Some(opened) = open_session(store, &child.id)? {
                if !opened.report.is_clean() {
                    tracing::info!(
                        run = %run.run_id,
                        session = %child.id,
                        agent = child.agent_path.as_deref().unwrap_or(""),
                        "child session of an interrupted run repaired"
                    );
                }
                children.push(RecoveredChild {
                    session_id: child.id.clone(),
                    agent_path: child.agent_path.clone(),
                    report: opened.report,
                    removed_empty: false,
                });
            }
        }
        let next_seq = store
            .events(&run.run_id, 1)?
            .last()
            .map(|event| event.seq + 1)
            .unwrap_or(1);
        store.append_event(&RunEvent {
            seq: next_seq,
            run_id: run.run_id.clone(),
            session_id: run.session_id.clone(),
            agent_path: "main".into(),
            ts: now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            kind: EventKind::RunFinished {
                status: RunStatus::Interrupted,
                stop_reason: "interrupted".into(),
                final_text: INTERRUPTED_RUN_TEXT.into(),
                usage_total: Usage::default(),
            },
        })?;
        run.status = RunState::Ended(RunStatus::Interrupted);
        run.stop_reason = Some("interrupted".into());
        run.ended = Some(now);
        store.put_run(&run)?;
        recovered.push(RecoveredRun {
            run,
            report,
            children,
        });
    }
    store.flush()?;
    Ok(recovered)
}

#[cfg(test)]
mod tests {
    use super::*;

    use troupe_agent::resume::{INTERRUPTED_CLOSING, INTERRUPTED_RESULT};
    use troupe_agent::validate_history;
    use troupe_protocol::model::{ContentBlock, Message, Role, ToolCall, ToolResult};
    use troupe_store::NewSession;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        (dir, store)
    }

    fn session(store: &Store, id: &str) {
        store
            .create_session(&NewSession {
                id: id.into(),
                cwd: "/tmp".into(),
                provider: "p".into(),
                model: "m".into(),
                parent: None,
                agent_path: None,
                run_id: None,
                fork_of: None,
            })
            .unwrap();
    }

    fn calls(ids: &[&str]) -> Message {
        Message {
            role: Role::Assistant,
            content: ids
                .iter()
                .map(|id| {
                    ContentBlock::ToolCall(ToolCall {
                        id: (*id).into(),
                        name: "bash".into(),
                        input: "{}".into(),
                    })
                })
                .collect(),
        }
    }

    #[test]
    fn missing_session_is_none() {
        let (_dir, store) = store();
        assert_eq!(open_session(&store, "nope").unwrap(), None);
    }

    #[test]
    fn a_killed_turn_is_repaired_once_and_written_back() {
        let (_dir, store) = store();
        session(&store, "s");
        store
            .put_message("s", 0, &Message::user_text("go"))
            .unwrap();
        store.put_message("s", 1, &calls(&["a", "b"])).unwrap();
        store
            .put_pending_result("s", &ToolResult::text("a", "done a", false))
            .unwrap();
        store.flush().unwrap();

        let opened = open_session(&store, "s").unwrap().unwrap();
        assert_eq!(opened.report.recovered_results, vec!["a"]);
        assert_eq!(opened.report.interrupted_calls, vec!["b"]);
        validate_history(&opened.history).unwrap();
        assert_eq!(opened.history.len(), 4);
        assert_eq!(opened.next_index(), 4);
        let results: Vec<_> = opened.history[2].tool_results_iter().collect();
        assert_eq!(results[1].joined_text(), INTERRUPTED_RESULT);
        assert_eq!(
            opened.repair_notice("s").as_deref(),
            Some("session s repaired: 1 call(s) answered as interrupted, 1 result(s) recovered")
        );

        // Written back: the second open needs no repair and sees the same.
        let again = open_session(&store, "s").unwrap().unwrap();
        assert!(again.report.is_clean());
        assert_eq!(again.repair_notice("s"), None);
        assert_eq!(again.history, opened.history);
        assert!(store.pending_results("s").unwrap().is_empty());
    }

    #[test]
    fn orphans_shift_the_tail_and_the_store_is_truncated() {
        let (_dir, store) = store();
        session(&store, "s");
        store
            .put_message("s", 0, &Message::user_text("go"))
            .unwrap();
        store
            .put_message(
                "s",
                1,
                &Message::tool_results(vec![ToolResult::text("x", "o", false)]),
            )
            .unwrap();
        store
            .put_message("s", 2, &Message::assistant_text("hi"))
            .unwrap();
        let opened = open_session(&store, "s").unwrap().unwrap();
        assert_eq!(opened.history.len(), 2);
        assert_eq!(store.session("s").unwrap().unwrap().message_count, 2);
        assert_eq!(store.load_history("s").unwrap().messages, opened.history);
    }

    #[test]
    fn transcript_saves_only_what_changed() {
        let (_dir, store) = store();
        session(&store, "s");
        let mut transcript = Transcript::new();
        transcript.push(Message::user_text("go"));
        transcript.push(Message::assistant_text("answer"));
        assert_eq!(transcript.unsaved().count(), 2);
        save_transcript(&mut transcript, &store, "s", true).unwrap();
        assert!(transcript.is_saved());
        // Closing extends the stored last message: it is written again.
        transcript.close("(stopped)");
        let unsaved: Vec<u64> = transcript.unsaved().map(|(index, _)| index).collect();
        assert_eq!(unsaved, vec![1]);
        save_transcript(&mut transcript, &store, "s", true).unwrap();
        let opened = open_session(&store, "s").unwrap().unwrap();
        assert_eq!(opened.history, transcript.messages());
        let mut reopened = Transcript::from_opened(&opened);
        assert!(reopened.is_saved());
        reopened.push(Message::user_text("more"));
        assert_eq!(reopened.unsaved().next().unwrap().0, 2);
    }

    #[test]
    fn interrupted_runs_are_marked_repaired_and_closed() {
        let (_dir, store) = store();
        session(&store, "s");
        store
            .put_message("s", 0, &Message::user_text("go"))
            .unwrap();
        let now = Utc::now();
        store
            .put_run(&RunRecord {
                run_id: "r".into(),
                session_id: "s".into(),
                prompt: "go".into(),
                status: RunState::Running,
                stop_reason: None,
                started: now,
                ended: None,
                pid: 1,
                history: None,
            })
            .unwrap();
        let recovered = recover_interrupted_runs(&store, now).unwrap();
        assert_eq!(recovered.len(), 1);
        assert!(recovered[0].report.closed);
        let run = store.run("r").unwrap().unwrap();
        assert_eq!(run.status, RunState::Ended(RunStatus::Interrupted));
        let events = store.events("r", 1).unwrap();
        assert!(matches!(
            events.last().unwrap().kind,
            EventKind::RunFinished {
                status: RunStatus::Interrupted,
                ..
            }
        ));
        let history = store.load_history("s").unwrap().messages;
        assert_eq!(history.last().unwrap().text(), INTERRUPTED_CLOSING);
        assert!(recover_interrupted_runs(&store, now).unwrap().is_empty());
    }

    fn child_session(store: &Store, id: &str, parent: &str, agent_path: &str, run_id: &str) {
        store
            .create_session(&NewSession {
                id: id.into(),
                cwd: "/tmp".into(),
                provider: "p".into(),
                model: "m".into(),
                parent: Some(parent.into()),
                agent_path: Some(agent_path.into()),
                run_id: Some(run_id.into()),
                fork_of: None,
            })
            .unwrap();
    }

    /// A history killed while the call `call_id` ran: a prompt, then an
    /// assistant message whose call has no result.
    fn unanswered(store: &Store, id: &str, call_id: &str) {
        store
            .put_message(id, 0, &Message::user_text(format!("task of {id}")))
            .unwrap();
        store.put_message(id, 1, &calls(&[call_id])).unwrap();
    }

    fn running(run_id: &str, session_id: &str) -> RunRecord {
        RunRecord {
            run_id: run_id.into(),
            session_id: session_id.into(),
            prompt: "go".into(),
            status: RunState::Running,
            stop_reason: None,
            started: Utc::now(),
            ended: None,
            pid: 1,
            history: None,
        }
    }

    #[test]
    fn an_interrupted_tree_run_repairs_its_child_and_grandchild_sessions() {
        let (_dir, store) = store();
        session(&store, "s");
        unanswered(&store, "s", "main-call");
        store.put_run(&running("r", "s")).unwrap();
        child_session(&store, "child", "s", "main/fork-1", "r");
        unanswered(&store, "child", "child-call");
        child_session(&store, "grandchild", "child", "main/fork-1/explorer-1", "r");
        unanswered(&store, "grandchild", "grand-call");
        // The grandchild's call finished before its tool message was written.
        store
            .put_pending_result(
                "grandchild",
                &ToolResult::text("grand-call", "found", false),
            )
            .unwrap();
        // A child session of another, finished run is left as it is.
        store
            .put_run(&RunRecord {
                status: RunState::Ended(RunStatus::Finished),
                stop_reason: Some("end_turn".into()),
                ..running("r-other", "s")
            })
            .unwrap();
        child_session(&store, "other-child", "s", "main/fork-2", "r-other");
        unanswered(&store, "other-child", "other-call");
        store
            .put_pending_result(
                "other-child",
                &ToolResult::text("other-call", "late", false),
            )
            .unwrap();
        store.flush().unwrap();
        let other_before = store.load_history("other-child").unwrap();
        for id in ["s", "child", "grandchild"] {
            let stored = store.load_history(id).unwrap().messages;
            assert!(validate_history(&stored).is_err(), "{id} starts broken");
        }

        let recovered = recover_interrupted_runs(&store, Utc::now()).unwrap();
        assert_eq!(recovered.len(), 1);
        let run = &recovered[0];
        assert_eq!(run.run.run_id, "r");
        assert_eq!(run.report.interrupted_calls, vec!["main-call"]);
        let children: Vec<(&str, Option<&str>)> = run
            .children
            .iter()
            .map(|child| (child.session_id.as_str(), child.agent_path.as_deref()))
            .collect();
        assert_eq!(
            children,
            [
                ("child", Some("main/fork-1")),
                ("grandchild", Some("main/fork-1/explorer-1"))
            ]
        );
        assert_eq!(run.children[0].report.interrupted_calls, vec!["child-call"]);
        assert!(run.children.iter().all(|child| !child.removed_empty));
        assert_eq!(run.children[1].report.recovered_results, vec!["grand-call"]);
        assert!(run.children[1].report.interrupted_calls.is_empty());

        // Every history of the tree is valid, as stored; no call was re-run:
        // each unanswered call has the interrupted result.
        for (id, call) in [("s", "main-call"), ("child", "child-call")] {
            let stored = store.load_history(id).unwrap().messages;
            validate_history(&stored).unwrap_or_else(|e| panic!("{id}: {e}"));
            let result = stored[2].tool_results_iter().next().unwrap();
            assert_eq!(result.call_id, call);
            assert_eq!(result.joined_text(), INTERRUPTED_RESULT);
            assert_eq!(stored.last().unwrap().text(), INTERRUPTED_CLOSING);
        }
        let grand = store.load_history("grandchild").unwrap().messages;
        validate_history(&grand).unwrap();
        assert_eq!(
            grand[2].tool_results_iter().next().unwrap().joined_text(),
            "found"
        );
        assert!(store.pending_results("grandchild").unwrap().is_empty());

        // The other run's child session is untouched, pending result and all.
        assert_eq!(store.load_history("other-child").unwrap(), other_before);
        assert_eq!(store.pending_results("other-child").unwrap().len(), 1);

        // Done once: nothing is left to recover.
        assert_eq!(
            store.run("r").unwrap().unwrap().status,
            RunState::Ended(RunStatus::Interrupted)
        );
        assert!(
            recover_interrupted_runs(&store, Utc::now())
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_child_session_killed_before_its_task_was_written_is_removed() {
        let (_dir, store) = store();
        session(&store, "s");
        unanswered(&store, "s", "main-call");
        store.put_run(&running("r", "s")).unwrap();
        child_session(&store, "empty-child", "s", "main/fork-1", "r");
        store.flush().unwrap();
        let recovered = recover_interrupted_runs(&store, Utc::now()).unwrap();
        let child = &recovered[0].children[0];
        assert_eq!(child.session_id, "empty-child");
        assert!(child.removed_empty);
        assert_eq!(store.session("empty-child").unwrap(), None);
        assert!(store.child_sessions("s").unwrap().is_empty());
    }
}
