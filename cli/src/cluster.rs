//! `troupe cluster status`: the nodes of the cluster the daemon belongs to
//! (capacity, runs in progress, last heartbeat) and its runs with the node
//! of each, asked of the daemon; `troupe cluster drain NODE` (and `--undo`,
//! `resume NODE`); and `troupe runs list` as a node of a cluster renders it
//! ([`render_runs`]).

use std::fmt::Write as _;

use troupe_protocol::api::{ClusterStatus, Rendered, RunSummary};
use troupe_protocol::events::preview;

use crate::ids::ShownIds;
use crate::project::Locations;
use crate::sessions::{ID_COLUMN, NO_RUNS};
use crate::{EXIT_RUNTIME, client::DaemonClient};

/// `troupe cluster` subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ClusterCommand {
    /// List the nodes of the cluster the daemon belongs to (capacity, runs
    /// in progress, last heartbeat) and the runs with the node of each.
    Status {
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Make a node take no new runs; it finishes the runs it has.
    Drain {
        /// The node's name.
        node: String,
        /// Let the node take runs again.
        #[arg(long)]
        undo: bool,
    },
    /// Let a drained node take runs again.
    Resume {
        /// The node's name.
        node: String,
    },
}

/// Runs a `troupe cluster` subcommand; returns the exit code.
pub(crate) async fn cluster(command: ClusterCommand) -> u8 {
    let client = match Locations::from_process()
        .map_err(|err| (err.code, err.message))
        .and_then(|locations| {
            DaemonClient::locate(&locations).map_err(|err| (err.code, err.message))
        }) {
        Ok(Some(client)) => client,
        Ok(None) => {
            eprintln!(
                "troupe: no daemon is running for this data directory; start one with `troupe serve --cluster URL`"
            );
            return EXIT_RUNTIME;
        }
        Err((code, message)) => {
            eprintln!("troupe: {message}");
            return code;
        }
    };
    let json = match command {
        ClusterCommand::Status { json } => json,
        ClusterCommand::Drain { node, undo } => return command_node(&client, &node, undo).await,
        ClusterCommand::Resume { node } => return command_node(&client, &node, true).await,
    };
    match client.cluster_status().await {
        Ok(status) if json => {
            println!("{}", serde_json::to_string(&status).unwrap_or_default());
            0
        }
        Ok(status) => {
            print!("{}", describe(&status));
            0
        }
        Err(err) => {
            eprintln!("troupe: {err}");
            err.code
        }
    }
}

/// Drains node `node` (or, with `resume`, lets it take runs again) and
/// says what it does now.
async fn command_node(client: &DaemonClient, node: &str, resume: bool) -> u8 {
    match client.command_node(node, resume).await {
        Ok(state) => {
            let doing = if state.draining {
                "takes no new runs"
            } else {
                "takes runs"
            };
            println!(
                "node {} {doing}; runs in progress: {}",
                state.node,
                state.running.len()
            );
            0
        }
        Err(err) => {
            eprintln!("troupe: {err}");
            err.code
        }
    }
}

/// `troupe cluster status` as text.
fn describe(status: &ClusterStatus) -> String {
    let mut text = format!(
        "cluster {} (answered by node {})\n\n{:<24}  {:>8}  {:>7}  {:<8}  LAST HEARTBEAT\n",
        status.url, status.node, "NODE", "CAPACITY", "RUNNING", "STATE"
    );
    for node in &status.nodes {
        let state = if node.stale {
            "stale"
        } else if node.draining {
            "draining"
        } else {
            "up"
        };
        let _ = writeln!(
            text,
            "{:<24}  {:>8}  {:>7}  {:<8}  {}",
            node.node,
            node.capacity,
            node.running.len(),
            state,
            node.heartbeat
        );
    }
    text.push('\n');
    text.push_str(&runs_table(&status.runs));
    text
}

/// `troupe runs list` of a node of a cluster: every run of the cluster, with
/// the node of each (JSON lines with `--json`).
pub(crate) fn render_runs(runs: &[RunSummary], json: bool) -> Rendered {
    let stdout = if json {
        runs.iter()
            .filter_map(|run| serde_json::to_string(run).ok())
            .map(|line| line + "\n")
            .collect()
    } else {
        runs_table(runs)
    };
    Rendered {
        code: 0,
        stdout,
        stderr: String::new(),
    }
}

/// Runs as a table: short id, status, start, node, the prompt's start.
fn runs_table(runs: &[RunSummary]) -> String {
    if runs.is_empty() {
        return format!("{NO_RUNS}\n");
    }
    let mut text = format!(
        "{:<ID_COLUMN$}  {:<11}  {:<16}  {:<24}  PROMPT\n",
        "RUN", "STATUS", "STARTED", "NODE"
    );
    let shown = ShownIds::new(runs.iter().map(|run| run.run_id.as_str()));
    for run in runs {
        let status = serde_json::to_value(run.status)
            .ok()
            .and_then(|value| value.as_str().map(str::to_string))
            .unwrap_or_default();
        let started = chrono::DateTime::parse_from_rfc3339(&run.started)
            .map(|at| at.format("%Y-%m-%d %H:%M").to_string())
            .unwrap_or_else(|_| run.started.clone());
        let _ = writeln!(
            text,
            "{:<ID_COLUMN$}  {:<11}  {:<16}  {:<24}  {}",
            shown.get(&run.run_id),
            status,
            started,
            run.node.as_deref().unwrap_or("waiting"),
            preview(&run.prompt)
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_protocol::api::{ClusterNode, RunState};

    fn run(id: &str, node: Option<&str>) -> RunSummary {
        RunSummary {
            agents: None,
            ended: None,
            node: node.map(str::to_string),
            prompt: "fix the\nbuild".into(),
            run_id: id.into(),
            session_id: "s".into(),
            started: "2026-12-04T10:00:00Z".into(),
            status: RunState::Running,
            stop_reason: None,
        }
    }

    #[test]
    fn runs_are_listed_with_their_node_or_as_waiting() {
        let text = render_runs(
            &[run("0193aaaa-1", Some("n1")), run("0193bbbb-2", None)],
            false,
        )
        .stdout;
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("NODE"), "{text}");
        assert!(
            lines[1].contains("n1") && lines[1].contains("running"),
            "{text}"
        );
        assert!(
            lines[1].contains("2026-12-04 10:00") && lines[1].contains("fix the build"),
            "{text}"
        );
        assert!(lines[2].contains("waiting"), "{text}");
        let json = render_runs(&[run("r", Some("n1"))], true).stdout;
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(json.trim()).unwrap()["node"],
            "n1"
        );
        assert_eq!(render_runs(&[], false).stdout, format!("{NO_RUNS}\n"));
    }

    #[test]
    fn the_status_lists_every_node_with_its_state() {
        let node = |name: &str, stale, draining| ClusterNode {
            node: name.into(),
            capacity: 2,
            running: vec!["r".into()],
            draining,
            heartbeat: "2026-12-04T10:00:00Z".into(),
            stale,
            addr: "127.0.0.1:1".into(),
        };
        let text = describe(&ClusterStatus {
            node: "a".into(),
            url: "nats://***@h:4222".into(),
            nodes: vec![
                node("a", false, false),
                node("b", true, false),
                node("c", false, true),
            ],
            runs: vec![run("r", Some("a"))],
        });
        assert!(
            text.starts_with("cluster nats://***@h:4222 (answered by node a)"),
            "{text}"
        );
        for (name, state) in [("a", "up"), ("b", "stale"), ("c", "draining")] {
            assert!(
                text.lines()
                    .any(|line| line.starts_with(name) && line.contains(state)),
                "{text}"
            );
        }
    }
}
