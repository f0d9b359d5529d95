//! Property tests of history repair: any conversation, cut and damaged in any
//! way (a kill at any message, records lost, results missing, duplicated or
//! stray, empty text), repairs into a history that the scripted model server
//! accepts for both wire protocols — the invariants every real provider
//! checks — and that needs no second repair.

use std::time::Duration;

use proptest::prelude::*;
use troupe_agent::resume::repair_history;
use troupe_agent::validate_history;
use troupe_config::ResolvedProvider;
use troupe_llm::{ChatRequest, anthropic, openai, openai_responses};
use troupe_protocol::model::Protocol;
use troupe_protocol::model::{ContentBlock, Message, Role, ToolCall, ToolResult};
use troupe_protocol::model::{SystemPrompt, ToolDefinition};

/// Tools the generated calls name (all offered in the request).
const TOOLS: [&str; 3] = ["bash", "read_file", "grep"];

/// One turn of a generated conversation.
#[derive(Debug, Clone)]
struct TurnShape {
    /// Text the person wrote.
    prompt: String,
    /// Text before the calls (empty: none).
    text: String,
    /// Tools called, by index into [`TOOLS`].
    calls: Vec<usize>,
}

/// A way a stored history can be damaged.
#[derive(Debug, Clone)]
enum Cut {
    /// The process stopped after this many messages.
    Truncate(usize),
    /// A record could not be read.
    Remove(usize),
    /// A result is missing from a tool message.
    DropResult(usize, usize),
    /// A result appears twice.
    DuplicateResult(usize),
    /// A tool message lands somewhere it does not belong.
    StrayTool(usize),
    /// An empty text block.
    EmptyText(usize),
    /// A call repeats an earlier call's id.
    RepeatId(usize),
}

fn turn() -> impl Strategy<Value = TurnShape> {
    (
        "[a-z]{1,8}( [a-z]{1,8}){0,3}",
        "([a-z]{1,8}( [a-z]{1,8}){0,3})?",
        prop::collection::vec(0..TOOLS.len(), 0..4),
    )
        .prop_map(|(prompt, text, calls)| TurnShape {
            prompt,
            text,
            calls,
        })
}

fn cut() -> impl Strategy<Value = Cut> {
    prop_oneof![
        (0usize..64).prop_map(Cut::Truncate),
        (0usize..64).prop_map(Cut::Remove),
        (0usize..64, 0usize..4).prop_map(|(m, r)| Cut::DropResult(m, r)),
        (0usize..64).prop_map(Cut::DuplicateResult),
        (0usize..64).prop_map(Cut::StrayTool),
        (0usize..64).prop_map(Cut::EmptyText),
        (0usize..64).prop_map(Cut::RepeatId),
    ]
}

/// The well-formed history of `turns`: each turn a prompt, a response, its
/// results; a response without calls ends the turn.
fn conversation(turns: &[TurnShape]) -> Vec<Message> {
    let mut history = Vec::new();
    for (t, shape) in turns.iter().enumerate() {
        history.push(Message::user_text(shape.prompt.clone()));
        let mut content = Vec::new();
        if !shape.text.is_empty() {
            content.push(ContentBlock::Text {
                text: shape.text.clone(),
            });
        }
        let calls: Vec<ToolCall> = shape
            .calls
            .iter()
            .enumerate()
            .map(|(i, tool)| ToolCall {
                id: format!("call_{t}_{i}"),
                name: TOOLS[*tool].into(),
                input: format!("{{\"n\":{i}}}"),
            })
            .collect();
        content.extend(calls.iter().cloned().map(ContentBlock::ToolCall));
        if content.is_empty() {
            content.push(ContentBlock::Text { text: "ok".into() });
        }
        history.push(Message {
            role: Role::Assistant,
            content,
        });
        if !calls.is_empty() {
            history.push(Message::tool_results(
                calls
                    .iter()
                    .map(|call| {
                        ToolResult::text(call.id.clone(), format!("out {}", call.id), false)
                    })
                    .collect(),
            ));
            history.push(Message::assistant_text(format!("turn {t} done")));
        }
    }
    history
}

/// Applies one damage; indices wrap around the current length.
fn damage(history: &mut Vec<Message>, cut: &Cut) {
    if history.is_empty() {
        return;
    }
    let at = |i: usize| i % history.len();
    match *cut {
        Cut::Truncate(n) => history.truncate(n % (history.len() + 1)),
        Cut::Remove(i) => {
            let i = at(i);
            history.remove(i);
        }
        Cut::DropResult(i, r) => {
            let i = at(i);
            let message = &mut history[i];
            if message.role == Role::Tool && !message.content.is_empty() {
                let r = r % message.content.len();
                message.content.remove(r);
            }
        }
        Cut::DuplicateResult(i) => {
            let i = at(i);
            let message = &mut history[i];
            if let Some(first) = message.content.first().cloned()
                && message.role == Role::Tool
            {
                message.content.push(first);
            }
        }
        Cut::StrayTool(i) => {
            let i = at(i);
            let stray = Message::tool_results(vec![ToolResult::text("stray", "lost", false)]);
            history.insert(i, stray);
        }
        Cut::EmptyText(i) => {
            let i = at(i);
            history[i]
                .content
                .insert(0, ContentBlock::Text { text: " ".into() });
        }
        Cut::RepeatId(i) => {
            let i = at(i);
            if history[i].role == Role::Assistant {
                history[i].content.push(ContentBlock::ToolCall(ToolCall {
                    id: "call_0_0".into(),
                    name: "bash".into(),
                    input: "{}".into(),
                }));
            }
        }
    }
}

fn provider(protocol: Protocol) -> ResolvedProvider {
    ResolvedProvider {
        name: "props".into(),
        protocol,
        model: "m".into(),
        base_url: "http://127.0.0.1:9".into(),
        api_key: None,
        api_key_env: "KEY".into(),
        context_window: 200_000,
        max_tokens: 1_024,
        thinking_budget: None,
        price: None,
        idle_timeout: Duration::from_secs(60),
        max_retries: 0,
        store: false,
    }
}

/// The request a continuation sends: the repaired history and a new prompt.
fn request(history: &[Message]) -> ChatRequest {
    let mut messages = history.to_vec();
    messages.push(Message::user_text("continue"));
    ChatRequest {
        system: SystemPrompt {
            stable: "You are tested.".into(),
            environment: "env".into(),
        },
        messages,
        tools: TOOLS
            .iter()
            .map(|name| ToolDefinition {
                name: (*name).into(),
                description: format!("the {name} tool"),
                input_schema: serde_json::json!({"type": "object"}),
            })
            .collect(),
        session_id: None,
    }
}

/// Violations the scripted server finds in the continuation's request.
fn violations(history: &[Message]) -> Vec<String> {
    let request = request(history);
    let mut found = Vec::new();
    for (protocol, wire) in [
        (Protocol::Anthropic, troupe_scripted::Protocol::Anthropic),
        (Protocol::OpenAi, troupe_scripted::Protocol::OpenAi),
        (
            Protocol::OpenAiResponses,
            troupe_scripted::Protocol::OpenAiResponses,
        ),
    ] {
        let body = match protocol {
            Protocol::Anthropic => anthropic::request_body(&provider(protocol), &request),
            Protocol::OpenAi => openai::request_body(&provider(protocol), &request),
            Protocol::OpenAiResponses => {
                openai_responses::request_body(&provider(protocol), &request)
            }
        }
        .expect("the request body encodes");
        let body: serde_json::Value = serde_json::from_slice(&body).expect("the body is JSON");
        found.extend(
            troupe_scripted::check_request(wire, &body)
                .into_iter()
                .map(|violation| violation.to_string()),
        );
    }
    found
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_cut_history_repairs_into_one_every_provider_accepts(
        turns in prop::collection::vec(turn(), 1..6),
        cuts in prop::collection::vec(cut(), 0..6),
        pending_mask in any::<u64>(),
    ) {
        let whole = conversation(&turns);
        // Results recorded as calls finished: any subset of them.
        let pending: Vec<ToolResult> = whole
            .iter()
            .flat_map(|message| message.tool_results_iter().cloned())
            .enumerate()
            .filter(|(i, _)| pending_mask & (1 << (i % 64)) != 0)
            .map(|(_, result)| result)
            .collect();
        let mut history = whole;
        for cut in &cuts {
            damage(&mut history, cut);
        }
        repair_history(&mut history, &pending);
        if history.is_empty() {
            // Nothing readable is left: the next run starts afresh.
            return Ok(());
        }
        prop_assert!(validate_history(&history).is_ok(), "{:?}", validate_history(&history));
        let found = violations(&history);
        prop_assert!(found.is_empty(), "{found:#?}\nhistory: {history:#?}");
        // A repaired history needs no second repair.
        let mut again = history.clone();
        let report = repair_history(&mut again, &pending);
        prop_assert!(report.is_clean(), "{report:?}");
        prop_assert_eq!(again, history);
    }
}
