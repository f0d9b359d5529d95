//! Layer 2: the older part of the history becomes a summary written by the
//! model; the recent tail stays verbatim; a recovery attachment (the files
//! read last, the tools on offer, and the notice that the summary is context
//! only) follows the summary. Here: where the history is cut, the summary
//! request, what is taken from its answer, what is dropped when the request
//! itself is too long, and the history that replaces the old one.

use troupe_protocol::model::ToolDefinition;
use troupe_protocol::model::{ContentBlock, Message, Role};

use super::estimate::tokens_of_chars;

/// The tail kept verbatim holds at least this many tokens…
pub(crate) const TAIL_MIN_TOKENS: u64 = 10_000;
/// …and at least this many messages (when the history has them).
pub(crate) const TAIL_MIN_MESSAGES: usize = 5;
/// Files of the recovery attachment.
pub(crate) const RECOVERY_FILES: usize = 5;
/// Tokens of one file in the recovery attachment.
pub(crate) const RECOVERY_FILE_TOKENS: u64 = 5_000;

/// What the summary request asks for.
pub(crate) const SUMMARY_INSTRUCTION: &str = "\
You are summarizing the conversation above between a user and a coding agent, so that the \
agent can continue the work with only your summary and the most recent messages. Answer in two \
phases.

Phase 1 (discarded): inside <analysis> tags, think through what the user is trying to \
accomplish, the key decisions, the files read or changed, the errors met and how they were \
fixed, and the exact state of the work.

Phase 2 (kept): inside <summary> tags, write these nine sections:
1. Primary request and intent
2. Key technical concepts
3. Files and code sections (paths, what changed, short essential snippets)
4. Errors and fixes
5. Problem solving (what was tried, what worked)
6. All user messages, verbatim and in order
7. Pending tasks
8. Current work (the most detailed section: exactly what was being done and where it stopped)
9. Next step (only what the user asked for; quote the latest request)

Rules: do not call any tools; write plain text only. Keep every user message of section 6 in \
its original words and language. Write the summary in the language the user writes in.";

/// The notice that closes the recovery attachment.
pub(crate) const BOUNDARY_NOTICE: &str = "\
The summary above is context only. For exact file contents, exact error messages or the \
user's exact words, read the files again with read_file; do not infer code from the summary.";

/// How much of a compacted history may be kept verbatim or re-attached, for
/// a threshold: the usual amounts, or a third of the threshold each where
/// that is less (small windows), so that what a summary leaves stays well
/// below the threshold it was made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budgets {
    /// Tokens the verbatim tail holds at least.
    pub tail_tokens: u64,
    /// Tokens of one file of the recovery attachment.
    pub file_tokens: u64,
}

/// The [`Budgets`] of a summary made for `threshold` tokens.
pub(crate) fn budgets(threshold: u64) -> Budgets {
    let third = threshold / 3;
    Budgets {
        tail_tokens: TAIL_MIN_TOKENS.min(third),
        file_tokens: RECOVERY_FILE_TOKENS.min(third / RECOVERY_FILES as u64),
    }
}

/// Where the history is cut: messages before `index` are summarised, the
/// rest is kept. The cut is at a message that is not a tool message (a call
/// is never separated from its results), leaving at least `min_tokens` and
/// [`TAIL_MIN_MESSAGES`] in the tail; `None` when no such cut leaves
/// anything to summarise.
pub(crate) fn tail_start(messages: &[Message], min_tokens: u64) -> Option<usize> {
    let mut tokens = 0;
    for index in (1..messages.len()).rev() {
        tokens += tokens_of_chars(messages[index].char_len() as u64);
        let kept = messages.len() - index;
        if kept >= TAIL_MIN_MESSAGES && tokens >= min_tokens && messages[index].role != Role::Tool {
            return Some(index);
        }
    }
    None
}

/// Indices where user turns begin: a user message (not tool results) starts
/// a group that runs to the next.
pub(crate) fn user_turn_starts(messages: &[Message]) -> Vec<usize> {
    messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::User)
        .map(|(index, _)| index)
        .collect()
}

/// How many of the oldest user-turn groups to leave out of the summary
/// request after `failures` too-long answers: one more each of the first
/// three times, then a fifth of the groups more each time.
pub(crate) fn groups_to_drop(failures: u32, groups: usize) -> usize {
    let failures = failures as usize;
    let dropped = if failures <= 3 {
        failures
    } else {
        3 + (failures - 3) * groups.div_ceil(5)
    };
    dropped.min(groups.saturating_sub(1))
}

/// The part to summarise with the oldest `drop` user-turn groups left out.
pub(crate) fn without_oldest_groups(older: &[Message], drop: usize) -> &[Message] {
    let starts = user_turn_starts(older);
    match starts.get(drop) {
        Some(start) if drop > 0 => &older[*start..],
        _ => older,
    }
}

/// The messages of a summary request: the part to summarise, then the
/// instruction as the last user message. Sent with no tools.
pub(crate) fn summary_request(older: &[Message]) -> Vec<Message> {
    let mut messages = older.to_vec();
    messages.push(Message::user_text(SUMMARY_INSTRUCTION));
    messages
}

/// The summary in a model's answer: the inside of `<summary>` (to its end
/// when the closing tag is missing, as when the answer was cut), else the
/// answer without its `<analysis>` part.
pub(crate) fn extract_summary(answer: &str) -> String {
    if let Some(start) = answer.find("<summary>") {
        let rest = &answer[start + "<summary>".len()..];
        let body = rest.find("</summary>").map_or(rest, |end| &rest[..end]);
        return body.trim().to_string();
    }
    let without_analysis = match (answer.find("<analysis>"), answer.find("</analysis>")) {
        (Some(start), Some(end)) if end > start => {
            format!(
                "{}{}",
                &answer[..start],
                &answer[end + "</analysis>".len()..]
            )
        }
        _ => answer.to_string(),
    };
    without_analysis.trim().to_string()
}

/// One file of the recovery attachment, as it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileSnapshot {
    /// Its path as the model named it.
    pub path: String,
    /// Its content as read.
    pub content: String,
}

/// The files of `files` whose reading is not in `tail` (a file read in the
/// kept tail is there already, whole).
pub(crate) fn files_outside(files: &[FileSnapshot], tail: &[Message]) -> Vec<FileSnapshot> {
    let read_in_tail: Vec<String> = tail
        .iter()
        .flat_map(|m| m.tool_calls())
        .filter(|call| call.name == "read_file")
        .filter_map(|call| {
            let args = call.input_value().ok()?;
            Some(args.get("path")?.as_str()?.to_string())
        })
        .collect();
    files
        .iter()
        .filter(|file| !read_in_tail.contains(&file.path))
        .cloned()
        .collect()
}

/// The recovery attachment: the files read last (most recent first, each
/// cut to `file_tokens`), the tools offered from now on, and the boundary
/// notice.
pub(crate) fn recovery_attachment(
    files: &[FileSnapshot],
    tools: &[ToolDefinition],
    file_tokens: u64,
) -> String {
    let mut text = String::new();
    if !files.is_empty() {
        text.push_str("## Files read most recently\n");
        for file in files.iter().take(RECOVERY_FILES) {
            let limit = (file_tokens * 35 / 10) as usize;
            let mut end = file.content.len().min(limit);
            while !file.content.is_char_boundary(end) {
                end -= 1;
            }
            let cut = if end < file.content.len() {
                "\n[… cut; read the file for the rest]"
            } else {
                ""
            };
            text.push_str(&format!(
                "\n### {}\n```\n{}{cut}\n```\n",
                file.path,
                &file.content[..end]
            ));
        }
        text.push('\n');
    }
    text.push_str("## Tools available now\n");
    for tool in tools {
        let summary = tool.description.lines().next().unwrap_or_default();
        text.push_str(&format!("- {}: {summary}\n", tool.name));
    }
    text.push_str("\n## Important\n");
    text.push_str(BOUNDARY_NOTICE);
    text
}

/// The history after a summary: the summary and the recovery attachment as
/// one user message, then the tail as it was.
pub(crate) fn compacted(summary: &str, attachment: &str, tail: &[Message]) -> Vec<Message> {
    let mut messages = Vec::with_capacity(tail.len() + 1);
    messages.push(Message {
        role: Role::User,
        content: vec![
            ContentBlock::Text {
                text: format!(
                    "This conversation was compacted; the summary of its earlier part follows.\n\n{summary}"
                ),
            },
            ContentBlock::Text {
                text: attachment.to_string(),
            },
        ],
    });
    messages.extend_from_slice(tail);
    messages
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_protocol::model::{ToolCall, ToolResult};

    fn turn(i: usize, size: usize) -> Vec<Message> {
        vec![
            Message::user_text(format!("request {i} {}", "x".repeat(size))),
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolCall(ToolCall {
                    id: format!("c{i}"),
                    name: "read_file".into(),
                    input: "{}".into(),
                })],
            },
            Message::tool_results(vec![ToolResult::text(
                format!("c{i}"),
                "y".repeat(size),
                false,
            )]),
            Message::assistant_text(format!("answer {i}")),
        ]
    }

    fn history(turns: usize, size: usize) -> Vec<Message> {
        (0..turns).flat_map(|i| turn(i, size)).collect()
    }

    #[test]
    fn the_tail_keeps_enough_tokens_and_messages_and_never_starts_with_results() {
        let messages = history(20, 10_000);
        let start = tail_start(&messages, TAIL_MIN_TOKENS).unwrap();
        assert_ne!(messages[start].role, Role::Tool);
        let kept = &messages[start..];
        assert!(kept.len() >= TAIL_MIN_MESSAGES);
        let tokens: u64 = kept
            .iter()
            .map(|m| tokens_of_chars(m.char_len() as u64))
            .sum();
        assert!(tokens >= TAIL_MIN_TOKENS, "{tokens}");
        // Every call in the tail has its result in the tail.
        crate::validate_history(kept)
            .or_else(|_| {
                // The tail may start with an assistant message: valid after the summary.
                let mut with_summary = vec![Message::user_text("summary")];
                with_summary.extend_from_slice(kept);
                crate::validate_history(&with_summary)
            })
            .unwrap();
        // Too short a history has nothing to summarise.
        assert_eq!(tail_start(&history(1, 10), TAIL_MIN_TOKENS), None);
        // Small windows keep less.
        assert_eq!(
            budgets(167_000),
            Budgets {
                tail_tokens: 10_000,
                file_tokens: 5_000
            }
        );
        assert_eq!(
            budgets(7_000),
            Budgets {
                tail_tokens: 2_333,
                file_tokens: 466
            }
        );
    }

    #[test]
    fn groups_are_dropped_one_at_a_time_then_a_fifth_at_a_time() {
        assert_eq!(groups_to_drop(0, 20), 0);
        assert_eq!(groups_to_drop(1, 20), 1);
        assert_eq!(groups_to_drop(3, 20), 3);
        assert_eq!(groups_to_drop(4, 20), 7);
        assert_eq!(groups_to_drop(5, 20), 11);
        assert_eq!(groups_to_drop(9, 20), 19, "one group is always left");
        let older = history(4, 10);
        let kept = without_oldest_groups(&older, 2);
        assert_eq!(kept.len(), 8);
        assert!(kept[0].text().starts_with("request 2"));
        assert_eq!(without_oldest_groups(&older, 0).len(), 16);
    }

    #[test]
    fn the_summary_is_taken_from_its_tags_and_survives_a_cut_answer() {
        assert_eq!(
            extract_summary("<analysis>draft</analysis>\n<summary>\n1. Fix it\n</summary>"),
            "1. Fix it"
        );
        assert_eq!(
            extract_summary("<analysis>a</analysis><summary>1. cut off"),
            "1. cut off"
        );
        assert_eq!(
            extract_summary("<analysis>thinking</analysis>Plain summary"),
            "Plain summary"
        );
        assert_eq!(extract_summary("no tags at all"), "no tags at all");
    }

    #[test]
    fn the_request_asks_for_nine_sections_and_the_result_keeps_the_tail() {
        let older = history(2, 10);
        let request = summary_request(&older);
        assert_eq!(request.len(), older.len() + 1);
        let instruction = request.last().unwrap().text();
        assert!(
            instruction.contains("9. Next step") && instruction.contains("do not call any tools")
        );
        let tools = vec![ToolDefinition {
            name: "read_file".into(),
            description: "Read a file.\nMore.".into(),
            input_schema: serde_json::json!({"type": "object"}),
        }];
        let files = vec![FileSnapshot {
            path: "src/lib.rs".into(),
            content: "z".repeat(40_000),
        }];
        let attachment = recovery_attachment(&files, &tools, RECOVERY_FILE_TOKENS);
        let read_again = vec![Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolCall(ToolCall {
                id: "r".into(),
                name: "read_file".into(),
                input: r#"{"path":"src/lib.rs"}"#.into(),
            })],
        }];
        assert!(
            files_outside(&files, &read_again).is_empty(),
            "read in the tail"
        );
        assert_eq!(files_outside(&files, &[]), files);
        assert!(attachment.contains("### src/lib.rs"));
        assert!(attachment.contains("[… cut; read the file for the rest]"));
        assert!(attachment.contains("- read_file: Read a file.\n"));
        assert!(attachment.ends_with(BOUNDARY_NOTICE));
        let tail = history(1, 10);
        let after = compacted("1. Fix it", &attachment, &tail);
        assert_eq!(after.len(), tail.len() + 1);
        assert_eq!(after[0].role, Role::User);
        assert!(after[0].text().contains("1. Fix it"));
        crate::validate_history(&after).unwrap();
    }
}
