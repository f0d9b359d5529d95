//! Devices: raw writes (`dd of=`, `shred`, `wipefs`, `blkdiscard`),
//! formatting (`mkfs*`, `mkswap`, …) and partition or encryption headers
//! (`sfdisk`, `parted`, `cryptsetup`).

use super::*;

/// `dd of=TARGET`.
pub(super) fn dd(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    for arg in call.args {
        if let Some(target) = arg.value.strip_prefix("of=") {
            walker.check_write_target(target, call.cwds, "dd");
        }
    }
    None
}

/// `shred`, `wipefs`, `blkdiscard` on a device.
pub(super) fn destroy(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    for arg in call.args.iter().filter(|a| is_device_target(&a.value)) {
        walker.block(
            HardBlockKind::DeviceWrite,
            &format!(
                "`{}` would destroy the data on `{}`",
                call.program, arg.value
            ),
        );
    }
    None
}

/// `mkfs*`, `mke2fs`, `mkswap`, `mkdosfs`, `mkexfatfs`, `mkntfs`.
pub(super) fn format(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    walker.block(
        HardBlockKind::Format,
        &format!(
            "`{}` creates a new file system and erases what the device held",
            call.program
        ),
    );
    None
}

/// True for `mkfs`, `mkfs.*` and `mke2fs`.
pub(super) fn is_mkfs(program: &str) -> bool {
    program.starts_with("mkfs") || program == "mke2fs"
}

/// `sfdisk`, `parted`, `cryptsetup` rewriting partitions or a header.
pub(super) fn partition(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    if partitions(call.program, call.args) {
        walker.block(
            HardBlockKind::Format,
            &format!(
                "`{}` rewrites a disk's partitions or encryption header and loses what the device held",
                call.program
            ),
        );
    }
    None
}

/// Names under `/dev` that are not storage: writing to them destroys nothing.
pub(super) const HARMLESS_DEVICES: &[&str] = &[
    "null", "zero", "full", "random", "urandom", "stdout", "stderr", "stdin", "ptmx", "console",
];

/// Subdirectories of `/dev` that are not storage.
pub(super) const HARMLESS_DEVICE_DIRS: &[&str] =
    &["fd/", "shm/", "pts/", "tcp/", "udp/", "mqueue/"];

pub(super) fn is_device_target(raw: &str) -> bool {
    if !raw.starts_with('/') {
        return false;
    }
    let normalized = normalize(Path::new(raw));
    let Ok(rest) = normalized.strip_prefix("/dev") else {
        return false;
    };
    let rest = rest.to_string_lossy();
    if rest.is_empty() {
        return false;
    }
    let harmless = HARMLESS_DEVICES.contains(&rest.as_ref())
        || rest.starts_with("tty")
        || HARMLESS_DEVICE_DIRS
            .iter()
            .any(|dir| rest.starts_with(dir) || rest == dir.trim_end_matches('/'));
    !harmless
}

/// Whether `sfdisk`, `parted` or `cryptsetup` would rewrite a device.
pub(super) fn partitions(program: &str, args: &[Word]) -> bool {
    let values: Vec<&str> = args.iter().map(|w| w.value.as_str()).collect();
    match program {
        "sfdisk" => !values.iter().any(|v| {
            matches!(
                *v,
                "-l" | "--list"
                    | "-d"
                    | "--dump"
                    | "-J"
                    | "--json"
                    | "-s"
                    | "--show-size"
                    | "-V"
                    | "--verify"
                    | "--help"
                    | "--version"
            )
        }),
        "parted" => values.iter().any(|v| {
            matches!(
                *v,
                "mklabel" | "mktable" | "mkpart" | "mkpartfs" | "rm" | "resizepart" | "mkfs"
            )
        }),
        "cryptsetup" => values
            .iter()
            .any(|v| matches!(*v, "luksFormat" | "erase" | "luksErase" | "reencrypt")),
        _ => false,
    }
}
