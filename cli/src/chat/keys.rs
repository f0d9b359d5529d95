//! Keys pressed while the agent works, and the line they type: text queued
//! for the agent's next step, or the answer to an approval request.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// What a key pressed during a turn means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TurnKey {
    /// Esc or Ctrl-C: cancel the turn.
    Cancel,
    /// Enter: send the typed line.
    Submit,
    /// Backspace: remove the last character.
    Erase,
    /// Ctrl-U: clear the line.
    ClearLine,
    /// Ctrl-L: clear the screen.
    ClearScreen,
    /// A character to type.
    Char(char),
    /// Anything else (releases, arrows, function keys).
    Ignore,
}

/// Reads one key event.
pub(crate) fn turn_key(event: &KeyEvent) -> TurnKey {
    if event.kind == KeyEventKind::Release {
        return TurnKey::Ignore;
    }
    let control = event.modifiers.contains(KeyModifiers::CONTROL);
    match event.code {
        KeyCode::Esc => TurnKey::Cancel,
        KeyCode::Char('c') | KeyCode::Char('C') if control => TurnKey::Cancel,
        KeyCode::Char('u') if control => TurnKey::ClearLine,
        KeyCode::Char('l') if control => TurnKey::ClearScreen,
        KeyCode::Char('j') | KeyCode::Char('m') if control => TurnKey::Submit,
        KeyCode::Char(_) if control => TurnKey::Ignore,
        KeyCode::Char(c) if !c.is_control() => TurnKey::Char(c),
        KeyCode::Enter => TurnKey::Submit,
        KeyCode::Backspace => TurnKey::Erase,
        KeyCode::Tab => TurnKey::Char(' '),
        _ => TurnKey::Ignore,
    }
}

/// Longest line kept while typing during a turn, in characters.
pub(crate) const TYPED_LINE_CHARS: usize = 10_000;

/// A line being typed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct TypedLine {
    text: String,
}

impl TypedLine {
    /// Applies a key; returns the line when `Submit` ends it (blank lines are
    /// not returned).
    pub(crate) fn apply(&mut self, key: &TurnKey) -> Option<String> {
        match key {
            TurnKey::Char(c) if self.text.chars().count() < TYPED_LINE_CHARS => {
                self.text.push(*c);
            }
            TurnKey::Erase => {
                self.text.pop();
            }
            TurnKey::ClearLine => self.text.clear(),
            TurnKey::Submit => {
                let line = std::mem::take(&mut self.text);
                return Some(line).filter(|line| !line.trim().is_empty());
            }
            TurnKey::Char(_) | TurnKey::Cancel | TurnKey::ClearScreen | TurnKey::Ignore => {}
        }
        None
    }

    /// What is typed so far.
    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode, modifiers: KeyModifiers) -> TurnKey {
        turn_key(&KeyEvent::new(code, modifiers))
    }

    #[test]
    fn esc_and_ctrl_c_cancel_the_turn() {
        assert_eq!(key(KeyCode::Esc, KeyModifiers::NONE), TurnKey::Cancel);
        assert_eq!(
            key(KeyCode::Char('c'), KeyModifiers::CONTROL),
            TurnKey::Cancel
        );
        assert_eq!(
            key(KeyCode::Char('c'), KeyModifiers::NONE),
            TurnKey::Char('c')
        );
        assert_eq!(key(KeyCode::Enter, KeyModifiers::NONE), TurnKey::Submit);
        assert_eq!(
            key(KeyCode::Char('d'), KeyModifiers::CONTROL),
            TurnKey::Ignore
        );
        assert_eq!(key(KeyCode::Up, KeyModifiers::NONE), TurnKey::Ignore);
        assert_eq!(
            key(KeyCode::Char('l'), KeyModifiers::CONTROL),
            TurnKey::ClearScreen
        );
        let mut release = KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE);
        release.kind = KeyEventKind::Release;
        assert_eq!(turn_key(&release), TurnKey::Ignore);
    }

    #[test]
    fn a_typed_line_is_edited_then_sent() {
        let mut line = TypedLine::default();
        for c in "use tabz".chars() {
            assert_eq!(line.apply(&TurnKey::Char(c)), None);
        }
        line.apply(&TurnKey::Erase);
        line.apply(&TurnKey::Char('s'));
        assert_eq!(line.as_str(), "use tabs");
        assert_eq!(line.apply(&TurnKey::Submit), Some("use tabs".into()));
        assert_eq!(line.as_str(), "");
        assert_eq!(
            line.apply(&TurnKey::Submit),
            None,
            "a blank line is not sent"
        );
        line.apply(&TurnKey::Char('x'));
        line.apply(&TurnKey::ClearLine);
        assert_eq!(line.as_str(), "");
    }

    #[test]
    fn a_typed_line_is_bounded() {
        let mut line = TypedLine::default();
        for _ in 0..TYPED_LINE_CHARS + 50 {
            line.apply(&TurnKey::Char('a'));
        }
        assert_eq!(line.as_str().len(), TYPED_LINE_CHARS);
    }
}
