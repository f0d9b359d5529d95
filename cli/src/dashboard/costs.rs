//! The costs page's figures: tokens per run, per agent, per model and per
//! day over a period, summed from the runs' stored `usage` events, each
//! agent's model taken from its session. Pure; the handler reads the store.

use std::collections::{BTreeMap, HashMap};

use chrono::NaiveDate;
use troupe_protocol::events::RunEvent;
use troupe_protocol::model::Usage;
use troupe_store::{RunRecord, SessionMeta};

/// Tokens summed over a period.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Tally {
    /// Per run, newest first: the run and its tokens.
    pub runs: Vec<(RunRecord, Usage)>,
    /// Per agent: (run id, agent path) → tokens.
    pub agents: BTreeMap<(String, String), Usage>,
    /// Per model.
    pub models: BTreeMap<String, Usage>,
    /// Per day (UTC) the run started on.
    pub days: BTreeMap<NaiveDate, Usage>,
}

/// The model each agent of a run used: the main agent's is its session's,
/// a sub-agent's is the model of the child session the run made for it.
pub(crate) fn agent_models(sessions: &[SessionMeta]) -> HashMap<(String, String), String> {
    let mut models = HashMap::new();
    for meta in sessions {
        if let (Some(run), Some(path)) = (&meta.run_id, &meta.agent_path) {
            models.insert((run.clone(), path.clone()), meta.model.clone());
        }
    }
    models
}

/// Sums the usage events of `runs` (each with its events), newest first.
pub(crate) fn tally(runs: Vec<(RunRecord, Vec<RunEvent>)>, sessions: &[SessionMeta]) -> Tally {
    let models = agent_models(sessions);
    let session_models: HashMap<&str, &str> = sessions
        .iter()
        .map(|meta| (meta.id.as_str(), meta.model.as_str()))
        .collect();
    let mut out = Tally::default();
    for (run, events) in runs {
        let mut total = Usage::default();
        for event in &events {
            let Some(usage) = super::model::usage_of(&event.kind) else {
                continue;
            };
            total.add(&usage);
            let key = (run.run_id.clone(), event.agent_path.clone());
            let model = models.get(&key).cloned().unwrap_or_else(|| {
                session_models
                    .get(run.session_id.as_str())
                    .map_or_else(|| "unknown".to_string(), |model| (*model).to_string())
            });
            out.agents.entry(key).or_default().add(&usage);
            out.models.entry(model).or_default().add(&usage);
        }
        out.days
            .entry(run.started.date_naive())
            .or_default()
            .add(&total);
        out.runs.push((run, total));
    }
    out.runs.sort_by(|a, b| {
        b.0.started
            .cmp(&a.0.started)
            .then(b.0.run_id.cmp(&a.0.run_id))
    });
    out
}

/// One bar of the chart: its label, its value and its height as a fraction
/// of the tallest.
pub(crate) fn bars(days: &BTreeMap<NaiveDate, Usage>) -> Vec<(String, u64, f64)> {
    let tallest = days.values().map(Usage::total).max().unwrap_or(0);
    days.iter()
        .map(|(day, usage)| {
            let total = usage.total();
            let share = if tallest == 0 {
                0.0
            } else {
                total as f64 / tallest as f64
            };
            (day.format("%m-%d").to_string(), total, share)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use troupe_protocol::events::EventKind;
    use troupe_store::RunState;

    use super::*;

    fn usage_event(agent: &str, input: u64, output: u64) -> RunEvent {
        let usage = Usage {
            input,
            output,
            cache_read: 0,
            cache_write: 0,
        };
        crate::dashboard::model::test_event(1, agent, EventKind::usage(&usage))
    }

    fn meta(id: &str, model: &str, run: Option<&str>, path: Option<&str>) -> SessionMeta {
        SessionMeta {
            id: id.into(),
            title: String::new(),
            cwd: "/p".into(),
            provider: "anthropic".into(),
            model: model.into(),
            created: Utc::now(),
            updated: Utc::now(),
            message_count: 0,
            parent: run.map(|_| "s".to_string()),
            agent_path: path.map(Into::into),
            run_id: run.map(Into::into),
            fork_of: None,
        }
    }

    #[test]
    fn tokens_are_summed_per_run_agent_model_and_day() {
        let day = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
        let run = |id: &str, started| RunRecord {
            run_id: id.into(),
            session_id: "s".into(),
            prompt: String::new(),
            status: RunState::Running,
            stop_reason: None,
            started,
            ended: None,
            pid: 1,
        };
        let sessions = vec![
            meta("s", "big", None, None),
            meta("c", "small", Some("r1"), Some("main/fork-1")),
        ];
        let tally = tally(
            vec![
                (
                    run("r1", day),
                    vec![usage_event("main", 10, 1), usage_event("main/fork-1", 5, 2)],
                ),
                (
                    run("r2", day + chrono::Duration::days(1)),
                    vec![usage_event("main", 100, 0)],
                ),
            ],
            &sessions,
        );
        assert_eq!(tally.runs[0].0.run_id, "r2", "newest first");
        assert_eq!(tally.runs[1].1.total(), 18);
        assert_eq!(tally.models["big"].input, 110);
        assert_eq!(tally.models["small"].output, 2);
        assert_eq!(
            tally.agents[&("r1".to_string(), "main/fork-1".to_string())].input,
            5
        );
        let bars = bars(&tally.days);
        assert_eq!(bars.len(), 2);
        assert_eq!(bars[1], ("03-02".to_string(), 100, 1.0));
        assert!((bars[0].2 - 0.18).abs() < 1e-9);
        assert!(super::bars(&BTreeMap::new()).is_empty());
    }
}
