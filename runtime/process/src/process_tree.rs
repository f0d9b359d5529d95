//! Every process a command starts, wherever it went (SPEC §5 "no survivors").
//!
//! A process group is not enough: `set -m`, `setsid` and `setpgid` move a
//! process into a group of its own, and killing the command's group misses
//! it. A [`Tree`] follows one command's processes by one of two means, chosen
//! once per process by [`containment`]:
//!
//! - **cgroup v2**, when a cgroup v2 hierarchy is mounted (found through
//!   `/proc/mounts`) and this process may create cgroups below its own: the
//!   command is moved into a cgroup of its own before it executes, every
//!   descendant stays in it whatever it does with sessions and groups, and
//!   `cgroup.kill` ends them all at once. Once the command's last process
//!   has ended, its emptied cgroup is kept as a spare for a later command
//!   ([`SPARE_CGROUPS`] at most, the rest removed): making and removing a
//!   cgroup costs the kernel 0.2–0.6 ms per command, much of it after `rmdir`
//!   returns, while joining an existing one costs nothing measurable. The
//!   spares are removed when the process ends ([`remove_spare_cgroups`]).
//! - **subreaper** otherwise: the command's shell is made a child subreaper
//!   (`PR_SET_CHILD_SUBREAPER`, kept across `exec`), so orphans of its tree
//!   are re-parented to it instead of to init and stay its descendants, and
//!   every process of the tree carries a tag in its environment
//!   (`TAG_VAR`). The members are the shell's descendants plus every
//!   process with the tag (and their descendants), found by scanning `/proc`;
//!   they are signalled one by one.
//!
//! Empty cgroups left by a troupe process that was killed are removed by the
//! next one that detects cgroup support. This module finds and signals
//! processes; when to stop them (timeout,
//! cancellation, the end of the main process) is `process`'s business. The
//! set arithmetic (`descendants`) and the parsers are pure functions.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use crate::parse_proc_stat;

/// Environment variable that tags every process of a command's tree in
/// subreaper mode (its value names the command).
pub(crate) const TAG_VAR: &str = "TROUPE_PROCESS_TAG";

/// Prefix of the cgroups this process creates below its own.
pub(crate) const CGROUP_PREFIX: &str = "troupe";

/// How long removing an emptied cgroup waits for the kernel to finish the
/// killed processes off.
const CGROUP_REMOVE_LIMIT: Duration = Duration::from_secs(2);

/// Pause between attempts to remove an emptied cgroup.
const CGROUP_REMOVE_PAUSE: Duration = Duration::from_millis(5);

/// Killed trees whose cgroup is still being removed: their processes were
/// sent `SIGKILL` but may not have exited yet.
static DYING: DyingTrees = DyingTrees {
    count: Mutex::new(0),
    gone: Condvar::new(),
};

/// A count of killed trees not yet gone, and a wake-up when one goes.
struct DyingTrees {
    count: Mutex<usize>,
    gone: Condvar,
}

/// One killed tree in [`DYING`], counted until dropped.
struct Dying;

impl Dying {
    fn new() -> Self {
        *DYING.count.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        Dying
    }
}

impl Drop for Dying {
    fn drop(&mut self) {
        let mut count = DYING.count.lock().unwrap_or_else(PoisonError::into_inner);
        *count = count.saturating_sub(1);
        DYING.gone.notify_all();
    }
}

/// Waits at most `limit` until every tree this process killed has no
/// process left (its cgroup removed); true when none is left. A process that
/// ends on purpose (a daemon stopping) calls it last, so that nothing it
/// started is still running when it has exited; a tree killed with
/// `cgroup.kill` is otherwise still dying for a moment after the kill.
pub fn wait_for_killed_trees(limit: Duration) -> bool {
    let count = DYING.count.lock().unwrap_or_else(PoisonError::into_inner);
    let (count, _) = DYING
        .gone
        .wait_timeout_while(count, limit, |count| *count > 0)
        .unwrap_or_else(PoisonError::into_inner);
    *count == 0
}

/// Most emptied cgroups kept for later commands; more commands than this
/// ending at once remove theirs.
pub const SPARE_CGROUPS: usize = 8;

/// Emptied cgroups kept for later commands, at most `capacity`.
#[derive(Debug)]
struct SpareCgroups {
    dirs: Mutex<Vec<PathBuf>>,
    capacity: usize,
}

impl SpareCgroups {
    const fn new(capacity: usize) -> Self {
        Self {
            dirs: Mutex::new(Vec::new()),
            capacity,
        }
    }

    fn dirs(&self) -> MutexGuard<'_, Vec<PathBuf>> {
        self.dirs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A spare cgroup below `parent`, if one is kept (the latest kept first).
    fn take(&self, parent: &Path) -> Option<PathBuf> {
        let mut dirs = self.dirs();
        let index = dirs.iter().rposition(|dir| dir.parent() == Some(parent))?;
        Some(dirs.remove(index))
    }

    /// Keeps the empty cgroup `dir`; false (and nothing kept) when full.
    fn keep(&self, dir: &Path) -> bool {
        let mut dirs = self.dirs();
        if dirs.len() >= self.capacity {
            return false;
        }
        dirs.push(dir.to_path_buf());
        true
    }

    /// Every kept cgroup, no longer kept.
    fn drain(&self) -> Vec<PathBuf> {
        std::mem::take(&mut *self.dirs())
    }
}

/// The emptied cgroups this process keeps for its next commands.
static SPARES: SpareCgroups = SpareCgroups::new(SPARE_CGROUPS);

/// Removes the spare cgroups this process kept (call it when the process is
/// about to end; a later command makes a new cgroup). Those a killed process
/// leaves behind are removed by the next troupe process
/// ([`detect`]).
pub fn remove_spare_cgroups() {
    for dir in SPARES.drain() {
        if let Err(err) = std::fs::remove_dir(&dir) {
            tracing::debug!(dir = %dir.display(), error = %err, "cannot remove a spare cgroup");
        }
    }
}

/// Whether a cgroup's `cgroup.events` text says processes are inside it
/// (`populated 1`); `None` when the text has no such line.
pub(crate) fn cgroup_populated(events: &str) -> Option<bool> {
    events.lines().find_map(|line| match line.trim() {
        "populated 0" => Some(false),
        "populated 1" => Some(true),
        _ => None,
    })
}

/// How commands' process trees are contained in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Containment {
    /// One cgroup v2 per command, created below this directory.
    Cgroup {
        /// This process's own cgroup directory.
        parent: PathBuf,
    },
    /// The command's shell is a child subreaper; members are tagged.
    Subreaper,
}

impl Containment {
    /// A few words for logs and `troupe`'s notices.
    pub fn describe(&self) -> String {
        match self {
            Self::Cgroup { parent } => format!("one cgroup per command below {}", parent.display()),
            Self::Subreaper => "a child subreaper per command".to_owned(),
        }
    }
}

/// The containment of this process, detected once.
pub fn containment() -> &'static Containment {
    static DETECTED: OnceLock<Containment> = OnceLock::new();
    DETECTED.get_or_init(|| {
        let detected = detect();
        tracing::debug!(containment = %detected.describe(), "command containment");
        detected
    })
}

/// Starts detecting [`containment`] on a thread of its own, so that the
/// first command of a session does not wait for the probe (a cgroup made,
/// a child created inside it, the cgroup removed). A command that comes
/// first waits for this detection instead of making its own.
pub fn detect_in_background() {
    let started = std::thread::Builder::new()
        .name("troupe-containment".to_owned())
        .spawn(|| {
            containment();
        });
    if let Err(err) = started {
        tracing::debug!(error = %err, "containment is detected by the first command");
    }
}

/// Uses cgroup v2 when a hierarchy is mounted and a cgroup can be created
/// (and killed) below this process's own; the subreaper otherwise.
pub fn detect() -> Containment {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let parent = cgroup2_mount(&mounts)
        .zip(own_cgroup(&own))
        .map(|(mount, own)| mount.join(own.trim_start_matches('/')));
    match parent {
        Some(parent) if cgroup_usable(&parent) => {
            remove_stale_cgroups(&parent);
            Containment::Cgroup { parent }
        }
        _ => Containment::Subreaper,
    }
}

/// The process that created a cgroup named by [`Tree::new`] or the probe
/// (`troupe-PID-…`).
pub(crate) fn cgroup_owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(CGROUP_PREFIX)?.strip_prefix('-')?;
    let (pid, tail) = rest.split_once('-')?;
    (!tail.is_empty()).then_some(())?;
    pid.parse().ok()
}

/// Removes the empty cgroups left below `parent` by troupe processes that
/// are gone (killed before they could remove them). Populated ones are left
/// alone.
fn remove_stale_cgroups(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = name.to_str().and_then(cgroup_owner) else {
            continue;
        };
        if !crate::process_is_alive(owner) {
            // Fails (and is left alone) while processes are inside.
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// Whether a cgroup with `cgroup.kill` can be created, joined and removed
/// below `parent`.
fn cgroup_usable(parent: &Path) -> bool {
    static PROBES: AtomicU64 = AtomicU64::new(1);
    let probe = parent.join(format!(
        "{CGROUP_PREFIX}-{}-probe-{}",
        std::process::id(),
        PROBES.fetch_add(1, Ordering::Relaxed)
    ));
    if std::fs::create_dir(&probe).is_err() {
        return false;
    }
    let usable = probe.join("cgroup.kill").exists() && joins(&probe);
    let _ = std::fs::remove_dir(&probe);
    usable
}

/// Whether a short-lived child can join the cgroup `dir` (the kernel refuses
/// in some delegations even when the file is writable): created inside it
/// where the kernel offers that (about a millisecond), otherwise moved
/// there (which can wait 7 to 22 ms for the kernel's RCU grace period).
fn joins(dir: &Path) -> bool {
    use std::os::unix::process::CommandExt;
    if let Ok(cgroup) = std::fs::File::open(dir)
        && let Some(starts) = crate::direct_spawn::starts_inside(std::os::fd::AsFd::as_fd(&cgroup))
    {
        return starts;
    }
    let Ok(procs) = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes()) else {
        return false;
    };
    let mut probe = std::process::Command::new("bash");
    probe
        .args(["-c", ":"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: the hook only makes async-signal-safe system calls on memory
    // prepared before the fork.
    unsafe {
        probe.pre_exec(move || join_cgroup(&procs));
    }
    probe.status().is_ok_and(|status| status.success())
}

/// The mount point of the cgroup v2 hierarchy in a `/proc/mounts` text.
pub(crate) fn cgroup2_mount(mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|line| {
        let mut fields = line.split_ascii_whitespace();
        let _device = fields.next()?;
        let mount = fields.next()?;
        (fields.next()? == "cgroup2").then(|| PathBuf::from(unescape_mount(mount)))
    })
}

/// `/proc/mounts` writes space, tab, newline and backslash as octal escapes.
fn unescape_mount(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|digits| bytes[i] == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d)));
        match octal {
            Some(digits) => {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// This process's cgroup v2 path in a `/proc/self/cgroup` text (the `0::`
/// line).
pub(crate) fn own_cgroup(text: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(str::to_owned)
}

/// Every process below `roots` (the roots included) in a `pid → parent`
/// table.
pub(crate) fn descendants(parents: &BTreeMap<i32, i32>, roots: &BTreeSet<i32>) -> BTreeSet<i32> {
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for (&pid, &parent) in parents {
        children.entry(parent).or_default().push(pid);
    }
    let mut out = BTreeSet::new();
    let mut stack: Vec<i32> = roots.iter().copied().collect();
    while let Some(pid) = stack.pop() {
        if out.insert(pid)
            && let Some(kids) = children.get(&pid)
        {
            stack.extend(kids);
        }
    }
    out
}

/// Whether an `environ` block (NUL-separated) holds `TAG_VAR=tag`.
pub(crate) fn environ_has_tag(environ: &[u8], tag: &str) -> bool {
    environ_tags(environ).any(|given| given == tag)
}

/// The values of `TAG_VAR` an `environ` block (NUL-separated) holds.
pub(crate) fn environ_tags(environ: &[u8]) -> impl Iterator<Item = &str> {
    let prefix = format!("{TAG_VAR}=");
    environ.split(|&b| b == 0).filter_map(move |entry| {
        entry
            .strip_prefix(prefix.as_bytes())
            .and_then(|tag| std::str::from_utf8(tag).ok())
    })
}

/// Every process's id and `/proc/PID` directory (none when `/proc` cannot
/// be read).
pub(crate) fn proc_entries() -> impl Iterator<Item = (i32, PathBuf)> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            Some((pid, entry.path()))
        })
}

/// Live processes (not zombies) and their parents, from `/proc`.
fn live_parents() -> BTreeMap<i32, i32> {
    let mut out = BTreeMap::new();
    for (pid, dir) in proc_entries() {
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
            continue;
        };
        if let Some((state, _)) = parse_proc_stat(&stat)
            && state != 'Z'
            && state != 'X'
            && let Some(parent) = stat_parent(&stat)
        {
            out.insert(pid, parent);
        }
    }
    out
}

/// The parent pid field of a `/proc/PID/stat` line.
fn stat_parent(stat: &str) -> Option<i32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// How one command's processes are followed.
#[derive(Debug)]
enum TreeKind {
    /// The command's own cgroup.
    Cgroup {
        /// Its directory.
        dir: PathBuf,
    },
    /// Descendants of the leader and tagged processes.
    Subreaper {
        /// The value of [`TAG_VAR`].
        tag: String,
    },
}

/// The processes of one command, wherever they moved.
#[derive(Debug)]
pub struct Tree {
    kind: TreeKind,
    /// The command's main process, once started.
    leader: AtomicI32,
    /// True once the tree's cgroup was released (removed or kept as a spare):
    /// it was empty and the main process had ended, so nothing of the
    /// command can be in it again, and the tree must not touch it any more
    /// (a spare may hold another command by then). Every use of the cgroup
    /// holds this lock, so none can overlap its release.
    released: Mutex<bool>,
    /// Set once `cgroup.kill` was written: such a cgroup is never kept as a
    /// spare. Some kernels remember the kill and SIGKILL every child later
    /// created inside the cgroup with `CLONE_INTO_CGROUP` (its kill count
    /// is compared with the parent's), so a command started in it would die
    /// before running anything.
    killed: AtomicBool,
    /// Set once `cgroup.kill` was written successfully: every process of the
    /// tree is then dying, and none can start another (the kill covers
    /// processes forked while it runs).
    killed_whole: AtomicBool,
    /// Where an emptied cgroup is kept for a later command.
    spares: &'static SpareCgroups,
}

impl Tree {
    /// A tree for the next command under `containment`. A cgroup that cannot
    /// be created falls back to the subreaper.
    pub fn new(containment: &Containment) -> Self {
        Self::with_spares(containment, &SPARES)
    }

    /// [`Tree::new`], taking a spare cgroup from and keeping its own in
    /// `spares`.
    fn with_spares(containment: &Containment, spares: &'static SpareCgroups) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("{CGROUP_PREFIX}-{}-{n}", std::process::id());
        let kind = match containment {
            Containment::Cgroup { parent } => {
                if let Some(dir) = spares.take(parent) {
                    return Self::with_kind(TreeKind::Cgroup { dir }, spares);
                }
                let dir = parent.join(&name);
                match std::fs::create_dir(&dir) {
                    Ok(()) => TreeKind::Cgroup { dir },
                    Err(err) => {
                        tracing::warn!(dir = %dir.display(), error = %err, "cannot create a cgroup; using a subreaper");
                        TreeKind::Subreaper { tag: name }
                    }
                }
            }
            Containment::Subreaper => TreeKind::Subreaper { tag: name },
        };
        Self::with_kind(kind, spares)
    }

    fn with_kind(kind: TreeKind, spares: &'static SpareCgroups) -> Self {
        Self {
            kind,
            leader: AtomicI32::new(0),
            released: Mutex::new(false),
            killed: AtomicBool::new(false),
            killed_whole: AtomicBool::new(false),
            spares,
        }
    }

    /// True once the whole tree was killed at once (`cgroup.kill`): nothing
    /// of it can outlive that, so there is nothing left to look for.
    pub fn killed_whole(&self) -> bool {
        self.killed_whole.load(Ordering::Acquire)
    }

    /// The release flag, held while the cgroup is used.
    fn released(&self) -> MutexGuard<'_, bool> {
        self.released.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The `cgroup.procs` file of the tree's cgroup (none for a subreaper
    /// tree): a process that writes `0` to it joins the tree.
    pub(crate) fn cgroup_procs(&self) -> Option<PathBuf> {
        match &self.kind {
            TreeKind::Cgroup { dir } => Some(dir.join("cgroup.procs")),
            TreeKind::Subreaper { .. } => None,
        }
    }

    /// The tree's cgroup directory (none for a subreaper tree): a process
    /// created inside it ([`crate::direct_spawn`]) starts in the tree.
    pub(crate) fn cgroup_dir(&self) -> Option<&Path> {
        match &self.kind {
            TreeKind::Cgroup { dir } => Some(dir),
            TreeKind::Subreaper { .. } => None,
        }
    }

    /// Releases the tree's cgroup once its main process has ended and no
    /// process is left in it: it is kept as a spare for a later command, or
    /// removed when enough are kept. True when it is released (then the tree
    /// has no member and nothing to kill). Emptiness is read from
    /// `cgroup.events`, which the kernel updates as a process exits, before
    /// its parent can reap it (reading `cgroup.procs` right after a member
    /// exited waits for the kernel to finish releasing it). While the main
    /// process lives nothing is tried: a shell that joins its cgroup itself
    /// is not in it yet when it starts. False for a subreaper tree.
    pub fn release_if_empty(&self) -> bool {
        let TreeKind::Cgroup { dir } = &self.kind else {
            return false;
        };
        let mut released = self.released();
        if *released {
            return true;
        }
        let leader = self.leader.load(Ordering::Acquire);
        if leader > 0 && crate::process_is_alive(leader.unsigned_abs()) {
            return false;
        }
        let populated = std::fs::read_to_string(dir.join("cgroup.events"))
            .ok()
            .as_deref()
            .and_then(cgroup_populated);
        *released = match populated {
            Some(true) => false,
            // The kernel refuses to remove a cgroup that holds a process.
            Some(false) => {
                (!self.killed.load(Ordering::Acquire) && self.spares.keep(dir))
                    || std::fs::remove_dir(dir).is_ok()
            }
            None => std::fs::remove_dir(dir).is_ok(),
        };
        *released
    }

    /// Whether this tree is a cgroup.
    pub fn is_cgroup(&self) -> bool {
        matches!(self.kind, TreeKind::Cgroup { .. })
    }

    /// Prepares `command` to start inside the tree: the tag in its
    /// environment, and a hook run in the child before `exec` that joins the
    /// cgroup or makes the child a subreaper.
    pub fn prepare(&self, command: &mut tokio::process::Command) -> io::Result<()> {
        match &self.kind {
            TreeKind::Cgroup { dir } => {
                let procs = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
                    .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
                // SAFETY: the hook only makes async-signal-safe system calls
                // (open, write, close) on memory prepared before the fork.
                unsafe {
                    command.pre_exec(move || join_cgroup(&procs));
                }
            }
            TreeKind::Subreaper { tag } => {
                command.env(TAG_VAR, tag);
                // SAFETY: prctl is async-signal-safe and touches no memory.
                unsafe {
                    command.pre_exec(|| {
                        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 {
                            Ok(())
                        } else {
                            Err(io::Error::last_os_error())
                        }
                    });
                }
            }
        }
        Ok(())
    }

    /// Records the command's main process.
    pub fn set_leader(&self, pid: u32) {
        if let Ok(pid) = i32::try_from(pid) {
            self.leader.store(pid, Ordering::Release);
        }
    }

    /// The live processes of the tree (never this process itself).
    pub fn members(&self) -> Vec<i32> {
        let released = self.released();
        if *released {
            return Vec::new();
        }
        self.members_unlocked()
    }

    /// [`Tree::members`] for a caller holding the release flag, unreleased.
    fn members_unlocked(&self) -> Vec<i32> {
        // SAFETY: getpid cannot fail.
        let me = unsafe { libc::getpid() };
        let members: Vec<i32> = match &self.kind {
            TreeKind::Cgroup { dir } => std::fs::read_to_string(dir.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|line| line.trim().parse().ok())
                .filter(|pid: &i32| crate::process_is_alive(pid.unsigned_abs()))
                .collect(),
            TreeKind::Subreaper { tag } => {
                let parents = live_parents();
                let leader = self.leader.load(Ordering::Acquire);
                let mut roots: BTreeSet<i32> = parents
                    .keys()
                    .copied()
                    .filter(|pid| *pid != me)
                    .filter(|pid| {
                        std::fs::read(format!("/proc/{pid}/environ"))
                            .is_ok_and(|environ| environ_has_tag(&environ, tag))
                    })
                    .collect();
                if leader > 1 && parents.contains_key(&leader) {
                    roots.insert(leader);
                }
                descendants(&parents, &roots).into_iter().collect()
            }
        };
        members
            .into_iter()
            .filter(|pid| *pid != me && *pid > 1)
            .collect()
    }

    /// True while some process of the tree is alive.
    pub fn has_live_members(&self) -> bool {
        // An empty cgroup is released: it cannot fill again, since only a
        // member could start a process in it.
        !self.release_if_empty() && !self.members().is_empty()
    }

    /// Sends `signal` to every process of the tree.
    pub fn signal(&self, signal: libc::c_int) {
        let released = self.released();
        if !*released {
            self.signal_unlocked(signal);
        }
    }

    /// [`Tree::signal`] for a caller holding the release flag, unreleased.
    fn signal_unlocked(&self, signal: libc::c_int) {
        for pid in self.members_unlocked() {
            // SAFETY: kill(2) with a single positive pid taken from /proc a
            // moment ago.
            unsafe { libc::kill(pid, signal) };
        }
    }

    /// Kills every process of the tree at once (`cgroup.kill`, or SIGKILL to
    /// each member).
    pub fn kill(&self) {
        let released = self.released();
        if *released {
            return;
        }
        if let TreeKind::Cgroup { dir } = &self.kind {
            self.killed.store(true, Ordering::Release);
            if std::fs::write(dir.join("cgroup.kill"), "1").is_ok() {
                self.killed_whole.store(true, Ordering::Release);
                return;
            }
        }
        self.signal_unlocked(libc::SIGKILL);
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let TreeKind::Cgroup { dir } = &self.kind else {
            return;
        };
        if self.release_if_empty() {
            return;
        }
        self.kill();
        if std::fs::remove_dir(dir).is_ok() {
            return;
        }
        // The kernel is still finishing killed processes: remove the empty
        // cgroup once it is empty, without holding up the caller.
        let dir = dir.clone();
        let dying = Dying::new();
        let spawned = std::thread::Builder::new()
            .name("troupe-cgroup-rm".into())
            .spawn(move || {
                let _dying = dying;
                let deadline = std::time::Instant::now() + CGROUP_REMOVE_LIMIT;
                while std::fs::remove_dir(&dir).is_err() {
                    if std::time::Instant::now() >= deadline {
                        tracing::warn!(dir = %dir.display(), "cannot remove a command's cgroup");
                        return;
                    }
                    // Woken as the last process leaves; a cgroup still busy
                    // once empty (a child cgroup inside) is tried again
                    // after a pause.
                    let emptied = wait_unpopulated(&dir, deadline);
                    if emptied && std::fs::remove_dir(&dir).is_ok() {
                        return;
                    }
                    std::thread::sleep(CGROUP_REMOVE_PAUSE);
                }
            });
        if let Err(err) = spawned {
            tracing::warn!(error = %err, "cannot start removing a command's cgroup");
        }
    }
}

/// Waits until the cgroup `dir` holds no process (`populated 0` in its
/// `cgroup.events`), or until `deadline`. The kernel notifies a change of that
/// file to `poll` as `POLLPRI`, so this wakes as the last process leaves, not
/// on a timer. False at the deadline or when the file cannot be read.
fn wait_unpopulated(dir: &Path, deadline: std::time::Instant) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::fd::AsRawFd;
    let Ok(mut file) = std::fs::File::open(dir.join("cgroup.events")) else {
        return false;
    };
    let mut text = String::new();
    loop {
        text.clear();
        if file.seek(SeekFrom::Start(0)).is_err() || file.read_to_string(&mut text).is_err() {
            return false;
        }
        if cgroup_populated(&text) == Some(false) {
            return true;
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        let mut watched = libc::pollfd {
            fd: file.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        };
        let timeout = i32::try_from(left.as_millis()).unwrap_or(i32::MAX).max(1);
        // SAFETY: one valid `pollfd` for the duration of the call.
        let ready = unsafe { libc::poll(&mut watched, 1, timeout) };
        if ready < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return false;
        }
    }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is
/// `procs`. Runs between fork and exec: system calls only.
fn join_cgroup(procs: &CString) -> io::Result<()> {
    // SAFETY: a valid C string; the descriptor is closed below.
    let fd = unsafe { libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: writes one byte from a static buffer to the descriptor above.
    let written = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
    let err = io::Error::last_os_error();
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(fd) };
    if written == 1 { Ok(()) } else { Err(err) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup2_mount_is_found_in_a_hybrid_layout() {
        let mounts = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n\
                      cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        assert_eq!(
            cgroup2_mount(mounts),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            cgroup2_mount("cgroup2 /odd\\040dir cgroup2 rw 0 0\n"),
            Some(PathBuf::from("/odd dir"))
        );
        assert_eq!(cgroup2_mount("proc /proc proc rw 0 0\n"), None);
    }

    /// A new cgroup tree keeping its spare in `spares`, or none where
    /// cgroup v2 is not writable.
    fn cgroup_tree_in(spares: &'static SpareCgroups) -> Option<Tree> {
        let containment = detect();
        if containment == Containment::Subreaper {
            eprintln!("cgroup v2 is not writable here: no cgroup to test");
            return None;
        }
        let tree = Tree::with_spares(&containment, spares);
        tree.is_cgroup().then_some(tree)
    }

    /// The cgroup directory of a cgroup tree.
    fn cgroup_dir(tree: &Tree) -> PathBuf {
        tree.cgroup_procs().unwrap().parent().unwrap().to_path_buf()
    }

    /// Whether the cgroup `dir` holds no process.
    fn is_empty_cgroup(dir: &Path) -> bool {
        let events = std::fs::read_to_string(dir.join("cgroup.events")).unwrap();
        cgroup_populated(&events) == Some(false)
    }

    /// Removes what a test kept in `spares`.
    /// Starts `program` with `args` in `tree` as its main process.
    fn start_in(tree: &Tree, program: &str, args: &[&str]) -> tokio::process::Child {
        let mut command = tokio::process::Command::new(program);
        command.args(args).stdin(std::process::Stdio::null());
        tree.prepare(&mut command).unwrap();
        let child = command.spawn().unwrap();
        tree.set_leader(child.id().unwrap());
        child
    }

    fn remove_all(spares: &SpareCgroups) {
        for dir in spares.drain() {
            std::fs::remove_dir(&dir).unwrap();
        }
    }

    #[tokio::test]
    async fn a_cgroup_is_kept_as_a_spare_once_its_last_process_ended_and_not_before() {
        static SPARES: SpareCgroups = SpareCgroups::new(1);
        let Some(tree) = cgroup_tree_in(&SPARES) else {
            return;
        };
        let dir = cgroup_dir(&tree);
        let mut child = start_in(&tree, "sleep", &["30"]);
        assert!(
            !tree.release_if_empty(),
            "a running member keeps its cgroup"
        );
        assert!(SPARES.dirs().is_empty());
        assert!(tree.has_live_members());
        child.start_kill().unwrap();
        child.wait().await.unwrap();
        assert!(!tree.has_live_members());
        assert_eq!(
            *SPARES.dirs(),
            vec![dir.clone()],
            "the emptied cgroup is kept"
        );
        assert!(is_empty_cgroup(&dir));
        assert!(tree.members().is_empty());
        // Nothing to kill, nothing to release again: no error, no thread.
        tree.kill();
        assert!(tree.release_if_empty());
        drop(tree);
        assert_eq!(SPARES.dirs().len(), 1, "released once");
        // The next command gets it; with no spare left, a new one is made.
        let next = cgroup_tree_in(&SPARES).unwrap();
        assert_eq!(cgroup_dir(&next), dir);
        let another = cgroup_tree_in(&SPARES).unwrap();
        assert_ne!(cgroup_dir(&another), dir);
        // Unused trees release their cgroups; one is kept, one removed.
        let another_dir = cgroup_dir(&another);
        drop(next);
        drop(another);
        assert_eq!(*SPARES.dirs(), vec![dir]);
        assert!(
            !another_dir.exists(),
            "a cgroup beyond the spares is removed"
        );
        remove_all(&SPARES);
    }

    #[tokio::test]
    async fn a_cgroup_stays_while_its_main_process_lives_even_before_it_joined() {
        static SPARES: SpareCgroups = SpareCgroups::new(1);
        let Some(tree) = cgroup_tree_in(&SPARES) else {
            return;
        };
        let procs = tree.cgroup_procs().unwrap();
        // Started outside the cgroup, as a shell that joins it itself is
        // until its first command runs.
        let mut child = tokio::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        tree.set_leader(child.id().unwrap());
        assert!(!tree.release_if_empty());
        assert!(SPARES.dirs().is_empty(), "released under a live shell");
        assert!(procs.exists());
        child.start_kill().unwrap();
        child.wait().await.unwrap();
        assert!(tree.release_if_empty());
        remove_all(&SPARES);
    }

    #[tokio::test]
    async fn a_cgroup_that_still_holds_a_process_is_never_kept_as_a_spare() {
        static SPARES: SpareCgroups = SpareCgroups::new(1);
        let Some(tree) = cgroup_tree_in(&SPARES) else {
            return;
        };
        let dir = cgroup_dir(&tree);
        // The main process leaves a process of its own behind and ends.
        let mut child = start_in(
            &tree,
            "bash",
            &["-c", "setsid sleep 30 >/dev/null 2>&1 < /dev/null &"],
        );
        child.wait().await.unwrap();
        assert!(
            !tree.release_if_empty(),
            "the left process keeps the cgroup"
        );
        assert!(tree.has_live_members());
        drop(tree);
        assert!(SPARES.dirs().is_empty(), "a cgroup that was killed is kept");
        // A process that ends on purpose waits for what it killed to exit.
        assert!(
            tokio::task::spawn_blocking(|| wait_for_killed_trees(Duration::from_secs(5)))
                .await
                .unwrap(),
            "the killed process is still dying"
        );
        assert!(!dir.exists(), "the cgroup of a killed process is left");
    }

    #[tokio::test]
    async fn a_released_tree_never_touches_the_command_that_reuses_its_cgroup() {
        static SPARES: SpareCgroups = SpareCgroups::new(1);
        let Some(first) = cgroup_tree_in(&SPARES) else {
            return;
        };
        let dir = cgroup_dir(&first);
        let mut child = start_in(&first, "true", &[]);
        child.wait().await.unwrap();
        assert!(first.release_if_empty());
        let second = cgroup_tree_in(&SPARES).unwrap();
        assert_eq!(cgroup_dir(&second), dir, "the spare is reused");
        let mut sleeper = start_in(&second, "sleep", &["30"]);
        first.kill();
        assert!(!first.killed_whole(), "a released tree kills nothing");
        first.signal(libc::SIGKILL);
        assert!(first.members().is_empty());
        assert!(first.release_if_empty());
        drop(first);
        assert!(
            second.has_live_members(),
            "the released tree reached the command that reused its cgroup"
        );
        assert!(sleeper.try_wait().unwrap().is_none());
        second.kill();
        sleeper.wait().await.unwrap();
        assert!(second.release_if_empty());
        remove_all(&SPARES);
    }

    #[tokio::test]
    async fn the_wait_for_an_empty_cgroup_wakes_as_its_last_process_leaves() {
        static SPARES: SpareCgroups = SpareCgroups::new(1);
        let Some(tree) = cgroup_tree_in(&SPARES) else {
            return;
        };
        let dir = cgroup_dir(&tree);
        let mut child = start_in(&tree, "sleep", &["30"]);
        // A process inside: the deadline ends the wait.
        let busy = dir.clone();
        let soon = std::time::Instant::now() + Duration::from_millis(50);
        assert!(
            !tokio::task::spawn_blocking(move || wait_unpopulated(&busy, soon))
                .await
                .unwrap()
        );
        // It leaves: the wait ends then, long before its deadline.
        let watched = dir.clone();
        let later = std::time::Instant::now() + Duration::from_secs(60);
        let waiting = tokio::task::spawn_blocking(move || wait_unpopulated(&watched, later));
        child.kill().await.unwrap();
        let woken = tokio::time::timeout(Duration::from_secs(30), waiting).await;
        assert!(
            matches!(woken, Ok(Ok(true))),
            "not woken by the emptied cgroup: {woken:?}"
        );
        assert!(is_empty_cgroup(&dir));
        assert!(tree.release_if_empty());
        drop(tree);
        remove_all(&SPARES);
    }

    #[tokio::test]
    async fn a_killed_cgroup_is_never_kept_for_a_later_command() {
        static SPARES: SpareCgroups = SpareCgroups::new(1);
        let Some(tree) = cgroup_tree_in(&SPARES) else {
            return;
        };
        let dir = cgroup_dir(&tree);
        tree.kill();
        assert!(tree.killed_whole(), "cgroup.kill reached every process");
        assert!(tree.release_if_empty());
        assert!(!dir.exists(), "removed, not kept");
        assert!(SPARES.drain().is_empty());
        drop(tree);

        // A command started in a fresh cgroup after a kill runs: some
        // kernels kill every child later created inside a killed cgroup.
        let containment = detect();
        let env = vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
        let dir = tempfile::tempdir().unwrap();
        for _ in 0..2 {
            let mut shell =
                crate::spawn_shell_in("sleep 30", dir.path(), &env, &containment, None).unwrap();
            shell.group.kill_now();
            let status = shell.child.wait().await.unwrap();
            assert!(status.code().is_none(), "{status:?}");
            drop(shell);
        }
        let mut shell =
            crate::spawn_shell_in("echo ran", dir.path(), &env, &containment, None).unwrap();
        let mut out = Vec::new();
        let outcome = crate::drive(
            &mut shell,
            None,
            &tokio_util::sync::CancellationToken::new(),
            |bytes| out.extend_from_slice(bytes),
        )
        .await;
        assert_eq!(
            outcome.status.and_then(|s| s.code()),
            Some(0),
            "{outcome:?}"
        );
        assert_eq!(out, b"ran\n");
    }

    #[test]
    fn spares_are_kept_up_to_their_number_and_taken_by_parent() {
        let spares = SpareCgroups::new(2);
        let (a, b) = (Path::new("/cg/a"), Path::new("/cg/b"));
        assert!(spares.keep(&a.join("troupe-1-1")));
        assert!(spares.keep(&b.join("troupe-1-2")));
        assert!(!spares.keep(&a.join("troupe-1-3")), "only two are kept");
        assert_eq!(spares.take(b), Some(b.join("troupe-1-2")));
        assert_eq!(spares.take(b), None);
        assert_eq!(spares.take(Path::new("/cg")), None);
        assert!(spares.keep(&a.join("troupe-1-4")));
        assert_eq!(spares.take(a), Some(a.join("troupe-1-4")), "latest first");
        assert_eq!(spares.drain(), vec![a.join("troupe-1-1")]);
        assert_eq!(spares.take(a), None);
    }

    #[test]
    fn populated_is_read_from_cgroup_events() {
        assert_eq!(cgroup_populated("populated 0\nfrozen 0\n"), Some(false));
        assert_eq!(cgroup_populated("populated 1\nfrozen 0\n"), Some(true));
        assert_eq!(cgroup_populated("frozen 0\n"), None);
        assert_eq!(cgroup_populated(""), None);
    }

    #[test]
    fn the_own_cgroup_is_the_unified_line() {
        let text = "9:name=systemd:/\n4:memory:/x/y\n0::/user.slice/a.scope\n";
        assert_eq!(own_cgroup(text).as_deref(), Some("/user.slice/a.scope"));
        assert_eq!(own_cgroup("0::/\n").as_deref(), Some("/"));
        assert_eq!(own_cgroup("4:memory:/x\n"), None);
    }

    #[test]
    fn descendants_follow_every_branch_from_the_roots() {
        // 10 → 11 → 12, 10 → 13; 20 (tagged orphan) → 21; 30 unrelated.
        let parents: BTreeMap<i32, i32> = [
            (10, 1),
            (11, 10),
            (12, 11),
            (13, 10),
            (20, 1),
            (21, 20),
            (30, 1),
        ]
        .into_iter()
        .collect();
        let roots: BTreeSet<i32> = [10, 20].into_iter().collect();
        assert_eq!(
            descendants(&parents, &roots)
                .into_iter()
                .collect::<Vec<_>>(),
            vec![10, 11, 12, 13, 20, 21]
        );
        assert!(descendants(&parents, &BTreeSet::new()).is_empty());
    }

    #[test]
    fn cgroups_name_the_process_that_made_them() {
        assert_eq!(cgroup_owner("troupe-123-4"), Some(123));
        assert_eq!(cgroup_owner("troupe-123-probe-1"), Some(123));
        assert_eq!(cgroup_owner("troupe-123"), None);
        assert_eq!(cgroup_owner("troupe-x-1"), None);
        assert_eq!(cgroup_owner("system.slice"), None);
    }

    #[test]
    fn the_tag_is_matched_exactly() {
        let environ = b"PATH=/bin\0TROUPE_PROCESS_TAG=troupe-7-3\0HOME=/h\0";
        assert!(environ_has_tag(environ, "troupe-7-3"));
        assert!(!environ_has_tag(environ, "troupe-7-31"));
        assert!(!environ_has_tag(environ, "troupe-7"));
        assert!(!environ_has_tag(b"", "troupe-7-3"));
    }
}
