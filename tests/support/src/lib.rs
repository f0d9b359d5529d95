//! What every crate's tests share about the machine they run on.
//!
//! A test that needs something the machine may not offer (Landlock, a
//! writable cgroup v2 tree, `tmux`, the MCP test servers, `nats-server`) asks [`require`]
//! first. Where the machine has it, the test runs. Where it does not, the
//! test is skipped loudly (a `SKIPPED` banner on stderr) — or fails, when
//! the variable that requires it is set to `1` ([`Need::require_var`]), as
//! CI sets it wherever the machine has the feature. So a machine without a
//! feature still runs the rest of the suite, and a machine with it cannot
//! silently skip what it should test.

pub mod git;
pub mod nats;
pub mod nats_cluster;
pub mod nats_operator;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use troupe_process::os_sandbox::KernelSupport;
use troupe_process::process_tree::{Containment, detect};

/// Something a test needs from the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// The kernel offers Landlock (the OS sandbox confines commands).
    Landlock,
    /// A cgroup v2 tree this process may write (commands get cgroups).
    Cgroups,
    /// The `tmux` program (a real terminal for the interactive chat).
    Tmux,
    /// Debian's `chromium` (a headless browser for the dashboard).
    Chromium,
    /// `nats-server` (the cluster's engine).
    NatsServer,
}

impl Need {
    /// What the need is, for the skip banner.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Landlock => "Landlock (the kernel's file-system sandbox)",
            Self::Cgroups => "a writable cgroup v2 tree",
            Self::Tmux => "tmux",
            Self::Chromium => "chromium",
            Self::NatsServer => "nats-server",
        }
    }

    /// The variable that turns a skip into a failure when set to `1`.
    pub fn require_var(self) -> &'static str {
        match self {
            Self::Landlock => "TROUPE_REQUIRE_LANDLOCK",
            Self::Cgroups => "TROUPE_REQUIRE_CGROUPS",
            Self::Tmux => "TROUPE_REQUIRE_TMUX",
            Self::Chromium => "TROUPE_REQUIRE_CHROMIUM",
            Self::NatsServer => "TROUPE_REQUIRE_NATS",
        }
    }

    /// Whether this machine offers it.
    pub fn available(self) -> bool {
        match self {
            Self::Landlock => KernelSupport::probe().landlock_abi > 0,
            Self::Cgroups => matches!(detect(), Containment::Cgroup { .. }),
            Self::Tmux => program_answers("tmux", "-V"),
            Self::Chromium => program_answers("chromium", "--version"),
            Self::NatsServer => program_answers("nats-server", "--version"),
        }
    }
}

/// Whether `program` runs and succeeds when asked `version_flag`.
fn program_answers(program: &str, version_flag: &str) -> bool {
    Command::new(program)
        .arg(version_flag)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Whether a test that needs `need` can run here: `true` when the machine
/// offers it; otherwise a loud skip (`false`), or a panic when
/// [`Need::require_var`] is `1`.
pub fn require(need: Need) -> bool {
    if need.available() {
        return true;
    }
    skip_or_fail(
        &format!("this machine does not offer {}", need.describe()),
        need.require_var(),
    );
    false
}

/// The directory `tests/mcp/install.sh` installs the MCP test servers into:
/// `$TROUPE_MCP_FIXTURES`, by default `~/.cache/troupe/mcp-fixtures`.
pub fn mcp_fixtures_dir() -> PathBuf {
    match std::env::var_os("TROUPE_MCP_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/troupe/mcp-fixtures"),
    }
}

/// `relative` below [`mcp_fixtures_dir`] when it exists. `None`, said
/// loudly, when it is not installed; a failure instead under
/// `TROUPE_REQUIRE_MCP_SERVERS=1` (CI).
pub fn mcp_fixture(relative: &str, what: &str) -> Option<PathBuf> {
    let path = mcp_fixtures_dir().join(relative);
    if path.exists() {
        return Some(path);
    }
    skip_or_fail(
        &format!(
            "{what} is not installed at {}: run tests/mcp/install.sh (or set TROUPE_MCP_FIXTURES)",
            path.display()
        ),
        "TROUPE_REQUIRE_MCP_SERVERS",
    );
    None
}

/// The Python interpreter of the MCP test fixtures (the venv with the `mcp`
/// package), as [`mcp_fixture`] finds it.
pub fn mcp_fixture_python() -> Option<PathBuf> {
    mcp_fixture("venv/bin/python", "the Python `mcp` package (venv)")
}

/// Fails with `message` when `require_var` is `1`; says it loudly otherwise.
fn skip_or_fail(message: &str, require_var: &str) {
    if std::env::var(require_var).is_ok_and(|value| value == "1") {
        panic!("{message} ({require_var}=1)");
    }
    eprintln!("\n\n!!!!! SKIPPED: {message} !!!!!\n");
}
