//! Configuration loading (TOML syntax, the file shape, validation) on
//! arbitrary text.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        troupe_fuzz::parse_config(text);
    }
});
