//! Text from outside Troupe (model text, tool output, arguments, provider
//! messages) made safe to print on a terminal.
//!
//! [`for_terminal`] removes terminal escape sequences whole — CSI (`ESC [`:
//! cursor moves, clear screen, colours), OSC (`ESC ]`: window titles,
//! clipboard writes with OSC 52, hyperlinks), DCS, SOS, PM and APC strings,
//! two-byte escapes, and their one-character C1 forms — and shows every other
//! control character in caret notation (`^G`, `^H`, `^?`), so that nothing
//! the text contains can move the cursor, rewrite what is on screen, set the
//! clipboard or the title, or fake a prompt. Tabs and newlines stay; a CR
//! right before a newline is dropped (CRLF text prints as lines), a bare CR
//! (which would overwrite the line) is shown as `^M`.
//!
//! Only the renderer's inputs go through it: the colours Troupe itself
//! writes are added after, and `--json` output never passes here.

use std::borrow::Cow;

/// ESC.
const ESC: char = '\u{1b}';
/// BEL, which also ends an OSC string.
const BEL: char = '\u{7}';

/// `text` with terminal control sequences removed and other control
/// characters made visible (see the module docs). Borrows when nothing
/// needed changing.
pub(crate) fn for_terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_care) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\t' => out.push(c),
            '\r' if chars.peek() == Some(&'\n') => {}
            ESC => match chars.next() {
                Some('[') => skip_csi(&mut chars),
                Some(']') => skip_string(&mut chars, true),
                Some('P' | 'X' | '^' | '_') => skip_string(&mut chars, false),
                // `ESC` + an intermediate byte or two, then a final one.
                Some(' '..='/') => {
                    while chars.next_if(|c| matches!(c, ' '..='/')).is_some() {}
                    chars.next();
                }
                // Any other two-character escape (`ESC c` resets the
                // terminal, `ESC 7`/`ESC 8` save and restore the cursor).
                Some(_) | None => {}
            },
            '\u{9b}' => skip_csi(&mut chars),
            '\u{9d}' => skip_string(&mut chars, true),
            '\u{90}' | '\u{98}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars, false),
            c if c.is_control() => push_caret(&mut out, c),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// True for characters [`for_terminal`] changes.
fn needs_care(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// Skips the rest of a CSI sequence: parameter and intermediate bytes, then
/// one final byte (`@` to `~`). A sequence cut short by other characters ends
/// at them.
fn skip_csi(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while chars
        .next_if(|c| matches!(c, '0'..='?' | ' '..='/'))
        .is_some()
    {}
    chars.next_if(|c| matches!(c, '@'..='~'));
}

/// Skips an OSC/DCS/SOS/PM/APC string up to its terminator: ST (`ESC \` or
/// U+009C), or BEL for OSC. An unterminated string runs to the end of the
/// text (a terminal would swallow it too).
fn skip_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, bel_ends: bool) {
    while let Some(c) = chars.next() {
        match c {
            '\u{9c}' => return,
            BEL if bel_ends => return,
            ESC if chars.peek() == Some(&'\\') => {
                chars.next();
                return;
            }
            _ => {}
        }
    }
}

/// Caret notation: `^@`..`^_` for C0, `^?` for DEL, `^[x` style hex for C1.
fn push_caret(out: &mut String, c: char) {
    let code = c as u32;
    match code {
        0..=0x1f => {
            out.push('^');
            // 0x40..=0x5f are ASCII, so the addition stays a valid char.
            out.push(char::from((code as u8) + 0x40));
        }
        0x7f => out.push_str("^?"),
        _ => out.push_str(&format!("<U+{code:04X}>")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(text: &str) -> String {
        for_terminal(text).into_owned()
    }

    #[test]
    fn plain_text_tabs_and_newlines_are_borrowed_unchanged() {
        let text = "fn main() {\n\tprintln!(\"é ✓\");\n}\n";
        assert!(matches!(for_terminal(text), Cow::Borrowed(t) if t == text));
    }

    #[test]
    fn osc_52_clipboard_writes_are_removed() {
        assert_eq!(clean("a\x1b]52;c;ZXZpbA==\x07b"), "ab");
        assert_eq!(clean("a\x1b]52;c;ZXZpbA==\x1b\\b"), "ab");
        assert_eq!(clean("a\u{9d}52;c;ZXZpbA==\u{9c}b"), "ab");
    }

    #[test]
    fn window_titles_and_hyperlinks_are_removed() {
        assert_eq!(clean("\x1b]0;pwned\x07ok"), "ok");
        assert_eq!(clean("\x1b]2;title\x1b\\ok"), "ok");
        assert_eq!(clean("\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\"), "link");
    }

    #[test]
    fn clear_screen_cursor_moves_and_colours_are_removed() {
        assert_eq!(clean("\x1b[2J\x1b[Hclean"), "clean");
        assert_eq!(clean("up\x1b[1A\x1b[2Kline"), "upline");
        assert_eq!(clean("\x1b[31mred\x1b[0m"), "red");
        assert_eq!(clean("\x1b[?1049hscreen"), "screen");
        assert_eq!(clean("\u{9b}2Jx"), "x");
    }

    #[test]
    fn other_escapes_and_device_strings_are_removed() {
        assert_eq!(clean("\x1bcreset"), "reset");
        assert_eq!(clean("\x1b7save\x1b8"), "save");
        assert_eq!(clean("\x1b(Bcharset"), "charset");
        assert_eq!(clean("\x1bPq#0;2;0;0;0\x1b\\sixel"), "sixel");
        assert_eq!(clean("\x1b_apc\x1b\\x"), "x");
        assert_eq!(clean("trailing\x1b"), "trailing");
        assert_eq!(clean("\x1b]0;never ends"), "");
    }

    #[test]
    fn a_bare_carriage_return_cannot_overwrite_a_line() {
        // A fake prompt drawn over the real line.
        assert_eq!(clean("rm -rf /\r$ ls"), "rm -rf /^M$ ls");
        assert_eq!(clean("one\r\ntwo\r\n"), "one\ntwo\n");
    }

    #[test]
    fn other_controls_are_shown_in_caret_notation() {
        assert_eq!(
            clean("bell\x07 back\x08 nul\0 del\x7f"),
            "bell^G back^H nul^@ del^?"
        );
        assert_eq!(clean("c1\u{85}next"), "c1<U+0085>next");
    }
}
