//! What the fuzz targets share: turning one fuzz input into the chunks a
//! network would deliver, and driving a decoded model stream to its end.
//! Each check is an ordinary function, so a crash a fuzzer finds can be
//! replayed from a test with the same input.

use bytes::Bytes;
use futures::StreamExt;
use troupe_llm::{EventStream, ProviderError};

/// Splits `data` into chunks: the first byte picks the chunk size (1 to 256
/// bytes), so the fuzzer explores every way a line or an event can be cut.
pub fn chunks(data: &[u8]) -> Vec<Bytes> {
    let Some((&size, rest)) = data.split_first() else {
        return Vec::new();
    };
    let size = usize::from(size) + 1;
    rest.chunks(size).map(Bytes::copy_from_slice).collect()
}

/// The chunks as the byte stream of an HTTP body.
pub fn body(
    data: &[u8],
) -> impl futures::Stream<Item = Result<Bytes, ProviderError>> + Send + 'static {
    futures::stream::iter(chunks(data).into_iter().map(Ok))
}

/// Reads a decoded stream to its end: every item is an event or a typed
/// error, never a panic, and the stream ends.
pub fn drain(stream: EventStream) -> usize {
    futures::executor::block_on(stream.map(|item| item.is_ok()).count())
}

/// Feeds `data` (cut into chunks) to the SSE parser and reads every event;
/// returns how many events it produced.
pub fn parse_sse(data: &[u8]) -> usize {
    let mut parser = troupe_llm::sse::SseParser::with_line_limit(4096);
    let mut events = 0;
    for chunk in chunks(data) {
        parser.push(&chunk);
        loop {
            match parser.next_event() {
                Ok(Some(event)) => {
                    events += 1;
                    assert!(event.data.len() <= 4096, "event data over the cap");
                }
                Ok(None) => break,
                Err(_) => return events,
            }
        }
    }
    while let Ok(Some(_)) = parser.finish() {
        events += 1;
    }
    events
}

/// Decides a shell command under a permission engine with a few rules in
/// default mode; the verdict is computed without a panic, and a command a
/// deny rule names is never allowed.
pub fn decide_command(command: &str) -> bool {
    use std::sync::Arc;
    use troupe_config::PermissionSettings;
    use troupe_protocol::permission::{
        PermissionMode, PermissionSubject, RuleEntry, RuleSource, ToolCategory,
    };
    use troupe_permissions::{PermissionEngine, PermissionRequest};
    use troupe_paths::sandbox::PathSandbox;

    let root = std::env::temp_dir();
    let Ok(sandbox) = PathSandbox::new(&root, &[], None) else {
        return false;
    };
    let rule = |text: &str| RuleEntry {
        rule: text.into(),
        source: RuleSource::User,
    };
    let settings = PermissionSettings {
        mode: PermissionMode::Default,
        allow: vec![rule("Bash(git status*)"), rule("Bash(ls*)"), rule("Read")],
        ask: vec![rule("Bash(git push*)")],
        deny: vec![rule("Bash(rm -rf*)"), rule("Bash(curl*)")],
        extra_roots: Vec::new(),
    };
    let Ok(engine) = PermissionEngine::new(&settings, Arc::new(sandbox)) else {
        return false;
    };
    let request = PermissionRequest {
        tool_name: "bash".into(),
        category: ToolCategory::Execute,
        read_only: false,
        subject: PermissionSubject::Command {
            command: command.into(),
        },
    };
    let verdict = engine.verdict(&request);
    let allowed = verdict.decision.is_allow();
    if command.trim_start().starts_with("rm -rf") || command.trim_start().starts_with("curl") {
        assert!(!allowed, "a denied command was allowed: {command:?}");
    }
    let _ = troupe_permissions::check_rule_syntax(command);
    allowed
}

/// Parses a configuration file's text; any text gives a configuration or an
/// error that names a line within the text.
pub fn parse_config(text: &str) {
    use troupe_config::{ConfigError, parse_config_file};
    let path = std::path::Path::new("/fuzz/config.toml");
    match parse_config_file(path, text) {
        Ok(_) => {}
        Err(err) => {
            if let Some(line) = err.line() {
                let lines = text.split('\n').count().max(1);
                assert!(
                    (1..=lines).contains(&line),
                    "error line {line} outside the text of {lines} lines: {err}"
                );
            }
            assert!(
                !matches!(err, ConfigError::Read { .. }),
                "parsing text read a file: {err}"
            );
        }
    }
}

/// Decodes bytes as every kind of stored record and parses them as keys; a
/// damaged record is an error, never a panic.
pub fn decode_records(data: &[u8]) {
    use troupe_protocol::events::RunEvent;
    use troupe_protocol::model::Message;
    use troupe_store::layout;
    use troupe_store::{CompactionMarker, LedgerEntry, RunRecord, SessionMeta};
    let _ = layout::decode::<SessionMeta>(data);
    let _ = layout::decode::<RunRecord>(data);
    let _ = layout::decode::<Message>(data);
    let _ = layout::decode::<RunEvent>(data);
    let _ = layout::decode::<CompactionMarker>(data);
    let _ = layout::decode::<LedgerEntry>(data);
    let _ = layout::decode::<Vec<troupe_protocol::permission::RuleEntry>>(data);
    let _ = layout::parse_numbered_key("owner", data);
    let _ = layout::parse_child_key("owner", data);
    if let Ok(message) = layout::decode::<Message>(data) {
        // What decodes encodes again and decodes to the same message.
        let bytes = layout::encode(&message).expect("a decoded message encodes");
        assert_eq!(layout::decode::<Message>(&bytes).ok(), Some(message));
    }
}

/// Validates raw arguments for a built-in tool picked by the first byte;
/// what validates is a JSON object.
pub fn validate_arguments(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let registry = troupe_tools::builtin_registry();
    let names: Vec<String> = registry.names().map(str::to_string).collect();
    if names.is_empty() {
        return;
    }
    let name = &names[usize::from(pick) % names.len()];
    let raw = String::from_utf8_lossy(rest);
    if let Ok(value) = registry.validate(name, &raw) {
        assert!(value.is_object(), "{name} accepted a non-object: {value}");
    }
}
