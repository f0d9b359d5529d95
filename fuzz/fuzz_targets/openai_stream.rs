//! The OpenAI Chat Completions stream decoder on arbitrary SSE bodies.
#![no_main]

use troupe_llm::openai;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    troupe_fuzz::drain(openai::decode_sse("fuzz", troupe_fuzz::body(data)));
});
