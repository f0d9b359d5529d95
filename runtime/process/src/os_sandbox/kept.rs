//! A session's confinement, made once and kept: the Landlock ruleset and
//! the namespaces of its plan serve every command until what they were made
//! from changes.
//!
//! A bind mount and a Landlock rule hold the file or directory a path named
//! when they were made, not the path: a protected directory removed and made
//! again, a `.mcp.json` that appears, or an allowed root replaced would leave
//! kept namespaces and rules pointing at what is no longer there. So before
//! each command the places of the plan are looked at again (their device,
//! inode and type; a few `lstat` calls), and the confinement is kept only
//! when the plan, every place and the host's mount table are as they were
//! ([`Kept::fits`]). The host's mount table is watched through
//! `/proc/self/mounts`, which the kernel marks with a priority event on every
//! mount and unmount ([`MountTable`]): a file system mounted after the
//! namespace was made would otherwise stay out of commands' sight.

use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::apply::{self, ApplyError};
use super::plan::Plan;

/// What a place was when the confinement was made: its device, inode and
/// file type; `None` when it did not exist.
pub(crate) type Identity = Option<(u64, u64, u32)>;

/// Every place of `plan` a rule or mount holds: the writable directories
/// and devices (Landlock rules), and the places bound, hidden, shown again
/// or pinned (mounts).
pub(crate) fn places_of(plan: &Plan) -> Vec<&Path> {
    plan.writable
        .iter()
        .chain(&plan.devices)
        .chain(&plan.read_only_mounts)
        .chain(&plan.writable_mounts)
        .chain(&plan.hidden)
        .chain(plan.shown.iter().map(|shown| &shown.path))
        .chain(&plan.pinned)
        .map(PathBuf::as_path)
        .collect()
}

/// What `path` is now (not following a link).
pub(crate) fn identity(path: &Path) -> Identity {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|meta| (meta.dev(), meta.ino(), meta.mode() & libc::S_IFMT))
}

/// The host's mount table, watched for changes from the moment it is opened.
#[derive(Debug)]
pub(crate) struct MountTable {
    /// `/proc/self/mounts`; `None` where it cannot be opened (every
    /// command then counts as after a change).
    file: Option<std::fs::File>,
}

impl MountTable {
    /// Starts watching.
    pub(crate) fn watch() -> Self {
        Self {
            file: std::fs::File::open("/proc/self/mounts").ok(),
        }
    }

    /// Whether a file system was mounted or unmounted since [`Self::watch`].
    pub(crate) fn changed(&self) -> bool {
        let Some(file) = &self.file else {
            return true;
        };
        let mut poll = libc::pollfd {
            fd: file.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        };
        // SAFETY: one pollfd on a descriptor `file` owns; no waiting.
        let ready = unsafe { libc::poll(&mut poll, 1, 0) };
        ready != 0 || poll.revents & (libc::POLLPRI | libc::POLLERR) != 0
    }
}

/// A confinement made for `plan` from the places as they were.
#[derive(Debug)]
pub(crate) struct Kept {
    plan: Plan,
    places: Vec<Identity>,
    mounts: MountTable,
    prepared: apply::Prepared,
}

impl Kept {
    /// Whether this confinement still fits `plan` with its places now as
    /// `places` say, the host's mount table `mounts_changed` or not.
    pub(crate) fn fits(&self, plan: &Plan, places: &[Identity], mounts_changed: bool) -> bool {
        !mounts_changed && self.plan == *plan && self.places == places
    }
}

/// The kept confinement of one plan, shared by the clones of a sandbox.
#[derive(Debug, Default, Clone)]
pub(crate) struct KeptConfinement(Arc<Mutex<Option<Kept>>>);

impl KeptConfinement {
    /// The confinement of `plan`: the kept one when it still fits, else one
    /// made by `make` (and kept).
    pub(crate) fn get_or_make(
        &self,
        plan: &Plan,
        make: impl FnOnce() -> Result<apply::Prepared, ApplyError>,
    ) -> Result<apply::Prepared, ApplyError> {
        let places: Vec<Identity> = places_of(plan).into_iter().map(identity).collect();
        let mut kept = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(current) = kept.as_ref()
            && current.fits(plan, &places, current.mounts.changed())
        {
            return Ok(current.prepared.clone());
        }
        // Watch from before the making: a change in between makes it again.
        let mounts = MountTable::watch();
        *kept = None;
        let prepared = make()?;
        tracing::debug!(
            namespaces = prepared.enters_namespaces(),
            "OS sandbox confinement made for the session's commands"
        );
        *kept = Some(Kept {
            plan: plan.clone(),
            places,
            mounts,
            prepared: prepared.clone(),
        });
        Ok(prepared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os_sandbox::plan::Shown;

    fn plan() -> Plan {
        Plan {
            writable: vec!["/p".into(), "/data/spill/s1".into()],
            devices: vec!["/dev/null".into()],
            read_only_mounts: vec!["/p/.troupe".into()],
            writable_mounts: vec!["/p/.troupe/exempt".into()],
            hidden: vec!["/data".into()],
            shown: vec![Shown {
                path: "/data/spill/s1".into(),
                writable: true,
            }],
            pinned: vec!["/p/.git".into()],
            network: true,
        }
    }

    #[test]
    fn every_place_a_rule_or_mount_holds_is_looked_at() {
        let plan = plan();
        let places: Vec<&str> = places_of(&plan)
            .into_iter()
            .map(|path| path.to_str().unwrap())
            .collect();
        assert_eq!(
            places,
            [
                "/p",
                "/data/spill/s1",
                "/dev/null",
                "/p/.troupe",
                "/p/.troupe/exempt",
                "/data",
                "/data/spill/s1",
                "/p/.git",
            ]
        );
    }

    #[test]
    fn a_kept_confinement_fits_only_the_same_plan_places_and_mounts() {
        let places = vec![Some((1, 2, libc::S_IFDIR)), None];
        let kept = Kept {
            plan: plan(),
            places: places.clone(),
            mounts: MountTable { file: None },
            prepared: apply::Prepared::default(),
        };
        assert!(kept.fits(&plan(), &places, false));
        // The host mounted or unmounted something.
        assert!(!kept.fits(&plan(), &places, true));
        // A place replaced (another inode) or one that appeared.
        assert!(!kept.fits(&plan(), &[Some((1, 3, libc::S_IFDIR)), None], false));
        assert!(!kept.fits(
            &plan(),
            &[Some((1, 2, libc::S_IFDIR)), Some((1, 9, libc::S_IFREG))],
            false
        ));
        // A directory that became a link.
        assert!(!kept.fits(&plan(), &[Some((1, 2, libc::S_IFLNK)), None], false));
        // Another plan (a split root's entries changed, the network).
        let mut other = plan();
        other.network = false;
        assert!(!kept.fits(&other, &places, false));
    }

    #[test]
    fn identity_tells_a_replaced_directory_from_the_same_one() {
        let dir = tempfile::tempdir().unwrap();
        let place = dir.path().join(".troupe");
        assert_eq!(identity(&place), None);
        std::fs::create_dir(&place).unwrap();
        let first = identity(&place);
        assert!(first.is_some_and(|(_, _, kind)| kind == libc::S_IFDIR));
        assert_eq!(identity(&place), first);
        // A new directory at the same path: hold it so the inode cannot be
        // reused at once.
        let moved = dir.path().join("old");
        std::fs::rename(&place, &moved).unwrap();
        std::fs::create_dir(&place).unwrap();
        assert_ne!(identity(&place), first);
    }

    #[test]
    fn the_mount_table_reports_no_change_until_one_happens() {
        // In a child with a private mount namespace of its own, so the
        // host's table is left alone; system calls only after the fork.
        let dir = tempfile::tempdir().unwrap();
        let target = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()).unwrap();
        let watch = || {
            use std::os::fd::FromRawFd;
            // SAFETY: a valid C string; the descriptor is owned by the File.
            let fd = unsafe { libc::open(c"/proc/self/mounts".as_ptr(), libc::O_RDONLY) };
            (fd >= 0).then(|| MountTable {
                // SAFETY: a fresh descriptor nobody else owns.
                file: Some(unsafe { std::fs::File::from_raw_fd(fd) }),
            })
        };
        let private = || {
            // SAFETY: in the child: unshare and mount take plain arguments
            // and C strings prepared before the fork.
            unsafe {
                libc::unshare(libc::CLONE_NEWNS) == 0
                    && libc::mount(
                        std::ptr::null(),
                        c"/".as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    ) == 0
            }
        };
        let mount = || {
            // SAFETY: in the child: mounts an empty tmpfs on this test's
            // directory, in the child's own mount namespace.
            unsafe {
                libc::mount(
                    c"tmpfs".as_ptr(),
                    target.as_ptr(),
                    c"tmpfs".as_ptr(),
                    0,
                    std::ptr::null(),
                ) == 0
            }
        };
        if !crate::direct_spawn::succeeds_in_child(private) {
            eprintln!("no mount namespace can be made here");
            return;
        }
        assert!(crate::direct_spawn::succeeds_in_child(|| {
            let Some(table) = watch() else { return false };
            if !private() || table.changed() {
                return false;
            }
            // The namespace's own table: watched from here.
            let Some(table) = watch() else { return false };
            let unchanged = !table.changed();
            let seen = mount() && table.changed();
            // A table watched after the change sees none.
            let fresh = watch().is_some_and(|table| !table.changed());
            unchanged && seen && fresh
        }));
    }
}
