//! The terminal while a turn of `troupe chat` or a `troupe run` works: lines
//! and Markdown printed above a spinner line that shows the step, the tokens
//! and what is being typed; and the key mode that lets Esc, Ctrl-C and typed
//! text reach the chat.

use std::cell::Cell;
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
    /// The answer goes to stdout (a `troupe run` whose stdout is the
    /// terminal), not with the progress on stderr.
    answer_to_stdout: bool,
    /// The last thing shown was part of the answer: the next part starts
    /// after a blank line.
    after_markdown: Cell<bool>,
}

impl Screen {
    /// A screen with a spinner on stderr; the answer's Markdown goes to
    /// stdout when `answer_to_stdout`, else to stderr with the rest.
    pub(crate) fn new(color: bool, answer_to_stdout: bool) -> Self {
        let spinner = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}") {
            spinner.set_style(style);
        }
        spinner.enable_steady_tick(TICK);
        Self {
            spinner,
            skin: markdown::skin(color),
            color,
            answer_to_stdout,
            after_markdown: Cell::new(false),
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
                    let text = markdown::render(&self.skin, &for_terminal(&markdown), width);
                    // Blocks shown one after the other stay apart.
                    let text = if self.after_markdown.replace(true) {
                        format!("\n{text}")
                    } else {
                        text
                    };
                    self.write_lines(&text, self.answer_to_stdout);
                    continue;
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
        self.after_markdown.set(false);
        self.write_lines(text, false);
    }

    /// Writes `text` above the spinner, to stdout or stderr.
    fn write_lines(&self, text: &str, to_stdout: bool) {
        let write = |out: &mut dyn Write| {
            for line in text.split('\n') {
                // The terminal may be in key mode: lines end with CR LF.
                let _ = write!(out, "{line}\r\n");
            }
            let _ = out.flush();
        };
        self.spinner.suspend(|| {
            if to_stdout {
                write(&mut std::io::stdout().lock());
            } else {
                write(&mut std::io::stderr().lock());
            }
        });
    }

    /// Clears the terminal (Ctrl-L); the spinner is drawn again at the top.
    pub(crate) fn clear(&self) {
        self.after_markdown.set(false);
        self.spinner.suspend(|| {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\x1b[2J\x1b[H");
            let _ = err.flush();
        });
    }

    /// Takes the spinner off the terminal while something else uses it (a
    /// question asked on the terminal); [`Screen::resume`] brings it back.
    pub(crate) fn pause(&self) {
        self.spinner.disable_steady_tick();
        self.spinner.set_draw_target(ProgressDrawTarget::hidden());
        let mut err = std::io::stderr().lock();
        // Clears the line the spinner was drawn on.
        let _ = write!(err, "\r\x1b[2K");
        let _ = err.flush();
    }

    /// Shows the spinner again after [`Screen::pause`].
    pub(crate) fn resume(&self) {
        self.spinner.set_draw_target(ProgressDrawTarget::stderr());
        self.spinner.enable_steady_tick(TICK);
    }

    /// The spinner's text.
    pub(crate) fn status(&self, text: String) {
        self.spinner.set_message(text);
    }

    /// Whether the screen colours what it shows.
    pub(crate) fn color(&self) -> bool {
        self.color
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

/// The terminal's width in columns (80 when unknown or reported as 0).
pub(crate) fn terminal_width() -> usize {
    crossterm::terminal::size()
        .ok()
        .map(|(columns, _)| usize::from(columns))
        .filter(|columns| *columns > 0)
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
