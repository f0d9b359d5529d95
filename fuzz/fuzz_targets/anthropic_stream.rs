//! The Anthropic Messages stream decoder on arbitrary SSE bodies.
#![no_main]

use troupe_llm::anthropic;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    troupe_fuzz::drain(anthropic::decode_sse("fuzz", troupe_fuzz::body(data)));
});
