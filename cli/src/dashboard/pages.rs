//! The dashboard's HTML, rendered on the server with `maud`: every value
//! goes through its escaping by type, and text from outside Troupe (prompts,
//! model text, tool output, file names) passes
//! [`crate::sanitize::for_terminal`] first, so a terminal escape shows as
//! text too. Markdown goes through [`super::markdown`], the one place that
//! writes HTML itself. No page holds an inline script or style: the scripts
//! are the files under `/assets/`, and bars are drawn as SVG attributes.

use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use troupe_actors::AgentStatus;
use troupe_protocol::events::{EventKind, RunEvent};
use troupe_protocol::model::{ContentBlock, Message, Role};
use troupe_store::{RunRecord, SessionMeta, short_id};
use troupe_telemetry::SpanStatus;

use super::model::{FilesShown, RunView};
use super::waterfall::Row;

/// Text from outside, with terminal controls made harmless (escaping for
/// HTML is maud's).
fn clean(text: &str) -> String {
    crate::sanitize::for_terminal(text).into_owned()
}

/// Above this many characters, a tool result or argument is folded (shown
/// in a `<details>` element).
const FOLD_CHARS: usize = 400;

/// Above this many lines, likewise.
const FOLD_LINES: usize = 6;

/// Whether `text` is long enough to be folded.
fn folded(text: &str) -> bool {
    text.chars().count() > FOLD_CHARS || text.lines().count() > FOLD_LINES
}

/// A block of outside text, folded when long.
fn text_block(summary: &str, text: &str) -> Markup {
    let text = clean(text);
    html! {
        @if folded(&text) {
            details { summary { (summary) } pre.out { (text) } }
        } @else {
            pre.out { (text) }
        }
    }
}

/// A time as pages show it.
fn when(at: &DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// A duration in seconds as pages show it (`4.2 s`, `3 min 5 s`).
pub(crate) fn duration_text(seconds: f64) -> String {
    if seconds < 60.0 {
        format!("{seconds:.1} s")
    } else {
        let whole = seconds.round() as u64;
        format!("{} min {} s", whole / 60, whole % 60)
    }
}

/// At most `limit` characters of `text`, marked with `…` when cut.
pub(crate) fn shortened(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// Every page: the security-minded head, the navigation, the body. `csrf`
/// is the session's token, sent by htmx with every request it makes.
pub(crate) fn layout(title: &str, csrf: &str, body: Markup) -> Markup {
    let headers = serde_json::json!({ "X-CSRF-Token": csrf }).to_string();
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="no-referrer";
                meta name="htmx-config" content=(super::HTMX_CONFIG);
                title { (title) " · troupe" }
                link rel="stylesheet" href="/assets/dashboard.css";
                script src="/assets/htmx.min.js" {}
                script src="/assets/htmx-ext-sse.min.js" {}
                script src="/assets/dashboard.js" {}
            }
            body hx-headers=(headers) {
                nav {
                    a href="/" { "Runs" }
                    a href="/sessions" { "Sessions" }
                    a href="/costs" { "Costs" }
                }
                main { (body) }
            }
        }
    }
}

/// The page a request without a session gets (with status 401): how to log
/// in, and the login script, which exchanges a code in the URL's fragment.
pub(crate) fn login_page() -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "Log in · troupe" }
                link rel="stylesheet" href="/assets/dashboard.css";
                script src="/assets/login.js" defer {}
            }
            body {
                main {
                    h1 { "Troupe dashboard" }
                    p #login-status {
                        "Not logged in. Run " code { "troupe dashboard" }
                        " and open the URL it prints."
                    }
                }
            }
        }
    }
}

/// A short page saying what went wrong.
pub(crate) fn problem_page(title: &str, message: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) " · troupe" }
                link rel="stylesheet" href="/assets/dashboard.css";
            }
            body { main { h1 { (title) } p { (message) } a href="/" { "Runs" } } }
        }
    }
}

/// One row of the runs list.
#[derive(Debug, Clone)]
pub(crate) struct RunRow {
    /// The run.
    pub run: RunRecord,
    /// Its session's working directory.
    pub project: String,
    /// Its agents: the main one and the sub-agents whose sessions it made.
    pub agents: usize,
    /// The tokens it used so far.
    pub tokens: troupe_protocol::model::Usage,
}

/// The run's status as a CSS class and text.
fn status_badge(status: &str) -> Markup {
    html! { span class={ "status " (status) } data-status=(status) { (status) } }
}

/// The rows of the runs table (what the live stream replaces).
pub(crate) fn runs_rows(rows: &[RunRow], now: DateTime<Utc>) -> Markup {
    html! {
        @if rows.is_empty() {
            tr { td colspan="8" { "No runs match." } }
        }
        @for row in rows {
            @let run = &row.run;
            @let end = run.ended.unwrap_or(now);
            tr data-run=(run.run_id) {
                td { a href={ "/runs/" (run.run_id) } { code { (short_id(&run.run_id)) } } }
                td { (status_badge(run.status.as_str())) }
                td.project { (clean(&row.project)) }
                td.prompt { (clean(&shortened(&run.prompt, 160))) }
                td.num { (row.agents) }
                td.num { (row.tokens.total()) }
                td { (when(&run.started)) }
                td { (duration_text((end - run.started).num_milliseconds().max(0) as f64 / 1000.0)) }
            }
        }
    }
}

/// The runs page: filters, the table (kept live), paging.
pub(crate) fn runs_page(
    csrf: &str,
    rows: &[RunRow],
    filter: &super::RunsQuery,
    has_next: bool,
    now: DateTime<Utc>,
) -> Markup {
    let page = filter.page.unwrap_or(0);
    let status = filter.status.clone().unwrap_or_default();
    let project = filter.project.clone().unwrap_or_default();
    let live = format!("/live/runs?{}", filter.query_string(page));
    let body = html! {
        h1 { "Runs" }
        form.filters method="get" action="/" {
            label { "Status "
                select name="status" {
                    @for choice in ["", "running", "finished", "stopped", "cancelled", "error", "interrupted"] {
                        option value=(choice) selected[choice == status] {
                            @if choice.is_empty() { "any" } @else { (choice) }
                        }
                    }
                }
            }
            label { "Project " input type="text" name="project" value=(project); }
            button type="submit" { "Filter" }
        }
        div.scroll {
            table.runs {
                thead { tr { th { "Run" } th { "Status" } th { "Project" } th { "Prompt" } th { "Agents" } th { "Tokens" } th { "Started" } th { "Duration" } } }
                tbody #runs hx-ext="sse" sse-connect=(live) sse-swap="runs" {
                    (runs_rows(rows, now))
                }
            }
        }
        (pager("/", filter, page, has_next))
    };
    layout("Runs", csrf, body)
}

fn pager(base: &str, filter: &super::RunsQuery, page: usize, has_next: bool) -> Markup {
    html! {
        p.pager {
            @if page > 0 { a href={ (base) "?" (filter.query_string(page - 1)) } { "← newer" } }
            " page " (page.saturating_add(1)) " "
            @if has_next { a href={ (base) "?" (filter.query_string(page.saturating_add(1))) } { "older →" } }
        }
    }
}

/// One event of a run's transcript, or `None` for events that are state
/// only (usage, iterations).
pub(crate) fn transcript_entry(event: &RunEvent) -> Option<Markup> {
    let agent = event.agent_path.as_str();
    let tag = html! { span.agent { (agent) } };
    let entry = match &event.kind {
        EventKind::TextDelta { text } => {
            html! { span.text data-agent=(agent) { (clean(text)) } }
        }
        EventKind::ThinkingDelta { .. } | EventKind::Usage { .. } | EventKind::Iteration { .. } => {
            return None;
        }
        EventKind::RunStarted { prompt } => html! {
            div.entry.prompt data-agent=(agent) { (tag) " prompt" (text_block("prompt", prompt)) }
        },
        EventKind::UserMessage { text } => html! {
            div.entry.user data-agent=(agent) { (tag) " message" (text_block("message", text)) }
        },
        EventKind::ToolStarted {
            call_id,
            name,
            args_preview,
            target,
        } => html! {
            div.entry.tool data-agent=(agent) data-call=(call_id) {
                (tag) " " strong { (clean(name)) }
                @if let Some(target) = target { " " code.target { (clean(target)) } }
                (text_block("arguments", args_preview))
            }
        },
        EventKind::ToolFinished {
            call_id,
            name,
            is_error,
            output_preview,
            output_lines,
            duration_ms,
        } => html! {
            div.entry.result.error[*is_error] data-agent=(agent) data-call=(call_id) {
                (tag) " " (clean(name)) " "
                @if *is_error { "failed" } @else { "done" }
                " in " (duration_text(*duration_ms as f64 / 1000.0)) ", " (output_lines) " lines"
                (text_block("result", output_preview))
            }
        },
        EventKind::ApprovalRequested { tool, reason, .. } => html! {
            div.entry.approval data-agent=(agent) { (tag) " asks to run " strong { (clean(tool)) } ": " (clean(reason)) }
        },
        EventKind::ApprovalResolved { outcome, .. } => html! {
            div.entry.approval data-agent=(agent) { (tag) " answered: " (outcome.as_str()) }
        },
        EventKind::SubagentStarted { role, task } => html! {
            div.entry.subagent data-agent=(agent) { (tag) " started as " (clean(role)) (text_block("task", task)) }
        },
        EventKind::SubagentFinished { status } => html! {
            div.entry.subagent data-agent=(agent) { (tag) " ended: " (status.as_str()) }
        },
        EventKind::Compaction {
            phase,
            before_tokens,
            after_tokens,
            ..
        } => html! {
            div.entry.notice data-agent=(agent) { (tag) " compaction " (clean(phase)) ": " (before_tokens) " → " (after_tokens) " tokens" }
        },
        EventKind::Notice { text, .. } => html! {
            div.entry.notice data-agent=(agent) { (tag) " " (clean(text)) }
        },
        EventKind::Hook {
            event: hook,
            outcome,
            message,
            ..
        } => html! {
            div.entry.notice data-agent=(agent) {
                (tag) " hook " (clean(hook)) ": " (clean(outcome))
                @if let Some(message) = message { " — " (clean(message)) }
            }
        },
        EventKind::PlanUpdated { .. } => html! {
            div.entry.notice data-agent=(agent) { (tag) " updated the plan" }
        },
        EventKind::CheckpointCreated {
            number, skipped, ..
        } => html! {
            div.entry.notice data-agent=(agent) {
                (tag) " checkpoint " (number) " taken"
                @if *skipped > 0 { " (" (skipped) " paths left out)" }
            }
        },
        EventKind::Rewound {
            to_run,
            files_restored,
            ..
        } => html! {
            div.entry.notice data-agent=(agent) {
                (tag) " the conversation was rewound to the end of run " (to_run)
                @if *files_restored { ", files restored" }
            }
        },
        EventKind::RunMoved { from_node, to_node } => html! {
            div.entry.notice data-agent=(agent) {
                (tag) " the run moved from node " (clean(from_node)) " to node " (clean(to_node))
            }
        },
        EventKind::Error { kind, message } => html! {
            div.entry.error data-agent=(agent) { (tag) " error " (clean(kind)) ": " (clean(message)) }
        },
        EventKind::RunFinished {
            status,
            stop_reason,
            ..
        } => html! {
            div.entry.finished data-agent=(agent) { (tag) " " (status.as_str()) " (" (clean(stop_reason)) ")" }
        },
    };
    Some(entry)
}

/// The transcript of `events`: consecutive text of one agent as one span,
/// every other event as its entry.
pub(crate) fn transcript(events: &[RunEvent]) -> Markup {
    let mut out = String::new();
    let mut text: Option<(&str, String)> = None;
    let flush = |out: &mut String, text: &mut Option<(&str, String)>| {
        if let Some((agent, joined)) = text.take() {
            out.push_str(
                &html! { span.text data-agent=(agent) { (clean(&joined)) } }.into_string(),
            );
        }
    };
    for event in events {
        if let EventKind::TextDelta { text: delta } = &event.kind {
            match &mut text {
                Some((agent, joined)) if *agent == event.agent_path => joined.push_str(delta),
                _ => {
                    flush(&mut out, &mut text);
                    text = Some((event.agent_path.as_str(), delta.clone()));
                }
            }
            continue;
        }
        if let Some(entry) = transcript_entry(event) {
            flush(&mut out, &mut text);
            out.push_str(&entry.into_string());
        }
    }
    flush(&mut out, &mut text);
    PreEscaped(out)
}

/// The part of the run page that changes with the run's state: status,
/// agents with their phase and a cancel button, approvals with their
/// buttons, the plan, the changed files, the tokens.
pub(crate) fn run_state(
    run_id: &str,
    status: &str,
    view: &RunView,
    phases: &[AgentStatus],
    files: &FilesShown,
) -> Markup {
    let running = view.finished.is_none() && status == "running";
    html! {
        p { "Status " (status_badge(status)) " · tokens: "
            (view.usage.input + view.usage.cache_read + view.usage.cache_write) " in, "
            (view.usage.output) " out" }
        @if running {
            form.action hx-post={ "/runs/" (run_id) "/cancel" } hx-target="this" hx-swap="outerHTML" {
                button.danger type="submit" { "Cancel run" }
            }
        }
        section.pending {
            h2 { "Approvals" }
            @if view.pending.is_empty() { p.none { "None waiting." } }
            @for pending in &view.pending {
                form.approval hx-post={ "/runs/" (run_id) "/approvals/" (pending.approval_id) }
                    hx-target="this" hx-swap="outerHTML" data-approval=(pending.approval_id) {
                    p { span.agent { (pending.agent_path) } " wants to run " strong { (clean(&pending.tool)) } }
                    p.reason { (clean(&pending.reason)) }
                    (text_block("arguments", &pending.args))
                    @if let Some(rule) = &pending.always_rule { p { "Always adds: " code { (clean(rule)) } } }
                    button type="submit" name="outcome" value="allow" { "Allow" }
                    button type="submit" name="outcome" value="allow_always" { "Always" }
                    button.danger type="submit" name="outcome" value="deny" { "Deny" }
                }
            }
        }
        section.agents {
            h2 { "Agents" }
            ul.tree {
                @for agent in &view.agents {
                    @let phase = phases.iter().find(|live| live.path == agent.path).map(|live| live.phase);
                    li class={ "depth-" (agent.depth().min(4)) } data-agent=(agent.path) {
                        code { (agent.path) }
                        @if let Some(role) = &agent.role { " " (clean(role)) }
                        " · "
                        @match (agent.ended, phase) {
                            (Some(ended), _) => { (status_badge(ended.as_str())) }
                            (None, Some(phase)) => { span.phase { (phase) } }
                            (None, None) => { span.phase { "running" } }
                        }
                        " · " (agent.tool_calls) " tool calls"
                        @if running && agent.ended.is_none() && agent.path != "main" {
                            form.action.inline hx-post={ "/runs/" (run_id) "/agents/cancel" } hx-target="this" hx-swap="outerHTML" {
                                input type="hidden" name="path" value=(agent.path);
                                button.danger type="submit" { "Cancel agent" }
                            }
                        }
                        @if let Some(task) = &agent.task { (text_block("task", task)) }
                    }
                }
            }
        }
        @if let Some((explanation, steps)) = &view.plan {
            section.plan {
                h2 { "Plan" }
                @if let Some(explanation) = explanation { p { (clean(explanation)) } }
                ol { @for step in steps { li { (step.status.mark()) " " (clean(&step.step)) } } }
            }
        }
        section.files {
            h2 { "Files changed" }
            @if let Some(note) = &files.note { p.note { (clean(note)) } }
            @if files.files.is_empty() { p.none { "None so far." } }
            ul { @for file in &files.files {
                li {
                    code { (clean(&file.path)) }
                    @if let Some(change) = file.change { " · " (change) }
                    @if !file.tools.is_empty() {
                        " · " (file.tools.join(", ")) " by " (file.agents.join(", "))
                    }
                    @if let Some(note) = &file.note { " · " (note) }
                    @for diff in &file.diffs { (diff_view(diff)) }
                }
            } }
        }
    }
}

/// A change as a folded, coloured unified diff (text only).
fn diff_view(lines: &[crate::diff::DiffLine]) -> Markup {
    use crate::diff::DiffLine;
    html! {
        details.diff {
            summary { "diff" }
            pre.diff {
                @for line in lines {
                    @match line {
                        DiffLine::File(text) => { span.file { (clean(text)) } "\n" }
                        DiffLine::Hunk(text) => { span.hunk { (clean(text)) } "\n" }
                        DiffLine::Context(text) => { " " (clean(text)) "\n" }
                        DiffLine::Removed(text) => { span.del { "-" (clean(text)) } "\n" }
                        DiffLine::Added(text) => { span.add { "+" (clean(text)) } "\n" }
                        DiffLine::More(count) => { span.hunk { "… " (count) " more lines" } "\n" }
                    }
                }
            }
        }
    }
}

/// Everything the run page shows.
pub(crate) struct RunPage<'a> {
    /// The run.
    pub run: &'a RunRecord,
    /// The state panel, rendered.
    pub state: Markup,
    /// The stored events shown (the latest ones when there are many).
    pub events: &'a [RunEvent],
    /// Events left out before the ones shown.
    pub skipped: u64,
    /// Where the live stream starts; `None` for a run that has ended.
    pub live_from: Option<u64>,
    /// The run's agents in the order they appeared: one lane each.
    pub agents: Vec<String>,
}

/// The run page.
pub(crate) fn run_page(csrf: &str, page: &RunPage<'_>) -> Markup {
    let run = page.run;
    let body = html! {
        h1 { "Run " code { (short_id(&run.run_id)) } }
        p.links {
            a href={ "/runs/" (run.run_id) "/spans" } { "Span waterfall" }
            " · "
            a href={ "/sessions/" (run.session_id) } { "Session " (short_id(&run.session_id)) }
            " · started " (when(&run.started))
            @if let Some(ended) = &run.ended { " · ended " (when(ended)) }
        }
        (text_block("prompt", &run.prompt))
        @let live = page.live_from.map(|from| format!("/runs/{}/live?from={from}", run.run_id));
        div #live hx-ext=[live.as_ref().map(|_| "sse")] sse-connect=[live.as_deref()] {
            div #state sse-swap=[live.as_ref().map(|_| "state")] { (page.state) }
            h2 { "Transcript" }
            @if page.skipped > 0 {
                p.none { (page.skipped) " earlier events are not shown; " code { "troupe runs attach " (run.run_id) } " replays them." }
            }
            // Live entries name the lane they go to (out-of-band swaps);
            // nothing is swapped into the sink itself.
            @if live.is_some() { div #sink sse-swap="entry" hx-swap="none" {} }
            div #lanes .lanes {
                @for (index, agent) in page.agents.iter().enumerate() {
                    @let own: Vec<RunEvent> = page.events.iter().filter(|event| &event.agent_path == agent).cloned().collect();
                    (lane(index, agent, transcript(&own)))
                }
            }
        }
    };
    layout("Run", csrf, body)
}

/// The column of one agent's transcript: agents side by side where the
/// screen is wide, one under the other where it is narrow.
pub(crate) fn lane(index: usize, agent: &str, entries: Markup) -> Markup {
    html! {
        section.lane data-lane=(agent) {
            h3 { code { (agent) } }
            div.transcript id={ "lane-" (index) } { (entries) }
        }
    }
}

/// What the live stream sends for one event of agent number `index`: the
/// agent's lane first when it is new, then the entry, each swapped in out
/// of band.
pub(crate) fn live_entry(
    index: usize,
    agent: &str,
    new_lane: bool,
    entry: Option<Markup>,
) -> Markup {
    html! {
        @if new_lane {
            div hx-swap-oob="beforeend:#lanes" { (lane(index, agent, html! {})) }
        }
        @if let Some(entry) = entry {
            div hx-swap-oob={ "beforeend:#lane-" (index) } { (entry) }
        }
    }
}

/// The span waterfall page.
pub(crate) fn spans_page(
    csrf: &str,
    run: &RunRecord,
    rows: &[Row<'_>],
    jaeger: Option<&str>,
) -> Markup {
    let body = html! {
        h1 { "Spans of run " a href={ "/runs/" (run.run_id) } { code { (short_id(&run.run_id)) } } }
        @if let Some(jaeger) = jaeger { p { a href=(jaeger) rel="noreferrer" { "Open the trace in Jaeger" } } }
        @if rows.is_empty() { p.none { "No spans were recorded for this run." } }
        div.scroll { table.waterfall {
            thead { tr { th { "Span" } th { "Duration" } th.bar { "Timeline" } } }
            tbody { @for row in rows {
                @let span = row.span;
                @let failed = matches!(span.status, SpanStatus::Error { .. });
                tr data-span=(span.span_id) data-parent=[span.parent_span_id.as_deref()] data-depth=(row.depth) {
                    td class={ "name depth-" (row.depth.min(8)) } {
                        (clean(&span.name))
                        @if let SpanStatus::Error { description } = &span.status { " " span.status.error { (clean(description)) } }
                        @if !span.attributes.is_empty() {
                            details { summary { "attributes" } dl {
                                @for (key, value) in &span.attributes { dt { (clean(key)) } dd { (clean(value)) } }
                            } }
                        }
                    }
                    td.num { (format!("{:.1} ms", span.duration_ms)) }
                    td.bar {
                        svg viewBox="0 0 1000 10" preserveAspectRatio="none" role="img" {
                            rect x=(format!("{:.1}", row.offset * 1000.0)) y="0"
                                width=(format!("{:.1}", (row.width * 1000.0).max(2.0))) height="10"
                                class=(if failed { "error" } else { "ok" }) {}
                        }
                    }
                }
            } }
        } }
    };
    layout("Spans", csrf, body)
}

/// The sessions page: the search, one page of sessions, paging.
pub(crate) fn sessions_page(
    csrf: &str,
    sessions: &[SessionMeta],
    query: &super::SessionsQuery,
    has_next: bool,
) -> Markup {
    let page = query.page.unwrap_or(0);
    let q = query.q.clone().unwrap_or_default();
    let link = |page: usize| {
        let mut out = format!("/sessions?page={page}");
        if !q.is_empty() {
            out.push_str("&q=");
            out.push_str(&super::encode_query_value(&q));
        }
        out
    };
    let body = html! {
        h1 { "Sessions" }
        form.filters method="get" action="/sessions" {
            label { "Search " input type="search" name="q" value=(q); }
            button type="submit" { "Search" }
        }
        div.scroll { table.sessions {
            thead { tr { th { "Session" } th { "Title" } th { "Project" } th { "Model" } th { "Messages" } th { "Updated" } } }
            tbody {
                @if sessions.is_empty() { tr { td colspan="6" { "No sessions match." } } }
                @for meta in sessions {
                    tr {
                        td { a href={ "/sessions/" (meta.id) } { code { (short_id(&meta.id)) } } }
                        td { (clean(&meta.title)) }
                        td.project { (clean(&meta.cwd.display().to_string())) }
                        td { (clean(&meta.model)) }
                        td.num { (meta.message_count) }
                        td { (when(&meta.updated)) }
                    }
                }
            }
        } }
        p.pager {
            @if page > 0 { a href=(link(page - 1)) { "← newer" } }
            " page " (page.saturating_add(1)) " "
            @if has_next { a href=(link(page.saturating_add(1))) { "older →" } }
        }
    };
    layout("Sessions", csrf, body)
}

/// A message's blocks: text as safe Markdown, tool calls and results
/// folded.
fn message_blocks(message: &Message) -> Markup {
    html! {
        @for block in &message.content {
            @match block {
                ContentBlock::Text { text } => {
                    div.markdown { (PreEscaped(super::markdown::to_html(text))) }
                }
                ContentBlock::ToolCall(call) => {
                    details.tool { summary { "tool call " strong { (clean(&call.name)) } } pre.out { (clean(&call.input)) } }
                }
                ContentBlock::ToolResult(result) => {
                    details.result.error[result.is_error] {
                        summary { @if result.is_error { "tool error" } @else { "tool result" } }
                        pre.out { (clean(&result.joined_text())) }
                    }
                }
                ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. } => {
                    p.none { "(thinking)" }
                }
                ContentBlock::Image { media_type, .. } => { p.none { "(image " (clean(media_type)) ")" } }
            }
        }
    }
}

/// A session's page: its facts, the command that resumes it, its runs and
/// its conversation.
pub(crate) fn session_page(
    csrf: &str,
    meta: &SessionMeta,
    runs: &[RunRecord],
    messages: &[Message],
    skipped: usize,
) -> Markup {
    let body = html! {
        h1 { "Session " code { (short_id(&meta.id)) } }
        p { (clean(&meta.title)) }
        p { "Project " code { (clean(&meta.cwd.display().to_string())) } " · " (clean(&meta.provider)) " " (clean(&meta.model))
            " · " (meta.message_count) " messages · updated " (when(&meta.updated)) }
        p { "Resume it: " code.command { "troupe resume " (meta.id) } }
        h2 { "Runs" }
        ul { @for run in runs {
            li { a href={ "/runs/" (run.run_id) } { code { (short_id(&run.run_id)) } } " " (status_badge(run.status.as_str())) " " (clean(&shortened(&run.prompt, 120))) }
        } }
        h2 { "Conversation" }
        @if skipped > 0 { p.none { (skipped) " earlier messages are not shown." } }
        @for message in messages {
            @let role = match message.role { Role::User => "user", Role::Assistant => "assistant", Role::Tool => "tool" };
            article class={ "message " (role) } { h3 { (role) } (message_blocks(message)) }
        }
    };
    layout("Session", csrf, body)
}

/// Tokens and cost as cells: input (cache included), output, estimated USD
/// (`—` without a price).
fn spent_cells(spent: &super::costs::Spent) -> Markup {
    let usage = &spent.usage;
    html! {
        td.num { (usage.input + usage.cache_read + usage.cache_write) }
        td.num { (usage.output) }
        td.num { @match spent.usd { Some(usd) => { "$" (format!("{usd:.4}")) } None => { "—" } } }
    }
}

/// The costs page: tokens per day (an SVG bar chart drawn here), per
/// model, per run and per agent over the last `days` days.
pub(crate) fn costs_page(
    csrf: &str,
    tally: &super::costs::Tally,
    days: i64,
    capped: bool,
) -> Markup {
    let bars = super::costs::bars(&tally.days);
    let slot = if bars.is_empty() {
        0.0
    } else {
        600.0 / bars.len() as f64
    };
    let body = html! {
        h1 { "Costs" }
        form.filters method="get" action="/costs" {
            label { "Period "
                select name="days" {
                    @for choice in [1, 7, 30, 90, 365] {
                        option value=(choice) selected[choice == days] { "last " (choice) " days" }
                    }
                }
            }
            button type="submit" { "Show" }
        }
        @if capped { p.none { "Only the latest " (super::MAX_COST_RUNS) " runs of the period are counted." } }
        h2 { "Tokens per day" }
        svg.chart viewBox="0 0 600 140" role="img" {
            @for (index, (label, total, share)) in bars.iter().enumerate() {
                @let height = share * 110.0;
                @let x = index as f64 * slot;
                @let bar = (slot * 0.7).min(40.0);
                rect x=(format!("{:.1}", x + (slot - bar) / 2.0)) y=(format!("{:.1}", 115.0 - height))
                    width=(format!("{:.1}", bar)) height=(format!("{:.1}", height.max(1.0))) {
                    title { (label) ": " (total) " tokens" }
                }
                text x=(format!("{:.1}", x + slot / 2.0)) y="132" text-anchor="middle" { (label) }
            }
        }
        h2 { "Per model" }
        div.scroll { table {
            thead { tr { th { "Provider" } th { "Model" } th { "Input" } th { "Output" } th { "USD" } } }
            tbody { @for ((provider, model), spent) in &tally.models {
                tr { td { (clean(provider)) } td { (clean(model)) } (spent_cells(spent)) }
            } }
        } }
        h2 { "Per run" }
        div.scroll { table {
            thead { tr { th { "Run" } th { "Prompt" } th { "Input" } th { "Output" } th { "USD" } } }
            tbody { @for (run, spent) in tally.runs.iter().take(super::PAGE_SIZE) {
                tr {
                    td { a href={ "/runs/" (run.run_id) } { code { (short_id(&run.run_id)) } } }
                    td.prompt { (clean(&shortened(&run.prompt, 80))) }
                    (spent_cells(spent))
                }
            } }
        } }
        h2 { "Per agent" }
        div.scroll { table {
            thead { tr { th { "Run" } th { "Agent" } th { "Input" } th { "Output" } th { "USD" } } }
            tbody { @for ((run, agent), spent) in tally.agents.iter().take(super::PAGE_SIZE * 4) {
                tr { td { code { (short_id(run)) } } td { code { (agent) } } (spent_cells(spent)) }
            } }
        } }
    };
    layout("Costs", csrf, body)
}

#[cfg(test)]
mod tests {
    use troupe_store::RunState;

    use super::*;

    const HOSTILE: &str =
        "<script>alert(1)</script> <a href=\"javascript:alert(1)\">x</a> \u{1b}[31mred";

    fn run(prompt: &str) -> RunRecord {
        RunRecord {
            run_id: "0197a1b2-0000-7000-8000-000000000001".into(),
            session_id: "0197a1b2-0000-7000-8000-000000000002".into(),
            prompt: prompt.into(),
            status: RunState::Running,
            stop_reason: None,
            started: Utc::now(),
            ended: None,
            pid: 1,
            history: None,
        }
    }

    fn assert_inert(html: &str) {
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(!html.contains("href=\"javascript"), "{html}");
        assert!(!html.contains('\u{1b}'), "{html:?}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
    }

    #[test]
    fn hostile_text_is_escaped_in_runs_and_transcripts() {
        let rows = [RunRow {
            run: run(HOSTILE),
            project: HOSTILE.into(),
            agents: 1,
            tokens: Default::default(),
        }];
        assert_inert(&runs_rows(&rows, Utc::now()).into_string());
        let event = super::super::model::test_event(
            1,
            "main",
            EventKind::ToolStarted {
                call_id: "c".into(),
                name: HOSTILE.into(),
                args_preview: HOSTILE.into(),
                target: Some(HOSTILE.into()),
            },
        );
        assert_inert(&transcript_entry(&event).unwrap().into_string());
    }

    #[test]
    fn long_results_are_folded_and_short_ones_are_not() {
        let long = "line\n".repeat(50);
        assert!(
            text_block("result", &long)
                .into_string()
                .starts_with("<details>")
        );
        assert!(
            text_block("result", "short")
                .into_string()
                .starts_with("<pre")
        );
    }

    #[test]
    fn numbers_and_text_are_shortened_for_lists() {
        assert_eq!(shortened("abcdef", 3), "abc…");
        assert_eq!(shortened("abc", 3), "abc");
        assert_eq!(duration_text(4.25), "4.2 s");
        assert_eq!(duration_text(185.0), "3 min 5 s");
    }
}
