//! The costs page's figures: tokens and their estimated cost per run, per
//! agent, per model and per day over a period, summed from the runs' stored
//! `usage` events. Each agent's provider and model are its session's; the
//! cost is the tokens at the `price` the user's config file gives that
//! provider, and unknown (`None`) wherever some of the tokens have no price.
//! Pure; the handler reads the store and the prices.

use std::collections::{BTreeMap, HashMap};

use chrono::NaiveDate;
use troupe_config::Price;
use troupe_protocol::events::RunEvent;
use troupe_protocol::model::Usage;
use troupe_store::{RunRecord, SessionMeta};

/// Tokens and what they cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Spent {
    /// The tokens.
    pub usage: Usage,
    /// Their estimated cost in USD; `None` when some of them have no price.
    pub usd: Option<f64>,
}

impl Default for Spent {
    fn default() -> Self {
        Self {
            usage: Usage::default(),
            usd: Some(0.0),
        }
    }
}

impl Spent {
    /// Adds `usage` at `price` (none: the cost becomes unknown).
    pub(crate) fn add(&mut self, usage: &Usage, price: Option<&Price>) {
        self.usage.add(usage);
        self.usd = match (self.usd, price) {
            (Some(sum), Some(price)) => Some(sum + price.cost_usd(usage)),
            _ => None,
        };
    }

    /// Adds what `other` spent.
    pub(crate) fn merge(&mut self, other: &Spent) {
        self.usage.add(&other.usage);
        self.usd = self.usd.zip(other.usd).map(|(a, b)| a + b);
    }
}

/// Tokens and costs summed over a period.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Tally {
    /// Per run, newest first.
    pub runs: Vec<(RunRecord, Spent)>,
    /// Per agent: (run id, agent path).
    pub agents: BTreeMap<(String, String), Spent>,
    /// Per model: (provider, model).
    pub models: BTreeMap<(String, String), Spent>,
    /// Per day (UTC) the run started on.
    pub days: BTreeMap<NaiveDate, Spent>,
}

/// The provider and model each agent of a run used: a sub-agent's are
/// those of the child session the run made for it.
pub(crate) fn agent_models(
    sessions: &[SessionMeta],
) -> HashMap<(String, String), (String, String)> {
    let mut models = HashMap::new();
    for meta in sessions {
        if let (Some(run), Some(path)) = (&meta.run_id, &meta.agent_path) {
            models.insert(
                (run.clone(), path.clone()),
                (meta.provider.clone(), meta.model.clone()),
            );
        }
    }
    models
}

/// Sums the usage events of `runs` (each with its events), newest first,
/// at `prices` (by provider name).
pub(crate) fn tally(
    runs: Vec<(RunRecord, Vec<RunEvent>)>,
    sessions: &[SessionMeta],
    prices: &HashMap<String, Price>,
) -> Tally {
    let models = agent_models(sessions);
    let session_models: HashMap<&str, (&str, &str)> = sessions
        .iter()
        .map(|meta| {
            (
                meta.id.as_str(),
                (meta.provider.as_str(), meta.model.as_str()),
            )
        })
        .collect();
    let mut out = Tally::default();
    for (run, events) in runs {
        let mut total = Spent::default();
        for event in &events {
            let Some(usage) = super::model::usage_of(&event.kind) else {
                continue;
            };
            let key = (run.run_id.clone(), event.agent_path.clone());
            let model = models.get(&key).cloned().unwrap_or_else(|| {
                session_models.get(run.session_id.as_str()).map_or_else(
                    || ("unknown".to_string(), "unknown".to_string()),
                    |(provider, model)| ((*provider).to_string(), (*model).to_string()),
                )
            });
            let price = prices.get(&model.0);
            total.add(&usage, price);
            out.agents.entry(key).or_default().add(&usage, price);
            out.models.entry(model).or_default().add(&usage, price);
        }
        out.days
            .entry(run.started.date_naive())
            .or_default()
            .merge(&total);
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
pub(crate) fn bars(days: &BTreeMap<NaiveDate, Spent>) -> Vec<(String, u64, f64)> {
    let tallest = days
        .values()
        .map(|spent| spent.usage.total())
        .max()
        .unwrap_or(0);
    days.iter()
        .map(|(day, spent)| {
            let total = spent.usage.total();
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
            provider: if model == "small" {
                "cheap"
            } else {
                "anthropic"
            }
            .into(),
            model: model.into(),
            created: Utc::now(),
            updated: Utc::now(),
            message_count: 0,
            parent: run.map(|_| "s".to_string()),
            agent_path: path.map(Into::into),
            run_id: run.map(Into::into),
            fork_of: None,
            branch_of: None,
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
            history: None,
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
            &HashMap::from([(
                "anthropic".to_string(),
                Price {
                    input: 1_000_000.0,
                    output: 2_000_000.0,
                    cache_read: 0.0,
                    cache_write: 0.0,
                },
            )]),
        );
        let model = |provider: &str, model: &str| (provider.to_string(), model.to_string());
        assert_eq!(tally.runs[0].0.run_id, "r2", "newest first");
        assert_eq!(tally.runs[0].1.usd, Some(100.0));
        assert_eq!(tally.runs[1].1.usage.total(), 18);
        assert_eq!(
            tally.runs[1].1.usd, None,
            "the fork's provider has no price"
        );
        assert_eq!(tally.models[&model("anthropic", "big")].usage.input, 110);
        assert_eq!(tally.models[&model("anthropic", "big")].usd, Some(112.0));
        assert_eq!(tally.models[&model("cheap", "small")].usage.output, 2);
        assert_eq!(tally.models[&model("cheap", "small")].usd, None);
        let fork = &tally.agents[&("r1".to_string(), "main/fork-1".to_string())];
        assert_eq!((fork.usage.input, fork.usd), (5, None));
        assert_eq!(
            tally.agents[&("r1".to_string(), "main".to_string())].usd,
            Some(12.0)
        );
        let bars = bars(&tally.days);
        assert_eq!(bars.len(), 2);
        assert_eq!(bars[1], ("03-02".to_string(), 100, 1.0));
        assert!((bars[0].2 - 0.18).abs() < 1e-9);
        assert!(super::bars(&BTreeMap::new()).is_empty());
    }
}
