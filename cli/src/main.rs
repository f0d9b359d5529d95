//! The `troupe` command: the front door of the runtime (SPEC §1.1).
//!
//! Parses the command line, sets up logging, and hands each subcommand to its
//! module. Exit codes follow SPEC §1.1: 0 finished, 1 runtime/provider error,
//! 2 usage/config error, 3 stopped by a limit, 130 cancelled (143 or 129 when
//! SIGTERM or SIGHUP cancelled the run).

// Product code never unwraps: errors are values (tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

mod approval;
mod chat;
mod client;
mod cluster;
mod daemon;
mod dashboard;
mod demo;
mod diff;
mod follow;
mod ids;
mod mcp;
mod project;
mod render;
mod retention;
mod rewind;
mod root_guard;
mod run;
mod runs;
mod sandbox;
mod sanitize;
mod sessions;
mod setup;
mod shell;
mod signals;
mod task_plan_view;
mod telemetry;
mod trust;
mod undo;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// SPEC §1.1: usage or configuration error.
pub const EXIT_USAGE: u8 = 2;
/// SPEC §1.1: runtime or provider error.
pub const EXIT_RUNTIME: u8 = 1;
/// The daemon ended because a store write did not return within
/// [`daemon::STORE_STALL_DEADLINE`]: the next client starts a fresh daemon
/// (75 is `EX_TEMPFAIL`: try again).
pub const EXIT_STORE_STALLED: u8 = 75;

/// How long a process that ends waits for the processes it killed.
const KILLED_PROCESSES_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Waits at most [`KILLED_PROCESSES_LIMIT`] for every process tree this
/// process killed (MCP servers, commands of cancelled runs) to have exited,
/// so that nothing it started outlives it: `cgroup.kill` signals a whole tree
/// at once, but a killed process still takes a moment to exit on a busy
/// machine. Nothing killed, nothing to wait for.
pub(crate) async fn await_killed_processes() {
    if troupe_process::process_tree::wait_for_killed_trees(std::time::Duration::ZERO) {
        return;
    }
    let gone = tokio::task::spawn_blocking(|| {
        troupe_process::process_tree::wait_for_killed_trees(KILLED_PROCESSES_LIMIT)
    })
    .await;
    if !matches!(gone, Ok(true)) {
        tracing::warn!(
            limit_ms = KILLED_PROCESSES_LIMIT.as_millis() as u64,
            "processes this process killed had not all exited"
        );
    }
}

/// An actor-based runtime for coding agents.
#[derive(Debug, Parser)]
#[command(name = "troupe", version, propagate_version = true)]
struct Cli {
    /// Colour progress on stderr: auto (a terminal, unless NO_COLOR is set), always or never.
    #[arg(long, global = true, value_enum, default_value_t = render::ColorChoice::Auto)]
    color: render::ColorChoice,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one task to completion and exit.
    Run(RunArgs),
    /// Continue a stored session.
    Resume(ResumeArgs),
    /// Talk with the agent in this terminal, turn after turn.
    Chat(ChatArgs),
    /// List, show, export or remove stored sessions.
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// List a session's runs, numbered from 1, or go back to the end of
    /// run N: the conversation is cut back (the history from before is kept
    /// as a branch session) and the files restored.
    Rewind(rewind::RewindArgs),
    /// Print the span tree of a run from the local span store.
    Trace {
        /// Run id (or a unique prefix of one).
        run: String,
    },
    /// List, show, cancel or follow runs.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Restore a session's project files to before the last turn that
    /// changed them; each further undo goes back one more turn, `--redo`
    /// brings back what the last undo replaced.
    Undo(undo::UndoArgs),
    /// List a session's checkpoints.
    #[command(subcommand)]
    Checkpoints(CheckpointsCommand),
    /// Print a one-time login URL for the daemon's web dashboard (and open
    /// it where a desktop browser exists).
    Dashboard {
        /// Only print the URL.
        #[arg(long)]
        no_open: bool,
    },
    /// Answer an approval a run in the daemon is waiting for.
    Approve {
        /// Run id (or a unique prefix of one).
        run: String,
        /// The approval: its number in the run (`1`, as `troupe runs show`
        /// lists it) or its full id (`RUN-1`, from the `approval_requested`
        /// event).
        approval: String,
        /// allow, allow-always or deny.
        #[arg(value_parser = parse_answer)]
        answer: troupe_protocol::events::ApprovalOutcome,
        /// Why (passed to the model with a deny).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Trust a project: its .troupe/config.toml, .mcp.json, role files and
    /// skills then apply in full.
    ///
    /// Until a project is trusted, what its files ask for that widens what
    /// runs unasked or where data goes is ignored (a mode of accept-edits or
    /// bypass, allow rules, extra_roots, env_allowlist, providers that set
    /// base_url or api_key_env, hooks, every MCP server of .troupe/config.toml
    /// and .mcp.json), and so are its role files and skills, with one notice
    /// per run; settings that only restrict (deny, ask) always apply. Review
    /// the files before trusting it.
    Trust {
        /// A directory of the project (default: the current one); its project
        /// root is trusted.
        dir: Option<PathBuf>,
        /// Stop trusting the project instead.
        #[arg(long)]
        revoke: bool,
    },
    /// The OS sandbox of commands: `troupe sandbox status` shows how commands
    /// are confined here and what this kernel cannot enforce.
    #[command(subcommand)]
    Sandbox(sandbox::SandboxCommand),
    /// MCP servers: `troupe mcp list` starts the servers configured here and
    /// lists their state, tools and last error.
    #[command(subcommand)]
    Mcp(mcp::McpCommand),
    /// Run an offline demonstration against the built-in scripted model.
    Demo(DemoArgs),
    /// The daemon of this data directory: `troupe daemon status` shows it
    /// and its settings, `troupe daemon stop` stops it.
    #[command(subcommand)]
    Daemon(daemon::control::DaemonCommand),
    /// The cluster the daemon is a node of: `troupe cluster status` lists
    /// its nodes and runs.
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
    /// Run the runtime daemon: the HTTP/SSE API on loopback.
    Serve {
        /// Address to listen on (default: 127.0.0.1 and any free port; the
        /// address is written to $TROUPE_HOME/daemon.json).
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
        /// Another host name clients may use in `Host`/`Origin` (repeatable;
        /// `NAME` allows any port, `NAME:PORT` only that one), e.g. the
        /// service name in a compose network.
        #[arg(long = "allow-host", value_name = "NAME")]
        allow_hosts: Vec<String>,
        /// Exit after this many seconds with no run in progress, no event
        /// stream open and no request (default: never).
        #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
        idle_exit: Option<u64>,
        /// Join the NATS JetStream cluster at this URL
        /// (`nats://[TOKEN@|USER:PASSWORD@]HOST:PORT`; default: `[cluster]
        /// url` of the user's config file): runs are placed on the nodes
        /// with room (see docs/cluster.md).
        #[arg(long, value_name = "URL", env = "TROUPE_CLUSTER")]
        cluster: Option<String>,
        /// This node's name in the cluster (default: the host name and the
        /// process id).
        #[arg(long, value_name = "NAME")]
        node: Option<String>,
        /// The most runs this node runs at once (default 4).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        capacity: Option<u32>,
        /// How long a connection may take to send a request head, in
        /// milliseconds (tests).
        #[arg(long, hide = true, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
        header_timeout_ms: Option<u64>,
        /// How long a connection may stay idle between requests, in
        /// milliseconds (tests).
        #[arg(long, hide = true, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
        idle_timeout_ms: Option<u64>,
        /// How many connections may be open without having sent the token
        /// (tests).
        #[arg(long, hide = true, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        max_unauthenticated: Option<u64>,
    },
    /// Print the shell completion script for SHELL to stdout.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) to stdout, or write one page per command
    /// into a directory.
    Man {
        /// Write `troupe.1`, `troupe-run.1`, … into this directory instead.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
}

/// `troupe chat`'s options.
#[derive(Debug, Args)]
pub struct ChatArgs {
    /// Continue this session (an id, a short id, or a unique prefix of one).
    #[arg(long)]
    pub session: Option<String>,
    /// Continue the current project's most recently updated session.
    #[arg(long = "continue", conflicts_with = "session")]
    pub continue_last: bool,
    /// Provider entry to use (default: `default_provider`, or the one configured).
    #[arg(long)]
    pub provider: Option<String>,
    /// Model id, overriding the provider's (`/model` changes it).
    #[arg(long)]
    pub model: Option<String>,
    /// Permission mode: default, accept-edits, plan or bypass (`/mode` changes it).
    #[arg(long, value_parser = parse_mode)]
    pub mode: Option<troupe_protocol::permission::PermissionMode>,
    /// Working directory (default: the current one).
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// Start even though the project root is `/` or the home directory
    /// itself, which `--cwd` must then name (without this, the chat asks).
    #[arg(long)]
    pub confirm_cwd: bool,
    /// Turn limit for each message.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_turns: Option<u32>,
    /// Token budget for each message.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub budget_tokens: Option<u64>,
    /// Wall-clock limit for each message, in seconds.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: Option<u64>,
    /// Run the turns in this process even when a daemon is running (also
    /// `TROUPE_NO_DAEMON=1`).
    #[arg(long, env = "TROUPE_NO_DAEMON", value_parser = clap::builder::BoolishValueParser::new(), default_value_t = false)]
    pub no_daemon: bool,
}

/// Options shared by the commands that start a run.
#[derive(Debug, Args)]
pub struct RunFlags {
    /// Provider entry to use (default: `default_provider`, or the one configured).
    #[arg(long)]
    pub provider: Option<String>,
    /// Model id, overriding the provider's.
    #[arg(long)]
    pub model: Option<String>,
    /// Permission mode: default, accept-edits, plan or bypass.
    #[arg(long, value_parser = parse_mode)]
    pub mode: Option<troupe_protocol::permission::PermissionMode>,
    /// Working directory (default: the current one; a continued session's own).
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// Run in a checkout of this git repository (`https://`, `ssh://`,
    /// `user@host:path`) made by the daemon that runs the run, instead of
    /// in the working directory (needs a daemon; with `--revision`).
    #[arg(long, requires = "revision")]
    pub repository: Option<String>,
    /// The branch, tag or commit of `--repository` to check out.
    #[arg(long, requires = "repository")]
    pub revision: Option<String>,
    /// Start even though the project root is `/` or the home directory
    /// itself, which `--cwd` must then name (without this, a terminal asks
    /// and anything else refuses).
    #[arg(long)]
    pub confirm_cwd: bool,
    /// Write every runtime event as one JSON object per line to stdout.
    #[arg(long)]
    pub json: bool,
    /// Turn limit for this message.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_turns: Option<u32>,
    /// Token budget for this run.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub budget_tokens: Option<u64>,
    /// Wall-clock limit for this run, in seconds.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: Option<u64>,
    /// Run in this process even when a daemon is running (also
    /// `TROUPE_NO_DAEMON=1`).
    #[arg(long, env = "TROUPE_NO_DAEMON", value_parser = clap::builder::BoolishValueParser::new(), default_value_t = false)]
    pub no_daemon: bool,
    /// Start the run in the daemon, print its id and return at once (follow
    /// it with `troupe runs attach`; approvals are answered with `troupe
    /// approve`).
    #[arg(long, conflicts_with_all = ["no_daemon", "json"])]
    pub detach: bool,
}

/// Options of `troupe run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The task.
    pub prompt: String,
    /// Continue this session (its id, or a unique prefix of it) instead of starting a new one.
    #[arg(long)]
    pub session: Option<String>,
    // The run options (a doc comment here would become clap help text).
    #[allow(missing_docs)]
    #[command(flatten)]
    pub flags: RunFlags,
}

/// Options of `troupe resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The session to continue: its id, its short id, or a unique prefix of
    /// either.
    #[arg(required_unless_present = "last")]
    pub id: Option<String>,
    /// Continue the current project's most recently updated session (the
    /// one argument then is what to say).
    #[arg(long)]
    pub last: bool,
    /// What to say (default: ask the agent to carry on where it stopped).
    pub prompt: Option<String>,
    // The run options (a doc comment here would become clap help text).
    #[allow(missing_docs)]
    #[command(flatten)]
    pub flags: RunFlags,
}

/// `troupe sessions` subcommands.
#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List the sessions of the current project, newest first.
    List {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Every project's sessions, not only the current project's.
        #[arg(long)]
        all: bool,
        /// Forks and sub-agent sessions too, each marked with its parent.
        #[arg(long)]
        tree: bool,
        /// At most this many sessions (the most recently updated).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        limit: Option<u64>,
    },
    /// Show a session: metadata, runs and its conversation.
    Show {
        /// Session id (or a unique prefix of one).
        id: String,
    },
    /// Write a session's messages as JSON Lines (one message per line).
    Export {
        /// Session id (or a unique prefix of one).
        id: String,
    },
    /// Remove a session and everything stored with it.
    Rm {
        /// Session id (or a unique prefix of one).
        id: String,
    },
    /// Compact a session now: summarise its older history (the recent part
    /// is kept verbatim), so that it continues with a smaller context.
    Compact {
        /// Session id (or a unique prefix of one).
        id: String,
    },
    /// Apply the retention policy now (`[store] keep_days` and `max_bytes`):
    /// remove the sessions it says go, then the checkpoints of sessions that
    /// are gone, and keep the checkpoint stores within `[checkpoints]
    /// max_bytes`. Sessions with a run in progress are kept.
    Clean,
}

/// `troupe checkpoints` subcommands.
#[derive(Debug, Subcommand)]
pub enum CheckpointsCommand {
    /// List a session's checkpoints (default: the latest session of the
    /// current project), oldest first, with the bytes each added.
    List {
        /// Session id (or a unique prefix of one).
        session: Option<String>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
}

/// `troupe runs` subcommands.
#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// List runs, newest first.
    List {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Show a run: status, times, prompt.
    Show {
        /// Run id (or a unique prefix of one).
        id: String,
    },
    /// Cancel a run in the daemon.
    Cancel {
        /// Run id (or a unique prefix of one).
        id: String,
    },
    /// Follow a run's events from any point (Ctrl-C stops following; the run
    /// goes on).
    Attach {
        /// Run id (or a unique prefix of one).
        id: String,
        /// First event to show (its `seq`).
        #[arg(long, default_value_t = 1)]
        from: u64,
        /// Write the events as JSON lines to stdout.
        #[arg(long)]
        json: bool,
    },
}

fn parse_answer(text: &str) -> Result<troupe_protocol::events::ApprovalOutcome, String> {
    use troupe_protocol::events::ApprovalOutcome;
    match ApprovalOutcome::parse(text) {
        Some(
            outcome @ (ApprovalOutcome::Allow
            | ApprovalOutcome::AllowAlways
            | ApprovalOutcome::Deny),
        ) => Ok(outcome),
        _ => Err(format!(
            "unknown answer \"{text}\" (expected allow, allow-always or deny)"
        )),
    }
}

/// Options of `troupe demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Write every runtime event as one JSON object per line to stdout.
    #[arg(long)]
    pub json: bool,
    /// Keep the sample repository and the demo's own home (its session and
    /// spans) instead of deleting them, and print where they are.
    #[arg(long)]
    pub keep: bool,
}

fn parse_mode(text: &str) -> Result<troupe_protocol::permission::PermissionMode, String> {
    troupe_protocol::permission::PermissionMode::parse(text).ok_or_else(|| {
        format!("unknown mode \"{text}\" (expected default, accept-edits, plan or bypass)")
    })
}

fn main() -> ExitCode {
    // Started by a daemon to end its commands once it is gone.
    if let Some(code) = troupe_process::reaper::run_if_asked() {
        return ExitCode::from(code);
    }
    let cli = Cli::parse();
    harden(&cli);
    // These only print text generated from the command line's definition.
    match cli.command {
        Command::Completions { shell } => return ExitCode::from(shell::completions(shell)),
        Command::Man { out_dir } => return ExitCode::from(shell::man(out_dir.as_deref())),
        Command::Trust { dir, revoke } => {
            init_logging(false);
            return ExitCode::from(trust::trust(dir.as_deref(), revoke));
        }
        Command::Sandbox(command) => {
            init_logging(false);
            return ExitCode::from(sandbox::sandbox(command));
        }
        _ => {}
    }
    let no_color = std::env::var_os("NO_COLOR").map(|value| value.to_string_lossy().into_owned());
    let color = render::use_color(
        cli.color,
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
        no_color.as_deref(),
    );
    // Commands that run agents set up full telemetry once the store is open.
    let sets_up_telemetry = match &cli.command {
        Command::Run(_) | Command::Resume(_) | Command::Demo(_) | Command::Serve { .. } => true,
        Command::Chat(args) => args.no_daemon,
        _ => false,
    };
    if !sets_up_telemetry {
        init_logging(color);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("troupe")
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("troupe: cannot start the async runtime: {err}");
            return ExitCode::from(EXIT_RUNTIME);
        }
    };
    let code = runtime.block_on(async move {
        match cli.command {
            Command::Run(args) => run::run(args, color).await,
            Command::Resume(args) => run::resume(args, color).await,
            Command::Chat(args) => chat::chat(args, color).await,
            Command::Sessions(command) => sessions::sessions(command).await,
            Command::Rewind(args) => rewind::rewind(args).await,
            Command::Trace { run } => {
                sessions::print_view(troupe_protocol::api::View::Trace { run }).await
            }
            Command::Runs(command) => runs::runs(command, color).await,
            Command::Undo(args) => undo::undo(args).await,
            Command::Checkpoints(CheckpointsCommand::List { session, json }) => {
                undo::checkpoints_list(session, json).await
            }
            Command::Dashboard { no_open } => dashboard::command::dashboard(no_open).await,
            Command::Approve {
                run,
                approval,
                answer,
                reason,
            } => runs::approve(&run, &approval, answer, reason).await,
            Command::Demo(args) => demo::demo(args, color).await,
            Command::Mcp(command) => mcp::mcp(command).await,
            Command::Daemon(command) => daemon::control::daemon(command).await,
            Command::Cluster(command) => cluster::cluster(command).await,
            Command::Serve {
                listen,
                allow_hosts,
                idle_exit,
                cluster,
                node,
                capacity,
                header_timeout_ms,
                idle_timeout_ms,
                max_unauthenticated,
            } => {
                let defaults = daemon::connections::Limits::default();
                let millis = std::time::Duration::from_millis;
                daemon::serve(daemon::ServeOptions {
                    listen,
                    allowed_hosts: allow_hosts,
                    idle_exit: idle_exit.map(std::time::Duration::from_secs),
                    cluster: daemon::cluster::ClusterFlags {
                        url: cluster,
                        node,
                        capacity,
                    },
                    limits: daemon::connections::Limits {
                        head_timeout: header_timeout_ms.map_or(defaults.head_timeout, millis),
                        idle_timeout: idle_timeout_ms.map_or(defaults.idle_timeout, millis),
                        max_unauthenticated: max_unauthenticated
                            .and_then(|n| usize::try_from(n).ok())
                            .unwrap_or(defaults.max_unauthenticated),
                        ..defaults
                    },
                })
                .await
            }
            Command::Completions { .. }
            | Command::Man { .. }
            | Command::Trust { .. }
            | Command::Sandbox(_) => 0,
        }
    });
    // Do not wait for lingering blocking tasks (a pending terminal prompt).
    runtime.shutdown_background();
    troupe_process::process_tree::remove_spare_cgroups();
    ExitCode::from(code)
}

/// Reads provider keys into memory and removes them from this process's
/// environment (and `/proc/PID/environ`), makes the process non-dumpable and
/// turns core dumps off, before any thread starts. The key variables are the
/// standard ones, those the user and project configuration files name, and
/// those a parent troupe process listed.
fn harden(cli: &Cli) {
    use troupe_config::paths::{self, ProcessEnv};
    use troupe_process::secrets;
    let given = match &cli.command {
        Command::Run(args) => args.flags.cwd.clone(),
        Command::Resume(args) => args.flags.cwd.clone(),
        _ => None,
    };
    let mut roots = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        roots.push(paths::find_project_root(&cwd));
        if let Some(given) = given {
            roots.push(paths::find_project_root(&cwd.join(given)));
        }
    }
    let roots: Vec<&std::path::Path> = roots.iter().map(PathBuf::as_path).collect();
    let user = paths::user_config_file(&ProcessEnv).ok();
    let parent = std::env::var(secrets::WITHHOLD_VARS_VAR).ok();
    let names =
        troupe_config::keys::key_names_from_files(user.as_deref(), &roots, parent.as_deref());
    // SAFETY: no other thread exists yet: the async runtime starts after this.
    let report = unsafe { secrets::harden_process(&names) };
    for failure in report.failures {
        eprintln!("troupe: warning: {failure}");
    }
}

/// Logs go to stderr (stdout carries answers and `--json` events), at `warn`
/// unless `TROUPE_LOG` or `RUST_LOG` says otherwise; a filter that does not
/// parse is one warning and the default filter. Unless one of them asks for
/// logs, a warning is one line in Troupe's style, without timestamps.
fn init_logging(color: bool) {
    use troupe_telemetry::{BriefFormat, LogStyle, log_filter, log_filter_from_env};
    let (filter, warning) = log_filter(&log_filter_from_env(|name| std::env::var(name).ok()));
    let installed = match telemetry::terminal_log_style() {
        LogStyle::Brief => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .event_format(BriefFormat)
            .with_writer(std::io::stderr)
            .try_init(),
        LogStyle::Detailed => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(color)
            .with_writer(std::io::stderr)
            .with_target(false)
            .try_init(),
    };
    if let (Ok(()), Some(warning)) = (installed, warning) {
        tracing::warn!("{warning}");
    }
}
