//! Tool-argument validation of every built-in tool on arbitrary input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    troupe_fuzz::validate_arguments(data);
});
