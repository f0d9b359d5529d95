//! The SSE parser on arbitrary bytes cut at arbitrary places.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    troupe_fuzz::parse_sse(data);
});
