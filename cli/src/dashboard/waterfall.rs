//! The span waterfall's layout: a run's span records as rows in start
//! order, each child under its parent (depth-first), with its bar's offset
//! and width as fractions of the whole run. A sub-agent's spans are children
//! of the `execute_tool agent` span that started it, so they sit under it.
//! Pure; the page draws the rows.

use std::collections::{BTreeMap, HashSet};

use troupe_telemetry::SpanRecord;

/// One row of the waterfall.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row<'s> {
    /// The span.
    pub span: &'s SpanRecord,
    /// How many ancestors it has among the run's spans.
    pub depth: usize,
    /// Where its bar starts, from 0 (the run's first start) to 1 (its last
    /// end).
    pub offset: f64,
    /// How long its bar is, as a fraction of the run.
    pub width: f64,
}

/// The rows of `spans`: roots (spans whose parent is not among them) in
/// start order, each followed by its children, recursively, in start order.
pub(crate) fn rows(spans: &[SpanRecord]) -> Vec<Row<'_>> {
    let Some(first) = spans.iter().map(|span| span.start).min() else {
        return Vec::new();
    };
    let last = spans.iter().map(|span| span.end).max().unwrap_or(first);
    let total_ms = (last - first).num_microseconds().unwrap_or(0) as f64 / 1_000.0;
    let ids: HashSet<&str> = spans.iter().map(|span| span.span_id.as_str()).collect();
    let mut children: BTreeMap<Option<&str>, Vec<&SpanRecord>> = BTreeMap::new();
    for span in spans {
        let parent = span
            .parent_span_id
            .as_deref()
            .filter(|parent| ids.contains(parent) && *parent != span.span_id);
        children.entry(parent).or_default().push(span);
    }
    for list in children.values_mut() {
        list.sort_by(|a, b| a.start.cmp(&b.start).then(a.span_id.cmp(&b.span_id)));
    }
    let mut rows = Vec::with_capacity(spans.len());
    let mut seen = HashSet::new();
    // Roots first; then whatever a cycle of parent ids kept from being
    // reached, drawn once as a root of its own.
    let mut by_start: Vec<&SpanRecord> = spans.iter().collect();
    by_start.sort_by(|a, b| a.start.cmp(&b.start).then(a.span_id.cmp(&b.span_id)));
    let roots = children.get(&None).cloned().unwrap_or_default();
    for top in roots.into_iter().chain(by_start) {
        let mut stack = vec![(top, 0)];
        while let Some((span, depth)) = stack.pop() {
            if !seen.insert(span.span_id.as_str()) {
                continue;
            }
            let offset_ms = (span.start - first).num_microseconds().unwrap_or(0) as f64 / 1_000.0;
            let (offset, width) = if total_ms > 0.0 {
                (offset_ms / total_ms, span.duration_ms.max(0.0) / total_ms)
            } else {
                (0.0, 1.0)
            };
            let offset = offset.clamp(0.0, 1.0);
            rows.push(Row {
                span,
                depth,
                offset,
                width: width.clamp(0.0, 1.0 - offset),
            });
            if let Some(kids) = children.get(&Some(span.span_id.as_str())) {
                stack.extend(kids.iter().rev().map(|kid| (*kid, depth + 1)));
            }
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use troupe_telemetry::SpanStatus;

    use super::*;

    fn span(id: &str, parent: Option<&str>, name: &str, start: i64, end: i64) -> SpanRecord {
        let at = |ms: i64| Utc.timestamp_millis_opt(1_700_000_000_000 + ms).unwrap();
        SpanRecord {
            trace_id: "0".repeat(32),
            span_id: id.into(),
            parent_span_id: parent.map(Into::into),
            name: name.into(),
            start: at(start),
            end: at(end),
            duration_ms: (end - start) as f64,
            status: SpanStatus::Unset,
            attributes: Default::default(),
            events: Vec::new(),
        }
    }

    #[test]
    fn children_follow_their_parent_in_start_order() {
        let spans = vec![
            span("c2", Some("root"), "execute_tool agent", 50, 90),
            span("root", None, "invoke_agent main", 0, 100),
            span("c1", Some("root"), "chat m", 10, 40),
            span("g1", Some("c2"), "invoke_agent main/fork-1", 55, 85),
            span("orphan", Some("gone"), "chat lost", 95, 100),
        ];
        let rows = rows(&spans);
        let order: Vec<(&str, usize)> = rows
            .iter()
            .map(|row| (row.span.span_id.as_str(), row.depth))
            .collect();
        assert_eq!(
            order,
            [("root", 0), ("c1", 1), ("c2", 1), ("g1", 2), ("orphan", 0)]
        );
        assert_eq!(rows[0].offset, 0.0);
        assert_eq!(rows[0].width, 1.0);
        assert!((rows[2].offset - 0.5).abs() < 1e-9);
        assert!((rows[2].width - 0.4).abs() < 1e-9);
    }

    #[test]
    fn a_cycle_and_an_empty_run_are_drawn_without_looping() {
        assert!(rows(&[]).is_empty());
        let spans = vec![
            span("a", Some("b"), "x", 0, 0),
            span("b", Some("a"), "y", 0, 0),
            span("s", Some("s"), "self", 0, 0),
        ];
        let rows = rows(&spans);
        let order: Vec<(&str, usize)> = rows
            .iter()
            .map(|row| (row.span.span_id.as_str(), row.depth))
            .collect();
        assert_eq!(order, [("s", 0), ("a", 0), ("b", 1)]);
        assert_eq!(rows[0].width, 1.0);
    }
}
