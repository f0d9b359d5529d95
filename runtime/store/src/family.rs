//! Session families: a child session (a sub-agent's or a fork's transcript)
//! names its parent in [`SessionMeta::parent`]. These pure functions find a
//! session's children and descendants and group sessions into families from
//! session metadata alone, so they read no history and touch no database.
//!
//! Stored links are not trusted to form a tree: a damaged record can close a
//! cycle (`a` → `b` → `a`) or name a parent that is gone. Every walk stops at
//! a session it has already seen, and a session whose parent is not listed
//! heads its own family.

use std::collections::{HashMap, HashSet, VecDeque};

use super::records::SessionMeta;

/// Oldest first: by creation time, then id.
fn oldest_first(a: &&SessionMeta, b: &&SessionMeta) -> std::cmp::Ordering {
    a.created.cmp(&b.created).then_with(|| a.id.cmp(&b.id))
}

/// The direct children of `parent` among `sessions`, oldest first.
pub(crate) fn children<'a>(sessions: &'a [SessionMeta], parent: &str) -> Vec<&'a SessionMeta> {
    let mut children: Vec<&SessionMeta> = sessions
        .iter()
        .filter(|meta| meta.parent.as_deref() == Some(parent) && meta.id != parent)
        .collect();
    children.sort_by(oldest_first);
    children
}

/// Every descendant of `root` among `sessions` (children, grandchildren, …),
/// breadth first: children before grandchildren, siblings oldest first.
/// `root` itself is never part of it, and each session appears once even when
/// damaged links form a cycle.
pub(crate) fn descendants<'a>(sessions: &'a [SessionMeta], root: &str) -> Vec<&'a SessionMeta> {
    let mut by_parent: HashMap<&str, Vec<&SessionMeta>> = HashMap::new();
    for meta in sessions {
        if let Some(parent) = meta.parent.as_deref() {
            by_parent.entry(parent).or_default().push(meta);
        }
    }
    for children in by_parent.values_mut() {
        children.sort_by(oldest_first);
    }
    let mut seen: HashSet<&str> = HashSet::from([root]);
    let mut queue: VecDeque<&str> = VecDeque::from([root]);
    let mut found = Vec::new();
    while let Some(parent) = queue.pop_front() {
        for child in by_parent.get(parent).into_iter().flatten() {
            if seen.insert(child.id.as_str()) {
                found.push(*child);
                queue.push_back(child.id.as_str());
            }
        }
    }
    found
}

/// Splits `sessions` into families: a session heads a family when it has no
/// parent or its parent is not listed; every other session belongs to its
/// parent's family. (A damaged cycle with no head is one family, headed by
/// one of its members.) Each family is ordered for removal: deepest sessions
/// first, the head last, so removing in this order never leaves a listed
/// session whose parent is already gone. Families are ordered by their
/// head's id.
pub(crate) fn families(sessions: &[SessionMeta]) -> Vec<Vec<&SessionMeta>> {
    let parents = listed_parents(sessions);
    let (heads, depths) = heads_and_depths(&parents);
    let mut by_head: HashMap<usize, Vec<usize>> = HashMap::new();
    for (position, head) in heads.iter().enumerate() {
        by_head.entry(*head).or_default().push(position);
    }
    let mut families: Vec<Vec<&SessionMeta>> = by_head
        .into_values()
        .map(|mut members| {
            members.sort_by(|a, b| {
                depths[*b]
                    .cmp(&depths[*a])
                    .then_with(|| oldest_first(&&sessions[*a], &&sessions[*b]))
            });
            members.into_iter().map(|at| &sessions[at]).collect()
        })
        .collect();
    families.sort_by(|a, b| a.last().map(|m| &m.id).cmp(&b.last().map(|m| &m.id)));
    families
}

/// For each listed session, the position of its parent when that parent is
/// listed (a session naming itself has none).
fn listed_parents(sessions: &[SessionMeta]) -> Vec<Option<usize>> {
    let positions: HashMap<&str, usize> = sessions
        .iter()
        .enumerate()
        .map(|(at, meta)| (meta.id.as_str(), at))
        .collect();
    sessions
        .iter()
        .enumerate()
        .map(|(at, meta)| {
            meta.parent
                .as_deref()
                .and_then(|parent| positions.get(parent).copied())
                .filter(|parent| *parent != at)
        })
        .collect()
}

/// For each session (by position), the head of its family and its depth
/// below the head. Linear: each session is walked once; a walk that meets a
/// session already on its path (a cycle) makes the last one it reached the
/// head.
fn heads_and_depths(parents: &[Option<usize>]) -> (Vec<usize>, Vec<usize>) {
    let count = parents.len();
    let mut heads: Vec<Option<usize>> = vec![None; count];
    let mut depths = vec![0usize; count];
    let mut on_path = vec![false; count];
    for start in 0..count {
        if heads[start].is_some() {
            continue;
        }
        let mut path = vec![start];
        on_path[start] = true;
        let (head, base) = loop {
            let last = path[path.len() - 1];
            match parents[last] {
                Some(parent) if on_path[parent] => break (last, 0),
                Some(parent) => match heads[parent] {
                    Some(head) => break (head, depths[parent] + 1),
                    None => {
                        on_path[parent] = true;
                        path.push(parent);
                    }
                },
                None => break (last, 0),
            }
        };
        for (above, at) in path.iter().rev().enumerate() {
            heads[*at] = Some(head);
            depths[*at] = base + above;
            on_path[*at] = false;
        }
    }
    let heads = heads
        .into_iter()
        .enumerate()
        .map(|(at, head)| head.unwrap_or(at))
        .collect();
    (heads, depths)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, TimeZone, Utc};

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(secs, 0).single().unwrap()
    }

    fn meta(id: &str, created: i64, parent: Option<&str>) -> SessionMeta {
        SessionMeta {
            id: id.into(),
            title: String::new(),
            cwd: "/".into(),
            provider: "p".into(),
            model: "m".into(),
            created: at(created),
            updated: at(created),
            message_count: 0,
            parent: parent.map(Into::into),
            agent_path: parent.map(|_| format!("main/{id}")),
            run_id: None,
            fork_of: None,
            branch_of: None,
        }
    }

    fn ids(found: &[&SessionMeta]) -> Vec<String> {
        found.iter().map(|meta| meta.id.clone()).collect()
    }

    fn tree() -> Vec<SessionMeta> {
        vec![
            meta("root", 0, None),
            meta("late-child", 5, Some("root")),
            meta("early-child", 1, Some("root")),
            meta("grandchild", 6, Some("early-child")),
            meta("great", 7, Some("grandchild")),
            meta("other", 2, None),
            meta("other-child", 3, Some("other")),
        ]
    }

    #[test]
    fn children_are_direct_and_oldest_first() {
        let sessions = tree();
        assert_eq!(
            ids(&children(&sessions, "root")),
            ["early-child", "late-child"]
        );
        assert_eq!(ids(&children(&sessions, "early-child")), ["grandchild"]);
        assert!(children(&sessions, "great").is_empty());
        assert!(children(&sessions, "missing").is_empty());
    }

    #[test]
    fn descendants_are_breadth_first_and_stay_in_the_family() {
        let sessions = tree();
        assert_eq!(
            ids(&descendants(&sessions, "root")),
            ["early-child", "late-child", "grandchild", "great"]
        );
        assert_eq!(ids(&descendants(&sessions, "other")), ["other-child"]);
        assert!(descendants(&sessions, "great").is_empty());
        // Children of a session that is not listed are still found.
        let orphans = [meta("a", 0, Some("gone")), meta("b", 1, Some("a"))];
        assert_eq!(ids(&descendants(&orphans, "gone")), ["a", "b"]);
    }

    #[test]
    fn damaged_cycles_end_every_walk() {
        let sessions = [
            meta("a", 0, Some("b")),
            meta("b", 1, Some("a")),
            meta("c", 2, Some("a")),
            meta("self", 3, Some("self")),
        ];
        assert_eq!(ids(&descendants(&sessions, "a")), ["b", "c"]);
        assert_eq!(ids(&descendants(&sessions, "b")), ["a", "c"]);
        assert!(descendants(&sessions, "self").is_empty());
        assert!(children(&sessions, "self").is_empty());
        let families = families(&sessions);
        assert_eq!(families.len(), 2);
        let cycle: HashSet<String> = ids(&families[0]).into_iter().collect();
        assert_eq!(cycle, HashSet::from(["a".into(), "b".into(), "c".into()]));
        assert_eq!(ids(&families[1]), ["self"]);
    }

    #[test]
    fn families_put_the_deepest_first_and_the_head_last() {
        let sessions = tree();
        let families = families(&sessions);
        let listed: Vec<Vec<String>> = families.iter().map(|family| ids(family)).collect();
        assert_eq!(
            listed,
            [
                vec!["other-child", "other"],
                vec!["great", "grandchild", "early-child", "late-child", "root"],
            ]
        );
        // Whatever order the listing has, the grouping is the same.
        let mut reversed = tree();
        reversed.reverse();
        let again: Vec<Vec<String>> = super::families(&reversed)
            .iter()
            .map(|family| ids(family))
            .collect();
        assert_eq!(again, listed);
        // A session whose parent is not listed heads its own family.
        let orphans = [meta("a", 0, Some("gone")), meta("b", 1, Some("a"))];
        let orphan_families = super::families(&orphans);
        assert_eq!(orphan_families.len(), 1);
        assert_eq!(ids(&orphan_families[0]), ["b", "a"]);
    }
}
