//! Deletions: recursive `rm` of the root, a top-level directory, home or
//! the project (globs and brace expansion included), `rm` of the root's
//! symbolic links, `find -delete` and `rsync --delete` into such places.

use super::*;

/// `rm`.
pub(super) fn rm(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    walker.rm(call.args, call.cwds);
    None
}

/// `find`: `-delete` here, `-exec` and its kin in [`super::nested`].
pub(super) fn find(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    walker.find_delete(call.args, call.cwds);
    walker.find_exec(call.args, call.cwds, call.depth);
    None
}

/// `rsync --delete`.
pub(super) fn rsync(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    walker.rsync_delete(call.args, call.cwds);
    None
}

/// Entries of `/` that are symbolic links on a merged-/usr system: a plain
/// `rm` removes them, and nothing runs without them.
pub(super) const ROOT_LINKS: &[&str] = &["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// Drops trailing `/`, `/*`, `/.*`, `/**` and `/.`: deleting a directory's
/// contents is judged like deleting the directory.
pub(super) fn strip_glob_tail(raw: &str) -> &str {
    let mut current = raw;
    loop {
        let trimmed = current.trim_end_matches('/');
        let trimmed = if trimmed.is_empty() && current.starts_with('/') {
            "/"
        } else {
            trimmed
        };
        if trimmed == "/" || trimmed == "." || trimmed.is_empty() {
            return if trimmed.is_empty() { "." } else { trimmed };
        }
        let last = trimmed.rsplit('/').next().unwrap_or(trimmed);
        if !is_all_entry_glob(last) && last != "." {
            return trimmed;
        }
        let cut = &trimmed[..trimmed.len() - last.len()];
        current = if cut.is_empty() { "." } else { cut };
    }
}

/// True when a path component is made of wildcards only, after at most one
/// leading dot: `*`, `?*`, `.*`, `.??*`, `[a-zA-Z0-9]*`, `.[!.]*`, `[^.]*`.
/// Such a glob names every entry of its directory, or every entry but a few
/// names no literal character picks out.
pub(super) fn is_all_entry_glob(component: &str) -> bool {
    let rest = component.strip_prefix('.').unwrap_or(component);
    if rest.is_empty() {
        return false;
    }
    let chars: Vec<char> = rest.chars().collect();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        match c {
            '*' | '?' => i += 1,
            '[' => match bracket_end(&chars, i) {
                Some(end) => i = end + 1,
                None => return false,
            },
            _ => return false,
        }
    }
    true
}

/// The index of the `]` closing the bracket expression opened at `open`
/// (`[!]a]`, `[[:alpha:]]`), if it is closed.
pub(super) fn bracket_end(chars: &[char], open: usize) -> Option<usize> {
    let mut i = open + 1;
    if matches!(chars.get(i), Some('!' | '^')) {
        i += 1;
    }
    // A `]` right after the opening (or its negation) is a member.
    if chars.get(i) == Some(&']') {
        i += 1;
    }
    while let Some(&c) = chars.get(i) {
        match c {
            ']' => return Some(i),
            '[' if matches!(chars.get(i + 1), Some(':' | '.' | '=')) => {
                let kind = chars[i + 1];
                let close = (i + 2..chars.len().saturating_sub(1))
                    .find(|&j| chars[j] == kind && chars[j + 1] == ']')?;
                i = close + 2;
            }
            _ => i += 1,
        }
    }
    None
}

/// `find` primaries that select nothing (options and actions).
pub(super) const FIND_HARMLESS: &[&str] = &[
    "-delete",
    "-depth",
    "-d",
    "-xdev",
    "-mount",
    "-print",
    "-print0",
    "-ignore_readdir_race",
    "-noleaf",
    "-follow",
];
/// `find` options that take a value and select nothing.
pub(super) const FIND_HARMLESS_WITH_VALUE: &[&str] = &["-mindepth", "-maxdepth"];

/// `find` tests that take no value; every other test takes one.
pub(super) const FIND_TESTS_WITHOUT_VALUE: &[&str] = &[
    "-empty",
    "-executable",
    "-readable",
    "-writable",
    "-nouser",
    "-nogroup",
    "-true",
    "-false",
];

/// `find`'s starting points (`.` when none is given) and the index where its
/// expression starts, after the leading options `-H`, `-L`, `-P`, `-D DEBUG`,
/// `-Olevel`.
pub(super) fn find_roots<'v>(values: &[&'v str]) -> (Vec<&'v str>, usize) {
    let mut i = 0;
    while let Some(value) = values.get(i) {
        match *value {
            "-H" | "-L" | "-P" => i += 1,
            "-D" => i += 2,
            v if v.starts_with("-O") => i += 1,
            _ => break,
        }
    }
    let start = i.min(values.len());
    let end = values[start..]
        .iter()
        .position(|v| v.starts_with('-') || matches!(*v, "(" | "!" | ","))
        .map_or(values.len(), |p| start + p);
    let roots = if end == start {
        vec!["."]
    } else {
        values[start..end].to_vec()
    };
    (roots, end)
}

/// True when the part of a `find` expression before an action narrows what
/// the action applies to: its last `-o`/`,` alternative holds a test that is
/// not negated (`-name x -delete` narrows; `-name x -o -delete`,
/// `! -name x -delete` and `-depth -delete` do not).
pub(super) fn find_narrowed(before: &[&str]) -> bool {
    let mut depth = 0usize;
    let mut segment = 0;
    for (i, value) in before.iter().enumerate() {
        match *value {
            "(" => depth += 1,
            ")" => depth = depth.saturating_sub(1),
            "-o" | "-or" | "," if depth == 0 => segment = i + 1,
            _ => {}
        }
    }
    let segment = &before[segment..];
    let mut negated = false;
    let mut i = 0;
    while let Some(value) = segment.get(i) {
        match *value {
            "!" | "-not" => {
                negated = true;
                i += 1;
                continue;
            }
            "(" if negated => {
                // Skip the negated group.
                let mut level = 0usize;
                while let Some(inner) = segment.get(i) {
                    i += 1;
                    match *inner {
                        "(" => level += 1,
                        ")" => {
                            level = level.saturating_sub(1);
                            if level == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
            }
            "(" | ")" | "-a" | "-and" => i += 1,
            v if FIND_HARMLESS_WITH_VALUE.contains(&v) => i += 2,
            v if FIND_HARMLESS.contains(&v) => i += 1,
            v => {
                if !negated {
                    return true;
                }
                i += if FIND_TESTS_WITHOUT_VALUE.contains(&v) {
                    1
                } else {
                    2
                };
            }
        }
        negated = false;
    }
    false
}

/// Most words one brace expansion may produce before the rest is ignored.
pub(super) const MAX_BRACE_WORDS: usize = 64;

/// The words a brace expansion (`{/*,/x}`, `pre{a,b}post`) makes of `word`,
/// outer braces first; the word itself when it has none.
pub(super) fn brace_alternatives(word: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = vec![word.to_owned()];
    while let Some(current) = pending.pop() {
        if out.len() + pending.len() >= MAX_BRACE_WORDS {
            out.push(current);
            continue;
        }
        let Some(open) = current.find('{') else {
            out.push(current);
            continue;
        };
        let mut depth = 0usize;
        let mut close = None;
        let mut commas = Vec::new();
        for (i, c) in current[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(open + i);
                        break;
                    }
                }
                ',' if depth == 1 => commas.push(open + i),
                _ => {}
            }
        }
        let Some(close) = close.filter(|_| !commas.is_empty()) else {
            out.push(current);
            continue;
        };
        let (prefix, suffix) = (&current[..open], &current[close + 1..]);
        let mut start = open + 1;
        for end in commas.into_iter().chain(std::iter::once(close)) {
            pending.push(format!("{prefix}{}{suffix}", &current[start..end]));
            start = end + 1;
        }
    }
    out
}

impl Walker<'_, '_> {
    pub(super) fn rm(&mut self, args: &[Word], cwds: &[Cwd]) {
        let mut recursive = false;
        let mut end_of_options = false;
        let mut targets = Vec::new();
        for arg in args {
            let value = arg.value.as_str();
            if !end_of_options && value == "--" {
                end_of_options = true;
            } else if !end_of_options && value.starts_with("--") {
                // GNU accepts any unambiguous prefix of a long option.
                recursive |= (value.len() >= 3 && "--recursive".starts_with(value))
                    || value == "--no-preserve-root";
            } else if !end_of_options && value.starts_with('-') && value.len() > 1 {
                recursive |= value[1..].contains(['r', 'R']);
            } else {
                targets.extend(brace_alternatives(value));
            }
        }
        for target in &targets {
            let target = target.as_str();
            if recursive && let Some(what) = self.protected(target, cwds) {
                self.block(
                    HardBlockKind::RecursiveDelete,
                    &format!(
                        "`rm` with recursive flags on `{target}` would delete {}",
                        what.describe()
                    ),
                );
            }
            if !recursive && self.root_links(target, cwds) {
                self.block(
                    HardBlockKind::RecursiveDelete,
                    &format!(
                        "`rm` on `{target}` would remove entries of the filesystem root; on a merged-/usr system `/bin`, `/lib` and `/lib64` are symbolic links that `rm` removes, and no program runs without them"
                    ),
                );
            }
            self.check_git_target(target, cwds, "rm");
        }
    }

    /// Whether a plain `rm` operand names entries of `/` that may be the
    /// links a merged-/usr system runs from: one of [`ROOT_LINKS`] or a glob
    /// matching one (`/*`, `/l*`; not `/*.log`).
    pub(super) fn root_links(&self, raw: &str, cwds: &[Cwd]) -> bool {
        cwds.iter().any(|cwd| {
            let Some(path) = self.expand(raw, cwd) else {
                return false;
            };
            let parts: Vec<String> = path
                .components()
                .filter_map(|c| match c {
                    Component::Normal(part) => Some(part.to_string_lossy().into_owned()),
                    _ => None,
                })
                .collect();
            let [name] = parts.as_slice() else {
                return false;
            };
            if !name.contains(['*', '?', '[']) {
                return ROOT_LINKS.contains(&name.as_str());
            }
            // A glob the matcher cannot read is taken to match.
            globset::Glob::new(name).map_or(true, |glob| {
                let matcher = glob.compile_matcher();
                ROOT_LINKS.iter().any(|link| matcher.is_match(link))
            })
        })
    }

    /// `find ROOT… -delete` with no test before `-delete` that narrows what
    /// is deleted.
    pub(super) fn find_delete(&mut self, args: &[Word], cwds: &[Cwd]) {
        let values: Vec<&str> = args.iter().map(|w| w.value.as_str()).collect();
        let (roots, expression_start) = find_roots(&values);
        let expression = &values[expression_start..];
        let Some(delete) = expression.iter().position(|v| *v == "-delete") else {
            return;
        };
        if find_narrowed(&expression[..delete]) {
            return;
        }
        for root in roots {
            if let Some(what) = self.protected(root, cwds) {
                self.block(
                    HardBlockKind::RecursiveDelete,
                    &format!(
                        "`find {root} -delete` would delete {} and everything below it",
                        what.describe()
                    ),
                );
            }
            self.check_git_target(root, cwds, "find -delete");
        }
    }

    /// `rsync --delete… SRC… DEST` onto a protected directory.
    pub(super) fn rsync_delete(&mut self, args: &[Word], cwds: &[Cwd]) {
        let deletes = args
            .iter()
            .any(|a| a.value.starts_with("--del") || a.value == "--remove-source-files");
        let operands: Vec<&str> = args
            .iter()
            .map(|a| a.value.as_str())
            .filter(|v| !v.starts_with('-'))
            .collect();
        if !deletes || operands.len() < 2 {
            return;
        }
        if let Some(destination) = operands.last()
            && let Some(what) = self.protected(destination, cwds)
        {
            self.block(
                HardBlockKind::RecursiveDelete,
                &format!(
                    "`rsync --delete` into `{destination}` would delete {} except what the source holds",
                    what.describe()
                ),
            );
        }
    }
}
