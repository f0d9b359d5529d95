//! The `troupe` command: the front door of the runtime (SPEC §1.1).
//!
//! Parses the command line, sets up logging, and hands each subcommand to its
//! module. Exit codes follow SPEC §1.1: 0 finished, 1 runtime/provider error,
//! 2 usage/config error, 3 stopped by a limit, 130 cancelled.

mod approval;
mod demo;
mod render;
mod run;
mod sessions;
mod setup;
mod telemetry;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// SPEC §1.1: usage or configuration error.
pub const EXIT_USAGE: u8 = 2;
/// SPEC §1.1: runtime or provider error.
pub const EXIT_RUNTIME: u8 = 1;

/// An actor-based runtime for coding agents.
#[derive(Debug, Parser)]
#[command(name = "troupe", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one task to completion and exit.
    Run(RunArgs),
    /// Continue a stored session.
    Resume(ResumeArgs),
    /// List, show, export or remove stored sessions.
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// Print the span tree of a run from the local span store.
    Trace {
        /// Run id.
        run: String,
    },
    /// Run an offline demonstration against the built-in scripted model.
    Demo(DemoArgs),
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
    pub mode: Option<troupe_runtime::config::PermissionMode>,
    /// Working directory (default: the current one; a continued session's own).
    #[arg(long)]
    pub cwd: Option<PathBuf>,
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
}

/// Options of `troupe run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The task.
    pub prompt: String,
    /// Continue this session instead of starting a new one.
    #[arg(long)]
    pub session: Option<String>,
    #[command(flatten)]
    pub flags: RunFlags,
}

/// Options of `troupe resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The session to continue.
    pub id: String,
    /// What to say (default: ask the agent to carry on where it stopped).
    pub prompt: Option<String>,
    #[command(flatten)]
    pub flags: RunFlags,
}

/// `troupe sessions` subcommands.
#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List sessions, newest first.
    List {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Show a session: metadata, runs and its conversation.
    Show {
        /// Session id.
        id: String,
    },
    /// Write a session's messages as JSON Lines (one message per line).
    Export {
        /// Session id.
        id: String,
    },
    /// Remove a session and everything stored with it.
    Rm {
        /// Session id.
        id: String,
    },
}

/// Options of `troupe demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Write every runtime event as one JSON object per line to stdout.
    #[arg(long)]
    pub json: bool,
    /// Keep the sample repository instead of deleting it.
    #[arg(long)]
    pub keep: bool,
}

fn parse_mode(text: &str) -> Result<troupe_runtime::config::PermissionMode, String> {
    troupe_runtime::config::PermissionMode::parse(text).ok_or_else(|| {
        format!("unknown mode \"{text}\" (expected default, accept-edits, plan or bypass)")
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Commands that run agents set up full telemetry once the store is open.
    if !matches!(
        cli.command,
        Command::Run(_) | Command::Resume(_) | Command::Demo(_)
    ) {
        init_logging();
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
            Command::Run(args) => run::run(args).await,
            Command::Resume(args) => run::resume(args).await,
            Command::Sessions(command) => sessions::sessions(command),
            Command::Trace { run } => sessions::trace(&run),
            Command::Demo(args) => demo::demo(args).await,
        }
    });
    // Do not wait for lingering blocking tasks (a pending terminal prompt).
    runtime.shutdown_background();
    ExitCode::from(code)
}

/// Logs go to stderr (stdout carries answers and `--json` events), at `warn`
/// unless `TROUPE_LOG` or `RUST_LOG` says otherwise; a filter that does not
/// parse is one warning and the default filter.
fn init_logging() {
    use troupe_runtime::telemetry::{log_filter, log_filter_from_env};
    let (filter, warning) = log_filter(&log_filter_from_env(|name| std::env::var(name).ok()));
    let installed = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
    if let (Ok(()), Some(warning)) = (installed, warning) {
        tracing::warn!("{warning}");
    }
}
