//! web_fetch's HTML to Markdown conversion (main-content extraction, then
//! conversion) on arbitrary bytes taken as a page.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let html = String::from_utf8_lossy(data);
    let markdown = troupe_tools::web::html_to_markdown(&html, "https://example.org/a/page.html");
    assert!(markdown.len() <= 4 * html.len() + 256);
});
