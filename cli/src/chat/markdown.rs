//! The answer as Markdown while it streams: text is shown a block at a time
//! (a paragraph, a list, a whole fenced code block), each rendered once it is
//! complete, so nothing printed has to be redrawn; the rest is shown when the
//! answer ends.

use termimad::MadSkin;

/// Text of one answer waiting to be shown.
#[derive(Debug, Default)]
pub(crate) struct MarkdownStream {
    pending: String,
}

impl MarkdownStream {
    /// Adds streamed text; returns the blocks it completed, if any.
    pub(crate) fn push(&mut self, text: &str) -> Option<String> {
        self.pending.push_str(text);
        let end = complete_blocks_end(&self.pending);
        if end == 0 {
            return None;
        }
        let rest = self.pending.split_off(end);
        let done = std::mem::replace(&mut self.pending, rest);
        Some(done).filter(|done| !done.trim().is_empty())
    }

    /// Everything not shown yet (the answer ended, or a tool call follows).
    pub(crate) fn finish(&mut self) -> Option<String> {
        let rest = std::mem::take(&mut self.pending);
        Some(rest).filter(|rest| !rest.trim().is_empty())
    }
}

/// The length of the prefix of `text` made of complete blocks: up to the end
/// of its last blank line outside a fenced code block (a fence is a line
/// starting with three backticks or tildes, possibly indented).
pub(crate) fn complete_blocks_end(text: &str) -> usize {
    let mut in_fence = false;
    let mut end = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        offset += line.len();
        if !line.ends_with('\n') {
            break; // an unfinished line
        }
        let content = line.trim();
        if content.starts_with("```") || content.starts_with("~~~") {
            in_fence = !in_fence;
            if !in_fence {
                // A closed fence ends its block.
                end = offset;
            }
            continue;
        }
        if !in_fence && content.is_empty() {
            end = offset;
        }
    }
    end
}

/// How Markdown looks: styled, or plain text where colour is off.
pub(crate) fn skin(color: bool) -> MadSkin {
    if color {
        MadSkin::default()
    } else {
        MadSkin::no_style()
    }
}

/// `markdown` rendered for a terminal `width` columns wide, without trailing
/// blank lines.
pub(crate) fn render(skin: &MadSkin, markdown: &str, width: usize) -> String {
    let text = termimad::FmtText::from(skin, markdown, Some(width.max(20)));
    text.to_string().trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_complete_at_a_blank_line() {
        assert_eq!(complete_blocks_end("Hello"), 0);
        assert_eq!(complete_blocks_end("Hello\n"), 0);
        assert_eq!(complete_blocks_end("Hello\n\n"), 7);
        assert_eq!(complete_blocks_end("Hello\n\nWorld\n\nand"), 14);
    }

    #[test]
    fn a_fenced_block_is_complete_only_when_closed() {
        let open = "Look:\n\n```rust\nfn main() {\n\n    x();\n";
        assert_eq!(complete_blocks_end(open), 7, "the blank line inside waits");
        let closed = format!("{open}}}\n```\n");
        assert_eq!(complete_blocks_end(&closed), closed.len());
        assert_eq!(complete_blocks_end("~~~\na\n\nb\n~~~\nafter"), 13);
    }

    #[test]
    fn streamed_pieces_come_out_block_by_block_and_nothing_is_lost() {
        let answer = "# Title\n\nSome *text* here.\n\n```\ncode\n\nmore\n```\n- a\n- b";
        let mut stream = MarkdownStream::default();
        let mut shown = String::new();
        let mut blocks = 0;
        for piece in answer.as_bytes().chunks(3) {
            if let Some(block) = stream.push(std::str::from_utf8(piece).unwrap()) {
                shown.push_str(&block);
                blocks += 1;
            }
        }
        assert_eq!(blocks, 3);
        shown.push_str(&stream.finish().unwrap());
        assert_eq!(shown, answer);
        assert_eq!(stream.finish(), None);
    }

    #[test]
    fn rendering_styles_only_with_colour() {
        let plain = render(&skin(false), "Some **bold** and `code`", 80);
        assert!(plain.contains("bold"), "{plain}");
        assert!(!plain.contains('\u{1b}'), "{plain:?}");
        let styled = render(&skin(true), "Some **bold** text", 80);
        assert!(styled.contains('\u{1b}'), "{styled:?}");
    }
}
