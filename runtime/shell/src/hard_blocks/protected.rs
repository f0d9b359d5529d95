//! Protected places: writes into the project's `.git` internals and the
//! files that govern Troupe (`tee`, `cp`/`mv`/`install`/`ln`, `truncate`,
//! `sed -i`/`perl -i`, `tar -x -C`), links out of them, `git config` keys
//! that run programs, and recursive permission changes on system
//! directories.

use super::*;

/// `tee FILE…`.
pub(super) fn tee(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    for arg in call.args.iter().filter(|a| !a.value.starts_with('-')) {
        walker.check_write_target(&arg.value, call.cwds, "tee");
    }
    None
}

/// `cp`, `mv`, `install`, `ln`, `link`.
pub(super) fn copy(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    let (program, args, cwds) = (call.program, call.args, call.cwds);
    if program == "mv" {
        // Moving a file away changes the directory it leaves.
        for source in args.iter().filter(|a| !a.value.starts_with('-')) {
            walker.check_git_target(&source.value, cwds, "mv");
        }
    }
    let sources = walker.copy_destination(program, args, cwds);
    // A link out of a place no command writes lets a later write
    // through the link change it (`ln .git/config x; echo >> x`).
    if matches!(program, "ln" | "link") || (program == "cp" && cp_links(args)) {
        let recursive = program == "cp" && cp_recursive(args);
        for source in sources {
            walker.check_link_source(&source, cwds, program, recursive);
        }
    }
    None
}

/// `git config` keys that run programs.
pub(super) fn git(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    walker.git(call.args);
    None
}

/// `truncate FILE…`.
pub(super) fn truncate(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    for arg in call.args.iter().filter(|a| !a.value.starts_with('-')) {
        walker.check_git_target(&arg.value, call.cwds, "truncate");
    }
    None
}

/// `chmod -R`, `chown -R`, `chgrp -R`.
pub(super) fn permissions(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    walker.recursive_permissions(call.program, call.args, call.cwds);
    None
}

/// `sed -i`.
pub(super) fn sed(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    walker.in_place_edit(call.program, call.args, call.cwds, sed_edits_in_place);
    None
}

/// `perl -i` (perl is not checked as an interpreter).
pub(super) fn perl(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    walker.in_place_edit(call.program, call.args, call.cwds, perl_edits_in_place);
    None
}

/// `tar -x -C DIR`.
pub(super) fn tar(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    let args = call.args;
    let extracts = args.iter().any(|a| {
        let v = a.value.as_str();
        v == "--extract"
            || v == "--get"
            || (!v.starts_with("--")
                && v.trim_start_matches('-')
                    .starts_with(|c: char| c.is_ascii_alphabetic())
                && v.trim_start_matches('-').contains('x'))
    });
    if extracts && let Some(dir) = option_value(args, &["-C", "--directory"]) {
        walker.check_git_target(&dir, call.cwds, "tar extracting");
    }
    None
}

/// True when `cp` makes links instead of copies (`-l`, `--link`, `-s`,
/// `--symbolic-link`, in a cluster such as `-al`).
pub(super) fn cp_links(args: &[Word]) -> bool {
    cp_option(args, &[("link", 2), ("symbolic-link", 2)], &['l', 's'])
}

/// True when `cp` copies directories (`-r`, `-R`, `-a`, `--recursive`,
/// `--archive`, in a cluster such as `-al`).
pub(super) fn cp_recursive(args: &[Word]) -> bool {
    cp_option(args, &[("recursive", 3), ("archive", 2)], &['r', 'R', 'a'])
}

/// True when `cp`'s arguments hold one of the long options `longs` (each
/// abbreviated to at least its given length) or one of the letters `shorts`
/// in a cluster of short options (up to an option that takes a value, `-S`
/// or `-t`, whose value follows in the cluster).
pub(super) fn cp_option(args: &[Word], longs: &[(&str, usize)], shorts: &[char]) -> bool {
    args.iter().any(|a| {
        let v = a.value.as_str();
        if let Some(long) = v.strip_prefix("--") {
            longs
                .iter()
                .any(|(name, least)| long.len() >= *least && name.starts_with(long))
        } else {
            v.starts_with('-')
                && v.len() > 1
                && v[1..]
                    .chars()
                    .take_while(|c| !matches!(c, 'S' | 't'))
                    .any(|c| shorts.contains(&c))
        }
    })
}

/// The files `sed` edits in place, when it does (`-i`, `-i.bak`, `-ni`,
/// `--in-place`).
pub(super) fn sed_edits_in_place(args: &[Word]) -> Option<Vec<String>> {
    let mut in_place = false;
    let mut script_given = false;
    let mut operands = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let v = arg.value.as_str();
        if v == "-e" || v == "-f" || v == "--expression" || v == "--file" {
            script_given = true;
            iter.next();
        } else if v.starts_with("--in-place") {
            in_place = true;
        } else if v.starts_with("--") {
        } else if v.starts_with('-') && v.len() > 1 {
            let flags = &v[1..];
            // `-i` takes an optional suffix glued to it: `-i.bak`.
            let before_i = flags.split('i').next().unwrap_or(flags);
            if flags.contains('i') && before_i.chars().all(|c| "nErsuz".contains(c)) {
                in_place = true;
            }
            if flags.ends_with('e') || flags.ends_with('f') {
                script_given = true;
                iter.next();
            }
        } else {
            operands.push(v.to_owned());
        }
    }
    if !in_place {
        return None;
    }
    if !script_given && !operands.is_empty() {
        operands.remove(0);
    }
    Some(operands)
}

/// The files `perl -i` edits in place.
pub(super) fn perl_edits_in_place(args: &[Word]) -> Option<Vec<String>> {
    let mut in_place = false;
    let mut operands = Vec::new();
    let mut iter = args.iter();
    let mut program_given = false;
    while let Some(arg) = iter.next() {
        let v = arg.value.as_str();
        if v.starts_with('-') && !v.starts_with("--") && v.len() > 1 {
            let flags = &v[1..];
            if flags.contains('i') {
                in_place = true;
            }
            if flags.ends_with('e') || flags.ends_with('E') {
                program_given = true;
                iter.next();
            }
        } else if !v.starts_with('-') {
            operands.push(v.to_owned());
        }
    }
    if !in_place {
        return None;
    }
    if !program_given && !operands.is_empty() {
        operands.remove(0);
    }
    Some(operands)
}

impl Walker<'_, '_> {
    /// `git config` setting a key that names a program or where git finds
    /// hooks or more configuration.
    pub(super) fn git(&mut self, args: &[Word]) {
        if let Some(detail) = git_config_change(args) {
            self.block(HardBlockKind::GitConfig, &detail);
        }
    }

    pub(super) fn recursive_permissions(&mut self, program: &str, args: &[Word], cwds: &[Cwd]) {
        let recursive = args.iter().any(|a| {
            let v = a.value.as_str();
            // GNU accepts any unambiguous prefix: `--rec` and longer.
            (v.len() >= 5 && "--recursive".starts_with(v))
                || (v.starts_with('-') && !v.starts_with("--") && v.contains('R'))
        });
        if !recursive {
            return;
        }
        let has_reference = args.iter().any(|a| a.value.starts_with("--reference"));
        let operands: Vec<&str> = args
            .iter()
            .map(|a| a.value.as_str())
            .filter(|v| !v.starts_with('-'))
            .collect();
        let targets = if has_reference {
            &operands[..]
        } else {
            operands.get(1..).unwrap_or_default()
        };
        for target in targets {
            if let Some(what) = self.protected(target, cwds).filter(Protected::is_system) {
                self.block(
                    HardBlockKind::RecursivePermissions,
                    &format!(
                        "`{program} -R` on `{target}` would change {} and everything below it",
                        what.describe()
                    ),
                );
            }
        }
    }

    /// Checks the destination of `cp`, `mv`, `install`, `ln` or `link`;
    /// returns the sources (for `ln`, a lone operand is the source).
    pub(super) fn copy_destination(
        &mut self,
        program: &str,
        args: &[Word],
        cwds: &[Cwd],
    ) -> Vec<String> {
        let mut destination = None;
        let mut operands = Vec::new();
        let mut iter = args.iter();
        while let Some(arg) = iter.next() {
            let value = arg.value.as_str();
            if value == "-t" {
                destination = iter.next().map(|w| w.value.as_str());
            } else if let Some(dir) = value.strip_prefix("--target-directory=") {
                destination = Some(dir);
            } else if matches!(value, "-S" | "--suffix") {
                iter.next();
            } else if !value.starts_with('-') {
                operands.push(value);
            }
        }
        let mut sources = operands.clone();
        let destination = destination.or_else(|| {
            if operands.len() >= 2 {
                sources.pop()
            } else {
                None
            }
        });
        if let Some(destination) = destination {
            self.check_write_target(destination, cwds, program);
        }
        sources.into_iter().map(str::to_owned).collect()
    }

    /// A link made from `raw`: refused when `raw` lies in the project's
    /// `.git` or a protected place, since a later write through the link
    /// would change it.
    /// With `recursive` (`cp -al`), a source that holds the project root
    /// links everything below it, `.git` and `.troupe` included.
    pub(super) fn check_link_source(
        &mut self,
        raw: &str,
        cwds: &[Cwd],
        program: &str,
        recursive: bool,
    ) {
        for cwd in cwds {
            let Some(path) = self.expand(raw, cwd) else {
                continue;
            };
            let root = self.ctx.project_root;
            if recursive && root.starts_with(&path) {
                self.block(
                    HardBlockKind::GitInternals,
                    &format!(
                        "`{program}` linking `{raw}` links every file below it, the repository's .git directory and Troupe's configuration included, and a later write through a link would change them; copy instead, or link only what you need"
                    ),
                );
                return;
            }
            let resolved = (self.ctx.resolve)(&path);
            let candidates = std::iter::once(path.as_path()).chain(resolved.as_deref());
            for candidate in candidates {
                if in_git_internals(candidate, root) {
                    self.block(
                        HardBlockKind::GitInternals,
                        &format!(
                            "`{program}` linking `{raw}`, inside the repository's .git directory, lets a later write through the link change it; use git commands instead"
                        ),
                    );
                    return;
                }
                if let Some(kind) = self.ctx.protected.covers(candidate) {
                    if self.block.is_none() {
                        self.block = Some(HardBlock::protected(
                            &format!(
                                "`{program}` linking `{raw}` (a later write through the link)"
                            ),
                            kind,
                        ));
                    }
                    return;
                }
            }
        }
    }

    /// `sed -i` / `perl -pi` edits its file operands in place.
    pub(super) fn in_place_edit(
        &mut self,
        program: &str,
        args: &[Word],
        cwds: &[Cwd],
        files_of: fn(&[Word]) -> Option<Vec<String>>,
    ) {
        if let Some(files) = files_of(args) {
            let how = format!("`{program}` editing in place");
            for file in files {
                self.check_git_target(&file, cwds, &how);
            }
        }
    }
}
