//! Decoding stored records and keys of the session store from arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    troupe_fuzz::decode_records(data);
});
