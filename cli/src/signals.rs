//! The signals that cancel a run started from the command line — Ctrl-C
//! (SIGINT), SIGTERM (`kill`, `timeout`, `docker stop`) and SIGHUP (a closed
//! terminal) — and the exit code of a run one of them cancelled: 128 + the
//! signal's number.

use std::io::Write;

use troupe_protocol::events::RunStatus;

/// A signal that cancels the run: Ctrl-C, `kill`/`timeout`/`docker stop`, or
/// a closed terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopSignal {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM.
    Terminate,
    /// SIGHUP.
    Hangup,
}

impl StopSignal {
    /// Every signal that cancels a run.
    pub(crate) const ALL: [StopSignal; 3] = [Self::Interrupt, Self::Terminate, Self::Hangup];

    /// The signal's number (the same on every Unix for these three).
    pub(crate) fn number(self) -> u8 {
        match self {
            Self::Hangup => 1,
            Self::Interrupt => 2,
            Self::Terminate => 15,
        }
    }

    /// The signal's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Hangup => "SIGHUP",
            Self::Interrupt => "SIGINT",
            Self::Terminate => "SIGTERM",
        }
    }

    /// The exit code of a process this signal stopped: 128 + its number.
    pub(crate) fn exit_code(self) -> u8 {
        128 + self.number()
    }

    /// What to tell the person when the signal arrives first.
    pub(crate) fn cancelling_notice(self) -> String {
        match self {
            Self::Interrupt => "cancelling (Ctrl-C again to exit at once)".to_string(),
            other => format!(
                "{} received; cancelling (send it again to exit at once)",
                other.name()
            ),
        }
    }

    fn kind(self) -> tokio::signal::unix::SignalKind {
        use tokio::signal::unix::SignalKind;
        match self {
            Self::Interrupt => SignalKind::interrupt(),
            Self::Terminate => SignalKind::terminate(),
            Self::Hangup => SignalKind::hangup(),
        }
    }
}

/// The exit code of a run that ended with `status`, `signal` being the first
/// stop signal received while it ran: a run the signal cancelled exits with
/// 128 + the signal's number (130, 143, 129); any other end keeps its status's
/// code (a run that finished before the cancellation landed exits 0).
pub(crate) fn exit_code(status: RunStatus, signal: Option<StopSignal>) -> u8 {
    match signal {
        Some(signal) if status == RunStatus::Cancelled => signal.exit_code(),
        _ => status.exit_code() as u8,
    }
}

/// Listeners for every [`StopSignal`], installed for the whole run: a signal
/// arriving between two polls is kept, not lost.
pub(crate) struct StopSignals {
    listeners: Vec<(StopSignal, tokio::signal::unix::Signal)>,
}

impl StopSignals {
    /// Installs the listeners; from here on these signals no longer end the
    /// process by themselves.
    pub(crate) fn listen() -> std::io::Result<Self> {
        let listeners = StopSignal::ALL
            .into_iter()
            .map(|signal| Ok((signal, tokio::signal::unix::signal(signal.kind())?)))
            .collect::<std::io::Result<_>>()?;
        Ok(Self { listeners })
    }

    /// [`StopSignals::listen`], saying on stderr why when it fails.
    pub(crate) fn listen_or_report() -> Option<Self> {
        Self::listen()
            .map_err(|err| {
                notice(&format!(
                    "cannot listen for Ctrl-C, SIGTERM and SIGHUP: {err}"
                ))
            })
            .ok()
    }

    /// The next stop signal.
    pub(crate) async fn recv(&mut self) -> StopSignal {
        let waits = self.listeners.iter_mut().map(|(signal, listener)| {
            let signal = *signal;
            Box::pin(async move {
                listener.recv().await;
                signal
            })
        });
        futures::future::select_all(waits).await.0
    }
}

/// Writes one line to stderr, ignoring failures (after SIGHUP the terminal
/// may be gone).
pub(crate) fn notice(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "troupe: {line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_a_signal_cancelled_exits_with_128_plus_the_signal() {
        assert_eq!(
            exit_code(RunStatus::Cancelled, Some(StopSignal::Interrupt)),
            130
        );
        assert_eq!(
            exit_code(RunStatus::Cancelled, Some(StopSignal::Terminate)),
            143
        );
        assert_eq!(
            exit_code(RunStatus::Cancelled, Some(StopSignal::Hangup)),
            129
        );
    }

    #[test]
    fn other_ends_keep_their_status_code() {
        assert_eq!(
            exit_code(RunStatus::Finished, Some(StopSignal::Terminate)),
            0
        );
        assert_eq!(exit_code(RunStatus::Finished, None), 0);
        assert_eq!(
            exit_code(RunStatus::Cancelled, None),
            RunStatus::Cancelled.exit_code() as u8
        );
        assert_eq!(
            exit_code(RunStatus::Error, Some(StopSignal::Hangup)),
            RunStatus::Error.exit_code() as u8
        );
    }

    #[test]
    fn notices_name_the_signal() {
        assert!(StopSignal::Interrupt.cancelling_notice().contains("Ctrl-C"));
        assert!(
            StopSignal::Terminate
                .cancelling_notice()
                .contains("SIGTERM")
        );
        assert!(StopSignal::Hangup.cancelling_notice().contains("SIGHUP"));
    }
}
