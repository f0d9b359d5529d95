//! Files opened and written without following links (SPEC §5 path
//! sandbox, defence in depth). [`open_beneath`] opens a resolved path one
//! component at a time with `O_NOFOLLOW`, so a symlink swapped into any
//! component after a check makes the open fail instead of escaping.
//! [`replace_file`] writes a temporary file in the target's directory and
//! renames it over the target, so a write never goes through a hard link into
//! a file elsewhere.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Applies `.` and `..` without touching the file system.
pub fn lexical_normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// `path` relative to `project_root` when inside it (`.` for the root itself),
/// absolute otherwise.
pub fn display_path(project_root: &Path, path: &Path) -> String {
    match path.strip_prefix(project_root) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

/// How to open the final component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only.
    Read,
    /// Create a new file for writing; fails if it exists.
    #[cfg(test)]
    CreateNew,
    /// Open an existing file for writing (not truncated: the caller checks
    /// it with [`ensure_regular`] first, then truncates).
    #[cfg(test)]
    Write,
}

/// Mode of files created by `write_file` (before the umask).
const NEW_FILE_MODE: libc::mode_t = 0o666;
/// Mode of directories created for `write_file` (before the umask).
const NEW_DIR_MODE: libc::mode_t = 0o777;

/// Opens an absolute, already resolved path without following any symlink in
/// any component: each directory is opened with `O_NOFOLLOW | O_DIRECTORY`
/// relative to its parent, the final component with `O_NOFOLLOW`. A symlink
/// found anywhere fails with `ELOOP`/`ENOTDIR`. With `create_dirs`, missing
/// directories are created on the way.
pub fn open_beneath(path: &Path, mode: OpenMode, create_dirs: bool) -> io::Result<File> {
    let (dir, name) = open_parent_beneath(path, create_dirs)?;
    open_file_at(&dir, &name, mode)
}

/// Opens the directory that holds the final component of an absolute,
/// resolved `path` the way [`open_beneath`] does (no symlink followed, missing
/// directories created with `create_dirs`); returns it with the final
/// component's name.
fn open_parent_beneath(path: &Path, create_dirs: bool) -> io::Result<(OwnedFd, CString)> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in path.components() {
        match component {
            Component::RootDir => {}
            Component::Normal(part) => parts.push(part),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "path must be absolute and resolved",
                ));
            }
        }
    }
    if !path.is_absolute() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "path must be absolute and resolved",
        ));
    }
    let Some((last, dirs)) = parts.split_last() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cannot open the root directory as a file",
        ));
    };
    let mut dir = open_root()?;
    for part in dirs {
        let name = c_name(part)?;
        dir = match open_dir_at(&dir, &name) {
            Ok(next) => next,
            Err(err) if create_dirs && err.kind() == io::ErrorKind::NotFound => {
                // SAFETY: `dir` is a valid directory fd and `name` a valid C string.
                let rc = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), NEW_DIR_MODE) };
                if rc != 0 {
                    let err = io::Error::last_os_error();
                    if err.kind() != io::ErrorKind::AlreadyExists {
                        return Err(err);
                    }
                }
                open_dir_at(&dir, &name)?
            }
            Err(err) => return Err(err),
        };
    }
    Ok((dir, c_name(last)?))
}

/// Opens `name` in `dir` without following a symlink.
fn open_file_at(dir: &OwnedFd, name: &CString, mode: OpenMode) -> io::Result<File> {
    // O_NONBLOCK: opening a FIFO must not hang; it has no effect on regular
    // files, and callers refuse anything else with `ensure_regular`.
    let flags = libc::O_NOFOLLOW
        | libc::O_CLOEXEC
        | libc::O_NONBLOCK
        | match mode {
            OpenMode::Read => libc::O_RDONLY,
            #[cfg(test)]
            OpenMode::CreateNew => libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            #[cfg(test)]
            OpenMode::Write => libc::O_WRONLY,
        };
    // SAFETY: valid dir fd and C string; the mode argument is read only with O_CREAT.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags,
            libc::c_uint::from(NEW_FILE_MODE),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat and is owned by nobody else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// The metadata of `file` when it is a regular file; an error otherwise
/// (directories, FIFOs, devices, sockets).
pub fn ensure_regular(file: &File) -> io::Result<std::fs::Metadata> {
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(io::Error::from(io::ErrorKind::IsADirectory));
    }
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a device, FIFO or socket)",
        ));
    }
    Ok(meta)
}

/// What [`replace_file`] replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replaced {
    /// The file did not exist.
    Created,
    /// A regular file of this many bytes was replaced.
    Existing {
        /// Its previous size.
        previous_bytes: u64,
    },
}

/// Mode of the temporary file before the final mode is applied.
const TEMP_FILE_MODE: libc::mode_t = 0o600;
/// Attempts at a temporary name that is not taken.
const TEMP_NAME_ATTEMPTS: usize = 16;

/// Writes `content` to the absolute, resolved `path` by replacement: a
/// temporary file in the same directory gets the content (and the old file's
/// permission bits, and its owner where the process may set it), then is
/// renamed over the target. Other hard links to the old file keep the old
/// content; a symlink or a non-regular file at `path` is refused, and no
/// symlink is followed in any component. Missing directories are created
/// with `create_dirs`. On failure the target is left as it was.
pub fn replace_file(path: &Path, content: &[u8], create_dirs: bool) -> io::Result<Replaced> {
    let (dir, name) = open_parent_beneath(path, create_dirs)?;
    let existing = stat_at(&dir, &name)?;
    let (mode, owner, replaced) = match &existing {
        None => {
            // New files get the usual mode through the umask.
            (None, None, Replaced::Created)
        }
        Some(stat) if (stat.st_mode & libc::S_IFMT) == libc::S_IFLNK => {
            return Err(io::Error::from_raw_os_error(libc::ELOOP));
        }
        Some(stat) if (stat.st_mode & libc::S_IFMT) == libc::S_IFDIR => {
            return Err(io::Error::from(io::ErrorKind::IsADirectory));
        }
        Some(stat) if (stat.st_mode & libc::S_IFMT) != libc::S_IFREG => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file (a device, FIFO or socket)",
            ));
        }
        Some(stat) => (
            Some(stat.st_mode & 0o7777),
            Some((stat.st_uid, stat.st_gid)),
            Replaced::Existing {
                previous_bytes: u64::try_from(stat.st_size).unwrap_or_default(),
            },
        ),
    };
    let (mut file, temp) = create_temp_at(&dir, &name, mode.is_some())?;
    let written = (|| {
        file.write_all(content)?;
        if let Some((uid, gid)) = owner {
            // Keeping the owner needs privileges; without them the new file
            // belongs to this process's user, as any new file would.
            // SAFETY: fchown on a descriptor this function owns.
            let _ = unsafe { libc::fchown(file.as_raw_fd(), uid, gid) };
        }
        // A new file was created with the usual mode through the umask; a
        // replacement takes the old file's bits.
        if let Some(mode) = mode
            // SAFETY: fchmod on a descriptor this function owns.
            && unsafe { libc::fchmod(file.as_raw_fd(), mode) } != 0
        {
            return Err(io::Error::last_os_error());
        }
        file.flush()?;
        // SAFETY: valid directory fd and C strings for both names.
        let rc = unsafe {
            libc::renameat(
                dir.as_raw_fd(),
                temp.as_ptr(),
                dir.as_raw_fd(),
                name.as_ptr(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    })();
    if written.is_err() {
        // SAFETY: valid directory fd and C string; failure leaves a stray file
        // that the next attempt does not reuse.
        unsafe { libc::unlinkat(dir.as_raw_fd(), temp.as_ptr(), 0) };
    }
    written.map(|()| replaced)
}

/// `fstatat` without following a symlink; `None` when nothing is there.
fn stat_at(dir: &OwnedFd, name: &CString) -> io::Result<Option<libc::stat>> {
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: valid directory fd, C string and out-pointer.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            stat.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        let err = io::Error::last_os_error();
        return if err.kind() == io::ErrorKind::NotFound {
            Ok(None)
        } else {
            Err(err)
        };
    }
    // SAFETY: fstatat succeeded and filled the struct.
    Ok(Some(unsafe { stat.assume_init() }))
}

/// Creates a new temporary file next to `name` in `dir`.
fn create_temp_at(dir: &OwnedFd, name: &CString, private: bool) -> io::Result<(File, CString)> {
    let base = String::from_utf8_lossy(name.as_bytes());
    let mode = if private {
        TEMP_FILE_MODE
    } else {
        NEW_FILE_MODE
    };
    let mut last_err = io::Error::from(io::ErrorKind::AlreadyExists);
    for _ in 0..TEMP_NAME_ATTEMPTS {
        let temp = format!(
            ".{base}.{}.{:08x}.tmp",
            std::process::id(),
            rand::random::<u32>()
        );
        let temp = c_name(std::ffi::OsStr::new(&temp))?;
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: valid dir fd and C string; the mode is read with O_CREAT.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                temp.as_ptr(),
                flags,
                libc::c_uint::from(mode),
            )
        };
        if fd >= 0 {
            // SAFETY: `fd` was just returned by openat and is owned by nobody else.
            return Ok((File::from(unsafe { OwnedFd::from_raw_fd(fd) }), temp));
        }
        last_err = io::Error::last_os_error();
        if last_err.kind() != io::ErrorKind::AlreadyExists {
            return Err(last_err);
        }
    }
    Err(last_err)
}

/// True when an error from [`open_beneath`] means a symlink was met.
pub fn is_symlink_error(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR))
}

fn c_name(part: &std::ffi::OsStr) -> io::Result<CString> {
    CString::new(part.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// Directory flags: search-only handles where the platform has them.
#[cfg(any(target_os = "linux", target_os = "android"))]
const DIR_FLAGS: libc::c_int =
    libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const DIR_FLAGS: libc::c_int =
    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

fn open_root() -> io::Result<OwnedFd> {
    let root = c"/";
    // SAFETY: a valid C string; the returned fd is checked below.
    let fd = unsafe { libc::open(root.as_ptr(), DIR_FLAGS) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn open_dir_at(dir: &OwnedFd, name: &CString) -> io::Result<OwnedFd> {
    // SAFETY: valid dir fd and C string; the returned fd is checked below.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), DIR_FLAGS) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Bytes examined for a NUL to call a file binary.
pub const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// True when the first [`BINARY_SNIFF_BYTES`] of `head` contain a NUL byte.
pub fn looks_binary(head: &[u8]) -> bool {
    memchr::memchr(0, &head[..head.len().min(BINARY_SNIFF_BYTES)]).is_some()
}

/// A model-facing explanation of an I/O error on `display`.
pub fn explain_io(display: &str, err: &io::Error) -> String {
    if is_symlink_error(err) {
        return format!(
            "Refused: a component of `{display}` is a symbolic link (it changed after the path \
             was checked); nothing was done."
        );
    }
    match err.kind() {
        io::ErrorKind::NotFound => format!("File not found: {display}."),
        io::ErrorKind::PermissionDenied => format!("Permission denied: {display}."),
        io::ErrorKind::IsADirectory => {
            format!("{display} is a directory, not a file; use glob to list files.")
        }
        _ => format!("Cannot access {display}: {err}."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::fs::symlink;

    fn base() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let base = crate::sandbox::resolve_path(dir.path()).unwrap();
        (dir, base)
    }

    #[test]
    fn opens_creates_and_reads() {
        let (_d, base) = base();
        let path = base.join("a/b/c.txt");
        let mut f = open_beneath(&path, OpenMode::CreateNew, true).unwrap();
        f.write_all(b"hi").unwrap();
        let err = open_beneath(&path, OpenMode::CreateNew, true).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        let mut s = String::new();
        open_beneath(&path, OpenMode::Read, false)
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "hi");
    }

    #[test]
    fn refuses_symlink_in_final_and_middle_components() {
        let (_d, base) = base();
        std::fs::create_dir(base.join("real")).unwrap();
        std::fs::write(base.join("real/f"), "x").unwrap();
        symlink(base.join("real/f"), base.join("link")).unwrap();
        symlink(base.join("real"), base.join("dirlink")).unwrap();
        let err = open_beneath(&base.join("link"), OpenMode::Read, false).unwrap_err();
        assert!(is_symlink_error(&err), "{err}");
        let err = open_beneath(&base.join("link"), OpenMode::Write, false).unwrap_err();
        assert!(is_symlink_error(&err), "{err}");
        let err = open_beneath(&base.join("dirlink/f"), OpenMode::Read, false).unwrap_err();
        assert!(is_symlink_error(&err), "{err}");
        let err = open_beneath(&base.join("dirlink/new/f"), OpenMode::CreateNew, true).unwrap_err();
        assert!(is_symlink_error(&err), "{err}");
        assert!(!base.join("real/new").exists());
    }

    #[test]
    fn fifo_does_not_hang_and_is_not_regular() {
        let (_d, base) = base();
        let fifo = base.join("fifo");
        let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let file = open_beneath(&fifo, OpenMode::Read, false).unwrap();
        assert!(ensure_regular(&file).is_err());
        let dir = open_beneath(&base, OpenMode::Read, false).unwrap();
        assert_eq!(
            ensure_regular(&dir).unwrap_err().kind(),
            io::ErrorKind::IsADirectory
        );
    }

    #[test]
    fn rejects_relative_and_dot_dot() {
        assert!(open_beneath(Path::new("rel/x"), OpenMode::Read, false).is_err());
        assert!(open_beneath(Path::new("/tmp/../etc/passwd"), OpenMode::Read, false).is_err());
        assert!(open_beneath(Path::new("/"), OpenMode::Read, false).is_err());
    }

    #[test]
    fn lexical_and_display() {
        assert_eq!(
            lexical_normalize(Path::new("/a/b/../c/./d")),
            PathBuf::from("/a/c/d")
        );
        assert_eq!(
            display_path(Path::new("/p"), Path::new("/p/src/x")),
            "src/x"
        );
        assert_eq!(display_path(Path::new("/p"), Path::new("/p")), ".");
        assert_eq!(display_path(Path::new("/p"), Path::new("/q/x")), "/q/x");
    }

    #[test]
    fn binary_sniffing_looks_at_first_8_kb_only() {
        assert!(looks_binary(b"ab\0c"));
        assert!(!looks_binary(b"plain text"));
        let mut late = vec![b'a'; BINARY_SNIFF_BYTES];
        late.push(0);
        assert!(!looks_binary(&late));
    }
}
