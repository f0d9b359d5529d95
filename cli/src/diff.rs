//! What a `write_file` or `edit_file` call would change, as a unified diff
//! with a few lines of context: the text an approval shows instead of the
//! call's JSON arguments. Pure: the caller reads the file.

use std::fmt::Write as _;

/// Lines of unchanged text shown around each change.
pub(crate) const CONTEXT_LINES: usize = 3;

/// Most diff lines shown; the rest is counted.
pub(crate) const MAX_DIFF_LINES: usize = 200;

/// Longest middle part (old lines × new lines) compared line by line; a
/// larger one is shown as removed then added.
const MAX_COMPARED_CELLS: usize = 4_000_000;

/// One line of a unified diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DiffLine {
    /// `--- path` / `+++ path`.
    File(String),
    /// `@@ -a,b +c,d @@`.
    Hunk(String),
    /// ` text`: unchanged.
    Context(String),
    /// `-text`.
    Removed(String),
    /// `+text`.
    Added(String),
    /// `… N more lines`.
    More(usize),
}

/// An edit script operation over lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Equal(usize, usize),
    Delete(usize),
    Insert(usize),
}

/// The lines of `text`, without their line breaks.
fn lines_of(text: &str) -> Vec<&str> {
    text.lines().collect()
}

/// The operations that turn `old` into `new`: the common prefix and suffix,
/// and a longest common subsequence of the middle when it is small enough.
fn operations(old: &[&str], new: &[&str]) -> Vec<Op> {
    let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let (old_mid, new_mid) = (
        &old[prefix..old.len() - suffix],
        &new[prefix..new.len() - suffix],
    );
    let mut ops: Vec<Op> = (0..prefix).map(|i| Op::Equal(i, i)).collect();
    if old_mid.len().saturating_mul(new_mid.len()) <= MAX_COMPARED_CELLS {
        ops.extend(
            middle_operations(old_mid, new_mid)
                .into_iter()
                .map(|op| shift(op, prefix)),
        );
    } else {
        ops.extend((0..old_mid.len()).map(|i| Op::Delete(prefix + i)));
        ops.extend((0..new_mid.len()).map(|j| Op::Insert(prefix + j)));
    }
    let (old_end, new_end) = (old.len() - suffix, new.len() - suffix);
    ops.extend((0..suffix).map(|k| Op::Equal(old_end + k, new_end + k)));
    ops
}

fn shift(op: Op, by: usize) -> Op {
    match op {
        Op::Equal(i, j) => Op::Equal(i + by, j + by),
        Op::Delete(i) => Op::Delete(i + by),
        Op::Insert(j) => Op::Insert(j + by),
    }
}

/// A longest-common-subsequence edit script (removals before additions).
fn middle_operations(old: &[&str], new: &[&str]) -> Vec<Op> {
    let (n, m) = (old.len(), new.len());
    // lengths[i][j]: LCS length of old[i..] and new[j..].
    let mut lengths = vec![0u32; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lengths[at(i, j)] = if old[i] == new[j] {
                lengths[at(i + 1, j + 1)] + 1
            } else {
                lengths[at(i + 1, j)].max(lengths[at(i, j + 1)])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut ops = Vec::new();
    while i < n || j < m {
        if i < n && j < m && old[i] == new[j] {
            ops.push(Op::Equal(i, j));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lengths[at(i + 1, j)] >= lengths[at(i, j + 1)]) {
            ops.push(Op::Delete(i));
            i += 1;
        } else {
            ops.push(Op::Insert(j));
            j += 1;
        }
    }
    ops
}

/// The unified diff from `old` to `new` of the file shown as `path`, with
/// `context` unchanged lines around each change; at most `max_lines` lines
/// of hunks, the rest counted. No lines when nothing changes.
pub(crate) fn unified_diff(
    path: &str,
    old: &str,
    new: &str,
    context: usize,
    max_lines: usize,
) -> Vec<DiffLine> {
    let (old_lines, new_lines) = (lines_of(old), lines_of(new));
    let ops = operations(&old_lines, &new_lines);
    let changed: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, op)| !matches!(op, Op::Equal(..)))
        .map(|(k, _)| k)
        .collect();
    if changed.is_empty() {
        return Vec::new();
    }
    // Hunks: runs of operations around changes, merged when their context
    // would touch.
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for &k in &changed {
        let start = k.saturating_sub(context);
        let end = (k + context + 1).min(ops.len());
        match ranges.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => ranges.push((start, end)),
        }
    }
    let mut out = vec![
        DiffLine::File(format!("--- {path}")),
        DiffLine::File(format!("+++ {path}")),
    ];
    let mut body = Vec::new();
    for (start, end) in ranges {
        let hunk = &ops[start..end];
        let old_count = hunk
            .iter()
            .filter(|op| matches!(op, Op::Equal(..) | Op::Delete(_)))
            .count();
        let new_count = hunk
            .iter()
            .filter(|op| matches!(op, Op::Equal(..) | Op::Insert(_)))
            .count();
        let old_start = ops[..start]
            .iter()
            .filter(|op| matches!(op, Op::Equal(..) | Op::Delete(_)))
            .count();
        let new_start = ops[..start]
            .iter()
            .filter(|op| matches!(op, Op::Equal(..) | Op::Insert(_)))
            .count();
        let mut header = String::from("@@ -");
        let _ = write!(
            header,
            "{},{old_count} +{},{new_count} @@",
            if old_count == 0 {
                old_start
            } else {
                old_start + 1
            },
            if new_count == 0 {
                new_start
            } else {
                new_start + 1
            }
        );
        body.push(DiffLine::Hunk(header));
        for op in hunk {
            body.push(match *op {
                Op::Equal(i, _) => DiffLine::Context(old_lines[i].to_string()),
                Op::Delete(i) => DiffLine::Removed(old_lines[i].to_string()),
                Op::Insert(j) => DiffLine::Added(new_lines[j].to_string()),
            });
        }
    }
    if body.len() > max_lines {
        let more = body.len() - max_lines;
        body.truncate(max_lines);
        body.push(DiffLine::More(more));
    }
    out.extend(body);
    out
}

/// git's unified patch of one file (from its header lines on, as the
/// checkpoint library gives it) as diff lines: its `---`/`+++` lines, its
/// other header lines (modes) and hunk headers as headers, and each line of
/// its hunks; at most `max_lines` lines of hunks, the rest counted. Pure.
pub(crate) fn patch_lines(patch: &str, max_lines: usize) -> Vec<DiffLine> {
    let mut out = Vec::new();
    let mut body = Vec::new();
    let mut in_hunks = false;
    for line in patch.lines() {
        if line.starts_with("@@") {
            in_hunks = true;
            body.push(DiffLine::Hunk(line.to_string()));
            continue;
        }
        if !in_hunks {
            if line.starts_with("--- ") || line.starts_with("+++ ") {
                out.push(DiffLine::File(line.to_string()));
            } else {
                out.push(DiffLine::Hunk(line.to_string()));
            }
            continue;
        }
        let mut chars = line.chars();
        body.push(match chars.next() {
            Some('+') => DiffLine::Added(chars.as_str().to_string()),
            Some('-') => DiffLine::Removed(chars.as_str().to_string()),
            Some(' ') => DiffLine::Context(chars.as_str().to_string()),
            _ => DiffLine::Hunk(line.to_string()),
        });
    }
    if body.len() > max_lines {
        let more = body.len() - max_lines;
        body.truncate(max_lines);
        body.push(DiffLine::More(more));
    }
    out.extend(body);
    out
}

/// The diff as text, coloured (red removals, green additions, cyan hunk
/// headers, bold file lines) when `color` is on. `clean` makes each line's
/// text safe for the terminal.
pub(crate) fn render(lines: &[DiffLine], color: bool, clean: impl Fn(&str) -> String) -> String {
    let paint = |code: &str, text: String| {
        if color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text
        }
    };
    lines
        .iter()
        .map(|line| match line {
            DiffLine::File(text) => paint("1", clean(text)),
            DiffLine::Hunk(text) => paint("36", clean(text)),
            DiffLine::Context(text) => format!(" {}", clean(text)),
            DiffLine::Removed(text) => paint("31", format!("-{}", clean(text))),
            DiffLine::Added(text) => paint("32", format!("+{}", clean(text))),
            DiffLine::More(n) => format!("… {n} more diff lines"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(lines: &[DiffLine]) -> String {
        render(lines, false, str::to_string)
    }

    #[test]
    fn a_changed_line_is_shown_with_three_lines_of_context() {
        let old = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
        let new = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n";
        let diff = plain(&unified_diff("a.txt", old, new, 3, 200));
        assert_eq!(
            diff,
            "--- a.txt\n+++ a.txt\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8"
        );
    }

    #[test]
    fn a_new_file_is_all_additions_and_an_unchanged_one_shows_nothing() {
        let diff = plain(&unified_diff("n.txt", "", "a\nb\n", 3, 200));
        assert_eq!(diff, "--- n.txt\n+++ n.txt\n@@ -0,0 +1,2 @@\n+a\n+b");
        assert!(unified_diff("n.txt", "same\n", "same\n", 3, 200).is_empty());
    }

    #[test]
    fn distant_changes_make_separate_hunks_and_close_ones_merge() {
        let old: String = (1..=20).map(|n| format!("{n}\n")).collect();
        let new = old.replace("2\n", "two\n").replace("18\n", "eighteen\n");
        let lines = unified_diff("f", &old, &new, 3, 200);
        let hunks = lines
            .iter()
            .filter(|line| matches!(line, DiffLine::Hunk(_)))
            .count();
        assert_eq!(hunks, 2, "{}", plain(&lines));
        let new = old.replace("5\n", "five\n").replace("8\n", "eight\n");
        let lines = unified_diff("f", &old, &new, 3, 200);
        let hunks = lines
            .iter()
            .filter(|line| matches!(line, DiffLine::Hunk(_)))
            .count();
        assert_eq!(hunks, 1, "{}", plain(&lines));
    }

    #[test]
    fn insertions_in_the_middle_keep_the_lines_around_them() {
        let diff = plain(&unified_diff("f", "a\nb\nc\n", "a\nx\nb\ny\nc\n", 1, 200));
        assert_eq!(diff, "--- f\n+++ f\n@@ -1,3 +1,5 @@\n a\n+x\n b\n+y\n c");
    }

    #[test]
    fn long_diffs_are_cut_and_counted() {
        let new: String = (0..50).map(|n| format!("{n}\n")).collect();
        let lines = unified_diff("f", "", &new, 3, 10);
        assert_eq!(lines.last(), Some(&DiffLine::More(41)));
    }

    #[test]
    fn a_patch_of_git_is_read_into_lines_and_cut() {
        let patch = "new file mode 100644\n--- /dev/null\n+++ b/a\n@@ -0,0 +1,3 @@\n+--- x\n+two\n three\n\\ No newline at end of file\n";
        assert_eq!(
            patch_lines(patch, 10),
            [
                DiffLine::Hunk("new file mode 100644".into()),
                DiffLine::File("--- /dev/null".into()),
                DiffLine::File("+++ b/a".into()),
                DiffLine::Hunk("@@ -0,0 +1,3 @@".into()),
                DiffLine::Added("--- x".into()),
                DiffLine::Added("two".into()),
                DiffLine::Context("three".into()),
                DiffLine::Hunk("\\ No newline at end of file".into()),
            ]
        );
        let cut = patch_lines(patch, 2);
        assert_eq!(cut.len(), 6);
        assert_eq!(cut[5], DiffLine::More(3));
        assert!(patch_lines("", 5).is_empty());
    }

    #[test]
    fn colour_only_when_asked() {
        let lines = unified_diff("f", "a\n", "b\n", 3, 200);
        let coloured = render(&lines, true, str::to_string);
        assert!(coloured.contains("\x1b[31m-a\x1b[0m"), "{coloured:?}");
        assert!(coloured.contains("\x1b[32m+b\x1b[0m"), "{coloured:?}");
        assert!(!plain(&lines).contains('\x1b'));
    }
}
