//! Shell tokenizing, command analysis, hard blocks and rule matching through
//! the permission engine, on arbitrary command lines.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(command) = std::str::from_utf8(data) {
        troupe_fuzz::decide_command(command);
    }
});
