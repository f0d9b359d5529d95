//! The token estimate: the last real usage reported by the provider plus the
//! characters added to the history since, at 3.5 characters a token. A model
//! call of the agent re-anchors it; any compaction resets it (the history it
//! measured is gone); a summary request never touches it.

use troupe_protocol::model::Usage;

/// Characters per token of text the provider has not counted yet, times 10.
const CHARS_PER_TOKEN_X10: u64 = 35;

/// What the estimate counts from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TokenEstimate {
    /// Tokens the provider reported for the last call (none after a reset).
    anchor_tokens: u64,
    /// Characters of history the anchor covers.
    anchor_chars: u64,
}

impl TokenEstimate {
    /// After a main model call whose usage was `usage`, when the request
    /// and its answer were `request_chars` characters (system prompt, tool
    /// definitions and history, the answer included).
    pub(crate) fn anchored(usage: &Usage, request_chars: u64) -> Self {
        Self {
            anchor_tokens: usage.input + usage.output + usage.cache_read + usage.cache_write,
            anchor_chars: request_chars,
        }
    }

    /// After a compaction: nothing is counted by the provider yet.
    pub(crate) fn reset() -> Self {
        Self::default()
    }

    /// After results of a request of `before_chars` characters were offloaded,
    /// leaving `after_chars`: the estimate scaled by what is left, so that a
    /// request smaller than the anchor's counts less than the anchor.
    pub(crate) fn shrunk(&self, before_chars: u64, after_chars: u64) -> Self {
        if after_chars >= before_chars || before_chars == 0 {
            return *self;
        }
        let before = u128::from(self.tokens(before_chars));
        Self {
            anchor_tokens: (before * u128::from(after_chars) / u128::from(before_chars)) as u64,
            anchor_chars: after_chars,
        }
    }

    /// The estimate for a request of `request_chars` characters, counted as
    /// [`TokenEstimate::anchored`] counts them (one that shrank below the
    /// anchor counts the anchor).
    pub(crate) fn tokens(&self, request_chars: u64) -> u64 {
        let added = request_chars.saturating_sub(self.anchor_chars);
        self.anchor_tokens + tokens_of_chars(added)
    }
}

/// Tokens of `chars` characters never counted by a provider (rounded up).
pub(crate) fn tokens_of_chars(chars: u64) -> u64 {
    (chars * 10).div_ceil(CHARS_PER_TOKEN_X10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_anchor_plus_new_characters() {
        let usage = Usage {
            input: 1_000,
            output: 200,
            cache_read: 5_000,
            cache_write: 300,
        };
        let estimate = TokenEstimate::anchored(&usage, 40_000);
        assert_eq!(estimate.tokens(40_000), 6_500);
        assert_eq!(estimate.tokens(40_035), 6_510);
        assert_eq!(
            estimate.tokens(10),
            6_500,
            "a shrunk history keeps the anchor"
        );
        assert_eq!(TokenEstimate::reset().tokens(3_500), 1_000);
        // Results offloaded out of the anchored part: scaled, not floored.
        let shrunk = estimate.shrunk(40_000, 10_000);
        assert_eq!(shrunk.tokens(10_000), 1_625);
        assert_eq!(shrunk.tokens(10_035), 1_635);
        assert_eq!(estimate.shrunk(40_000, 40_000), estimate);
        assert_eq!(tokens_of_chars(1), 1);
        assert_eq!(tokens_of_chars(0), 0);
    }
}
