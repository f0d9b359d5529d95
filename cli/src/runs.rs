//! `troupe runs list|show|cancel|attach` and `troupe approve`: runs as their
//! own objects. Listing and showing read the store (through the daemon while
//! it holds it); cancelling and answering approvals reach a run only through
//! the daemon that runs it (an embedded run is cancelled with Ctrl-C in its
//! own terminal); attaching follows a run from any event — live through the
//! daemon, or from the store for a run that has ended.

use std::sync::Arc;

use futures::future::BoxFuture;
use troupe_actors::EventSubscription;
use troupe_protocol::api::View;
use troupe_protocol::events::{ApprovalOutcome, RunEvent};

use crate::client::{ClientError, DaemonClient, RemoteRun};
use crate::follow::Approvals;
use crate::follow::{Answerer, OnSignal, RunLink, follow};
use crate::ids::{self, IdKind};
use crate::project::Locations;
use crate::render::RenderStyle;
use crate::sessions::print_view;
use crate::signals::StopSignals;
use crate::{EXIT_RUNTIME, RunsCommand};

/// What is said when an action needs a daemon and none runs.
pub(crate) const NEEDS_DAEMON: &str = "no daemon is running for this data directory: only runs in a \
daemon (`troupe serve`) can be reached from another terminal; a run started without one is \
cancelled with Ctrl-C in its own terminal";

/// Runs a `troupe runs` subcommand; returns the exit code.
pub(crate) async fn runs(command: RunsCommand, color: bool) -> u8 {
    match command {
        RunsCommand::List { json } => print_view(View::RunsList { json }).await,
        RunsCommand::Show { id } => print_view(View::RunShow { id }).await,
        RunsCommand::Cancel { id } => match daemon() {
            Ok(client) => report(client.cancel(&id).await, &format!("cancelling run {id}")),
            Err(err) => fail(&err),
        },
        RunsCommand::Attach { id, from, json } => attach(&id, from, json, color).await,
    }
}

/// Runs `troupe approve RUN APPROVAL ANSWER [--reason]`.
pub(crate) async fn approve(
    run: &str,
    approval: &str,
    outcome: ApprovalOutcome,
    reason: Option<String>,
) -> u8 {
    let done = format!("answered {approval}: {}", outcome.as_str());
    match daemon() {
        Ok(client) => report(client.approve(run, approval, outcome, reason).await, &done),
        Err(err) => fail(&err),
    }
}

/// The running daemon, or the error that says none runs.
fn daemon() -> Result<DaemonClient, ClientError> {
    let locations = Locations::from_process().map_err(|err| ClientError {
        message: err.message,
        code: err.code,
    })?;
    DaemonClient::locate(&locations)?.ok_or_else(|| ClientError {
        message: NEEDS_DAEMON.to_string(),
        code: EXIT_RUNTIME,
    })
}

fn report(result: Result<(), ClientError>, done: &str) -> u8 {
    match result {
        Ok(()) => {
            eprintln!("troupe: {done}");
            0
        }
        Err(err) => fail(&err),
    }
}

fn fail(err: &ClientError) -> u8 {
    eprintln!("troupe: {err}");
    err.code
}

/// Follows a run from event `from`: live through the daemon (answering its
/// approvals on this terminal; Ctrl-C stops following, the run goes on), or
/// from the store. Exits with the run's exit code once it has ended.
async fn attach(given: &str, from: u64, json: bool, color: bool) -> u8 {
    let Some(mut signals) = StopSignals::listen_or_report() else {
        return EXIT_RUNTIME;
    };
    let locations = match Locations::from_process() {
        Ok(locations) => locations,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    let style = RenderStyle {
        color,
        next_steps: false,
        dir: None,
    };
    let approvals = Approvals::from_terminal();
    match DaemonClient::locate(&locations) {
        Ok(Some(client)) => {
            let events = match client.events(given, from, false).await {
                Ok(events) => events,
                Err(err) => return fail(&err),
            };
            let mut link = RemoteRun {
                client: Arc::new(client),
                run_id: given.to_string(),
                events,
            };
            follow(
                &mut link,
                &mut signals,
                json,
                style.clone(),
                approvals,
                OnSignal::Detach,
            )
            .await
            .exit_code()
        }
        Ok(None) => {
            let store = match locations.open_store() {
                Ok(store) => store,
                Err(err) => {
                    eprintln!("troupe: {err}");
                    return err.code;
                }
            };
            let run_id = match ids::resolve(&store, IdKind::Run, given) {
                Ok(id) => id,
                Err(err) => {
                    eprintln!("troupe: {err}");
                    return err.code;
                }
            };
            let mut link = StoredRun {
                events: EventSubscription::stored(store, run_id, from),
            };
            follow(
                &mut link,
                &mut signals,
                json,
                style,
                Approvals::Nobody,
                OnSignal::Detach,
            )
            .await
            .exit_code()
        }
        Err(err) => fail(&err),
    }
}

/// A run's events read back from the store: nothing to cancel or answer.
struct StoredRun {
    events: EventSubscription,
}

impl RunLink for StoredRun {
    async fn next_event(&mut self) -> Option<RunEvent> {
        self.events.recv().await
    }

    fn cancel(&self) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }

    fn answerer(&self) -> Answerer {
        Arc::new(|_, _, _| Box::pin(async {}))
    }

    fn send_message(&self, _text: String) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(async { Err("the run is not in progress".to_string()) })
    }
}
