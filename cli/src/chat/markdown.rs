//! The answer as Markdown while it streams: text is shown a block at a time
//! (a paragraph, a list, a whole fenced code block), each rendered once it is
//! complete, so nothing printed has to be redrawn; the rest is shown when the
//! answer ends. Headings stay at the left margin, links show their target
//! (`text (url)`), and blocks are separated by one blank line. `troupe chat`
//! and `troupe run` on a terminal both show answers this way.

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

/// How Markdown looks: styled, or plain text where colour is off; headings
/// at the left margin, like the text under them.
pub(crate) fn skin(color: bool) -> MadSkin {
    let mut skin = if color {
        MadSkin::default()
    } else {
        MadSkin::no_style()
    };
    for header in skin.headers.iter_mut() {
        header.align = termimad::Alignment::Left;
    }
    skin
}

/// `markdown` rendered for a terminal `width` columns wide: links with their
/// targets, one blank line between blocks, no blank lines at either end.
pub(crate) fn render(skin: &MadSkin, markdown: &str, width: usize) -> String {
    let markdown = links_with_targets(markdown);
    let text = termimad::FmtText::from(skin, &markdown, Some(width.max(20)));
    one_blank_line_between_blocks(&text.to_string())
}

/// `text` with runs of blank lines made one, and none at either end.
pub(crate) fn one_blank_line_between_blocks(text: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for line in text.lines() {
        let blank = line.trim().is_empty();
        if blank && out.last().is_none_or(|last| last.trim().is_empty()) {
            continue;
        }
        out.push(if blank { "" } else { line.trim_end() });
    }
    while out.last().is_some_and(|last| last.is_empty()) {
        out.pop();
    }
    out.join("\n")
}

/// `markdown` with each inline link `[text](url)` written `text (url)` (just
/// `url` when the text is the url), outside code spans and fenced code
/// blocks, so the target is shown.
pub(crate) fn links_with_targets(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    let mut in_fence = false;
    for line in markdown.split_inclusive('\n') {
        let content = line.trim();
        if content.starts_with("```") || content.starts_with("~~~") {
            in_fence = !in_fence;
            out.push_str(line);
            continue;
        }
        if in_fence {
            out.push_str(line);
        } else {
            out.push_str(&line_links_with_targets(line));
        }
    }
    out
}

/// [`links_with_targets`] on one line outside a fence.
fn line_links_with_targets(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    let mut in_code = false;
    while let Some(at) = rest.find(['`', '[']) {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if rest.starts_with('`') {
            in_code = !in_code;
            out.push('`');
            rest = &rest[1..];
            continue;
        }
        // A `[text](target)` outside code.
        let link = (!in_code)
            .then(|| {
                let close = rest.find("](")?;
                let text = &rest[1..close];
                let after = &rest[close + 2..];
                let end = after.find(')')?;
                let target = &after[..end];
                let valid = !text.contains(['[', ']'])
                    && !target.is_empty()
                    && !target.contains(char::is_whitespace);
                valid.then_some((text, target, close + 2 + end + 1))
            })
            .flatten();
        match link {
            Some((text, target, length)) => {
                if text.is_empty() || text == target {
                    out.push_str(target);
                } else {
                    out.push_str(&format!("{text} ({target})"));
                }
                rest = &rest[length..];
            }
            None => {
                out.push('[');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
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
    fn links_show_their_targets_outside_code() {
        assert_eq!(
            links_with_targets("See [the docs](https://x.dev/a) and [x](y)."),
            "See the docs (https://x.dev/a) and x (y)."
        );
        assert_eq!(
            links_with_targets("[https://x.dev](https://x.dev)"),
            "https://x.dev"
        );
        assert_eq!(
            links_with_targets("`[a](b)` stays, [not a link] too"),
            "`[a](b)` stays, [not a link] too"
        );
        assert_eq!(
            links_with_targets("```\n[a](b)\n```\n[c](d)\n"),
            "```\n[a](b)\n```\nc (d)\n"
        );
        let rendered = render(&skin(false), "Read [the guide](https://g.dev).", 80);
        assert!(rendered.contains("the guide (https://g.dev)"), "{rendered}");
    }

    #[test]
    fn headings_are_not_centred_and_blocks_are_apart() {
        let rendered = render(&skin(false), "# Title\n\nFirst.\n\n- a\n- b\n\nLast.", 80);
        let lines: Vec<&str> = rendered.lines().collect();
        assert!(lines[0].starts_with("Title"), "{rendered:?}");
        assert_eq!(lines[1], "", "{rendered:?}");
        assert_eq!(lines[2], "First.", "{rendered:?}");
        assert_eq!(lines[3], "", "{rendered:?}");
        assert_eq!(lines.last(), Some(&"Last."), "{rendered:?}");
        assert_eq!(lines[lines.len() - 2], "", "{rendered:?}");
        assert_eq!(
            one_blank_line_between_blocks("\n\na\n\n\n\nb  \n\n"),
            "a\n\nb"
        );
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
