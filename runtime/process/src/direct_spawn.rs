//! Starting a command straight into its cgroup: `clone3` with
//! `CLONE_INTO_CGROUP` and `CLONE_PIDFD`, then `exec`.
//!
//! Moving a running process into a cgroup (writing to `cgroup.procs`, as a
//! hook between fork and `exec` or the shell itself would) takes the
//! kernel's cgroup threadgroup lock for writing, which waits for an RCU
//! grace period whenever no other move happened just before: 7 to 22 ms on
//! a quiet machine, paid by every command an agent runs one after another.
//! A child created inside its cgroup is never moved, so it starts in about
//! a millisecond whatever came before.
//!
//! On x86-64 the child shares this process's memory until it executes its
//! program (`CLONE_VM` and `CLONE_VFORK`, as `posix_spawn` starts one), on
//! a stack of its own: no page table is copied and no page is copied on
//! write afterwards, which in a process of this size costs half a
//! millisecond a command. The calling thread waits meanwhile; signals are
//! blocked around the clone and the child puts every handler back to its
//! default before it unblocks them, so no handler of this process ever runs
//! in the child. Elsewhere the child gets a copy of the memory, as after
//! `fork`. Either way it only makes system calls on memory prepared here
//! before the clone (the argument and environment arrays, the directory,
//! the descriptors, the sandbox's [`Prepared`] steps), writing nothing but
//! its own stack. A step that fails sends its `errno` through a
//! close-on-exec pipe and ends the child; end-of-file on that pipe means
//! `exec` succeeded.
//!
//! The exit is awaited on the child's pidfd (readable once it exits), then
//! reaped with `waitpid`. Kernels or seccomp filters without `clone3` are
//! reported as [`LaunchError::Unsupported`], and callers start the command
//! the usual way instead.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use tokio::io::unix::AsyncFd;

use crate::os_sandbox::apply::{self, Prepared};

/// `CLONE_INTO_CGROUP` (Linux 5.7), which `libc` declares in a type too
/// narrow for it.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// What one launch starts.
pub(crate) struct Launch<'a> {
    /// The program, as a path (no `PATH` lookup happens in the child).
    pub program: &'a Path,
    /// Its arguments, the program's name first.
    pub args: &'a [&'a OsStr],
    /// Its whole environment.
    pub env: &'a [(String, String)],
    /// Its working directory.
    pub cwd: &'a Path,
    /// Its stdin, stdout and stderr; `None` is `/dev/null`.
    pub stdio: [Option<BorrowedFd<'a>>; 3],
    /// The cgroup directory it starts in.
    pub cgroup: BorrowedFd<'a>,
    /// The sandbox steps it applies to itself before `exec`.
    pub confinement: Option<&'a Prepared>,
}

/// Why a launch did not start the command.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LaunchError {
    /// This kernel (or a seccomp filter around this process) offers no
    /// `clone3` with these flags: start the command another way.
    #[error("clone3 into a cgroup is not available: {0}")]
    Unsupported(io::Error),
    /// The command could not be started.
    #[error("{0}")]
    Failed(io::Error),
}

/// The step of the child that failed, sent with its `errno`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Step {
    Stdio = 1,
    Group = 2,
    Directory = 3,
    Sandbox = 4,
    Exec = 5,
}

impl Step {
    fn from_byte(byte: u8) -> Option<Self> {
        [
            Step::Stdio,
            Step::Group,
            Step::Directory,
            Step::Sandbox,
            Step::Exec,
        ]
        .into_iter()
        .find(|step| *step as u8 == byte)
    }

    fn describe(self) -> &'static str {
        match self {
            Step::Stdio => "setting up its standard streams",
            Step::Group => "making its process group",
            Step::Directory => "entering its working directory",
            Step::Sandbox => "entering the OS sandbox",
            Step::Exec => "executing the program",
        }
    }
}

/// The error a child's report describes: the failed step and its `errno`.
fn child_error(report: [u8; 5]) -> io::Error {
    let errno = i32::from_ne_bytes([report[1], report[2], report[3], report[4]]);
    let os = io::Error::from_raw_os_error(errno);
    match Step::from_byte(report[0]) {
        // The program's own error reads best alone ("No such file or
        // directory"), as `std::process::Command` reports it.
        Some(Step::Exec) | None => os,
        Some(step) => io::Error::new(os.kind(), format!("{}: {os}", step.describe())),
    }
}

/// Everything the child touches, built before the clone.
struct ChildPlan<'a> {
    program: CString,
    /// Null-terminated array of pointers into `_args`.
    argv: Vec<*const libc::c_char>,
    /// Null-terminated array of pointers into `_env`.
    envp: Vec<*const libc::c_char>,
    cwd: CString,
    /// Descriptors numbered 3 or above for fds 0, 1 and 2.
    stdio: [OwnedFd; 3],
    confinement: Option<&'a Prepared>,
    _args: Vec<CString>,
    _env: Vec<CString>,
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte"))
}

/// A duplicate of `fd` numbered 3 or above, close-on-exec, so that moving
/// it onto 0, 1 or 2 in the child never overwrites another one still to
/// be moved.
fn above_stdio(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: fcntl on a valid descriptor; the result is a new descriptor
    // owned below.
    let dup = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `dup` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(dup) })
}

fn dev_null() -> io::Result<OwnedFd> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    above_stdio(std::os::fd::AsFd::as_fd(&file))
}

impl<'a> ChildPlan<'a> {
    fn new(launch: &Launch<'a>) -> io::Result<Self> {
        let program = c_string(launch.program.as_os_str().as_bytes())?;
        let args = launch
            .args
            .iter()
            .map(|arg| c_string(arg.as_bytes()))
            .collect::<io::Result<Vec<_>>>()?;
        let env = launch
            .env
            .iter()
            .map(|(name, value)| c_string(format!("{name}={value}").as_bytes()))
            .collect::<io::Result<Vec<_>>>()?;
        let argv = args
            .iter()
            .map(|arg| arg.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let envp = env
            .iter()
            .map(|pair| pair.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let cwd = c_string(launch.cwd.as_os_str().as_bytes())?;
        let mut stdio = Vec::with_capacity(3);
        for fd in launch.stdio {
            stdio.push(match fd {
                Some(fd) => above_stdio(fd)?,
                None => dev_null()?,
            });
        }
        let stdio: [OwnedFd; 3] = stdio
            .try_into()
            .map_err(|_| io::Error::other("three standard streams"))?;
        Ok(Self {
            program,
            argv,
            envp,
            cwd,
            stdio,
            confinement: launch.confinement,
            _args: args,
            _env: env,
        })
    }
}

/// The stack of a child that shares this process's memory: mapped for one
/// launch, a guard page below it.
#[cfg(target_arch = "x86_64")]
struct ChildStack {
    base: *mut libc::c_void,
    len: usize,
}

#[cfg(target_arch = "x86_64")]
impl ChildStack {
    /// Room for the child's few frames (system calls on prepared memory).
    const LEN: usize = 256 * 1024;
    const GUARD: usize = 4096;

    fn map() -> io::Result<Self> {
        // SAFETY: a fresh anonymous private mapping; nothing aliases it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Self {
            base,
            len: Self::LEN,
        };
        // SAFETY: the lowest page of the mapping made above.
        if unsafe { libc::mprotect(base, Self::GUARD, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }
}

#[cfg(target_arch = "x86_64")]
impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`; the child that ran on it has
        // executed its program or ended (`CLONE_VFORK`).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Every signal blocked in the calling thread until dropped.
#[cfg(target_arch = "x86_64")]
struct SignalsBlocked {
    previous: libc::sigset_t,
}

#[cfg(target_arch = "x86_64")]
impl SignalsBlocked {
    fn all() -> Self {
        // SAFETY: sigset_t is a plain C value; pthread_sigmask only reads
        // and writes the two sets.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            let mut previous: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut previous);
            Self { previous }
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `all`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, std::ptr::null_mut());
        }
    }
}

/// `clone3` with `args` (which names a stack) whose child calls
/// `entry(start)` on that stack and never returns; the parent gets the
/// child's pid or a negative `errno`, as from the system call.
///
/// # Safety
/// `args` must name a mapped stack; `entry` may only make system calls
/// on memory prepared before the call and must end in `exec` or `_exit`.
#[cfg(target_arch = "x86_64")]
unsafe fn clone3_on_stack(
    args: &mut libc::clone_args,
    entry: unsafe extern "C" fn(*const libc::c_void) -> !,
    start: *const libc::c_void,
) -> libc::c_long {
    let result: libc::c_long;
    // SAFETY: the parent only makes the system call (rax, rcx and r11 are
    // what it changes). The child starts on its own stack (the kernel sets
    // its stack pointer to the stack's end, 16-byte aligned) with every
    // other register as the parent had it, and calls `entry` with `start`,
    // which never returns.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => result,
            in("rdi") std::ptr::from_mut(args),
            in("rsi") std::mem::size_of::<libc::clone_args>(),
            in("r12") start,
            in("r13") entry,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    result
}

/// Where the child of [`clone3_on_stack`] starts: every signal handler of
/// this process back to its default (signals are still blocked), then the
/// closure in `start`.
///
/// # Safety
/// Only as the entry of that child, with `start` pointing to the parent's
/// `Option<F>`, which the child takes (the parent waits meanwhile).
#[cfg(target_arch = "x86_64")]
unsafe extern "C" fn child_entry<F: FnOnce() -> libc::c_int>(start: *const libc::c_void) -> ! {
    // SAFETY: `start` points to the parent's Option<F>, alive while the
    // parent waits (CLONE_VFORK); sigaction and _exit are
    // async-signal-safe.
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        for signal in 1..=64 {
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut current) == 0
                && current.sa_sigaction != libc::SIG_DFL
                && current.sa_sigaction != libc::SIG_IGN
            {
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        let slot = &mut *start.cast::<Option<F>>().cast_mut();
        let code = match slot.take() {
            Some(child) => child(),
            None => 127,
        };
        libc::_exit(code)
    }
}

/// Runs `child` in a new process and returns its pid: created by `clone3`
/// with `flags`, and inside `cgroup` when one is given. On x86-64 the child
/// shares this process's memory (`CLONE_VM`, `CLONE_VFORK`, a stack of its
/// own) and this thread waits until it executes a program or ends; elsewhere
/// it runs on a copy, as after `fork`. `child` runs in the child: it may only
/// make async-signal-safe system calls on memory prepared before the call,
/// and `exec` or return the exit code.
fn run_in_child<F: FnOnce() -> libc::c_int>(
    cgroup: Option<BorrowedFd<'_>>,
    flags: u64,
    pidfd: *mut libc::c_int,
    child: F,
) -> io::Result<libc::pid_t> {
    let into = if cgroup.is_some() {
        CLONE_INTO_CGROUP
    } else {
        0
    };
    #[cfg(target_arch = "x86_64")]
    let result = {
        let stack = ChildStack::map()?;
        // SAFETY: an all-zero clone_args is valid (no flags, no pointers).
        let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
        args.flags = (libc::CLONE_VM | libc::CLONE_VFORK) as u64 | flags | into;
        args.pidfd = pidfd as u64;
        args.exit_signal = libc::SIGCHLD as u64;
        args.cgroup = cgroup.map_or(0, |fd| fd.as_raw_fd() as u64);
        args.stack = stack.base as u64;
        args.stack_size = stack.len as u64;
        let mut slot = Some(child);
        let blocked = SignalsBlocked::all();
        // SAFETY: the stack is mapped until after the child has executed a
        // program or ended (this thread waits for that); `child_entry`
        // takes `slot` and runs it.
        let result = unsafe {
            clone3_on_stack(
                &mut args,
                child_entry::<F>,
                std::ptr::from_mut(&mut slot).cast_const().cast(),
            )
        };
        drop(blocked);
        drop(stack);
        if result < 0 {
            return Err(io::Error::from_raw_os_error(
                i32::try_from(-result).unwrap_or(libc::EINVAL),
            ));
        }
        result
    };
    #[cfg(not(target_arch = "x86_64"))]
    let result = {
        // SAFETY: an all-zero clone_args is valid (no flags, no pointers).
        let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
        args.flags = flags | into;
        args.pidfd = pidfd as u64;
        args.exit_signal = libc::SIGCHLD as u64;
        args.cgroup = cgroup.map_or(0, |fd| fd.as_raw_fd() as u64);
        // SAFETY: a valid argument block of its own size; the child runs
        // `child` on its copy of this stack, then ends.
        let pid = unsafe {
            libc::syscall(
                libc::SYS_clone3,
                std::ptr::addr_of_mut!(args),
                std::mem::size_of::<libc::clone_args>(),
            )
        };
        if pid == 0 {
            let code = child();
            // SAFETY: in the child: ends it without running anything else.
            unsafe { libc::_exit(code) }
        }
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        pid
    };
    libc::pid_t::try_from(result).map_err(|_| io::Error::other("pid"))
}

/// Whether a `clone3` error means this kernel or a seccomp filter offers no
/// `clone3` into a cgroup (rather than this one call failing).
fn clone3_refused(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::ENOSYS | libc::EPERM | libc::EINVAL | libc::E2BIG)
    )
}

/// Starts `launch` in its cgroup. The child leads its own process group.
pub(crate) fn launch(launch: &Launch<'_>) -> Result<DirectChild, LaunchError> {
    let plan = ChildPlan::new(launch).map_err(LaunchError::Failed)?;
    let (report_read, report_write) = std::io::pipe().map_err(LaunchError::Failed)?;
    let report_write = OwnedFd::from(report_write);
    let mut pidfd: libc::c_int = -1;
    let report = report_write.as_raw_fd();
    let child = || {
        // SAFETY: in the child, which only makes system calls on `plan`.
        unsafe { child_main(&plan, report) }
    };
    let pid = match run_in_child(
        Some(launch.cgroup),
        libc::CLONE_PIDFD as u64,
        &mut pidfd,
        child,
    ) {
        Ok(pid) => pid,
        Err(err) if clone3_refused(&err) => return Err(LaunchError::Unsupported(err)),
        Err(err) => return Err(LaunchError::Failed(err)),
    };
    drop(report_write);
    // SAFETY: CLONE_PIDFD stored a fresh descriptor nobody else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let mut report = [0u8; 5];
    match read_report(&report_read, &mut report) {
        Ok(0) => {}
        Ok(_) => {
            // The child ended before exec: reap it.
            reap_blocking(pid);
            return Err(LaunchError::Failed(child_error(report)));
        }
        Err(err) => {
            reap_blocking(pid);
            return Err(LaunchError::Failed(err));
        }
    }
    drop(plan);
    DirectChild::new(pid, pidfd).map_err(LaunchError::Failed)
}

/// Whether a child can be created inside the cgroup `cgroup`: one is, and
/// ends at once without running anything. `None` when this kernel (or a
/// seccomp filter) offers no `clone3` into a cgroup, so only moving a
/// process there can tell.
pub(crate) fn starts_inside(cgroup: BorrowedFd<'_>) -> Option<bool> {
    match run_in_child(Some(cgroup), 0, std::ptr::null_mut(), || 0) {
        Ok(pid) => {
            reap_blocking(pid);
            Some(true)
        }
        Err(err) => (!clone3_refused(&err)).then_some(false),
    }
}

/// Whether `check` succeeds in a child of this process that runs nothing
/// else and ends at once: how a probe tries what would change this
/// process for good (entering namespaces), without starting a program.
///
/// `check` runs in the child (see [`run_in_child`]): it may only make
/// async-signal-safe system calls on memory prepared before the call,
/// writing nothing but its own stack.
pub(crate) fn succeeds_in_child(check: impl FnOnce() -> bool + Copy) -> bool {
    let child = move || if check() { 0 } else { 1 };
    let pid = match run_in_child(None, 0, std::ptr::null_mut(), child) {
        Ok(pid) => pid,
        // No `clone3` here: a plain fork.
        Err(err) if clone3_refused(&err) => {
            // SAFETY: the child only runs `check` (system calls only, see
            // above) and `_exit`.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                // SAFETY: in the child: ends it without running anything
                // else.
                unsafe { libc::_exit(child()) }
            }
            if pid < 0 {
                return false;
            }
            pid
        }
        Err(_) => return false,
    };
    reap_blocking(pid)
        .is_some_and(|status| libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0)
}

/// Reads the child's report: 0 bytes when `exec` succeeded.
fn read_report(pipe: &std::io::PipeReader, report: &mut [u8; 5]) -> io::Result<usize> {
    use std::io::Read;
    let mut reader = pipe;
    let mut filled = 0;
    while filled < report.len() {
        match reader.read(&mut report[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}

/// Waits for and reaps `pid`, a child that has ended or is about to; its
/// wait status, `None` when it could not be waited for.
fn reap_blocking(pid: libc::pid_t) -> Option<libc::c_int> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid on our own child.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc >= 0 {
            return Some(status);
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return None;
        }
    }
}

/// The child's side: system calls only, then `exec` or `_exit(127)`.
///
/// # Safety
/// Only in the child of `clone3`, with `plan` built before the clone.
unsafe fn child_main(plan: &ChildPlan<'_>, report: RawFd) -> ! {
    let fail = |step: Step, errno: i32| -> ! {
        let mut bytes = [0u8; 5];
        bytes[0] = step as u8;
        bytes[1..].copy_from_slice(&errno.to_ne_bytes());
        // SAFETY: write and _exit are async-signal-safe.
        unsafe {
            libc::write(report, bytes.as_ptr().cast(), bytes.len());
            libc::_exit(127)
        }
    };
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    // SAFETY: each call below is an async-signal-safe system call on
    // memory prepared before the clone.
    unsafe {
        // Signals as a freshly started program expects them: none
        // blocked, SIGPIPE back to its default (this runtime ignores it).
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGPIPE, &default, std::ptr::null_mut());
        for (target, fd) in plan.stdio.iter().enumerate() {
            let target = target as libc::c_int;
            if libc::dup2(fd.as_raw_fd(), target) != target {
                fail(Step::Stdio, errno());
            }
        }
        if libc::setpgid(0, 0) != 0 {
            fail(Step::Group, errno());
        }
        // Namespaces first: entering a mount namespace moves the process
        // to its root, and the directory is looked up inside it.
        if let Some(prepared) = plan.confinement
            && let Err(err) = apply::enter_namespaces(prepared)
        {
            fail(Step::Sandbox, err.raw_os_error().unwrap_or(libc::EIO));
        }
        if libc::chdir(plan.cwd.as_ptr()) != 0 {
            fail(Step::Directory, errno());
        }
        if let Some(prepared) = plan.confinement
            && let Err(err) = apply::restrict(prepared)
        {
            fail(Step::Sandbox, err.raw_os_error().unwrap_or(libc::EIO));
        }
        libc::execve(
            plan.program.as_ptr(),
            plan.argv.as_ptr(),
            plan.envp.as_ptr(),
        );
        fail(Step::Exec, errno())
    }
}

/// A command started by [`launch`]: its exit is awaited on its pidfd.
#[derive(Debug)]
pub struct DirectChild {
    pid: libc::pid_t,
    /// `None` once handed to the reaper of a child dropped while running.
    pidfd: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
}

impl DirectChild {
    fn new(pid: libc::pid_t, pidfd: OwnedFd) -> io::Result<Self> {
        // SAFETY: an OwnedFd keeps the same open descriptor for as long as
        // the AsyncFd owns it.
        let registered =
            unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) };
        let pidfd = match registered {
            Ok(pidfd) => pidfd,
            Err(err) => {
                let err = io::Error::from(err);
                // Nothing can watch it: it must not outlive this call.
                // SAFETY: kill on our own child, not yet reaped.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                reap_blocking(pid);
                return Err(err);
            }
        };
        Ok(Self {
            pid,
            pidfd: Some(pidfd),
            status: None,
        })
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.pid.unsigned_abs()
    }

    /// Reaps the child if it has ended.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if let Some(status) = self.status {
            return Ok(Some(status));
        }
        let mut raw = 0;
        // SAFETY: waitpid on our own child, not blocking.
        let rc = unsafe { libc::waitpid(self.pid, &mut raw, libc::WNOHANG) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        if rc == 0 {
            return Ok(None);
        }
        let status = ExitStatus::from_raw(raw);
        self.status = Some(status);
        Ok(Some(status))
    }

    /// Waits for the child to exit and reaps it. Cancel-safe.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(status);
            }
            let Some(pidfd) = &self.pidfd else {
                return Err(io::Error::other("the child is watched elsewhere"));
            };
            let mut ready = pidfd.readable().await?;
            ready.clear_ready();
        }
    }
}

impl Drop for DirectChild {
    fn drop(&mut self) {
        if self.status.is_some() || matches!(self.try_wait(), Ok(Some(_)) | Err(_)) {
            return;
        }
        // Still running (its group is being killed by its owner): reap it
        // when it ends, so it leaves no zombie behind.
        let (Some(pidfd), Ok(runtime)) = (self.pidfd.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let pid = self.pid;
        runtime.spawn(async move {
            let mut orphan = DirectChild {
                pid,
                pidfd: Some(pidfd),
                status: None,
            };
            let _ = orphan.wait().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_childs_report_names_the_step_and_the_error() {
        let mut report = [0u8; 5];
        report[0] = Step::Directory as u8;
        report[1..].copy_from_slice(&libc::ENOENT.to_ne_bytes());
        let err = child_error(report);
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(
            err.to_string()
                .starts_with("entering its working directory: No such file"),
            "{err}"
        );
        report[0] = Step::Exec as u8;
        report[1..].copy_from_slice(&libc::EACCES.to_ne_bytes());
        let err = child_error(report);
        assert_eq!(err.raw_os_error(), Some(libc::EACCES));
    }

    #[test]
    fn a_check_in_a_child_reports_its_result_and_changes_nothing_here() {
        assert!(succeeds_in_child(|| true));
        assert!(!succeeds_in_child(|| false));
        // The child's own namespace is its own: this process keeps its
        // mount namespace.
        let before = std::fs::read_link("/proc/self/ns/mnt").unwrap();
        // SAFETY: unshare takes plain flags (in the child only).
        let _ = succeeds_in_child(|| unsafe { libc::unshare(libc::CLONE_NEWNS) } == 0);
        assert_eq!(std::fs::read_link("/proc/self/ns/mnt").unwrap(), before);
    }

    /// A fresh cgroup below the one this process may create in, removed
    /// on drop; `None` (with a note) where cgroup v2 is not writable.
    struct TestCgroup {
        dir: std::path::PathBuf,
        fd: std::fs::File,
    }

    impl TestCgroup {
        fn new(name: &str) -> Option<Self> {
            let crate::process_tree::Containment::Cgroup { parent } = crate::process_tree::detect()
            else {
                eprintln!("cgroup v2 is not writable here");
                return None;
            };
            let dir = parent.join(format!("troupe-{}-{name}", std::process::id()));
            std::fs::create_dir(&dir).unwrap();
            let fd = std::fs::File::open(&dir).unwrap();
            Some(Self { dir, fd })
        }
    }

    impl Drop for TestCgroup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.dir);
        }
    }

    /// The calling thread's blocked signals.
    fn blocked_signals() -> Vec<libc::c_int> {
        // SAFETY: queries the mask into a zeroed plain C value.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set);
            (1..=64)
                .filter(|signal| libc::sigismember(&set, *signal) == 1)
                .collect()
        }
    }

    #[tokio::test]
    async fn a_launched_command_starts_in_its_cgroup_keeps_ignored_signals_and_reports_its_exit() {
        let Some(cgroup) = TestCgroup::new("launch-test") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: sets SIGHUP's disposition of this test process to ignored
        // (and back below); no handler runs.
        let previous = unsafe { libc::signal(libc::SIGHUP, libc::SIG_IGN) };
        let before = blocked_signals();
        let program = std::path::Path::new("/bin/sh");
        let args = [
            OsStr::new("sh"),
            OsStr::new("-c"),
            OsStr::new(
                "cat /proc/self/cgroup > out; grep '^SigIgn' /proc/self/status >> out; exit 3",
            ),
        ];
        let env = [("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
        let launched = launch(&Launch {
            program,
            args: &args,
            env: &env,
            cwd: dir.path(),
            stdio: [None, None, None],
            cgroup: std::os::fd::AsFd::as_fd(&cgroup.fd),
            confinement: None,
        });
        // SAFETY: puts SIGHUP's disposition back.
        unsafe { libc::signal(libc::SIGHUP, previous) };
        // The signals blocked around the clone are unblocked again.
        assert_eq!(blocked_signals(), before);
        let mut child = launched.unwrap();
        let status = child.wait().await.unwrap();
        assert_eq!(status.code(), Some(3));
        let out = std::fs::read_to_string(dir.path().join("out")).unwrap();
        let name = cgroup.dir.file_name().unwrap().to_str().unwrap();
        assert!(
            out.lines()
                .any(|line| line.starts_with("0::") && line.ends_with(name)),
            "{out}"
        );
        // SIGHUP (bit 0) stays ignored in the child, as across any exec.
        let ignored = out
            .lines()
            .find_map(|line| line.strip_prefix("SigIgn:"))
            .map(|mask| u64::from_str_radix(mask.trim(), 16).unwrap())
            .unwrap();
        assert_eq!(ignored & 1, 1, "{out}");
    }

    #[test]
    fn a_launch_that_fails_before_its_program_runs_names_the_step() {
        let Some(cgroup) = TestCgroup::new("launch-fail-test") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let args = [OsStr::new("true")];
        let launch_with = |program: &std::path::Path, cwd: &std::path::Path| {
            launch(&Launch {
                program,
                args: &args,
                env: &[],
                cwd,
                stdio: [None, None, None],
                cgroup: std::os::fd::AsFd::as_fd(&cgroup.fd),
                confinement: None,
            })
        };
        let Err(LaunchError::Failed(err)) =
            launch_with(std::path::Path::new("/bin/true"), &dir.path().join("gone"))
        else {
            panic!("a missing directory is an error");
        };
        assert!(
            err.to_string()
                .starts_with("entering its working directory"),
            "{err}"
        );
        let Err(LaunchError::Failed(err)) =
            launch_with(&dir.path().join("no-such-program"), dir.path())
        else {
            panic!("a missing program is an error");
        };
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
    }

    #[test]
    fn a_child_created_inside_a_cgroup_is_reported_where_one_can_be_made() {
        let crate::process_tree::Containment::Cgroup { parent } = crate::process_tree::detect()
        else {
            eprintln!("cgroup v2 is not writable here");
            return;
        };
        let dir = parent.join(format!("troupe-{}-probe-test", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let cgroup = std::fs::File::open(&dir).unwrap();
        let starts = starts_inside(std::os::fd::AsFd::as_fd(&cgroup));
        drop(cgroup);
        // Empty again: the child ended and was reaped.
        std::fs::remove_dir(&dir).unwrap();
        assert_ne!(starts, Some(false));
    }
}
