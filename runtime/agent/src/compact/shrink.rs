//! Whether a compaction shrinks the history enough to be worth it. A summary
//! costs a request carrying the whole older part, and the history it leaves
//! starts with a new prefix (the provider's prompt cache starts over); one
//! that removes little — or grows the history, as a summary of a short first
//! message followed by one huge tool batch does — is worse than none. So, at
//! the threshold, the loop chooses between a summary, offloading large tool
//! results wherever they are (the recent batch included), and skipping the
//! compaction (counted as a failure by the breaker); and a summary that came
//! back is applied only when it shrank the request by the margin.
//!
//! Sizes are characters of requests as sent (the ledger applied: replaced
//! results count their previews), as the estimate counts them: a comparison
//! of characters holds whichever way tokens are later estimated.

/// The least part of a request (in percent) a compaction must remove to be
/// worth it: a tenth. That is more than the estimate's own error (the
/// threshold keeps 13,000 tokens for it, 6.5% of a 200,000-token window), so
/// a compaction that passes did shrink the history; and a summary saving a
/// tenth of every later request repays its own request (about the older
/// part, plus a few thousand tokens of answer) and the prompt cache its new
/// prefix loses within a few turns. Below that it is not worth a request.
pub(crate) const MIN_SAVING_PERCENT: u64 = 10;

/// A compaction aims at leaving the request at this share of the threshold
/// (in percent): offloading large results goes on, largest first, until the
/// estimate is there.
pub(crate) const RELIEF_TARGET_PERCENT: u64 = 50;

/// The least characters a compaction must remove from a request of
/// `request_chars`.
pub(crate) fn min_saving(request_chars: u64) -> u64 {
    request_chars * MIN_SAVING_PERCENT / 100
}

/// Whether a request went from `before` to `after` characters by the
/// margin (a compaction that did not is discarded).
pub(crate) fn shrank_enough(before: u64, after: u64) -> bool {
    after.saturating_add(min_saving(before)) <= before
}

/// What a history offers a summary, in characters as requests carry them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sizes {
    /// The whole next request (system prompt, tools, history).
    pub request: u64,
    /// The part before the cut, which a summary replaces (0: no cut).
    pub older: u64,
    /// What replaces it before the summary's own text: the message's frame
    /// and the recovery attachment.
    pub replacement: u64,
}

impl Sizes {
    /// Whether summarising the older part can shrink the request by the
    /// margin, before the summary's own text is counted (the answer is
    /// checked again with it, [`shrank_enough`]).
    pub(crate) fn worth_summarising(&self) -> bool {
        self.older > 0 && self.older.saturating_sub(self.replacement) >= min_saving(self.request)
    }

    /// Characters a summary would leave, its own text aside.
    pub(crate) fn left_by_summary(&self) -> u64 {
        self.request - self.older.min(self.request) + self.replacement
    }
}

/// What to do when the estimate is at the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Offload large tool results (the recent ones included) first.
    Offload,
    /// Summarise the older part.
    Summarise,
    /// Neither helps: no request; counted as a failure, and said why.
    Skip(&'static str),
}

/// Why a summary was not asked for when nothing precedes the recent
/// messages.
pub(crate) const NOTHING_BEFORE_THE_TAIL: &str =
    "nothing precedes the recent messages that a summary could replace";
/// Why a summary was not asked for when the older part is too small.
pub(crate) const TOO_LITTLE_TO_SUMMARISE: &str =
    "summarising the older messages would not shrink the history by a tenth";
/// Why a summary that came back was not applied.
pub(crate) const SUMMARY_DID_NOT_SHRINK: &str =
    "the summary would not have shrunk the history by a tenth";

/// The step at the threshold, for an estimate of `estimate` tokens and a
/// threshold of `threshold`; `can_offload`: large results could still be
/// offloaded. Offloading comes first when a summary is not worth it, and
/// when the tail it keeps (with the rest it leaves) would still be at the
/// threshold: the recent batch is too large to keep verbatim.
pub(crate) fn choose(sizes: Sizes, estimate: u64, threshold: u64, can_offload: bool) -> Step {
    let worth = sizes.worth_summarising();
    if can_offload && (!worth || left_tokens(sizes, estimate) >= threshold) {
        return Step::Offload;
    }
    if worth {
        Step::Summarise
    } else if sizes.older == 0 {
        Step::Skip(NOTHING_BEFORE_THE_TAIL)
    } else {
        Step::Skip(TOO_LITTLE_TO_SUMMARISE)
    }
}

/// The estimate of what a summary leaves: the current estimate scaled by the
/// characters left (its own text aside).
fn left_tokens(sizes: Sizes, estimate: u64) -> u64 {
    if sizes.request == 0 {
        return 0;
    }
    let left = u128::from(sizes.left_by_summary());
    (u128::from(estimate) * left / u128::from(sizes.request)) as u64
}

/// Characters to offload from a request of `request_chars` estimated at
/// `estimate` tokens for it to come down to [`RELIEF_TARGET_PERCENT`] of
/// `threshold`.
pub(crate) fn relief_needed(request_chars: u64, estimate: u64, threshold: u64) -> u64 {
    let target = threshold * RELIEF_TARGET_PERCENT / 100;
    let excess = estimate.saturating_sub(target);
    if estimate == 0 {
        return 0;
    }
    (u128::from(request_chars) * u128::from(excess)).div_ceil(u128::from(estimate)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenth_of_the_request_must_go() {
        assert_eq!(min_saving(100_000), 10_000);
        assert!(shrank_enough(100_000, 90_000));
        assert!(!shrank_enough(100_000, 90_001));
        assert!(!shrank_enough(100_000, 110_000), "a grown history");
        assert!(shrank_enough(0, 0));
    }

    #[test]
    fn a_summary_is_worth_it_when_the_older_part_outweighs_its_replacement_by_the_margin() {
        let sizes = |older, replacement| Sizes {
            request: 300_000,
            older,
            replacement,
        };
        assert!(!sizes(0, 0).worth_summarising(), "no cut");
        assert!(!sizes(11, 2_000).worth_summarising(), "the task alone");
        assert!(sizes(32_000, 2_000).worth_summarising());
        assert!(!sizes(31_999, 2_000).worth_summarising());
        assert_eq!(sizes(32_000, 2_000).left_by_summary(), 270_000);
    }

    #[test]
    fn one_huge_recent_batch_is_offloaded_then_skipped_never_summarised() {
        // The task (11 characters) then 300,000 characters of results.
        let batch = Sizes {
            request: 320_000,
            older: 11,
            replacement: 2_000,
        };
        assert_eq!(choose(batch, 91_000, 87_000, true), Step::Offload);
        assert_eq!(
            choose(batch, 91_000, 87_000, false),
            Step::Skip(TOO_LITTLE_TO_SUMMARISE)
        );
        let no_cut = Sizes { older: 0, ..batch };
        assert_eq!(
            choose(no_cut, 91_000, 87_000, false),
            Step::Skip(NOTHING_BEFORE_THE_TAIL)
        );
    }

    #[test]
    fn a_tail_that_alone_exceeds_the_threshold_is_offloaded_before_a_summary() {
        // A third is older history worth summarising; what is left is still
        // above the threshold.
        let sizes = Sizes {
            request: 450_000,
            older: 150_000,
            replacement: 2_000,
        };
        assert!(sizes.worth_summarising());
        assert_eq!(choose(sizes, 135_000, 87_000, true), Step::Offload);
        // Nothing left to offload: the summary still helps.
        assert_eq!(choose(sizes, 135_000, 87_000, false), Step::Summarise);
        // A tail that fits: summarised straight away.
        assert_eq!(choose(sizes, 90_000, 87_000, true), Step::Summarise);
    }

    #[test]
    fn relief_aims_at_half_the_threshold() {
        // 91,000 tokens for 320,000 characters: 47,500 tokens too many.
        assert_eq!(relief_needed(320_000, 91_000, 87_000), 167_033);
        assert_eq!(relief_needed(320_000, 40_000, 87_000), 0);
        assert_eq!(relief_needed(0, 0, 87_000), 0);
    }
}
