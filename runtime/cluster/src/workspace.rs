//! Runs at a git repository and revision: a run may name `repository` (a
//! URL) and `revision` instead of a `cwd` every node shares. The node that
//! takes it fetches the repository into a cache of its own (one bare
//! repository per URL under `TROUPE_HOME/workspaces/cache`), then clones
//! the revision from the cache into a checkout of the run's own
//! (`TROUPE_HOME/workspaces/runs/<run_id>`), and the run works there.
//!
//! The URL comes from another node, so it is untrusted: [`check_repository`]
//! takes only `https://`, `ssh://` and scp-like `user@host:path` (and
//! `file://` where the node's configuration allows it), nothing that could
//! be read as an option, no `ext::`-style transport. [`check_revision`]
//! takes a branch, tag or commit name and nothing git could read as an
//! option or a range. Git runs as Troupe's own git does
//! (`troupe_process::git_command`): nothing the repository configures runs,
//! no hooks, only the allowed transport, confined by the kernel to write
//! below the cache or the checkout; and every step is bounded in time and
//! in the bytes it may write ([`WorkspaceLimits`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use troupe_process::git_command::{git_command, git_command_writing, git_fetch_command};

/// The directory below a data directory that holds the workspaces.
pub const WORKSPACES_DIR: &str = "workspaces";

/// The directory below [`WORKSPACES_DIR`] that holds one checkout per run.
pub const RUNS_DIR: &str = "runs";

/// Whether `dir` is a run's checkout below data directory `data_dir`
/// (`DATA_DIR/workspaces/runs/NAME`, exactly): the one place inside the
/// data directory that the run working there may write.
pub fn is_run_checkout(data_dir: &Path, dir: &Path) -> bool {
    let Ok(rest) = dir.strip_prefix(data_dir.join(WORKSPACES_DIR).join(RUNS_DIR)) else {
        return false;
    };
    let mut parts = rest.components();
    matches!(
        (parts.next(), parts.next()),
        (Some(std::path::Component::Normal(_)), None)
    )
}

/// The longest repository URL accepted.
pub const MAX_URL_CHARS: usize = 2048;

/// The longest revision accepted.
pub const MAX_REVISION_CHARS: usize = 256;

/// How long and how large a checkout may get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkspaceLimits {
    /// The time the fetch and the checkout may take together.
    pub time: Duration,
    /// The most bytes the cache, and then the checkout, may hold.
    pub max_bytes: u64,
}

impl Default for WorkspaceLimits {
    fn default() -> Self {
        Self {
            time: Duration::from_secs(600),
            max_bytes: 4 * 1024 * 1024 * 1024,
        }
    }
}

/// How a repository is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `https://`.
    Https,
    /// `ssh://` or `user@host:path`.
    Ssh,
    /// `file://` (where the node allows it).
    File,
}

impl Transport {
    /// Git's name of the protocol.
    pub fn protocol(self) -> &'static str {
        match self {
            Self::Https => "https",
            Self::Ssh => "ssh",
            Self::File => "file",
        }
    }
}

/// Why a run's workspace could not be made.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The repository or revision is not one this node checks out.
    #[error("{0}")]
    Refused(String),
    /// Git failed.
    #[error("git could not {what}: {cause}")]
    Git {
        /// The step.
        what: &'static str,
        /// Git's last words.
        cause: String,
    },
    /// A step took longer than the limit.
    #[error("the checkout took longer than {0:?}")]
    TimedOut(Duration),
    /// The cache or the checkout grew past the limit.
    #[error("the repository holds more than {0} bytes")]
    TooLarge(u64),
    /// The file system refused.
    #[error("the workspace could not be prepared: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads a repository URL: its transport, or why it is refused.
/// `file://` is taken only when `allow_file`.
pub fn check_repository(url: &str, allow_file: bool) -> Result<Transport, WorkspaceError> {
    let refuse = |why: &str| {
        Err(WorkspaceError::Refused(format!(
            "the repository {} is refused: {why}",
            shown(url)
        )))
    };
    if url.is_empty() || url.chars().count() > MAX_URL_CHARS {
        return refuse(&format!("it must be 1 to {MAX_URL_CHARS} characters"));
    }
    if url.chars().any(|ch| ch.is_control() || ch.is_whitespace()) {
        return refuse("it holds spaces or control characters");
    }
    if url.starts_with('-') {
        return refuse("it starts with `-`");
    }
    if let Some((scheme, rest)) = url.split_once("://") {
        let transport = match scheme.to_ascii_lowercase().as_str() {
            "https" => Transport::Https,
            "ssh" => Transport::Ssh,
            "file" if allow_file => Transport::File,
            "file" => return refuse("this node does not check out file:// repositories"),
            _ => return refuse("only https://, ssh:// and user@host:path are checked out"),
        };
        let authority = rest.split('/').next().unwrap_or_default();
        let host = authority.rsplit('@').next().unwrap_or_default();
        if transport != Transport::File && (host.is_empty() || host.starts_with('-')) {
            return refuse("it names no host");
        }
        if authority.starts_with('-') {
            return refuse("its host part starts with `-`");
        }
        if transport == Transport::File && !rest.starts_with('/') {
            return refuse("a file:// URL must name an absolute path");
        }
        return Ok(transport);
    }
    if url.contains("::") {
        return refuse("remote helpers (`transport::address`) are not checked out");
    }
    // scp-like: [user@]host:path, the host before the first `:` and no `/`
    // before it (else git would read a local path).
    match url.split_once(':') {
        Some((authority, path))
            if !authority.is_empty() && !authority.contains('/') && !path.is_empty() =>
        {
            let host = authority.rsplit('@').next().unwrap_or_default();
            if host.is_empty() || host.starts_with('-') {
                return refuse("it names no host");
            }
            Ok(Transport::Ssh)
        }
        _ => refuse("only https://, ssh:// and user@host:path are checked out"),
    }
}

/// Checks a revision: a branch, tag or commit name, nothing git could read
/// as an option, a range or a path.
pub fn check_revision(revision: &str) -> Result<(), WorkspaceError> {
    let refuse = |why: &str| {
        Err(WorkspaceError::Refused(format!(
            "the revision {:?} is refused: {why}",
            revision.chars().take(80).collect::<String>()
        )))
    };
    if revision.is_empty() || revision.len() > MAX_REVISION_CHARS {
        return refuse(&format!("it must be 1 to {MAX_REVISION_CHARS} characters"));
    }
    if revision.starts_with(['-', '/', '.']) || revision.ends_with(['/', '.']) {
        return refuse("it starts or ends with `-`, `/` or `.`");
    }
    if revision.contains("..") || revision.contains("//") || revision.ends_with(".lock") {
        return refuse("it is not a branch, tag or commit name");
    }
    if !revision
        .chars()
        .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '-' | '_' | '.' | '/'))
    {
        return refuse("only letters, digits, `-`, `_`, `.` and `/` may name it");
    }
    Ok(())
}

/// The cache directory's name for `url`: a readable part and a hash, so
/// two URLs never share a cache.
pub fn cache_name(url: &str) -> String {
    let readable: String = url
        .rsplit(['/', ':'])
        .find(|part| !part.is_empty())
        .unwrap_or("repository")
        .trim_end_matches(".git")
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() || ch == '-' || ch == '_' {
                ch
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    // FNV-1a: stable across builds, enough to tell URLs apart.
    let hash = url.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{readable}-{hash:016x}.git")
}

/// `url` as messages show it: without a password.
fn shown(url: &str) -> String {
    let text: String = url.chars().take(200).collect();
    match text.split_once("://") {
        Some((scheme, rest)) => {
            let host_end = rest.find('/').unwrap_or(rest.len());
            match rest[..host_end].rfind('@') {
                Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
                None => text.clone(),
            }
        }
        None => text,
    }
}

/// Checks out `revision` of `url` for run `run_id` below `root`
/// (`TROUPE_HOME/workspaces`): the checkout's path. Nothing is written
/// before the URL and revision are accepted; a failed checkout is removed.
pub async fn check_out(
    root: &Path,
    url: &str,
    revision: &str,
    run_id: &str,
    allow_file: bool,
    limits: WorkspaceLimits,
) -> Result<PathBuf, WorkspaceError> {
    let transport = check_repository(url, allow_file)?;
    check_revision(revision)?;
    if !troupe_protocol::cluster::is_valid_token(run_id) {
        return Err(WorkspaceError::Refused(format!(
            "{run_id:?} is not a run id"
        )));
    }
    let deadline = tokio::time::Instant::now() + limits.time;
    let cache = root.join("cache").join(cache_name(url));
    let commit = {
        let lock = cache_lock(&cache);
        let _held = lock.lock().await;
        fetch(&cache, url, transport, deadline, limits).await?;
        resolve(&cache, revision, deadline, limits).await?
    };
    let runs = root.join(RUNS_DIR);
    std::fs::create_dir_all(&runs)?;
    let checkout = runs.join(run_id);
    let made = clone_at(&cache, &checkout, &runs, &commit, deadline, limits).await;
    let made = match made {
        Ok(()) => point_origin_at(&checkout, url, deadline, limits).await,
        Err(err) => Err(err),
    };
    match made {
        Ok(()) => {
            tracing::info!(run = %run_id, repository = %shown(url), %revision, %commit, "checked out the run's repository");
            Ok(checkout)
        }
        Err(err) => {
            let _ = std::fs::remove_dir_all(&checkout);
            Err(err)
        }
    }
}

/// One lock per cache: two runs of one repository fetch in turn.
fn cache_lock(cache: &Path) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>> = OnceLock::new();
    let mut locks = LOCKS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    locks.entry(cache.to_path_buf()).or_default().clone()
}

/// Creates the cache when absent, then fetches every branch and tag of
/// `url` into it.
async fn fetch(
    cache: &Path,
    url: &str,
    transport: Transport,
    deadline: tokio::time::Instant,
    limits: WorkspaceLimits,
) -> Result<(), WorkspaceError> {
    let writable = [cache.to_path_buf()];
    if !cache.join("HEAD").exists() {
        std::fs::create_dir_all(cache)?;
        let init = git_command_writing(
            cache,
            &["init", "--quiet", "--bare", "--template="],
            &writable,
        );
        bounded(init, "create the cache", cache, deadline, limits).await?;
    }
    let command = git_fetch_command(
        cache,
        &[
            "fetch",
            "--quiet",
            "--prune",
            "--no-recurse-submodules",
            "--",
            url,
            "+refs/heads/*:refs/heads/*",
            "+refs/tags/*:refs/tags/*",
        ],
        &writable,
        &[transport.protocol()],
    );
    bounded(command, "fetch the repository", cache, deadline, limits)
        .await
        .map(drop)
}

/// The commit `revision` names in the cache.
async fn resolve(
    cache: &Path,
    revision: &str,
    deadline: tokio::time::Instant,
    limits: WorkspaceLimits,
) -> Result<String, WorkspaceError> {
    let wanted = format!("{revision}^{{commit}}");
    let command = git_command(
        cache,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &wanted,
        ],
    );
    match bounded(command, "find the revision", cache, deadline, limits).await {
        Ok(commit) if !commit.trim().is_empty() => Ok(commit.trim().to_string()),
        Ok(_) | Err(WorkspaceError::Git { .. }) => Err(WorkspaceError::Refused(format!(
            "the repository has no revision {revision}"
        ))),
        Err(err) => Err(err),
    }
}

/// Clones the cache into `checkout` and checks out `commit` there.
async fn clone_at(
    cache: &Path,
    checkout: &Path,
    runs: &Path,
    commit: &str,
    deadline: tokio::time::Instant,
    limits: WorkspaceLimits,
) -> Result<(), WorkspaceError> {
    if checkout.exists() {
        return Err(WorkspaceError::Refused(format!(
            "the checkout {} exists already",
            checkout.display()
        )));
    }
    let source = cache.to_string_lossy().into_owned();
    let target = checkout.to_string_lossy().into_owned();
    let clone = git_fetch_command(
        runs,
        &[
            "clone",
            "--quiet",
            "--no-checkout",
            "--no-hardlinks",
            "--template=",
            "--",
            &source,
            &target,
        ],
        &[runs.to_path_buf()],
        &["file"],
    );
    bounded(clone, "clone the revision", runs, deadline, limits).await?;
    let switch = git_command_writing(
        checkout,
        &[
            "-c",
            "advice.detachedHead=false",
            "checkout",
            "--quiet",
            "--detach",
            commit,
        ],
        &[checkout.to_path_buf()],
    );
    bounded(switch, "check out the revision", checkout, deadline, limits)
        .await
        .map(drop)
}

/// Points the checkout's `origin` at the repository itself rather than the
/// cache it was cloned from: what the run fetches or pushes goes there.
async fn point_origin_at(
    checkout: &Path,
    url: &str,
    deadline: tokio::time::Instant,
    limits: WorkspaceLimits,
) -> Result<(), WorkspaceError> {
    let command = git_command_writing(
        checkout,
        &["remote", "set-url", "origin", url],
        &[checkout.to_path_buf()],
    );
    bounded(
        command,
        "name the checkout's origin",
        checkout,
        deadline,
        limits,
    )
    .await
    .map(drop)
}

/// Runs `command` until it ends, the deadline passes, or `watched` holds
/// more than the limit's bytes (then it is killed): its stdout.
async fn bounded(
    mut command: tokio::process::Command,
    what: &'static str,
    watched: &Path,
    deadline: tokio::time::Instant,
    limits: WorkspaceLimits,
) -> Result<String, WorkspaceError> {
    command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = command.spawn()?;
    let output = tokio::select! {
        output = child.wait_with_output() => output?,
        () = tokio::time::sleep_until(deadline) => return Err(WorkspaceError::TimedOut(limits.time)),
        () = grows_past(watched, limits.max_bytes) => return Err(WorkspaceError::TooLarge(limits.max_bytes)),
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let cause = stderr
            .lines()
            .rev()
            .find(|line| !line.trim().is_empty())
            .unwrap_or("no message")
            .chars()
            .take(300)
            .collect();
        return Err(WorkspaceError::Git { what, cause });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Resolves once `dir` holds more than `max_bytes`.
async fn grows_past(dir: &Path, max_bytes: u64) {
    let mut ticks = tokio::time::interval(Duration::from_millis(250));
    loop {
        ticks.tick().await;
        let dir = dir.to_path_buf();
        let size = tokio::task::spawn_blocking(move || bytes_below(&dir))
            .await
            .unwrap_or(0);
        if size > max_bytes {
            return;
        }
    }
}

/// The bytes of the files below `dir` (symbolic links not followed).
fn bytes_below(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => bytes_below(&entry.path()),
            Ok(kind) if kind.is_file() => entry.metadata().map_or(0, |meta| meta.len()),
            _ => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_ssh_and_allowed_file_repositories_are_taken() {
        for (url, transport) in [
            ("https://github.com/o/r.git", Transport::Https),
            ("HTTPS://host/r", Transport::Https),
            ("ssh://git@host:2222/o/r.git", Transport::Ssh),
            ("git@github.com:o/r.git", Transport::Ssh),
            ("host:r.git", Transport::Ssh),
        ] {
            assert_eq!(check_repository(url, false).unwrap(), transport, "{url}");
        }
        assert_eq!(
            check_repository("file:///srv/r.git", true).unwrap(),
            Transport::File
        );
        for hostile in [
            "ext::sh -c touch% /tmp/pwned",
            "ext::sh",
            "fd::17",
            "file:///srv/r.git",
            "http://host/r",
            "git://host/r",
            "ftp://host/r",
            "/srv/r.git",
            "./r",
            "-uhelp",
            "--upload-pack=touch /tmp/x",
            "ssh://-oProxyCommand=touch%20x/r",
            "-oProxyCommand=x:r",
            "git@-oProxyCommand=x:r",
            "https://host/r with space",
            "https://host/r\n",
            "",
            "a/b:c",
        ] {
            let err = check_repository(hostile, false).unwrap_err();
            assert!(
                matches!(err, WorkspaceError::Refused(_)),
                "{hostile}: {err}"
            );
        }
        let long = format!("https://host/{}", "a".repeat(MAX_URL_CHARS));
        assert!(check_repository(&long, false).is_err());
        assert!(check_repository("file://relative/r", true).is_err());
    }

    #[test]
    fn a_refusal_does_not_show_a_password() {
        let err = check_repository("ftp://ann:s3cret@host/r", false)
            .unwrap_err()
            .to_string();
        assert!(
            !err.contains("s3cret") && err.contains("ftp://***@host/r"),
            "{err}"
        );
    }

    #[test]
    fn revisions_are_branch_tag_or_commit_names_only() {
        for good in ["main", "v1.2.3", "feature/x", "0123abcd", "release-2026_12"] {
            assert!(check_revision(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "-n",
            "--output=/tmp/x",
            "main..evil",
            "HEAD~1",
            "a b",
            "x^{tree}",
            "/abs",
            "topic.lock",
            "trailing/",
            "@{-1}",
            "a:b",
        ] {
            assert!(check_revision(bad).is_err(), "{bad}");
        }
        assert!(check_revision(&"a".repeat(MAX_REVISION_CHARS + 1)).is_err());
    }

    #[test]
    fn only_a_runs_own_checkout_is_a_run_checkout() {
        let data = Path::new("/home/a/.local/share/troupe");
        assert!(is_run_checkout(data, &data.join("workspaces/runs/r1")));
        for not in [
            data.join("workspaces/runs"),
            data.join("workspaces/runs/r1/sub"),
            data.join("workspaces/cache/x.git"),
            data.join("sessions"),
            data.join("workspaces/runs/../cache"),
            PathBuf::from("/elsewhere/workspaces/runs/r1"),
        ] {
            assert!(!is_run_checkout(data, &not), "{}", not.display());
        }
    }

    #[test]
    fn each_url_has_its_own_readable_cache() {
        let a = cache_name("https://github.com/o/tool.git");
        assert!(a.starts_with("tool-") && a.ends_with(".git"), "{a}");
        assert_ne!(a, cache_name("https://gitlab.com/o/tool.git"));
        assert_eq!(a, cache_name("https://github.com/o/tool.git"));
        let odd = cache_name("file:///../../etc");
        assert!(!odd.contains('/') && !odd.starts_with('.'), "{odd}");
    }
}
