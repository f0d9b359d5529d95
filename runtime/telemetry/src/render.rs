//! `troupe trace RUN`'s view of a run: the span tree of a run's
//! [`SpanRecord`]s as indented text. Pure; owns only the layout, reads nothing
//! and prints nothing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

use super::genai;
use super::local::{SpanEventRecord, SpanRecord, SpanStatus};

/// Attributes shown after a span's duration, in this order, with their labels.
const SHOWN: [(&str, &str); 13] = [
    (genai::USAGE_INPUT_TOKENS, "in"),
    (genai::USAGE_OUTPUT_TOKENS, "out"),
    (genai::USAGE_CACHE_READ_INPUT_TOKENS, "cache_read"),
    (genai::USAGE_CACHE_CREATION_INPUT_TOKENS, "cache_write"),
    (genai::RESPONSE_FINISH_REASONS, "finish"),
    (genai::TOOL_CALL_ID, "call"),
    (genai::APPROVAL_OUTCOME, "outcome"),
    (genai::COMPACTION_TOKENS_BEFORE, "before"),
    (genai::COMPACTION_TOKENS_AFTER, "after"),
    (genai::HOOK_EXIT_CODE, "exit"),
    (genai::HOOK_OUTCOME, "outcome"),
    (genai::RUN_STATUS, "status"),
    (genai::ERROR_TYPE, "error"),
];

/// The span tree of `records`: one line per span (name, duration, key
/// attributes; `ERROR` when the span failed), children indented under their
/// parent, siblings in start order; span events as `·` lines under their span.
/// Spans whose parent is not among the records are shown as roots. Empty input
/// gives an empty string.
///
/// ```text
/// invoke_agent main  1.20 s  run=r1 conversation=s1 status=finished
/// ├─ chat claude-sonnet-4-5  800 ms  model=claude-sonnet-4-5 in=1200 out=40 finish=tool_use
/// ├─ execute_tool read_file  3.1 ms  call=c1
/// │  · permission allow: read-only tool
/// └─ chat claude-sonnet-4-5  390 ms  model=claude-sonnet-4-5 in=1300 out=12 finish=end_turn
/// ```
pub fn render_span_tree(records: &[SpanRecord]) -> String {
    let ids: HashSet<&str> = records.iter().map(|r| r.span_id.as_str()).collect();
    let mut children: HashMap<&str, Vec<&SpanRecord>> = HashMap::new();
    let mut roots: Vec<&SpanRecord> = Vec::new();
    for record in records {
        match record.parent_span_id.as_deref() {
            Some(parent) if ids.contains(parent) && parent != record.span_id => {
                children.entry(parent).or_default().push(record);
            }
            _ => roots.push(record),
        }
    }
    let order = |a: &&SpanRecord, b: &&SpanRecord| {
        a.start
            .cmp(&b.start)
            .then_with(|| a.span_id.cmp(&b.span_id))
    };
    roots.sort_by(order);
    for list in children.values_mut() {
        list.sort_by(order);
    }

    let mut out = String::new();
    let mut visited: HashSet<&str> = HashSet::new();
    for root in roots {
        write_span(&mut out, root, "", "", &children, &mut visited);
    }
    out
}

fn write_span<'a>(
    out: &mut String,
    span: &'a SpanRecord,
    first_prefix: &str,
    rest_prefix: &str,
    children: &HashMap<&str, Vec<&'a SpanRecord>>,
    visited: &mut HashSet<&'a str>,
) {
    // Span ids are unique in a well-formed trace; a repeated id is shown once.
    if !visited.insert(span.span_id.as_str()) {
        return;
    }
    let _ = writeln!(out, "{first_prefix}{}", span_line(span));
    let kids = children
        .get(span.span_id.as_str())
        .map(Vec::as_slice)
        .unwrap_or_default();
    for event in &span.events {
        let _ = writeln!(out, "{rest_prefix}· {}", event_line(event));
    }
    for (i, kid) in kids.iter().enumerate() {
        let last = i + 1 == kids.len();
        let (branch, continuation) = if last {
            ("└─ ", "   ")
        } else {
            ("├─ ", "│  ")
        };
        write_span(
            out,
            kid,
            &format!("{rest_prefix}{branch}"),
            &format!("{rest_prefix}{continuation}"),
            children,
            visited,
        );
    }
}

fn span_line(span: &SpanRecord) -> String {
    let mut line = format!("{}  {}", span.name, format_duration(span.duration_ms));
    let mut details: Vec<String> = Vec::new();
    if let Some(run) = span.attribute(genai::RUN_ID)
        && span.parent_span_id.is_none()
    {
        details.push(format!("run={run}"));
    }
    if span.name.starts_with(genai::OP_INVOKE_AGENT)
        && let Some(conversation) = span.attribute(genai::CONVERSATION_ID)
    {
        details.push(format!("conversation={conversation}"));
    }
    let model = span
        .attribute(genai::RESPONSE_MODEL)
        .or_else(|| span.attribute(genai::REQUEST_MODEL));
    if let Some(model) = model {
        details.push(format!("model={model}"));
    }
    for (key, label) in SHOWN {
        if let Some(value) = span.attribute(key) {
            details.push(format!("{label}={value}"));
        }
    }
    if let SpanStatus::Error { description } = &span.status {
        let shown = span.attribute(genai::ERROR_TYPE) == Some(description.as_str());
        if description.is_empty() || shown {
            details.push("ERROR".to_string());
        } else {
            details.push(format!("ERROR {description}"));
        }
    }
    if !details.is_empty() {
        line.push_str("  ");
        line.push_str(&details.join(" "));
    }
    line
}

fn event_line(event: &SpanEventRecord) -> String {
    if event.name == genai::PERMISSION_EVENT {
        let decision = event
            .attributes
            .get(genai::PERMISSION_DECISION)
            .map(String::as_str)
            .unwrap_or("?");
        return match event.attributes.get(genai::PERMISSION_REASON) {
            Some(reason) if !reason.is_empty() => format!("permission {decision}: {reason}"),
            _ => format!("permission {decision}"),
        };
    }
    let attributes: BTreeMap<&str, &str> = event
        .attributes
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut line = event.name.clone();
    for (key, value) in attributes {
        let _ = write!(line, " {key}={value}");
    }
    line
}

/// `0.42 ms`, `3.1 ms`, `812 ms`, `1.23 s`, `75.0 s`.
pub(crate) fn format_duration(ms: f64) -> String {
    if ms < 1.0 {
        format!("{ms:.2} ms")
    } else if ms < 10.0 {
        format!("{ms:.1} ms")
    } else if ms < 1_000.0 {
        format!("{ms:.0} ms")
    } else if ms < 10_000.0 {
        format!("{:.2} s", ms / 1_000.0)
    } else {
        format!("{:.1} s", ms / 1_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Duration, Utc};

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp_millis(1_780_000_000_000 + ms).unwrap()
    }

    fn rec(id: &str, parent: Option<&str>, name: &str, start: i64, ms: i64) -> SpanRecord {
        SpanRecord {
            trace_id: "t".into(),
            span_id: id.into(),
            parent_span_id: parent.map(str::to_string),
            name: name.into(),
            start: at(start),
            end: at(start) + Duration::milliseconds(ms),
            duration_ms: ms as f64,
            status: SpanStatus::Unset,
            attributes: BTreeMap::new(),
            events: Vec::new(),
        }
    }

    #[test]
    fn durations_are_readable() {
        assert_eq!(format_duration(0.421), "0.42 ms");
        assert_eq!(format_duration(3.06), "3.1 ms");
        assert_eq!(format_duration(812.4), "812 ms");
        assert_eq!(format_duration(1_234.0), "1.23 s");
        assert_eq!(format_duration(75_000.0), "75.0 s");
    }

    #[test]
    fn empty_input_renders_nothing() {
        assert_eq!(render_span_tree(&[]), "");
    }

    #[test]
    fn siblings_are_ordered_by_start_and_orphans_become_roots() {
        let records = vec![
            rec("c", Some("a"), "second", 20, 5),
            rec("b", Some("a"), "first", 10, 5),
            rec("a", None, "root", 0, 100),
            rec("x", Some("missing"), "orphan", 50, 1),
            rec("d", Some("c"), "grandchild", 21, 2),
        ];
        let text = render_span_tree(&records);
        let expected = "\
root  100 ms
├─ first  5.0 ms
└─ second  5.0 ms
   └─ grandchild  2.0 ms
orphan  1.0 ms
";
        assert_eq!(text, expected);
    }

    #[test]
    fn errors_and_events_are_shown() {
        let mut tool = rec("b", Some("a"), "execute_tool bash", 1, 40);
        tool.attributes
            .insert(genai::ERROR_TYPE.into(), "timeout".into());
        tool.status = SpanStatus::Error {
            description: "timeout".into(),
        };
        tool.events.push(SpanEventRecord {
            name: genai::PERMISSION_EVENT.into(),
            time: at(1),
            attributes: BTreeMap::from([
                (genai::PERMISSION_DECISION.into(), "allow".into()),
                (
                    genai::PERMISSION_REASON.into(),
                    "rule Bash(cargo test*)".into(),
                ),
            ]),
        });
        let mut other = rec("c", Some("a"), "hook Stop", 50, 2);
        other.status = SpanStatus::Error {
            description: "exit 1".into(),
        };
        other.events.push(SpanEventRecord {
            name: "note".into(),
            time: at(50),
            attributes: BTreeMap::from([("k".into(), "v".into())]),
        });
        let text = render_span_tree(&[rec("a", None, "invoke_agent main", 0, 60), tool, other]);
        let expected = "\
invoke_agent main  60 ms
├─ execute_tool bash  40 ms  error=timeout ERROR
│  · permission allow: rule Bash(cargo test*)
└─ hook Stop  2.0 ms  ERROR exit 1
   · note k=v
";
        assert_eq!(text, expected);
    }

    #[test]
    fn a_self_parented_or_repeated_span_does_not_loop() {
        let records = vec![
            rec("a", Some("a"), "self", 0, 1),
            rec("a", None, "dup", 1, 1),
        ];
        let text = render_span_tree(&records);
        assert_eq!(text.lines().count(), 1, "{text}");
    }
}
