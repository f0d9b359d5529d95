//! Stop conditions of the loop (SPEC §3): unknown tools several turns in a row,
//! repeated identical calls, the turn limit, and the run's budgets (tokens,
//! estimated cost, wall clock, tool calls), checked before every model call.
//! Each hit knows its stop reason and the texts shown to people and the model,
//! built from the constants.

use std::time::Duration;

use troupe_config::{Limits, Price};
use troupe_protocol::model::{ToolCall, Usage};

use super::REPEATED_CALL_LIMIT;

/// Why the loop stopped early because of a limit.
#[derive(Debug, Clone, PartialEq)]
pub enum LimitHit {
    /// The turn limit of one user message.
    MaxTurns {
        /// The limit.
        limit: u32,
    },
    /// Every call named an unknown tool this many turns in a row.
    UnknownTools {
        /// Turns in a row.
        turns: u32,
        /// The names the model tried in the last turn.
        names: Vec<String>,
    },
    /// The same call this many times in a row.
    RepeatedCalls {
        /// Tool name.
        tool: String,
        /// Calls in a row.
        count: u32,
    },
    /// Token budget used up.
    BudgetTokens {
        /// Tokens used.
        used: u64,
        /// The budget.
        limit: u64,
    },
    /// Cost budget used up.
    BudgetUsd {
        /// Estimated USD spent.
        used: f64,
        /// The budget.
        limit: f64,
    },
    /// Wall-clock budget used up.
    WallClock {
        /// The budget.
        limit: Duration,
    },
    /// Tool-call budget used up.
    MaxToolCalls {
        /// The budget.
        limit: u32,
    },
}

impl LimitHit {
    /// The `stop_reason` of `run_finished`.
    pub fn stop_reason(&self) -> &'static str {
        match self {
            Self::MaxTurns { .. } => "max_turns",
            Self::UnknownTools { .. } => "unknown_tools",
            Self::RepeatedCalls { .. } => "repeated_calls",
            Self::BudgetTokens { .. } => "budget_tokens",
            Self::BudgetUsd { .. } => "budget_usd",
            Self::WallClock { .. } => "wall_clock",
            Self::MaxToolCalls { .. } => "max_tool_calls",
        }
    }

    /// The text that closes the history and is shown as a notice. It says what
    /// happened and that sending another message continues.
    pub fn notice(&self) -> String {
        let what = match self {
            Self::MaxTurns { limit } => {
                format!(
                    "reached the limit of {} for this message",
                    count_of(u64::from(*limit), "turn")
                )
            }
            Self::UnknownTools { turns, names } => format!(
                "{} in a row asked only for tools that do not exist ({})",
                count_of(u64::from(*turns), "turn"),
                names.join(", ")
            ),
            Self::RepeatedCalls { tool, count } => format!(
                "the same {tool} call with the same arguments was requested {} in a row",
                count_of(u64::from(*count), "time")
            ),
            Self::BudgetTokens { used, limit } => {
                format!("the token budget is used up ({used} of {limit} tokens)")
            }
            Self::BudgetUsd { used, limit } => {
                format!("the cost budget is used up (about ${used:.2} of ${limit:.2})")
            }
            Self::WallClock { limit } => {
                format!("the time budget of {} s is used up", limit.as_secs())
            }
            Self::MaxToolCalls { limit } => {
                format!(
                    "the budget of {} is used up",
                    count_of(u64::from(*limit), "tool call")
                )
            }
        };
        format!("(Stopped: {what}. Send another message to continue.)")
    }
}

/// `1 turn`, `2 turns`: a count with its noun in the right number.
pub(crate) fn count_of(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// What a run has consumed so far (shared by the agents of one run).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunTally {
    /// Usage summed over every response.
    pub usage: Usage,
    /// Estimated cost in USD.
    pub cost_usd: f64,
    /// Tool calls executed or refused.
    pub tool_calls: u32,
}

impl RunTally {
    /// Adds one response's usage, priced when prices are known.
    pub fn add_usage(&mut self, usage: &Usage, price: Option<&Price>) {
        self.usage.add(usage);
        if let Some(price) = price {
            self.cost_usd += price.cost_usd(usage);
        }
    }
}

/// The budgets of one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Token budget.
    pub tokens: u64,
    /// Cost budget, applied only when the provider has prices.
    pub usd: Option<f64>,
    /// Wall-clock budget.
    pub wall_clock: Duration,
    /// Tool-call budget.
    pub tool_calls: u32,
}

impl Budget {
    /// The budgets of the given limits; the cost budget applies when prices exist.
    pub fn from_limits(limits: &Limits, priced: bool) -> Self {
        Self {
            tokens: limits.budget_tokens,
            usd: priced.then_some(limits.budget_usd),
            wall_clock: limits.wall_clock,
            tool_calls: limits.max_tool_calls,
        }
    }

    /// Checked before every model call: the first budget exhausted, if any.
    pub fn check(&self, tally: &RunTally, elapsed: Duration) -> Option<LimitHit> {
        let used = tally.usage.total();
        if used >= self.tokens {
            return Some(LimitHit::BudgetTokens {
                used,
                limit: self.tokens,
            });
        }
        if let Some(limit) = self.usd
            && tally.cost_usd >= limit
        {
            return Some(LimitHit::BudgetUsd {
                used: tally.cost_usd,
                limit,
            });
        }
        if elapsed >= self.wall_clock {
            return Some(LimitHit::WallClock {
                limit: self.wall_clock,
            });
        }
        if tally.tool_calls >= self.tool_calls {
            return Some(LimitHit::MaxToolCalls {
                limit: self.tool_calls,
            });
        }
        None
    }
}

/// Per-user-message loop state: turns taken, unknown-tool streak, the run of
/// identical calls.
#[derive(Debug, Clone)]
pub(crate) struct LoopGuard {
    max_turns: u32,
    unknown_limit: u32,
    turns: u32,
    unknown_streak: u32,
    last_call: Option<(String, String)>,
    repeat_count: u32,
}

impl LoopGuard {
    /// A guard with the given turn limit and unknown-tool limit.
    pub(crate) fn new(max_turns: u32, unknown_limit: u32) -> Self {
        Self {
            max_turns,
            unknown_limit,
            turns: 0,
            unknown_streak: 0,
            last_call: None,
            repeat_count: 0,
        }
    }

    /// Turns started so far.
    pub(crate) fn turns(&self) -> u32 {
        self.turns
    }

    /// Called before each model call: counts the turn, or says the limit is hit.
    pub(crate) fn begin_turn(&mut self) -> Result<u32, LimitHit> {
        if self.turns >= self.max_turns {
            return Err(LimitHit::MaxTurns {
                limit: self.max_turns,
            });
        }
        self.turns += 1;
        Ok(self.turns)
    }

    /// Called with a response's tool calls before they run. `is_known` says
    /// whether a name is a registered tool. Returns the limit hit, if any; the
    /// caller then answers every call without running it and stops.
    pub(crate) fn observe_calls(
        &mut self,
        calls: &[ToolCall],
        is_known: impl Fn(&str) -> bool,
    ) -> Option<LimitHit> {
        if calls.is_empty() {
            return None;
        }
        if calls.iter().all(|call| !is_known(&call.name)) {
            self.unknown_streak += 1;
            if self.unknown_streak >= self.unknown_limit {
                return Some(LimitHit::UnknownTools {
                    turns: self.unknown_streak,
                    names: calls.iter().map(|call| call.name.clone()).collect(),
                });
            }
        } else {
            self.unknown_streak = 0;
        }
        for call in calls {
            let signature = (call.name.clone(), canonical_arguments(&call.input));
            if self.last_call.as_ref() == Some(&signature) {
                self.repeat_count += 1;
            } else {
                self.last_call = Some(signature);
                self.repeat_count = 1;
            }
            if self.repeat_count >= REPEATED_CALL_LIMIT {
                return Some(LimitHit::RepeatedCalls {
                    tool: call.name.clone(),
                    count: self.repeat_count,
                });
            }
        }
        None
    }
}

/// Arguments in canonical form: parsed and re-serialised with sorted keys and
/// no insignificant whitespace; malformed JSON is compared as written.
pub(crate) fn canonical_arguments(input: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(input) {
        // serde_json's map is ordered by key (no `preserve_order` feature), so
        // serialising sorts every object's keys.
        Ok(value) => value.to_string(),
        Err(_) => input.trim().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, input: &str) -> ToolCall {
        ToolCall {
            id: format!("id-{name}-{input}"),
            name: name.into(),
            input: input.into(),
        }
    }

    fn known(name: &str) -> bool {
        matches!(name, "read_file" | "bash")
    }

    #[test]
    fn turn_limit() {
        let mut guard = LoopGuard::new(2, 3);
        assert_eq!(guard.begin_turn(), Ok(1));
        assert_eq!(guard.begin_turn(), Ok(2));
        let hit = guard.begin_turn().unwrap_err();
        assert_eq!(hit, LimitHit::MaxTurns { limit: 2 });
        assert_eq!(hit.stop_reason(), "max_turns");
        assert!(hit.notice().contains("limit of 2 turns"));
    }

    #[test]
    fn counts_of_one_are_singular() {
        assert_eq!(count_of(1, "turn"), "1 turn");
        assert_eq!(count_of(0, "turn"), "0 turns");
        assert_eq!(count_of(3, "tool call"), "3 tool calls");
        assert_eq!(
            LimitHit::MaxTurns { limit: 1 }.notice(),
            "(Stopped: reached the limit of 1 turn for this message. Send another message to continue.)"
        );
        assert_eq!(
            LimitHit::MaxToolCalls { limit: 1 }.notice(),
            "(Stopped: the budget of 1 tool call is used up. Send another message to continue.)"
        );
    }

    #[test]
    fn unknown_tools_three_turns_in_a_row_and_reset() {
        let mut guard = LoopGuard::new(25, 3);
        assert!(guard.observe_calls(&[call("nope", "{}")], known).is_none());
        assert!(guard.observe_calls(&[call("nada", "{}")], known).is_none());
        // A turn with any known tool resets the streak.
        assert!(
            guard
                .observe_calls(
                    &[call("nope", "{}"), call("read_file", "{\"path\":\"a\"}")],
                    known
                )
                .is_none()
        );
        assert!(guard.observe_calls(&[call("x", "{}")], known).is_none());
        assert!(guard.observe_calls(&[call("y", "{}")], known).is_none());
        let hit = guard.observe_calls(&[call("z", "{}")], known).unwrap();
        assert_eq!(hit.stop_reason(), "unknown_tools");
        assert!(hit.notice().contains('z'));
    }

    #[test]
    fn subagent_unknown_limit_is_two() {
        let mut guard = LoopGuard::new(25, super::super::UNKNOWN_TOOL_TURNS_SUBAGENT);
        assert!(guard.observe_calls(&[call("x", "{}")], known).is_none());
        assert!(guard.observe_calls(&[call("y", "{}")], known).is_some());
    }

    #[test]
    fn repeated_identical_calls_stop_at_three_with_canonical_arguments() {
        let mut guard = LoopGuard::new(25, 3);
        assert!(
            guard
                .observe_calls(&[call("read_file", r#"{"path":"a","limit":5}"#)], known)
                .is_none()
        );
        assert!(
            guard
                .observe_calls(
                    &[call("read_file", r#"{ "limit": 5, "path": "a" }"#)],
                    known
                )
                .is_none()
        );
        let hit = guard
            .observe_calls(&[call("read_file", r#"{"path":"a","limit":5}"#)], known)
            .unwrap();
        assert_eq!(
            hit,
            LimitHit::RepeatedCalls {
                tool: "read_file".into(),
                count: 3
            }
        );
    }

    #[test]
    fn different_arguments_break_the_run() {
        let mut guard = LoopGuard::new(25, 3);
        for path in ["a", "a", "b", "b", "a"] {
            let input = format!(r#"{{"path":"{path}"}}"#);
            assert!(
                guard
                    .observe_calls(&[call("read_file", &input)], known)
                    .is_none()
            );
        }
        // Three identical calls inside one turn also count.
        let same = call("bash", r#"{"command":"ls"}"#);
        assert!(
            guard
                .observe_calls(&[same.clone(), same.clone(), same], known)
                .is_some()
        );
    }

    #[test]
    fn budgets_in_order() {
        let budget = Budget {
            tokens: 100,
            usd: Some(1.0),
            wall_clock: Duration::from_secs(10),
            tool_calls: 5,
        };
        let mut tally = RunTally::default();
        assert!(budget.check(&tally, Duration::ZERO).is_none());
        tally.tool_calls = 5;
        assert_eq!(
            budget.check(&tally, Duration::ZERO).unwrap().stop_reason(),
            "max_tool_calls"
        );
        assert_eq!(
            budget
                .check(&tally, Duration::from_secs(10))
                .unwrap()
                .stop_reason(),
            "wall_clock"
        );
        tally.cost_usd = 1.5;
        assert_eq!(
            budget.check(&tally, Duration::ZERO).unwrap().stop_reason(),
            "budget_usd"
        );
        tally.usage.output = 100;
        let hit = budget.check(&tally, Duration::ZERO).unwrap();
        assert_eq!(hit.stop_reason(), "budget_tokens");
        assert!(hit.notice().contains("100 of 100"));
    }

    #[test]
    fn cost_budget_only_when_priced() {
        let limits = Limits::default();
        assert!(Budget::from_limits(&limits, false).usd.is_none());
        let mut tally = RunTally::default();
        tally.add_usage(
            &Usage {
                input: 1_000_000,
                output: 0,
                cache_read: 0,
                cache_write: 0,
            },
            Some(&Price {
                input: 3.0,
                output: 15.0,
                cache_read: 0.3,
                cache_write: 3.75,
            }),
        );
        assert!((tally.cost_usd - 3.0).abs() < 1e-9);
    }

    #[test]
    fn canonical_arguments_sort_keys_and_keep_bad_json() {
        assert_eq!(
            canonical_arguments(r#"{"b":1, "a":{"d":2,"c":3}}"#),
            r#"{"a":{"c":3,"d":2},"b":1}"#
        );
        assert_eq!(canonical_arguments(" {bad "), "{bad");
    }
}
