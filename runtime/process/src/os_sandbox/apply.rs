//! Applying a [`Plan`] to one child process.
//!
//! Everything that allocates, opens paths or can fail in interesting ways
//! happens in the parent ([`prepare`]): the Landlock ruleset is created and
//! filled there (one file descriptor per rule, closed again once added), and
//! the namespaces are made: a short-lived child of this process enters new
//! ones (`unshare`, its own `/proc/self/{setgroups,uid_map,gid_map}` for a
//! user namespace, then the mount table edits, [`make_namespaces`]) and this
//! process keeps a descriptor of each ([`HeldNamespaces`]) before the child
//! ends. A namespace lives while a descriptor or a process holds it, so one
//! set serves many commands: the caller ([`super::CommandSandbox`]) keeps
//! the prepared confinement and makes it again only when what it was made
//! from changed. Between `fork` and `exec` a command's child ([`enter`])
//! only makes system calls on that prepared memory: `setns` into each held
//! namespace, `chdir`, `prctl` (capabilities, `PR_SET_NO_NEW_PRIVS`) and
//! `landlock_restrict_self` with the shared ruleset, all async-signal-safe.
//!
//! A Landlocked process may not `ptrace` (nor read `/proc/PID/environ`,
//! `/proc/PID/mem`, …) of any process outside its own domain, even as root;
//! with ABI 6 it may not signal them nor reach their abstract UNIX sockets
//! either.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use landlock::{
    ABI, Access, AccessFs, AccessNet, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};

use super::git;
use super::plan::Plan;

/// The Landlock ABI the rules are written for (and tested on); older kernels
/// get the subset they know.
pub(crate) const TARGET_ABI: ABI = ABI::V7;

/// How the child enters its namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamespaceKind {
    /// This process may create mount and network namespaces itself (root).
    Privileged,
    /// Through a user namespace that maps the caller's own ids.
    User,
}

/// Why a command could not be confined.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The Landlock ruleset could not be built.
    #[error("cannot build the Landlock ruleset: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    /// A path of the plan holds a NUL byte.
    #[error("a sandbox path holds a NUL byte: {0}")]
    Nul(String),
    /// The namespaces could not be made.
    #[error("cannot make the sandbox's namespaces: {0}")]
    Namespaces(io::Error),
}

/// One mount call of the child.
#[derive(Debug)]
struct MountCall {
    source: Option<CString>,
    target: CString,
    fstype: Option<CString>,
    flags: libc::c_ulong,
    data: Option<CString>,
}

impl MountCall {
    fn bind(path: &CString, flags: libc::c_ulong) -> Self {
        Self {
            source: Some(path.clone()),
            target: path.clone(),
            fstype: None,
            flags,
            data: None,
        }
    }

    fn remount(target: &CString, flags: libc::c_ulong) -> Self {
        Self {
            source: None,
            target: target.clone(),
            fstype: None,
            flags,
            data: None,
        }
    }
}

/// Most directories a plan may show again inside hidden places (the child
/// keeps their descriptors on its stack).
pub(crate) const MAX_SHOWN: usize = 8;

/// One step of the child's mount-table edits.
#[derive(Debug)]
enum MountStep {
    /// A `mount` call.
    Mount(MountCall),
    /// `mkdir` (an existing directory is fine).
    MakeDir(CString),
    /// Binds the directory opened into slot `slot` (see
    /// [`Prepared::shown_sources`]) onto `target`.
    BindShown { slot: usize, target: CString },
}

/// Flags of the empty file system that hides a place.
const HIDING_FLAGS: libc::c_ulong = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;

/// How new namespaces are made: what the child that makes them applies to
/// itself ([`make_namespaces`]).
#[derive(Debug, Default)]
pub(crate) struct NamespaceSteps {
    /// `unshare` flags.
    unshare: libc::c_int,
    /// Contents for `/proc/self/uid_map` and `gid_map` (user namespace).
    id_maps: Option<(CString, CString)>,
    /// Directories shown again inside hidden places, opened by the child
    /// in its new mount namespace before anything hides them (a bind mount
    /// takes its source from the caller's own namespace).
    shown_sources: Vec<CString>,
    /// Mount steps in order (the first makes every mount private).
    mounts: Vec<MountStep>,
}

/// Descriptors of namespaces made once ([`hold_namespaces`]), entered by
/// each command with `setns`.
#[derive(Debug)]
pub(crate) struct HeldNamespaces {
    /// The user namespace (made through one: entered first).
    user: Option<OwnedFd>,
    /// The mount namespace.
    mount: OwnedFd,
    /// The network namespace (`network = false`).
    network: Option<OwnedFd>,
}

/// What a command's child applies between fork and exec.
#[derive(Debug, Default, Clone)]
pub(crate) struct Prepared {
    /// The namespaces it enters; `None` when it stays in this process's.
    namespaces: Option<Arc<HeldNamespaces>>,
    /// The Landlock ruleset, when the kernel has Landlock (shared: each
    /// command enters a domain of its own made from it).
    ruleset: Option<Arc<OwnedFd>>,
    /// Drop [`DROPPED_CAPABILITIES`] from the bounding set (the parent runs
    /// as root, so the command would get every capability).
    drop_capabilities: bool,
}

impl Prepared {
    /// Whether the child enters namespaces (and so must enter its working
    /// directory again afterwards: `setns` into a mount namespace moves it
    /// to that namespace's root).
    pub(crate) fn enters_namespaces(&self) -> bool {
        self.namespaces.is_some()
    }
}

/// Capabilities a confined command never gets, even as root:
/// `CAP_SYS_ADMIN` (21) and `CAP_PERFMON` (38), either of which lets root
/// read the memory and environment of any process through
/// `/proc/PID/{environ,mem}` whatever Landlock says (the kernel's
/// `perfmon_capable` exception), and `CAP_DAC_READ_SEARCH` (2), which lets
/// root open a file by its handle (`open_by_handle_at`) without a path, and
/// so around a place the sandbox hides.
pub(crate) const DROPPED_CAPABILITIES: [libc::c_int; 3] = [2, 21, 38];

/// Prepares `plan` for a child: a Landlock ruleset when `landlock` (the
/// kernel offers it) and namespace work when `namespaces` says how.
pub(crate) fn prepare(
    plan: &Plan,
    landlock: bool,
    namespaces: Option<NamespaceKind>,
) -> Result<Prepared, ApplyError> {
    let mut prepared = Prepared::default();
    if let Some(kind) = namespaces.filter(|_| plan.needs_namespaces()) {
        let steps = namespace_steps(plan, kind)?;
        let held = hold_namespaces(&steps).map_err(ApplyError::Namespaces)?;
        prepared.namespaces = Some(Arc::new(held));
    }
    if landlock {
        prepared.ruleset = ruleset(plan)?.map(Arc::new);
    }
    // SAFETY: geteuid cannot fail.
    prepared.drop_capabilities = unsafe { libc::geteuid() } == 0;
    Ok(prepared)
}

fn c_path(path: &Path) -> Result<CString, ApplyError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| ApplyError::Nul(path.display().to_string()))
}

/// The steps that make the namespaces of `plan`.
fn namespace_steps(plan: &Plan, kind: NamespaceKind) -> Result<NamespaceSteps, ApplyError> {
    let mut prepared = NamespaceSteps::default();
    let mut flags = libc::CLONE_NEWNS;
    if !plan.network {
        flags |= libc::CLONE_NEWNET;
    }
    if kind == NamespaceKind::User {
        flags |= libc::CLONE_NEWUSER;
        // SAFETY: getuid and getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let maps = (
            CString::new(format!("{uid} {uid} 1\n")),
            CString::new(format!("{gid} {gid} 1\n")),
        );
        if let (Ok(uid_map), Ok(gid_map)) = maps {
            prepared.id_maps = Some((uid_map, gid_map));
        }
    }
    prepared.unshare = flags;
    prepared.mounts.push(MountStep::Mount(MountCall::remount(
        &c"/".to_owned(),
        libc::MS_REC | libc::MS_PRIVATE,
    )));
    // Every edit, outermost first, so an edit inside a place comes after
    // the place's own; at one depth: hide, show, pin, read-only, writable.
    let mut groups: Vec<(usize, u8, Vec<MountStep>)> = Vec::new();
    let depth = |path: &Path| path.components().count();
    for place in &plan.hidden {
        // Nothing to hide yet, or a link (its target is hidden in its own
        // right).
        if git::look(place) != git::Entry::Dir {
            continue;
        }
        let target = c_path(place)?;
        let mut steps = vec![MountStep::Mount(MountCall {
            source: Some(c"tmpfs".to_owned()),
            target: target.clone(),
            fstype: Some(c"tmpfs".to_owned()),
            flags: HIDING_FLAGS,
            data: Some(c"mode=0755,size=64k,nr_inodes=1024".to_owned()),
        })];
        for shown in plan
            .shown
            .iter()
            .filter(|shown| shown.path.starts_with(place))
        {
            let mut dir = place.clone();
            if let Ok(rest) = shown.path.strip_prefix(place) {
                for part in rest.components() {
                    dir.push(part);
                    steps.push(MountStep::MakeDir(c_path(&dir)?));
                }
            }
        }
        steps.push(MountStep::Mount(MountCall::remount(
            &target,
            libc::MS_REMOUNT | libc::MS_RDONLY | HIDING_FLAGS,
        )));
        groups.push((depth(place), 0, steps));
    }
    for shown in &plan.shown {
        if prepared.shown_sources.len() == MAX_SHOWN {
            tracing::warn!(dir = %shown.path.display(), "too many directories to show again inside hidden places; left hidden");
            continue;
        }
        let target = c_path(&shown.path)?;
        let slot = prepared.shown_sources.len();
        prepared.shown_sources.push(target.clone());
        let mut steps = vec![MountStep::BindShown {
            slot,
            target: target.clone(),
        }];
        if !shown.writable {
            let kept = kept_mount_flags(&target);
            steps.push(MountStep::Mount(MountCall::remount(
                &target,
                libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | kept,
            )));
        }
        groups.push((depth(&shown.path), 1, steps));
    }
    for dir in &plan.pinned {
        if !dir.is_dir() {
            continue;
        }
        let target = c_path(dir)?;
        groups.push((
            depth(dir),
            2,
            vec![MountStep::Mount(MountCall::bind(
                &target,
                libc::MS_BIND | libc::MS_REC,
            ))],
        ));
    }
    for place in &plan.read_only_mounts {
        // A place that does not exist has nothing to protect yet; one that
        // exists but cannot be described is still bound read-only.
        let Ok(meta) = std::fs::symlink_metadata(place) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            // The place the link names is resolved separately; binding
            // over a link would bind its target.
            continue;
        }
        let target = c_path(place)?;
        let kept = kept_mount_flags(&target);
        groups.push((
            depth(place),
            3,
            vec![
                MountStep::Mount(MountCall::bind(&target, libc::MS_BIND | libc::MS_REC)),
                MountStep::Mount(MountCall::remount(
                    &target,
                    libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | kept,
                )),
            ],
        ));
    }
    for dir in &plan.writable_mounts {
        if !dir.is_dir() {
            continue;
        }
        let target = c_path(dir)?;
        let kept = kept_mount_flags(&target);
        groups.push((
            depth(dir),
            4,
            vec![
                MountStep::Mount(MountCall::bind(&target, libc::MS_BIND | libc::MS_REC)),
                MountStep::Mount(MountCall::remount(
                    &target,
                    libc::MS_REMOUNT | libc::MS_BIND | kept,
                )),
            ],
        ));
    }
    groups.sort_by_key(|(depth, rank, _)| (*depth, *rank));
    prepared
        .mounts
        .extend(groups.into_iter().flat_map(|(_, _, steps)| steps));
    Ok(prepared)
}

/// Makes the namespaces of `steps` in a child of this process and keeps a
/// descriptor of each: the child makes them, says so on a pipe, and waits
/// (every signal blocked) until this process has opened them through
/// `/proc/PID/ns` and kills it; it runs nothing else, holds no other
/// descriptor and dies with this process. A step that fails is reported
/// with its `errno`. Nothing here waits for a pipe to close: a process
/// forked meanwhile by another thread may hold a copy of its end.
pub(crate) fn hold_namespaces(steps: &NamespaceSteps) -> io::Result<HeldNamespaces> {
    let (ready_read, ready_write) = std::io::pipe()?;
    let ready_write = OwnedFd::from(ready_write);
    // SAFETY: getpid cannot fail.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the child only makes system calls on memory prepared before
    // the fork (`steps`, the descriptor) and never returns.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: in the child: system calls only; it ends by `_exit`, by
        // the parent's SIGKILL, or with its parent.
        unsafe {
            // It dies with this process (killed, it cannot kill the child),
            // and holds none of its descriptors meanwhile: not the store's
            // locked database, not another child's pipe.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() != parent {
                libc::_exit(1)
            }
            let keep = ready_write.as_raw_fd() as libc::c_uint;
            if keep > 3 {
                libc::syscall(
                    libc::SYS_close_range,
                    3 as libc::c_uint,
                    keep - 1,
                    0 as libc::c_uint,
                );
            }
            libc::syscall(
                libc::SYS_close_range,
                keep + 1,
                libc::c_uint::MAX,
                0 as libc::c_uint,
            );
            let errno = match make_namespaces(steps) {
                // The parent opens our namespaces through /proc/PID/ns,
                // which a process that is not dumpable keeps to root; this
                // one runs nothing and is killed as soon as they are open.
                Ok(()) => match check(libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0)) {
                    Ok(()) => 0,
                    Err(err) => err.raw_os_error().unwrap_or(libc::EIO),
                },
                Err(err) => err.raw_os_error().unwrap_or(libc::EIO),
            };
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
            let bytes = errno.to_ne_bytes();
            libc::write(ready_write.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
            if errno != 0 {
                libc::_exit(1)
            }
            loop {
                libc::pause();
            }
        }
    }
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    drop(ready_write);
    let result = read_ready(&ready_read).and_then(|()| open_namespaces(pid, steps.unshare));
    let mut status = 0;
    // SAFETY: kill and waitpid on our own child, not yet reaped (so its pid
    // is still its own); it holds nothing once its namespaces are open.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        while libc::waitpid(pid, &mut status, 0) < 0
            && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
        {}
    }
    result
}

/// Reads the child's report: its `errno`, 0 when the namespaces are made.
fn read_ready(pipe: &std::io::PipeReader) -> io::Result<()> {
    use std::io::Read;
    let mut report = [0u8; 4];
    let mut reader = pipe;
    reader
        .read_exact(&mut report)
        .map_err(|_| io::Error::other("the child making the namespaces ended early"))?;
    match i32::from_ne_bytes(report) {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

/// Opens the namespaces `flags` made in process `pid`.
fn open_namespaces(pid: libc::pid_t, flags: libc::c_int) -> io::Result<HeldNamespaces> {
    let open = |name: &str| -> io::Result<OwnedFd> {
        let path = CString::new(format!("/proc/{pid}/ns/{name}"))
            .map_err(|_| io::Error::other("namespace path"))?;
        // SAFETY: a valid C string; the descriptor is owned below.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    Ok(HeldNamespaces {
        user: (flags & libc::CLONE_NEWUSER != 0)
            .then(|| open("user"))
            .transpose()?,
        mount: open("mnt")?,
        network: (flags & libc::CLONE_NEWNET != 0)
            .then(|| open("net"))
            .transpose()?,
    })
}

/// The flags of the mount holding `path` that a remount must keep (in a user
/// namespace the kernel refuses to drop them).
fn kept_mount_flags(path: &CString) -> libc::c_ulong {
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs fills the struct; the path is a valid C string.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return 0;
    }
    let pairs = [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ];
    pairs
        .iter()
        .filter(|(st, _)| stat.f_flag & st != 0)
        .fold(0, |acc, (_, ms)| acc | ms)
}

/// The ruleset fd for `plan`: every file-system access is handled (so only
/// what a rule grants is allowed), reads and execution are granted on `/`,
/// everything on the writable directories, writes and `ioctl` on the
/// devices; process scoping from ABI 6; TCP bind and connect refused when
/// the network is off (ABI 4).
fn ruleset(plan: &Plan) -> Result<Option<OwnedFd>, ApplyError> {
    let abi = TARGET_ABI;
    let all = AccessFs::from_all(abi);
    let read = AccessFs::from_read(abi);
    let mut ruleset = Ruleset::default()
        .handle_access(all)?
        .scope(Scope::from_all(abi))?;
    if !plan.network {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    let mut created = ruleset.create()?;
    if let Ok(fd) = PathFd::new("/") {
        created = created.add_rule(PathBeneath::new(fd, read))?;
    }
    for dir in &plan.writable {
        // A root that vanished since the session started grants nothing.
        let Ok(fd) = PathFd::new(dir) else { continue };
        let access = if dir.is_dir() {
            all
        } else {
            AccessFs::from_file(abi)
        };
        created = created.add_rule(PathBeneath::new(fd, access))?;
    }
    let device = read | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
    for path in &plan.devices {
        let Ok(fd) = PathFd::new(path) else { continue };
        let access = if path.is_dir() {
            device
        } else {
            device & AccessFs::from_file(abi)
        };
        created = created.add_rule(PathBeneath::new(fd, access))?;
    }
    Ok(created.into())
}

/// Makes the namespaces of `steps` in the calling process: `unshare`, the
/// id maps of a user namespace, the mount table edits. Runs in a child
/// between fork and its end: system calls only, on memory prepared before
/// the fork.
pub(crate) fn make_namespaces(steps: &NamespaceSteps) -> io::Result<()> {
    // SAFETY: unshare takes plain flags.
    check(unsafe { libc::unshare(steps.unshare) })?;
    if let Some((uid_map, gid_map)) = &steps.id_maps {
        // A process that is not dumpable (the runtime makes itself so)
        // cannot write its own id maps: `/proc/self` then belongs to root.
        // This child runs nothing and is in no Landlock domain, so no
        // confined command can reach it meanwhile.
        // SAFETY: prctl with plain integers.
        check(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) })?;
        write_file(c"/proc/self/setgroups", c"deny")?;
        write_file(c"/proc/self/uid_map", uid_map)?;
        write_file(c"/proc/self/gid_map", gid_map)?;
    }
    // The directories to show again, opened before anything hides them;
    // the descriptors close when the child ends.
    let mut shown_fds: [libc::c_int; MAX_SHOWN] = [-1; MAX_SHOWN];
    for (slot, path) in steps.shown_sources.iter().enumerate().take(MAX_SHOWN) {
        // SAFETY: a valid C string; open is async-signal-safe.
        shown_fds[slot] = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
    }
    for step in &steps.mounts {
        match step {
            MountStep::Mount(call) => mount(call)?,
            MountStep::MakeDir(path) => {
                // SAFETY: a valid C string; mkdir is async-signal-safe.
                let rc = unsafe { libc::mkdir(path.as_ptr(), 0o755) };
                if rc != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
                    return Err(io::Error::last_os_error());
                }
            }
            MountStep::BindShown { slot, target } => {
                let Some(&fd) = shown_fds.get(*slot).filter(|fd| **fd >= 0) else {
                    // Gone since the plan was made: it stays hidden.
                    continue;
                };
                let mut buf = [0u8; 40];
                let Some(source) = fd_path(fd, &mut buf) else {
                    continue;
                };
                // SAFETY: valid C strings, no file-system type, no data.
                check(unsafe {
                    libc::mount(
                        source.as_ptr(),
                        target.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    )
                })?;
            }
        }
    }
    Ok(())
}

/// Enters the namespaces `prepared` holds (the user namespace first, which
/// gives the rights to enter the others). Runs between fork and exec:
/// system calls only. `setns` into a mount namespace moves the process to
/// that namespace's root: enter the working directory afterwards.
pub(crate) fn enter_namespaces(prepared: &Prepared) -> io::Result<()> {
    let Some(held) = &prepared.namespaces else {
        return Ok(());
    };
    let join = |fd: &OwnedFd, kind: libc::c_int| {
        // SAFETY: setns on a namespace descriptor owned by `held`.
        check(unsafe { libc::setns(fd.as_raw_fd(), kind) })
    };
    if let Some(user) = &held.user {
        join(user, libc::CLONE_NEWUSER)?;
    }
    join(&held.mount, libc::CLONE_NEWNS)?;
    if let Some(network) = &held.network {
        join(network, libc::CLONE_NEWNET)?;
    }
    Ok(())
}

/// Restricts the calling process as `prepared` says: capabilities dropped
/// (root), `no_new_privs`, the Landlock domain. Runs between fork and exec,
/// after [`enter_namespaces`]: system calls only.
pub(crate) fn restrict(prepared: &Prepared) -> io::Result<()> {
    if prepared.drop_capabilities {
        for capability in DROPPED_CAPABILITIES {
            // SAFETY: prctl with plain integers. EINVAL: a kernel that does
            // not know the capability cannot grant it either.
            let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0) };
            if rc != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
                return Err(io::Error::last_os_error());
            }
        }
    }
    if let Some(ruleset) = &prepared.ruleset {
        // SAFETY: prctl with plain integers.
        check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
        // SAFETY: a ruleset descriptor owned by `prepared`, no flags.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_landlock_restrict_self,
                ruleset.as_raw_fd(),
                0 as libc::c_uint,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Applies `prepared` to the calling process, `cwd` its working directory
/// (entered again inside the namespaces). Runs between fork and exec:
/// system calls only, on memory prepared before the fork.
pub(crate) fn enter(prepared: &Prepared, cwd: &CStr) -> io::Result<()> {
    enter_namespaces(prepared)?;
    if prepared.enters_namespaces() {
        // SAFETY: a valid C string; chdir is async-signal-safe.
        check(unsafe { libc::chdir(cwd.as_ptr()) })?;
    }
    restrict(prepared)
}

/// Makes one `mount` call.
fn mount(call: &MountCall) -> io::Result<()> {
    let ptr = |text: &Option<CString>| text.as_ref().map_or(std::ptr::null(), |text| text.as_ptr());
    // SAFETY: valid C strings or null; the data, when given, is a C string
    // of mount options.
    check(unsafe {
        libc::mount(
            ptr(&call.source),
            call.target.as_ptr(),
            ptr(&call.fstype),
            call.flags,
            ptr(&call.data).cast(),
        )
    })
}

/// Writes `/proc/self/fd/FD` and a NUL into `buf` without allocating (the
/// child may not), returning it as a C string.
fn fd_path(fd: libc::c_int, buf: &mut [u8; 40]) -> Option<&std::ffi::CStr> {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    buf[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 12];
    let mut count = 0;
    let mut rest = fd.unsigned_abs();
    loop {
        digits[count] = b'0' + (rest % 10) as u8;
        count += 1;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let mut end = PREFIX.len();
    for digit in digits[..count].iter().rev() {
        buf[end] = *digit;
        end += 1;
    }
    buf[end] = 0;
    std::ffi::CStr::from_bytes_until_nul(&buf[..=end]).ok()
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Writes `text` to the file `path` (a `/proc/self` control file).
fn write_file(path: &std::ffi::CStr, text: &std::ffi::CStr) -> io::Result<()> {
    // SAFETY: a valid C string; the descriptor is closed below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let bytes = text.to_bytes();
    // SAFETY: writes the bytes of `text` to the descriptor above.
    let written = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
    let err = io::Error::last_os_error();
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(fd) };
    if usize::try_from(written).is_ok_and(|n| n == bytes.len()) {
        Ok(())
    } else {
        Err(err)
    }
}

/// The kernel's Landlock ABI version; 0 without Landlock.
pub(crate) fn landlock_abi() -> i32 {
    // SAFETY: the version query takes no attribute and touches no memory.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    i32::try_from(rc).unwrap_or(0).max(0)
}

/// Whether a child can enter the namespaces `kind` makes (a private mount
/// namespace and a network namespace), bind a directory read-only, pin one,
/// and hide one behind an empty file system showing a directory inside it
/// again (fresh ones in the temporary directory; `/` itself cannot be bound
/// in a user namespace). The child tries it and ends; it starts no
/// program.
pub(crate) fn namespaces_work(kind: NamespaceKind) -> bool {
    let dir = std::env::temp_dir().join(format!("troupe-ns-probe-{}", std::process::id()));
    let shown = dir.join("hidden/shown");
    if std::fs::create_dir(&dir).is_err() || std::fs::create_dir_all(&shown).is_err() {
        let _ = std::fs::remove_dir_all(&dir);
        return false;
    }
    let plan = Plan {
        read_only_mounts: vec![dir.join("hidden/shown")],
        hidden: vec![dir.join("hidden")],
        shown: vec![super::plan::Shown {
            path: shown,
            writable: true,
        }],
        pinned: vec![dir.clone()],
        network: false,
        ..Plan::default()
    };
    let works = namespace_steps(&plan, kind).is_ok_and(|steps| {
        crate::direct_spawn::succeeds_in_child(|| make_namespaces(&steps).is_ok())
    });
    tracing::debug!(?kind, works, "namespace probe");
    let _ = std::fs::remove_dir_all(&dir);
    works
}
