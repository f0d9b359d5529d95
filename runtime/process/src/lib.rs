//! Process discipline for every child the runtime starts (SPEC §4, §6, §8): each
//! child leads its own process group inside a tree that follows every process
//! it starts (its own cgroup, or a subreaper; see `process_tree`), gets stdin
//! from /dev/null and only the environment it is given; stopping it stops the
//! WHOLE group and tree (SIGTERM, then SIGKILL after [`KILL_GRACE`]), so no
//! descendant survives a timeout or a cancellation, not even one that moved
//! to a group or session of its own. Used by `bash`, background tasks and
//! hooks, so it knows nothing about tools.
//!
//! Commands are also confined by the OS sandbox (`spawn_confined`, see
//! `os_sandbox`). A shell that nothing has to confine between fork and
//! `exec` joins its cgroup itself and is started with `posix_spawn`
//! ([`spawn_bash`]), so starting it does not cost more as the runtime's
//! memory grows.
//!
//! This crate starts, watches and stops processes; it does not decide what may
//! run (permissions) nor how output is shown (the tools). Beside this root:
//! `process_tree` (the cgroup or subreaper tree), `os_sandbox` (Landlock,
//! namespaces, seccomp, the files it watches), `lineage` (whether a process
//! descends from a command of a run), `secrets` (the provider keys no child
//! is given) and `git_command` (Troupe's own, confined `git`).

// Product code never unwraps: errors are values (tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod direct_spawn;
pub mod git_command;
pub mod lineage;
pub mod os_sandbox;
pub mod process_tree;
pub mod reaper;
pub mod secrets;

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use crate::os_sandbox::{CommandSandbox, WatchedFiles};
use crate::process_tree::{Containment, Tree};

/// SPEC §4: after SIGTERM a process group has this long to exit before SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(2);

/// How often a group being stopped is checked for live members. Group members
/// that are not our children cannot be waited for, only observed.
pub(crate) const GROUP_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// After SIGKILL, how long to wait for the kernel to finish the group off
/// before reporting it gone anyway (SIGKILL cannot be caught; only a process in
/// uninterruptible sleep lingers).
pub const KILL_CONFIRM: Duration = Duration::from_secs(1);

/// Once every process of the group is gone, how long to keep reading output
/// still buffered in the pipe. Only a process that left the group (`setsid`)
/// can hold the pipe open longer; its output is then abandoned.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// Size of one read from a child's output pipe.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// SPEC §4: the only variables of the runtime's environment a command sees,
/// besides the configured allowlist.
pub(crate) const BASE_ENV_VARS: [&str; 5] = ["HOME", "PATH", "USER", "TERM", "LANG"];

/// SPEC §15: commands never see provider keys. These names are withheld even
/// when a configuration allowlists them; [`child_environment_withholding`]
/// withholds the configured key variables as well.
pub(crate) const WITHHELD_ENV_VARS: [&str; 3] = crate::secrets::STANDARD_KEY_VARS;

/// The environment of child processes: `BASE_ENV_VARS` plus the allowlisted
/// names, in that order, each once, those `lookup` knows; never the
/// `WITHHELD_ENV_VARS` nor the names this process withheld at start-up.
/// Pure apart from that start-up list: pass `|name| std::env::var(name).ok()`
/// to read the runtime's environment (once per session).
pub fn child_environment<F>(allowlist: &[String], lookup: F) -> Vec<(String, String)>
where
    F: Fn(&str) -> Option<String>,
{
    let withheld = crate::secrets::key_names(
        crate::secrets::withheld_names()
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    child_environment_withholding(allowlist, &withheld, lookup)
}

/// [`child_environment`] with the withheld names given: every name in
/// `withheld` and every `WITHHELD_ENV_VARS` name is left out, whatever the
/// allowlist says. Pure.
pub fn child_environment_withholding<F>(
    allowlist: &[String],
    withheld: &BTreeSet<String>,
    lookup: F,
) -> Vec<(String, String)>
where
    F: Fn(&str) -> Option<String>,
{
    let mut out: Vec<(String, String)> = Vec::new();
    let names = BASE_ENV_VARS
        .iter()
        .copied()
        .chain(allowlist.iter().map(String::as_str));
    for name in names {
        if name.is_empty()
            || WITHHELD_ENV_VARS.contains(&name)
            || withheld.contains(name)
            || out.iter().any(|(existing, _)| existing == name)
        {
            continue;
        }
        if let Some(value) = lookup(name) {
            out.push((name.to_string(), value));
        }
    }
    out
}

/// Why a process could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// Spawning failed.
    #[error("cannot start `{program}`: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        source: io::Error,
    },
    /// The output pipe could not be created.
    #[error("cannot create the output pipe: {0}")]
    Pipe(io::Error),
    /// The child has no usable process id.
    #[error("the started process has no usable process id")]
    NoPid,
    /// Called outside a Tokio runtime, which watching the output needs.
    #[error("no async runtime is running to watch the process")]
    NoRuntime,
}

/// How stopping a group ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillOutcome {
    /// No live member was left; nothing was sent.
    AlreadyGone,
    /// Every member exited after SIGTERM within the grace period.
    Terminated,
    /// Some member outlived the grace period and got SIGKILL.
    Killed,
}

/// A process group led by a child we started. Dropping it while armed sends
/// SIGKILL to the group (the emergency path: a future dropped mid-run leaves no
/// process behind); [`ProcessGroup::terminate`] is the graceful path.
#[derive(Debug)]
pub struct ProcessGroup {
    pgid: libc::pid_t,
    /// Every process the command started, wherever it moved (see
    /// `process_tree`); `None` for a bare group.
    tree: Option<Tree>,
    /// Set once the group was seen empty: it is never signalled again, so a
    /// recycled id can never be hit.
    gone: AtomicBool,
    armed: AtomicBool,
    /// Protected files the command must leave as it found them (see
    /// [`WatchedFiles`]); put back when it ends and again when dropped.
    watched: WatchedFiles,
}

impl ProcessGroup {
    /// The group led by process `pid`. `None` for ids that would address more
    /// than one group (0, 1, or out of range).
    pub fn new(pid: u32) -> Option<Self> {
        let pgid = libc::pid_t::try_from(pid).ok()?;
        if pgid <= 1 {
            return None;
        }
        Some(Self {
            pgid,
            tree: None,
            gone: AtomicBool::new(false),
            armed: AtomicBool::new(true),
            watched: WatchedFiles::default(),
        })
    }

    /// The same group, setting aside what the command creates at `watched`
    /// when it ends.
    pub fn with_watched(mut self, watched: WatchedFiles) -> Self {
        self.watched = watched;
        self
    }

    /// Puts back the protected files the command created, changed or
    /// removed (see [`WatchedFiles`]); returns what was done to each. Call
    /// it once the command has ended.
    pub fn set_aside_created_protected(&self) -> Vec<crate::os_sandbox::SetAside> {
        self.watched.set_aside_created()
    }

    /// The same group, also following `tree`: signals, liveness and kills
    /// then cover every process the command started, also those that left
    /// the group (`setsid`, `setpgid`, `set -m`).
    pub fn with_tree(mut self, tree: Tree) -> Self {
        self.tree = Some(tree);
        self
    }

    /// The process group id (the leader's pid).
    pub fn id(&self) -> u32 {
        // pgid > 1 was checked in `new`.
        self.pgid.unsigned_abs()
    }

    /// Sends `signal` to every member of the group and of its tree. A group
    /// without members is not an error.
    pub fn signal(&self, signal: libc::c_int) -> io::Result<()> {
        if let Some(tree) = &self.tree {
            tree.signal(signal);
        }
        if self.gone.load(Ordering::Acquire) {
            return Ok(());
        }
        // SAFETY: kill(2) takes plain integers; a negative pid addresses the
        // group, and `new` refused the ids 0 and 1 that would address more.
        let rc = unsafe { libc::kill(-self.pgid, signal) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ESRCH) {
            self.gone.store(true, Ordering::Release);
            return Ok(());
        }
        Err(err)
    }

    /// True while some member of the group or its tree is alive. Zombies
    /// (exited, waiting for their parent) run nothing and do not count.
    pub fn has_live_members(&self) -> bool {
        if self.tree.as_ref().is_some_and(Tree::has_live_members) {
            return true;
        }
        if self.gone.load(Ordering::Acquire) {
            return false;
        }
        let alive = group_has_live_members(self.pgid);
        if !alive {
            self.gone.store(true, Ordering::Release);
        }
        alive
    }

    /// Stops the group: SIGTERM (and SIGCONT, so stopped members can act on it),
    /// then SIGKILL to whatever is still alive after `grace`.
    pub async fn terminate(&self, grace: Duration) -> KillOutcome {
        if !self.has_live_members() {
            return KillOutcome::AlreadyGone;
        }
        self.send_logged(libc::SIGTERM);
        self.send_logged(libc::SIGCONT);
        if self.wait_until_empty(grace).await {
            return KillOutcome::Terminated;
        }
        tracing::debug!(
            pgid = self.pgid,
            "process group outlived SIGTERM; sending SIGKILL"
        );
        self.kill_now();
        if !self.wait_until_empty(KILL_CONFIRM).await {
            tracing::warn!(
                pgid = self.pgid,
                "process group still has live members after SIGKILL"
            );
        }
        KillOutcome::Killed
    }

    /// SIGKILL to the group and its tree at once. A tree whose processes
    /// have all ended is released instead: nothing is left to kill.
    pub fn kill_now(&self) {
        if let Some(tree) = &self.tree
            && !tree.release_if_empty()
        {
            tree.kill();
        }
        self.send_logged(libc::SIGKILL);
    }

    /// After this, dropping the group sends nothing.
    pub fn disarm(&self) {
        self.armed.store(false, Ordering::Release);
    }

    async fn wait_until_empty(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if !self.has_live_members() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(GROUP_POLL_INTERVAL).await;
        }
    }

    fn send_logged(&self, signal: libc::c_int) {
        if let Err(err) = self.signal(signal) {
            tracing::warn!(pgid = self.pgid, signal, error = %err, "cannot signal process group");
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // A tree already killed whole needs no look through `/proc` for
        // survivors (milliseconds while its processes are still dying, on
        // the thread that drops it: at exit, the process's last ones).
        let killed_whole = self.tree.as_ref().is_some_and(Tree::killed_whole);
        if self.armed.load(Ordering::Acquire) && !killed_whole && self.has_live_members() {
            self.kill_now();
        }
        // Whoever ran the command did this already; this catches a task
        // that ended otherwise (its processes are gone now).
        self.watched.set_aside_created();
    }
}

/// True when some process of group `pgid` is alive (not a zombie). Reads
/// `/proc` where it exists; elsewhere any member counts, zombies included.
pub fn group_has_live_members(pgid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(-pgid, 0) };
    if rc != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    // Without /proc, existence is all we know: count the group as alive.
    scan_proc_for_group(pgid).unwrap_or(true)
}

/// `Some(true)` when `/proc` lists a live (non-zombie) member of `pgid`,
/// `Some(false)` when it lists none, `None` when `/proc` cannot be read.
fn scan_proc_for_group(pgid: libc::pid_t) -> Option<bool> {
    let entries = std::fs::read_dir("/proc").ok()?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((state, group)) = parse_proc_stat(&stat)
            && group == pgid
            && state != 'Z'
            && state != 'X'
        {
            return Some(true);
        }
    }
    Some(false)
}

/// Parses the state and process group of a `/proc/PID/stat` line. The command
/// name is in parentheses and may contain anything, so fields are counted from
/// the last `)`.
pub(crate) fn parse_proc_stat(stat: &str) -> Option<(char, libc::pid_t)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// True when process `pid` is alive: it exists and is not a zombie, or its
/// main thread is a zombie while other threads of it still run. A process
/// that is exiting shows its main thread as a zombie before its other
/// threads have let go of its open files (a database lock among them), so it
/// counts as gone only once no thread but the main one is left.
pub fn process_is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => match parse_proc_stat(&stat) {
            Some(('Z' | 'X', _)) => other_threads_remain(pid),
            Some(_) => true,
            None => false,
        },
        Err(_) => {
            let Ok(pid) = libc::pid_t::try_from(pid) else {
                return false;
            };
            // SAFETY: signal 0 only checks for existence.
            unsafe { libc::kill(pid, 0) == 0 }
        }
    }
}

/// Whether `/proc/PID/task` lists a thread besides the main one.
fn other_threads_remain(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|threads| threads.filter_map(Result::ok).nth(1).is_some())
        .unwrap_or(false)
}

/// Makes `command` lead its own process group and spawns it, contained as
/// this process contains commands ([`process_tree::containment`]). The caller
/// sets the environment (`env_clear` plus [`child_environment`]), directory
/// and stdio (stdin from /dev/null unless it feeds the child, as hooks do).
/// The returned group kills every member, and every process of its tree,
/// when dropped while armed.
pub fn spawn_in_group(command: &mut Command) -> Result<(Child, Arc<ProcessGroup>), ProcessError> {
    spawn_contained(command, process_tree::containment())
}

/// [`spawn_in_group`] with the containment given (tests use both kinds).
pub(crate) fn spawn_contained(
    command: &mut Command,
    containment: &Containment,
) -> Result<(Child, Arc<ProcessGroup>), ProcessError> {
    spawn_confined(command, containment, None)
}

/// [`spawn_contained`], confined by `sandbox` when given: the one spawn path
/// of every command the runtime starts for a tool, a background task or a
/// hook. The sandbox's hook is added after the tree's, which must still
/// write to the cgroup file system.
pub(crate) fn spawn_confined(
    command: &mut Command,
    containment: &Containment,
    sandbox: Option<&CommandSandbox>,
) -> Result<(Child, Arc<ProcessGroup>), ProcessError> {
    spawn_in_tree(command, Tree::new(containment), true, sandbox)
}

/// How one standard stream of a command is connected.
#[derive(Debug)]
pub enum ChildStdio {
    /// `/dev/null`.
    Null,
    /// A new pipe whose other end is returned in [`SpawnedCommand`].
    Piped,
    /// This descriptor (the caller keeps no copy it needs closed).
    Given(std::os::fd::OwnedFd),
}

/// A command's main process, started straight into its cgroup
/// ([`direct_spawn`]) or forked the usual way.
#[derive(Debug)]
pub enum CommandChild {
    /// Started by `clone3` inside its cgroup; awaited on its pidfd.
    Direct(direct_spawn::DirectChild),
    /// Started by Tokio's `Command`.
    Forked(Child),
}

impl CommandChild {
    /// The process id, while it can be known.
    pub fn id(&self) -> Option<u32> {
        match self {
            CommandChild::Direct(child) => Some(child.id()),
            CommandChild::Forked(child) => child.id(),
        }
    }

    /// Waits for the process to exit and reaps it. Cancel-safe.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        match self {
            CommandChild::Direct(child) => child.wait().await,
            CommandChild::Forked(child) => child.wait().await,
        }
    }
}

/// A command started by [`spawn_bash`]: its main process, its group and
/// tree, and this side of the streams that were [`ChildStdio::Piped`].
#[derive(Debug)]
pub struct SpawnedCommand {
    /// The `bash` process.
    pub child: CommandChild,
    /// Its process group and tree.
    pub group: Arc<ProcessGroup>,
    /// Writes to its stdin.
    pub stdin: Option<pipe::Sender>,
    /// Reads its stdout.
    pub stdout: Option<pipe::Receiver>,
    /// Reads its stderr.
    pub stderr: Option<pipe::Receiver>,
}

/// How [`spawn_bash`] may start the shell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpawnPath {
    /// Straight into its cgroup where the kernel allows it (the default).
    IntoCgroup,
    /// Forked, joining its cgroup after the fork (what kernels without
    /// `clone3` get; tests take it on purpose).
    #[cfg_attr(not(test), allow(dead_code))]
    Forked,
}

/// Set once `clone3` into a cgroup was refused: every later command is
/// forked.
static CLONE_INTO_CGROUP_REFUSED: AtomicBool = AtomicBool::new(false);

/// Starts `bash -c SCRIPT` in `cwd` with exactly `env` (and the streams
/// `stdio` says, in the order stdin, stdout, stderr) inside a new tree of
/// `containment`, confined by `sandbox`: how the `bash` tool, background
/// tasks and hooks start their commands. Must be called inside a Tokio
/// runtime.
///
/// In a cgroup tree the shell is created inside its cgroup
/// ([`direct_spawn`]): it is never moved there, which would cost an RCU
/// grace period (7 to 22 ms) whenever no other move came just before.
/// Where the kernel refuses that, the shell is forked and joins its cgroup
/// itself. When nothing else has to run in the child before `exec` (no
/// sandbox confinement, an environment that cannot run code before the
/// script: `shell_may_join_itself`), it joins as the first command of the
/// script (`self_joining_script`), so the process is started with
/// `posix_spawn`: the child shares this process's memory until its `exec`
/// instead of copying its page tables. Nothing of the script runs before
/// the join, and a shell that cannot join exits 125 without running it.
/// Otherwise the child joins in a hook between fork and `exec`, as every
/// other command does.
pub fn spawn_bash(
    script: &str,
    cwd: &Path,
    env: &[(String, String)],
    stdio: [ChildStdio; 3],
    containment: &Containment,
    sandbox: Option<&CommandSandbox>,
) -> Result<SpawnedCommand, ProcessError> {
    spawn_bash_by(
        script,
        cwd,
        env,
        stdio,
        containment,
        sandbox,
        SpawnPath::IntoCgroup,
    )
}

/// [`spawn_bash`] by the path given.
fn spawn_bash_by(
    script: &str,
    cwd: &Path,
    env: &[(String, String)],
    stdio: [ChildStdio; 3],
    containment: &Containment,
    sandbox: Option<&CommandSandbox>,
    path: SpawnPath,
) -> Result<SpawnedCommand, ProcessError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(ProcessError::NoRuntime);
    }
    let streams = Streams::connect(stdio)?;
    let tree = Tree::new(containment);
    let mut env = env.to_vec();
    set_var(
        &mut env,
        crate::lineage::COMMAND_VAR,
        &std::process::id().to_string(),
    );
    if path == SpawnPath::IntoCgroup
        && let Some((child, watched)) =
            spawn_into_cgroup(script, cwd, &env, &streams, &tree, sandbox)?
    {
        let pid = child.id();
        tree.set_leader(pid);
        let group = ProcessGroup::new(pid).ok_or(ProcessError::NoPid)?;
        return Ok(streams.spawned(
            CommandChild::Direct(child),
            Arc::new(group.with_tree(tree).with_watched(watched)),
        ));
    }
    let confined = sandbox.is_some_and(|sandbox| sandbox.plan().is_some());
    let self_join = tree
        .cgroup_procs()
        .filter(|_| !confined && shell_may_join_itself(&env))
        .zip(find_in_path("bash", env_value(&env, "PATH")));
    let mut command = match &self_join {
        Some((procs, bash)) => {
            let mut command = Command::new(bash);
            command.arg("-c").arg(self_joining_script(procs, script));
            command
        }
        None => {
            let mut command = Command::new("bash");
            command.arg("-c").arg(script);
            command
        }
    };
    command
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    streams.attach(&mut command).map_err(ProcessError::Pipe)?;
    let (child, group) = spawn_in_tree(&mut command, tree, self_join.is_none(), sandbox)?;
    // The command, dropped here, held copies of the child's ends.
    drop(command);
    Ok(streams.spawned(CommandChild::Forked(child), group))
}

/// Sets `name` in `env`, replacing every earlier value (a child reads the
/// first one).
fn set_var(env: &mut Vec<(String, String)>, name: &str, value: &str) {
    env.retain(|(key, _)| key != name);
    env.push((name.to_owned(), value.to_owned()));
}

/// The shell started inside `tree`'s cgroup, with what its sandbox watches;
/// `None` when it has to be forked instead (no cgroup tree, no `bash` on
/// the command's `PATH` to report on, or a kernel that refuses `clone3`).
fn spawn_into_cgroup(
    script: &str,
    cwd: &Path,
    env: &[(String, String)],
    streams: &Streams,
    tree: &Tree,
    sandbox: Option<&CommandSandbox>,
) -> Result<Option<(direct_spawn::DirectChild, WatchedFiles)>, ProcessError> {
    if CLONE_INTO_CGROUP_REFUSED.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let Some(dir) = tree.cgroup_dir() else {
        return Ok(None);
    };
    let Some(bash) = find_in_path("bash", env_value(env, "PATH")) else {
        return Ok(None);
    };
    let spawn_error = |source: io::Error| ProcessError::Spawn {
        program: "bash".to_owned(),
        source,
    };
    let confinement = match sandbox {
        Some(sandbox) => sandbox
            .prepare_confinement()
            .map_err(|err| spawn_error(io::Error::other(err)))?,
        None => None,
    };
    let mut env = env.to_vec();
    if let Some(dir) = confinement.as_ref().and_then(|c| c.temp_dir.as_ref()) {
        set_var(&mut env, "TMPDIR", &dir.to_string_lossy());
    }
    let cgroup = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(dir)
            .map_err(spawn_error)?
    };
    let args = [
        std::ffi::OsStr::new("bash"),
        std::ffi::OsStr::new("-c"),
        std::ffi::OsStr::new(script),
    ];
    let launch = direct_spawn::Launch {
        program: &bash,
        args: &args,
        env: &env,
        cwd,
        stdio: streams.child_ends(),
        cgroup: std::os::fd::AsFd::as_fd(&cgroup),
        confinement: confinement.as_ref().map(|c| &c.prepared),
    };
    match direct_spawn::launch(&launch) {
        Ok(child) => Ok(Some((
            child,
            confinement.map(|c| c.watched).unwrap_or_default(),
        ))),
        Err(direct_spawn::LaunchError::Unsupported(err)) => {
            tracing::debug!(error = %err, "commands are forked and then join their cgroup");
            CLONE_INTO_CGROUP_REFUSED.store(true, Ordering::Relaxed);
            Ok(None)
        }
        Err(direct_spawn::LaunchError::Failed(source)) => Err(spawn_error(source)),
    }
}

/// The standard streams of a command being started: the child's ends and
/// this side of the pipes made for it.
struct Streams {
    /// The child's stdin, stdout and stderr; `None` is `/dev/null`.
    child: [Option<std::os::fd::OwnedFd>; 3],
    stdin: Option<pipe::Sender>,
    stdout: Option<pipe::Receiver>,
    stderr: Option<pipe::Receiver>,
}

impl Streams {
    fn connect(stdio: [ChildStdio; 3]) -> Result<Self, ProcessError> {
        let mut streams = Streams {
            child: [None, None, None],
            stdin: None,
            stdout: None,
            stderr: None,
        };
        for (index, stdio) in stdio.into_iter().enumerate() {
            streams.child[index] = match stdio {
                ChildStdio::Null => None,
                ChildStdio::Given(fd) => Some(fd),
                ChildStdio::Piped => {
                    let (reader, writer) = io::pipe().map_err(ProcessError::Pipe)?;
                    if index == 0 {
                        streams.stdin = Some(
                            pipe::Sender::from_owned_fd(writer.into())
                                .map_err(ProcessError::Pipe)?,
                        );
                        Some(reader.into())
                    } else {
                        let receiver = pipe::Receiver::from_owned_fd(reader.into())
                            .map_err(ProcessError::Pipe)?;
                        if index == 1 {
                            streams.stdout = Some(receiver);
                        } else {
                            streams.stderr = Some(receiver);
                        }
                        Some(writer.into())
                    }
                }
            };
        }
        Ok(streams)
    }

    fn child_ends(&self) -> [Option<std::os::fd::BorrowedFd<'_>>; 3] {
        self.child
            .each_ref()
            .map(|fd| fd.as_ref().map(std::os::fd::AsFd::as_fd))
    }

    /// Gives the child's ends to `command` (copies: `spawned` closes these).
    fn attach(&self, command: &mut Command) -> io::Result<()> {
        let stdio = |fd: &Option<std::os::fd::OwnedFd>| -> io::Result<Stdio> {
            Ok(match fd {
                Some(fd) => Stdio::from(fd.try_clone()?),
                None => Stdio::null(),
            })
        };
        command
            .stdin(stdio(&self.child[0])?)
            .stdout(stdio(&self.child[1])?)
            .stderr(stdio(&self.child[2])?);
        Ok(())
    }

    /// The started command, closing this process's copies of the child's
    /// ends (its pipes reach end-of-file once the command's processes are
    /// gone).
    fn spawned(self, child: CommandChild, group: Arc<ProcessGroup>) -> SpawnedCommand {
        SpawnedCommand {
            child,
            group,
            stdin: self.stdin,
            stdout: self.stdout,
            stderr: self.stderr,
        }
    }
}

/// Starts `command` in `tree` (joining it between fork and `exec` when
/// `join_in_child`), confined by `sandbox`.
fn spawn_in_tree(
    command: &mut Command,
    tree: Tree,
    join_in_child: bool,
    sandbox: Option<&CommandSandbox>,
) -> Result<(Child, Arc<ProcessGroup>), ProcessError> {
    command.process_group(0).kill_on_drop(false);
    let program = command
        .as_std()
        .get_program()
        .to_string_lossy()
        .into_owned();
    if join_in_child {
        tree.prepare(command)
            .map_err(|source| ProcessError::Spawn {
                program: program.clone(),
                source,
            })?;
    }
    let watched = match sandbox {
        Some(sandbox) => sandbox
            .confine(command)
            .map_err(|err| ProcessError::Spawn {
                program: program.clone(),
                source: io::Error::other(err),
            })?,
        None => WatchedFiles::default(),
    };
    let child = command
        .spawn()
        .map_err(|source| ProcessError::Spawn { program, source })?;
    let pid = child.id().ok_or(ProcessError::NoPid)?;
    tree.set_leader(pid);
    let group = ProcessGroup::new(pid).ok_or(ProcessError::NoPid)?;
    Ok((child, Arc::new(group.with_tree(tree).with_watched(watched))))
}

/// Exit status of a shell that could not join its cgroup (and ran nothing).
pub const JOIN_FAILED_EXIT: i32 = 125;

/// `script` preceded, on its first line (so that line numbers in the
/// shell's messages stay those of the script), by the command that moves
/// the shell into the cgroup whose `cgroup.procs` is `procs`, or ends it
/// with [`JOIN_FAILED_EXIT`]. `builtin` keeps a function of the same name
/// out of it; [`shell_may_join_itself`] keeps such functions out anyway.
fn self_joining_script(procs: &Path, script: &str) -> String {
    let quoted = procs.to_string_lossy().replace('\'', r"'\''");
    format!("builtin printf 0 > '{quoted}' || exit {JOIN_FAILED_EXIT}; {script}")
}

/// True when `bash -c` with `env` runs nothing before the script's first
/// command: no startup file (`BASH_ENV`, `ENV`), no options that print or
/// change commands (`SHELLOPTS`, `BASHOPTS`), no imported functions
/// (`BASH_FUNC_*`).
fn shell_may_join_itself(env: &[(String, String)]) -> bool {
    env.iter().all(|(name, _)| {
        !matches!(name.as_str(), "BASH_ENV" | "ENV" | "SHELLOPTS" | "BASHOPTS")
            && !name.starts_with("BASH_FUNC_")
    })
}

/// The value of `name` in `env` (the last one counts, as for the child).
fn env_value<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

/// The first executable file named `program` in the directories of `path`
/// (a `PATH` value; empty entries are skipped), as the child's own lookup
/// would find it.
fn find_in_path(program: &str, path: Option<&str>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    path?
        .split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
}

/// A shell command running in its own group, with stdout and stderr combined
/// into one pipe (so output arrives in the order it was written).
#[derive(Debug)]
pub struct ShellProcess {
    /// The `bash` process.
    pub child: CommandChild,
    /// Its process group.
    pub group: Arc<ProcessGroup>,
    /// Read end of the combined stdout/stderr pipe.
    pub output: pipe::Receiver,
}

/// [`spawn_shell_in`] with the usual containment and no sandbox.
#[cfg(test)]
pub(crate) fn spawn_shell(
    command: &str,
    cwd: &Path,
    env: &[(String, String)],
) -> Result<ShellProcess, ProcessError> {
    spawn_shell_contained(command, cwd, env, process_tree::containment())
}

/// [`spawn_shell_in`] with the usual containment, confined by `sandbox` (see
/// `spawn_confined`).
pub fn spawn_shell_confined(
    command: &str,
    cwd: &Path,
    env: &[(String, String)],
    sandbox: &CommandSandbox,
) -> Result<ShellProcess, ProcessError> {
    spawn_shell_in(
        command,
        cwd,
        env,
        process_tree::containment(),
        Some(sandbox),
    )
}

/// [`spawn_shell_in`] without a sandbox.
pub fn spawn_shell_contained(
    command: &str,
    cwd: &Path,
    env: &[(String, String)],
    containment: &Containment,
) -> Result<ShellProcess, ProcessError> {
    spawn_shell_in(command, cwd, env, containment, None)
}

/// Starts `bash -c COMMAND` in `cwd` with exactly `env`, in its own process
/// group, stdin from /dev/null, stdout and stderr into one pipe, with the
/// containment and the sandbox given. Must be called inside a Tokio runtime.
pub fn spawn_shell_in(
    command: &str,
    cwd: &Path,
    env: &[(String, String)],
    containment: &Containment,
    sandbox: Option<&CommandSandbox>,
) -> Result<ShellProcess, ProcessError> {
    spawn_shell_by(
        command,
        cwd,
        env,
        containment,
        sandbox,
        SpawnPath::IntoCgroup,
    )
}

/// [`spawn_shell_in`] by the path given.
pub(crate) fn spawn_shell_by(
    command: &str,
    cwd: &Path,
    env: &[(String, String)],
    containment: &Containment,
    sandbox: Option<&CommandSandbox>,
    path: SpawnPath,
) -> Result<ShellProcess, ProcessError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(ProcessError::NoRuntime);
    }
    let (reader, writer) = io::pipe().map_err(ProcessError::Pipe)?;
    let stderr_writer = writer.try_clone().map_err(ProcessError::Pipe)?;
    let stdio = [
        ChildStdio::Null,
        ChildStdio::Given(writer.into()),
        ChildStdio::Given(stderr_writer.into()),
    ];
    let spawned = spawn_bash_by(command, cwd, env, stdio, containment, sandbox, path)?;
    // Our copies of the write end are closed by now: the pipe reaches
    // end-of-file once every process holding it is gone.
    let output = pipe::Receiver::from_owned_fd(reader.into()).map_err(ProcessError::Pipe)?;
    Ok(ShellProcess {
        child: spawned.child,
        group: spawned.group,
        output,
    })
}

/// Why [`drive`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The main process exited by itself.
    Exited,
    /// The timeout passed; the group was stopped.
    TimedOut,
    /// The cancellation token fired; the group was stopped.
    Cancelled,
}

/// What [`drive`] observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriveOutcome {
    /// Why it stopped.
    pub ending: Ending,
    /// The main process's exit status, when it was collected.
    pub status: Option<ExitStatus>,
    /// How the group was stopped (timeout, cancellation, or members left
    /// running after the main process exited); `None` when nothing was left.
    pub stopped: Option<KillOutcome>,
    /// False when reading stopped before end-of-file (a process outside the
    /// group still held the pipe open).
    pub output_complete: bool,
}

/// Runs a started shell to its end: streams its output into `sink`, stops the
/// whole group on timeout or cancellation, and once the main process exits
/// stops anything it left running in its group, so reading never hangs.
pub async fn drive<F>(
    process: &mut ShellProcess,
    timeout: Option<Duration>,
    cancel: &CancellationToken,
    mut sink: F,
) -> DriveOutcome
where
    F: FnMut(&[u8]),
{
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    let mut eof = false;
    let mut status: Option<ExitStatus> = None;
    let ending = loop {
        if status.is_some() {
            break Ending::Exited;
        }
        tokio::select! {
            biased;
            () = cancel.cancelled() => break Ending::Cancelled,
            () = sleep_until_opt(deadline) => break Ending::TimedOut,
            // Exit before reads: a process left writing in the background must
            // not hide the main process's exit.
            waited = process.child.wait() => match waited {
                Ok(exit) => status = Some(exit),
                Err(err) => {
                    tracing::warn!(error = %err, "waiting for command failed");
                    break Ending::Exited;
                }
            },
            read = process.output.read(&mut buf), if !eof => match read {
                Ok(0) => eof = true,
                Ok(n) => sink(&buf[..n]),
                Err(err) => {
                    tracing::warn!(error = %err, "reading command output failed");
                    eof = true;
                }
            },
        }
    };

    // Stop the group (everything on timeout/cancel; leftovers after an exit)
    // while still draining the pipe, so a full pipe never blocks a dying writer.
    let group = Arc::clone(&process.group);
    let stop = async move {
        let outcome = group.terminate(KILL_GRACE).await;
        match outcome {
            KillOutcome::AlreadyGone => None,
            other => Some(other),
        }
    };
    tokio::pin!(stop);
    let mut stopped: Option<Option<KillOutcome>> = None;
    let mut drain_deadline: Option<tokio::time::Instant> = None;
    while !eof {
        tokio::select! {
            biased;
            read = process.output.read(&mut buf) => match read {
                Ok(0) => eof = true,
                Ok(n) => sink(&buf[..n]),
                Err(_) => eof = true,
            },
            outcome = &mut stop, if stopped.is_none() => {
                stopped = Some(outcome);
                drain_deadline = Some(tokio::time::Instant::now() + DRAIN_TIMEOUT);
            },
            () = sleep_until_opt(drain_deadline) => break,
        }
    }
    let stopped = match stopped {
        Some(outcome) => outcome,
        None => stop.await,
    };
    if status.is_none() {
        // The group is gone (or SIGKILLed): collect the exit status.
        status = process.child.wait().await.ok();
    }
    process.group.disarm();
    DriveOutcome {
        ending,
        status,
        stopped,
        output_complete: eof,
    }
}

async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state letter of `pid` in `/proc/PID/stat`.
    fn state_of(pid: u32) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        parse_proc_stat(&stat).map(|(state, _)| state)
    }

    #[test]
    fn a_process_whose_main_thread_ended_before_its_others_is_still_alive() {
        // The main thread ends (pthread_exit) while a second one sleeps: the
        // main thread shows as a zombie, but the process still holds its
        // files.
        let mut child = std::process::Command::new("python3")
            .args([
                "-c",
                "import ctypes, threading, time\n\
                 threading.Thread(target=time.sleep, args=(60,)).start()\n\
                 ctypes.CDLL(None).pthread_exit(None)",
            ])
            .spawn()
            .expect("python3 runs");
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while state_of(pid) != Some('Z') {
            assert!(
                std::time::Instant::now() < deadline,
                "the main thread never ended"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(process_is_alive(pid), "a thread of it still runs");
        child.kill().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while process_is_alive(pid) {
            assert!(std::time::Instant::now() < deadline, "it never ended");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // Gone while still unreaped: a zombie alone is not alive.
        assert_eq!(state_of(pid), Some('Z'));
        child.wait().unwrap();
    }

    fn lookup(name: &str) -> Option<String> {
        match name {
            "HOME" => Some("/home/u".into()),
            "PATH" => Some("/bin".into()),
            "LANG" => Some("C.UTF-8".into()),
            "CARGO_HOME" => Some("/cargo".into()),
            "ANTHROPIC_API_KEY" => Some("sk-secret".into()),
            "SECRET" => Some("s3cr3t".into()),
            _ => None,
        }
    }

    #[test]
    fn environment_keeps_base_and_allowlist_only() {
        let env = child_environment(&["CARGO_HOME".into(), "MISSING".into()], lookup);
        assert_eq!(
            env,
            vec![
                ("HOME".into(), "/home/u".into()),
                ("PATH".into(), "/bin".into()),
                ("LANG".into(), "C.UTF-8".into()),
                ("CARGO_HOME".into(), "/cargo".into()),
            ]
        );
    }

    #[test]
    fn environment_withholds_provider_keys_and_duplicates() {
        let env = child_environment(
            &["ANTHROPIC_API_KEY".into(), "PATH".into(), String::new()],
            lookup,
        );
        assert!(env.iter().all(|(k, _)| k != "ANTHROPIC_API_KEY"));
        assert_eq!(env.iter().filter(|(k, _)| k == "PATH").count(), 1);
        assert!(env.iter().all(|(k, _)| k != "SECRET"));
    }

    #[test]
    fn configured_key_variables_are_withheld_whatever_the_allowlist_says() {
        let withheld = crate::secrets::key_names(["SECRET"]);
        let env = child_environment_withholding(
            &[
                "SECRET".into(),
                "CARGO_HOME".into(),
                "ANTHROPIC_API_KEY".into(),
            ],
            &withheld,
            lookup,
        );
        assert!(
            env.iter()
                .all(|(k, _)| k != "SECRET" && k != "ANTHROPIC_API_KEY")
        );
        assert!(env.iter().any(|(k, _)| k == "CARGO_HOME"));
    }

    #[test]
    fn proc_stat_parsing_survives_odd_command_names() {
        let stat = "1234 (a) b (c)) S 1 999 999 0 -1";
        assert_eq!(parse_proc_stat(stat), Some(('S', 999)));
        assert_eq!(parse_proc_stat("garbage"), None);
        assert_eq!(parse_proc_stat("5 (x) Z 1 5"), Some(('Z', 5)));
    }

    #[test]
    fn group_ids_that_address_everything_are_refused() {
        assert!(ProcessGroup::new(0).is_none());
        assert!(ProcessGroup::new(1).is_none());
        assert!(ProcessGroup::new(u32::MAX).is_none());
    }

    #[test]
    fn spawning_outside_a_runtime_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            spawn_shell("true", dir.path(), &[]),
            Err(ProcessError::NoRuntime)
        ));
    }

    #[tokio::test]
    async fn drive_collects_combined_output_and_status() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = spawn_shell("echo out; echo err >&2; exit 3", dir.path(), &[]).unwrap();
        let mut out = Vec::new();
        let outcome = drive(&mut p, None, &CancellationToken::new(), |b| {
            out.extend_from_slice(b)
        })
        .await;
        assert_eq!(outcome.ending, Ending::Exited);
        assert_eq!(outcome.status.and_then(|s| s.code()), Some(3));
        assert_eq!(String::from_utf8(out).unwrap(), "out\nerr\n");
        assert!(outcome.output_complete);
        assert_eq!(outcome.stopped, None);
    }

    #[tokio::test]
    async fn drive_stops_leftovers_after_exit() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = spawn_shell("sleep 300 & echo started", dir.path(), &[]).unwrap();
        let group = Arc::clone(&p.group);
        let outcome = drive(&mut p, None, &CancellationToken::new(), |_| {}).await;
        assert_eq!(outcome.ending, Ending::Exited);
        assert_eq!(outcome.stopped, Some(KillOutcome::Terminated));
        assert!(!group_has_live_members(group.id() as libc::pid_t));
    }

    #[test]
    fn the_join_comes_first_on_the_scripts_own_first_line() {
        let procs = Path::new("/cg/troupe-1-2/cgroup.procs");
        assert_eq!(
            self_joining_script(procs, "echo $LINENO\nfalse"),
            "builtin printf 0 > '/cg/troupe-1-2/cgroup.procs' || exit 125; echo $LINENO\nfalse"
        );
        assert_eq!(
            self_joining_script(Path::new("/a'b/cgroup.procs"), "x"),
            "builtin printf 0 > '/a'\\''b/cgroup.procs' || exit 125; x"
        );
    }

    #[test]
    fn a_shell_that_could_run_code_before_the_script_joins_in_the_child() {
        let env = |name: &str| {
            vec![
                ("PATH".to_owned(), "/bin".to_owned()),
                (name.to_owned(), "x".to_owned()),
            ]
        };
        assert!(shell_may_join_itself(&env("LANG")));
        for name in [
            "BASH_ENV",
            "ENV",
            "SHELLOPTS",
            "BASHOPTS",
            "BASH_FUNC_builtin%%",
        ] {
            assert!(!shell_may_join_itself(&env(name)), "{name}");
        }
    }

    #[test]
    fn bash_is_found_where_the_childs_path_finds_it() {
        let dir = tempfile::tempdir().unwrap();
        // A `bash` that is not executable is passed over, as by the shell.
        std::fs::write(dir.path().join("bash"), "").unwrap();
        let path = format!("::{}:/bin:/usr/bin", dir.path().display());
        let found = find_in_path("bash", Some(&path)).unwrap();
        assert!(
            found.starts_with("/bin") || found.starts_with("/usr/bin"),
            "{found:?}"
        );
        assert_eq!(find_in_path("bash", None), None);
        assert_eq!(find_in_path("no-such-program-here", Some("/bin")), None);
        let env = [
            ("PATH".to_owned(), "/a".to_owned()),
            ("PATH".to_owned(), "/b".to_owned()),
        ];
        assert_eq!(env_value(&env, "PATH"), Some("/b"));
        assert_eq!(env_value(&env, "HOME"), None);
    }

    /// Runs `script` contained with `env`, started by `path`; its exit
    /// code and output.
    async fn contained_shell(
        script: &str,
        env: &[(String, String)],
        containment: &Containment,
        path: SpawnPath,
    ) -> (Option<i32>, String) {
        let dir = tempfile::tempdir().unwrap();
        let mut shell = spawn_shell_by(script, dir.path(), env, containment, None, path).unwrap();
        let mut output = Vec::new();
        let outcome = drive(&mut shell, None, &CancellationToken::new(), |bytes| {
            output.extend_from_slice(bytes)
        })
        .await;
        let code = outcome.status.and_then(|status| status.code());
        (code, String::from_utf8_lossy(&output).into_owned())
    }

    #[tokio::test]
    async fn a_shell_that_joins_its_cgroup_itself_runs_the_script_as_written() {
        let containment = process_tree::detect();
        if containment == Containment::Subreaper {
            eprintln!("cgroup v2 is not writable here: every shell joins in the child");
            return;
        }
        let own = format!("troupe-{}-", std::process::id());
        let in_own_cgroup = |output: &str| {
            output
                .lines()
                .any(|line| line.starts_with("0::/") && line.contains(&own))
        };
        let script = "echo line $LINENO; cat /proc/self/cgroup; tr '\\0' ' ' < /proc/$$/cmdline\n\
                      no-such-command-here; exit 3";
        let path = ("PATH".to_owned(), "/usr/bin:/bin".to_owned());
        let (code, output) = contained_shell(
            script,
            std::slice::from_ref(&path),
            &containment,
            SpawnPath::Forked,
        )
        .await;
        assert_eq!(code, Some(3), "{output}");
        // The shell joined by itself; line numbers are the script's own;
        // its commands ran in the cgroup.
        assert!(output.contains("-c builtin printf 0 > '"), "{output}");
        assert!(output.starts_with("line 1\n"), "{output}");
        assert!(output.contains("line 2: no-such-command-here"), "{output}");
        assert!(in_own_cgroup(&output), "{output}");

        // With a startup file, the child joins before `exec`, as before.
        let bash_env = ("BASH_ENV".to_owned(), "/dev/null".to_owned());
        let (code, output) =
            contained_shell(script, &[path, bash_env], &containment, SpawnPath::Forked).await;
        assert_eq!(code, Some(3), "{output}");
        assert!(!output.contains("builtin printf"), "{output}");
        assert!(in_own_cgroup(&output), "{output}");
    }

    /// The containment of this machine when it has a writable cgroup v2.
    fn cgroup_containment() -> Option<Containment> {
        let containment = process_tree::detect();
        if containment == Containment::Subreaper {
            eprintln!("cgroup v2 is not writable here: nothing starts inside a cgroup");
            return None;
        }
        Some(containment)
    }

    #[tokio::test]
    async fn a_shell_started_inside_its_cgroup_is_there_before_its_first_command() {
        let Some(containment) = cgroup_containment() else {
            return;
        };
        let own = format!("troupe-{}-", std::process::id());
        let path = ("PATH".to_owned(), "/usr/bin:/bin".to_owned());
        let script = "echo line $LINENO; cat /proc/self/cgroup; tr '\\0' ' ' < /proc/$$/cmdline; \
                      echo; ps -o pgid= -p $$; echo \"tmp=$TMPDIR\"; exit 4";
        let (code, output) = contained_shell(
            script,
            std::slice::from_ref(&path),
            &containment,
            SpawnPath::IntoCgroup,
        )
        .await;
        assert_eq!(code, Some(4), "{output}");
        assert!(output.starts_with("line 1\n"), "{output}");
        // No join in the script: the kernel created it in the cgroup.
        assert!(
            output
                .lines()
                .any(|line| line.starts_with("bash -c echo line $LINENO;")),
            "{output}"
        );
        assert!(
            output
                .lines()
                .any(|line| line.starts_with("0::/") && line.contains(&own)),
            "{output}"
        );
        assert!(!output.contains("printf"), "{output}");
        assert!(output.contains("tmp=\n"), "{output}");
    }

    #[tokio::test]
    async fn a_shell_started_inside_its_cgroup_leads_its_group_and_reports_how_it_ended() {
        let Some(containment) = cgroup_containment() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let env = vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
        let mut shell = spawn_shell_by(
            "echo $$ $(ps -o pgid= -p $$); kill -9 $$",
            dir.path(),
            &env,
            &containment,
            None,
            SpawnPath::IntoCgroup,
        )
        .unwrap();
        assert!(matches!(shell.child, CommandChild::Direct(_)));
        let mut output = Vec::new();
        let outcome = drive(&mut shell, None, &CancellationToken::new(), |bytes| {
            output.extend_from_slice(bytes)
        })
        .await;
        let output = String::from_utf8_lossy(&output);
        let ids: Vec<&str> = output.split_whitespace().collect();
        assert_eq!(ids.len(), 2, "{output}");
        assert_eq!(ids[0], ids[1], "the shell leads its own group: {output}");
        let status = outcome.status.unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL),
            "{status:?}"
        );
        // Reaped: no zombie of it is left.
        let pid: i32 = ids[0].parse().unwrap();
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }

    #[tokio::test]
    async fn a_shell_that_cannot_start_inside_its_cgroup_is_an_error_that_names_the_step() {
        let Some(containment) = cgroup_containment() else {
            return;
        };
        let env = vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
        let missing = Path::new("/no/such/directory/here");
        let err = spawn_shell_by(
            "true",
            missing,
            &env,
            &containment,
            None,
            SpawnPath::IntoCgroup,
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("entering its working directory") && text.contains("No such file"),
            "{text}"
        );
        // The failed child was reaped and its cgroup is not left behind
        // holding anything.
        let forked = spawn_shell_by("true", missing, &env, &containment, None, SpawnPath::Forked)
            .unwrap_err();
        assert!(forked.to_string().contains("No such file"), "{forked}");
    }

    #[tokio::test]
    async fn piped_streams_reach_a_shell_started_inside_its_cgroup() {
        use tokio::io::AsyncWriteExt;
        let Some(containment) = cgroup_containment() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let env = vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
        for path in [SpawnPath::IntoCgroup, SpawnPath::Forked] {
            let mut spawned = spawn_bash_by(
                "read line; echo \"out:$line\"; echo \"err:$line\" >&2; exit 7",
                dir.path(),
                &env,
                [ChildStdio::Piped, ChildStdio::Piped, ChildStdio::Piped],
                &containment,
                None,
                path,
            )
            .unwrap();
            let mut stdin = spawned.stdin.take().unwrap();
            stdin.write_all(b"hello\n").await.unwrap();
            drop(stdin);
            let (mut out, mut err) = (String::new(), String::new());
            spawned
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .await
                .unwrap();
            spawned
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .await
                .unwrap();
            let status = spawned.child.wait().await.unwrap();
            assert_eq!(status.code(), Some(7), "{path:?}");
            assert_eq!(out, "out:hello\n", "{path:?}");
            assert_eq!(err, "err:hello\n", "{path:?}");
            assert_eq!(
                matches!(spawned.child, CommandChild::Direct(_)),
                path == SpawnPath::IntoCgroup
            );
            spawned.group.disarm();
        }
    }
}
