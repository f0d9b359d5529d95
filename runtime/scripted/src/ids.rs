//! Deterministic, protocol-looking identifiers for the scripted server: tool call
//! ids (`toolu_…`, `call_…`), message ids (`msg_…`, `chatcmpl-…`, `resp_…`) and request ids
//! (`req_…`).
//!
//! Ids are derived from a per-server counter through a fixed mixing function, so a
//! test run produces the same ids every time. This module only makes strings; it
//! must not know about requests, scripts or HTTP.

/// Alphabet of the random-looking part of every id (the providers use base62).
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Length of the random part of an Anthropic tool id after `toolu_01`
/// (fixtures/sse: `toolu_01NRLabsLyVHZPKxbKvkfSMn`).
const ANTHROPIC_TOOL_ID_TAIL: usize = 22;
/// Length of the random part of an OpenAI tool call id after `call_`
/// (fixtures/sse: `call_JMW1whyEaYG438VE1OIflxA2`).
const OPENAI_CALL_ID_TAIL: usize = 24;
/// Length of the random part of an Anthropic message id after `msg_01`
/// (fixtures/sse: `msg_019Q1hrJbZG26Fb9BQhrkHEr`).
const ANTHROPIC_MESSAGE_ID_TAIL: usize = 22;
/// Length of the random part of an OpenAI completion id after `chatcmpl-`
/// (fixtures/sse: `chatcmpl-ABfw031mOJeYCSHe4yI2ZjOA6kMJL`).
const OPENAI_COMPLETION_ID_TAIL: usize = 29;
/// Length of the random part of an OpenAI Responses id after `resp_`.
const OPENAI_RESPONSE_ID_TAIL: usize = 32;
/// Length of the random part of a request id after `req_011C`
/// (fixtures/ERRORS.md: `req_011CVQe1dLrGNMJyE1ghG1av`).
const REQUEST_ID_TAIL: usize = 20;

/// Golden-ratio increment of the splitmix64 generator.
const SPLITMIX_INCREMENT: u64 = 0x9E37_79B9_7F4A_7C15;

/// Produces deterministic ids; one per server.
#[derive(Debug, Default)]
pub(crate) struct IdGen {
    state: u64,
}

impl IdGen {
    /// A generator whose sequence starts from `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// `toolu_01` followed by 22 base62 characters.
    pub(crate) fn anthropic_tool_id(&mut self) -> String {
        format!("toolu_01{}", self.tail(ANTHROPIC_TOOL_ID_TAIL))
    }

    /// `call_` followed by 24 base62 characters.
    pub(crate) fn openai_call_id(&mut self) -> String {
        format!("call_{}", self.tail(OPENAI_CALL_ID_TAIL))
    }

    /// `msg_01` followed by 22 base62 characters.
    pub(crate) fn anthropic_message_id(&mut self) -> String {
        format!("msg_01{}", self.tail(ANTHROPIC_MESSAGE_ID_TAIL))
    }

    /// `chatcmpl-` followed by 29 base62 characters.
    pub(crate) fn openai_completion_id(&mut self) -> String {
        format!("chatcmpl-{}", self.tail(OPENAI_COMPLETION_ID_TAIL))
    }

    /// `resp_` followed by 32 base62 characters.
    pub(crate) fn openai_response_id(&mut self) -> String {
        format!("resp_{}", self.tail(OPENAI_RESPONSE_ID_TAIL))
    }

    /// `req_011C` followed by 20 base62 characters.
    pub(crate) fn request_id(&mut self) -> String {
        format!("req_011C{}", self.tail(REQUEST_ID_TAIL))
    }

    fn next_u64(&mut self) -> u64 {
        // splitmix64: a tiny, well-mixed sequence; quality is irrelevant beyond
        // "looks random and never repeats within a test".
        self.state = self.state.wrapping_add(SPLITMIX_INCREMENT);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn tail(&mut self, len: usize) -> String {
        let mut out = String::with_capacity(len);
        let mut word = self.next_u64();
        let mut left_in_word = 0u32;
        for _ in 0..len {
            if left_in_word == 0 {
                word = self.next_u64();
                // 62^10 < 2^64: ten base62 digits per 64-bit word.
                left_in_word = 10;
            }
            let digit = (word % BASE62.len() as u64) as usize;
            word /= BASE62.len() as u64;
            left_in_word -= 1;
            out.push(char::from(BASE62[digit]));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ids_have_the_provider_shapes() {
        let mut ids = IdGen::new(7);
        let tool = ids.anthropic_tool_id();
        assert!(tool.starts_with("toolu_01"));
        assert_eq!(tool.len(), "toolu_01".len() + ANTHROPIC_TOOL_ID_TAIL);
        let call = ids.openai_call_id();
        assert!(call.starts_with("call_"));
        assert_eq!(call.len(), "call_".len() + OPENAI_CALL_ID_TAIL);
        assert!(ids.anthropic_message_id().starts_with("msg_01"));
        assert!(ids.openai_completion_id().starts_with("chatcmpl-"));
        assert!(ids.request_id().starts_with("req_011C"));
        assert!(
            call["call_".len()..]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric())
        );
    }

    #[test]
    fn ids_are_deterministic_and_distinct() {
        let a: Vec<String> = {
            let mut ids = IdGen::new(1);
            (0..100).map(|_| ids.openai_call_id()).collect()
        };
        let b: Vec<String> = {
            let mut ids = IdGen::new(1);
            (0..100).map(|_| ids.openai_call_id()).collect()
        };
        assert_eq!(a, b);
        let unique: HashSet<&String> = a.iter().collect();
        assert_eq!(unique.len(), a.len());
    }
}
