//! Builds the assistant message of one response from its stream events.
//!
//! Pure and protocol-neutral: text deltas are appended to the open text block,
//! thinking deltas to the open thinking block (closed by its signature), tool
//! calls and redacted thinking become blocks of their own, in arrival order.
//! Appending is amortised O(1) per delta, so accumulation is linear in the size
//! of the response.

use troupe_protocol::model::{ContentBlock, Message, Role, StopReason, Usage};

use super::{ResponseMetadata, StreamEvent};

/// Accumulates one response.
#[derive(Debug, Default, Clone)]
pub struct ResponseAccumulator {
    blocks: Vec<ContentBlock>,
    usage: Usage,
    stop_reason: Option<StopReason>,
    metadata: ResponseMetadata,
    /// True once any event carrying content (text, thinking, tool call) arrived.
    delivered: bool,
}

impl ResponseAccumulator {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one event.
    pub fn push(&mut self, event: &StreamEvent) {
        match event {
            StreamEvent::TextDelta(text) => {
                self.delivered = true;
                if text.is_empty() {
                    return;
                }
                if let Some(ContentBlock::Text { text: open }) = self.blocks.last_mut() {
                    open.push_str(text);
                } else {
                    self.blocks.push(ContentBlock::Text { text: text.clone() });
                }
            }
            StreamEvent::ThinkingDelta(text) => {
                self.delivered = true;
                match self.blocks.last_mut() {
                    Some(ContentBlock::Thinking {
                        thinking,
                        signature: None,
                    }) => thinking.push_str(text),
                    _ => self.blocks.push(ContentBlock::Thinking {
                        thinking: text.clone(),
                        signature: None,
                    }),
                }
            }
            StreamEvent::ThinkingSignature(sig) => {
                self.delivered = true;
                match self.blocks.last_mut() {
                    Some(ContentBlock::Thinking { signature, .. }) if signature.is_none() => {
                        *signature = Some(sig.clone());
                    }
                    _ => self.blocks.push(ContentBlock::Thinking {
                        thinking: String::new(),
                        signature: Some(sig.clone()),
                    }),
                }
            }
            StreamEvent::RedactedThinking(data) => {
                self.delivered = true;
                self.blocks
                    .push(ContentBlock::RedactedThinking { data: data.clone() });
            }
            StreamEvent::ToolCall(call) => {
                self.delivered = true;
                self.blocks.push(ContentBlock::ToolCall(call.clone()));
            }
            StreamEvent::Metadata(metadata) => self.metadata = metadata.clone(),
            StreamEvent::Usage(usage) => self.usage = *usage,
            StreamEvent::Stop(reason) => self.stop_reason = Some(reason.clone()),
            // A retry adds nothing to the response: the next attempt's events follow.
            StreamEvent::Retrying(_) => {}
        }
    }

    /// True once content (not just usage) has arrived.
    pub fn has_delivered(&self) -> bool {
        self.delivered
    }

    /// Usage so far.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// The response's id and model, as far as the provider sent them.
    pub fn metadata(&self) -> &ResponseMetadata {
        &self.metadata
    }

    /// The stop reason, once the response ended normally.
    pub fn stop_reason(&self) -> Option<&StopReason> {
        self.stop_reason.as_ref()
    }

    /// The blocks so far.
    pub fn blocks(&self) -> &[ContentBlock] {
        &self.blocks
    }

    /// The assistant message built so far. Thinking blocks without a signature
    /// (a stream cut inside thinking) are dropped: a provider refuses them back.
    pub fn into_message(self) -> Message {
        let content = self
            .blocks
            .into_iter()
            .filter(|block| match block {
                ContentBlock::Thinking { signature, .. } => signature.is_some(),
                ContentBlock::Text { text } => !text.is_empty(),
                _ => true,
            })
            .collect();
        Message {
            role: Role::Assistant,
            content,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_protocol::model::ToolCall;

    #[test]
    fn builds_blocks_in_arrival_order() {
        let mut acc = ResponseAccumulator::new();
        assert!(!acc.has_delivered());
        acc.push(&StreamEvent::Usage(Usage {
            input: 5,
            ..Usage::default()
        }));
        assert!(!acc.has_delivered());
        acc.push(&StreamEvent::Metadata(ResponseMetadata {
            id: Some("msg_1".into()),
            model: Some("claude-x".into()),
        }));
        assert!(!acc.has_delivered(), "metadata is not content");
        assert_eq!(acc.metadata().id.as_deref(), Some("msg_1"));
        for event in [
            StreamEvent::ThinkingDelta("let me ".into()),
            StreamEvent::ThinkingDelta("think".into()),
            StreamEvent::ThinkingSignature("sig".into()),
            StreamEvent::TextDelta("Hel".into()),
            StreamEvent::TextDelta("lo".into()),
            StreamEvent::ToolCall(ToolCall {
                id: "t1".into(),
                name: "read_file".into(),
                input: "{}".into(),
            }),
            StreamEvent::TextDelta("after".into()),
            StreamEvent::Stop(StopReason::ToolUse),
        ] {
            acc.push(&event);
        }
        assert!(acc.has_delivered());
        assert_eq!(acc.stop_reason(), Some(&StopReason::ToolUse));
        assert_eq!(acc.usage().input, 5);
        let msg = acc.into_message();
        assert_eq!(msg.content.len(), 4);
        assert_eq!(
            msg.content[0],
            ContentBlock::Thinking {
                thinking: "let me think".into(),
                signature: Some("sig".into())
            }
        );
        assert_eq!(
            msg.content[1],
            ContentBlock::Text {
                text: "Hello".into()
            }
        );
        assert_eq!(
            msg.content[3],
            ContentBlock::Text {
                text: "after".into()
            }
        );
    }

    #[test]
    fn unsigned_thinking_and_empty_text_are_dropped() {
        let mut acc = ResponseAccumulator::new();
        acc.push(&StreamEvent::ThinkingDelta("cut".into()));
        acc.push(&StreamEvent::TextDelta(String::new()));
        assert!(acc.has_delivered());
        assert!(acc.into_message().content.is_empty());
    }
}
