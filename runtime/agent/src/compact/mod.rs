//! Context compaction as pure decisions: the token estimate, layer 1 (large
//! tool results offloaded to spill files, decided once per call id in a
//! ledger), layer 2 (a summary of the older history replacing it, the recent
//! tail kept verbatim, a recovery attachment after it), summaries prepared
//! ahead and when they still fit, the circuit breaker of automatic summaries
//! and the thresholds that trigger each. Nothing here
//! writes a file or calls a model: the agent's interpreter does, and feeds
//! the outcome back.

use troupe_config::ResolvedProvider;

pub(crate) mod ahead;
pub(crate) mod breaker;
pub(crate) mod estimate;
pub mod offload;
pub(crate) mod shrink;
pub(crate) mod summary;

/// Tokens kept free for the summary request itself below the window.
pub(crate) const SUMMARY_RESERVE: u64 = 20_000;
/// Tokens kept free for the estimate's error below the window.
pub(crate) const SAFETY_MARGIN: u64 = 13_000;
/// Tokens kept free below the window when a stored session is continued.
pub(crate) const RESUME_MARGIN: u64 = 8_000;
/// Tokens kept free below the window after an emergency compaction: above
/// this the turn ends with an error.
pub(crate) const EMERGENCY_MARGIN: u64 = 3_000;
/// Fraction (in percent) of the threshold from which a summary is prepared
/// ahead, while the agent goes on.
pub(crate) const WORK_AHEAD_PERCENT: u64 = 70;

/// Where automatic summaries start for a context `window`: `None` when the
/// window is too small for them (layer 1 still runs).
pub(crate) fn auto_threshold(window: u64) -> Option<u64> {
    window
        .checked_sub(SUMMARY_RESERVE + SAFETY_MARGIN)
        .filter(|threshold| *threshold > 0)
}

/// Where preparing a summary ahead starts.
pub(crate) fn work_ahead_threshold(threshold: u64) -> u64 {
    threshold * WORK_AHEAD_PERCENT / 100
}

/// Above this estimate, a stored session is compacted before it continues.
pub(crate) fn resume_threshold(window: u64) -> u64 {
    window.saturating_sub(RESUME_MARGIN)
}

/// Above this estimate after an emergency compaction, the turn ends.
pub(crate) fn emergency_limit(window: u64) -> u64 {
    window.saturating_sub(EMERGENCY_MARGIN)
}

/// Whether a history of `messages` can be compacted for a context
/// `window` (manual compaction refuses one that cannot): some part of it is
/// old enough to summarise once the verbatim tail is kept, and large enough
/// for its summary to shrink the history by the margin
/// ([`shrink::MIN_SAVING_PERCENT`] of the history; the loop checks it again
/// with the whole request).
pub fn compactable(messages: &[troupe_protocol::model::Message], window: u64) -> bool {
    let threshold = auto_threshold(window).unwrap_or(window / 2);
    let Some(cut) = summary::tail_start(messages, summary::budgets(threshold).tail_tokens)
        .filter(|cut| *cut > 0)
    else {
        return false;
    };
    let chars = |messages: &[troupe_protocol::model::Message]| -> u64 {
        messages.iter().map(|m| m.char_len() as u64).sum()
    };
    shrink::Sizes {
        request: chars(messages),
        older: chars(&messages[..cut]),
        replacement: 0,
    }
    .worth_summarising()
}

/// The start-up warning for a window too small for summaries, if it is.
pub(crate) fn small_window_warning(window: u64) -> Option<String> {
    auto_threshold(window).is_none().then(|| {
        format!(
            "the context window of {window} tokens is at most {} tokens: automatic summaries \
             are off (large tool results are still offloaded); long runs may hit the window",
            SUMMARY_RESERVE + SAFETY_MARGIN
        )
    })
}

/// The warning for a provider whose context window is too small for
/// automatic summaries, naming the provider.
pub fn window_warning(provider: &ResolvedProvider) -> Option<String> {
    small_window_warning(provider.context_window)
        .map(|warning| format!("provider `{}`: {warning}", provider.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_of_a_window() {
        assert_eq!(auto_threshold(200_000), Some(167_000));
        assert_eq!(work_ahead_threshold(167_000), 116_900);
        assert_eq!(resume_threshold(200_000), 192_000);
        assert_eq!(emergency_limit(200_000), 197_000);
        assert_eq!(auto_threshold(33_000), None);
        assert_eq!(auto_threshold(1_000), None);
        assert_eq!(auto_threshold(33_001), Some(1));
        assert!(small_window_warning(33_000).unwrap().contains("33000"));
        assert!(small_window_warning(40_000).is_none());
        assert_eq!(resume_threshold(100), 0);
    }

    #[test]
    fn a_history_is_compactable_when_something_precedes_the_kept_tail() {
        use troupe_protocol::model::Message;
        let short = vec![Message::user_text("hi"), Message::assistant_text("hello")];
        assert!(!compactable(&short, 200_000));
        let long: Vec<Message> = (0..20)
            .flat_map(|i| {
                [
                    Message::user_text(format!("request {i} {}", "x".repeat(20_000))),
                    Message::assistant_text(format!("answer {i}")),
                ]
            })
            .collect();
        assert!(compactable(&long, 200_000));
        assert!(!compactable(&long[..4], 200_000), "all of it is the tail");
        // The task, then one huge batch: the summary would replace the task.
        let mut batch = vec![Message::user_text("do it")];
        batch.extend_from_slice(&long[1..6]);
        assert!(!compactable(&batch, 200_000), "too little to summarise");
    }

    #[test]
    fn a_window_too_small_for_summaries_is_named() {
        let mut small = ResolvedProvider {
            name: "claude".into(),
            protocol: troupe_protocol::model::Protocol::Anthropic,
            model: "m".into(),
            base_url: "http://127.0.0.1:9".into(),
            api_key: None,
            api_key_env: "ANTHROPIC_API_KEY".into(),
            context_window: 200_000,
            max_tokens: 8_192,
            thinking_budget: None,
            price: None,
            idle_timeout: std::time::Duration::from_secs(300),
            max_retries: 4,
            store: false,
        };
        assert_eq!(window_warning(&small), None);
        small.context_window = 32_768;
        let warning = window_warning(&small).unwrap();
        assert!(warning.starts_with("provider `claude`: the context window of 32768 tokens"));
        assert!(warning.contains("automatic summaries are off"));
    }
}
