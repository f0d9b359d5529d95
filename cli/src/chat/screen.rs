//! The chat's terminal while a turn runs: lines and Markdown printed above a
//! spinner line that shows the step, the tokens and what is being typed; and
//! the key mode that lets Esc, Ctrl-C and typed text reach the chat.

use std::io::Write;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use termimad::MadSkin;

use super::markdown;
use super::view::Shown;
use crate::sanitize::for_terminal;

/// The spinner's refresh interval.
const TICK: Duration = Duration::from_millis(120);

/// Output of one turn.
pub(crate) struct Screen {
    spinner: ProgressBar,
    skin: MadSkin,
    color: bool,
}

impl Screen {
    /// A screen with a spinner on stderr.
    pub(crate) fn new(color: bool) -> Self {
        let spinner = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}") {
            spinner.set_style(style);
        }
        spinner.enable_steady_tick(TICK);
        Self {
            spinner,
            skin: markdown::skin(color),
            color,
        }
    }

    /// Shows `items` above the spinner. Their text comes from the model,
    /// tools and providers: control sequences in it are removed before
    /// Troupe adds its own styling.
    pub(crate) fn show(&self, items: Vec<Shown>) {
        for item in items {
            let text = match item {
                Shown::Markdown(markdown) => {
                    let width = terminal_width();
                    markdown::render(&self.skin, &for_terminal(&markdown), width)
                }
                Shown::Line(line) => for_terminal(&line).into_owned(),
                Shown::Dim(line) => self.paint("2", &for_terminal(&line)),
                Shown::Error(line) => self.paint("31", &for_terminal(&line)),
            };
            self.line(&text);
        }
    }

    /// Prints one line (or several) above the spinner.
    pub(crate) fn line(&self, text: &str) {
        self.spinner.suspend(|| {
            let mut err = std::io::stderr().lock();
            for line in text.split('\n') {
                // The terminal is in key mode: lines end with CR LF.
                let _ = write!(err, "{line}\r\n");
            }
            let _ = err.flush();
        });
    }

    /// The spinner's text.
    pub(crate) fn status(&self, text: String) {
        self.spinner.set_message(text);
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// Removes the spinner.
    pub(crate) fn close(self) {
        self.spinner.finish_and_clear();
    }
}

/// The terminal's width in columns (80 when unknown).
pub(crate) fn terminal_width() -> usize {
    crossterm::terminal::size()
        .map(|(columns, _)| usize::from(columns))
        .unwrap_or(80)
}

/// The terminal in key mode for the length of a turn: keys arrive one by
/// one and Ctrl-C is a key, not a signal. Restored on drop.
pub(crate) struct KeyMode {
    active: bool,
}

impl KeyMode {
    /// Enters key mode; on a terminal that refuses it, keys are not read and
    /// Ctrl-C stays a signal (which cancels the turn too).
    pub(crate) fn enter() -> Self {
        match crossterm::terminal::enable_raw_mode() {
            Ok(()) => Self { active: true },
            Err(err) => {
                tracing::debug!(%err, "no key mode");
                Self { active: false }
            }
        }
    }

    /// Whether keys are read.
    pub(crate) fn active(&self) -> bool {
        self.active
    }
}

impl Drop for KeyMode {
    fn drop(&mut self) {
        if self.active {
            let _ = crossterm::terminal::disable_raw_mode();
        }
    }
}
