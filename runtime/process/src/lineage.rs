//! Whether a process is one of the commands a Troupe runtime started, or
//! something one of them started in turn: the daemon asks before it lets a
//! peer start a run or answer an approval, so that a command (whatever the
//! model made of it) can never widen its own permissions through the
//! daemon's API.
//!
//! A process is taken for a command when it, or any process it descends
//! from:
//! - carries [`COMMAND_VAR`] in its environment (every command starts with
//!   it; a process that clears its environment still descends from one that
//!   has it, unless it also left the tree);
//! - sits in a cgroup a Troupe runtime made for a command (a process cannot
//!   leave its cgroup without writing to the cgroup file system, which the
//!   OS sandbox refuses);
//! - descends from the asking runtime itself, or from any other process
//!   named `troupe` (an embedded run's commands).
//!
//! [`judge`] is the pure rule over facts read from `/proc`; [`lineage_of`]
//! reads them. Facts that cannot be read (a process that made itself not
//! dumpable hides its environment) count for nothing either way: the other
//! marks still hold.

use super::process_tree::CGROUP_PREFIX;

/// Environment variable every command starts with; its value is the process
/// id of the runtime that started it.
pub const COMMAND_VAR: &str = "TROUPE_COMMAND";

/// The name (`comm`) of a Troupe process.
const TROUPE_COMM: &str = "troupe";

/// How many ancestors are followed at most.
const MAX_ANCESTORS: usize = 128;

/// What `/proc` says of one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessFacts {
    /// Its id.
    pub pid: i32,
    /// Its parent's id (0 for the first process).
    pub ppid: i32,
    /// Its name as the kernel keeps it (at most 15 bytes).
    pub comm: String,
    /// Whether its environment holds [`COMMAND_VAR`]; `None` when it cannot
    /// be read.
    pub marked: Option<bool>,
    /// Its cgroup v2 path, when known.
    pub cgroup: Option<String>,
}

/// What a process is to the runtime asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lineage {
    /// A command a Troupe runtime started, or a process one started; the
    /// text says how it was recognised.
    Command(String),
    /// Nothing any Troupe runtime started.
    Unrelated,
}

/// The lineage of the process `chain[0]`, given its ancestors after it
/// (parent first), for the runtime with id `runtime_pid`. Pure.
pub fn judge(chain: &[ProcessFacts], runtime_pid: i32) -> Lineage {
    for (depth, process) in chain.iter().enumerate() {
        let who = if depth == 0 {
            format!("process {}", process.pid)
        } else {
            format!("its ancestor {} ({})", process.pid, process.comm)
        };
        if process.marked == Some(true) {
            return Lineage::Command(format!("{who} carries {COMMAND_VAR}"));
        }
        if process.cgroup.as_deref().is_some_and(is_command_cgroup) {
            return Lineage::Command(format!("{who} is in a command's cgroup"));
        }
        if depth > 0 && process.pid == runtime_pid {
            return Lineage::Command(format!("it descends from this daemon ({runtime_pid})"));
        }
        if depth > 0 && process.comm == TROUPE_COMM {
            return Lineage::Command(format!("{who} is a Troupe process"));
        }
    }
    Lineage::Unrelated
}

/// Whether a cgroup path names a cgroup made for a command.
fn is_command_cgroup(path: &str) -> bool {
    path.split('/').any(|part| {
        part.strip_prefix(CGROUP_PREFIX)
            .is_some_and(|rest| rest.starts_with('-'))
    })
}

/// The parent id and name in a `/proc/PID/stat` line (the name is in
/// parentheses and may hold anything, so it ends at the last `)`).
pub(crate) fn parse_stat_parent(stat: &str) -> Option<(i32, String)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_owned();
    let mut fields = stat.get(close + 1..)?.split_ascii_whitespace();
    let _state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, comm))
}

/// The cgroup v2 path in a `/proc/PID/cgroup` text (the `0::` line).
pub(crate) fn parse_cgroup(text: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(str::to_owned)
}

/// Whether an `environ` block (NUL-separated) holds [`COMMAND_VAR`].
pub(crate) fn environ_marked(environ: &[u8]) -> bool {
    let wanted = format!("{COMMAND_VAR}=");
    environ
        .split(|byte| *byte == 0)
        .any(|entry| entry.starts_with(wanted.as_bytes()))
}

/// Reads the facts of process `pid`; `None` when it is gone.
pub fn facts(pid: i32) -> Option<ProcessFacts> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (ppid, comm) = parse_stat_parent(&stat)?;
    let marked = std::fs::read(format!("/proc/{pid}/environ"))
        .ok()
        .map(|environ| environ_marked(&environ));
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()
        .and_then(|text| parse_cgroup(&text));
    Some(ProcessFacts {
        pid,
        ppid,
        comm,
        marked,
        cgroup,
    })
}

/// The lineage of process `pid` for the runtime with id `runtime_pid`,
/// read from `/proc`; `None` when the process is gone.
pub fn lineage_of(pid: i32, runtime_pid: i32) -> Option<Lineage> {
    let mut chain = vec![facts(pid)?];
    while chain.len() < MAX_ANCESTORS {
        let parent = chain.last().map_or(0, |last| last.ppid);
        if parent <= 0 {
            break;
        }
        match facts(parent) {
            Some(next) => chain.push(next),
            None => break,
        }
    }
    Some(judge(&chain, runtime_pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(pid: i32, ppid: i32, comm: &str) -> ProcessFacts {
        ProcessFacts {
            pid,
            ppid,
            comm: comm.to_owned(),
            marked: Some(false),
            cgroup: Some("/user.slice/session-1.scope".to_owned()),
        }
    }

    #[test]
    fn commands_are_recognised_by_any_mark_anywhere_in_their_ancestry() {
        let owner = vec![
            process(40, 30, "troupe"),
            process(30, 20, "bash"),
            process(20, 1, "tmux: server"),
            process(1, 0, "systemd"),
        ];
        assert_eq!(judge(&owner, 10), Lineage::Unrelated);

        let marked = |chain: &mut Vec<ProcessFacts>, at: usize| chain[at].marked = Some(true);
        let mut chain = owner.clone();
        marked(&mut chain, 1);
        assert!(matches!(judge(&chain, 10), Lineage::Command(why) if why.contains("30")));

        let mut chain = owner.clone();
        chain[0].cgroup = Some("/user.slice/troupe-77-3".to_owned());
        assert!(matches!(judge(&chain, 10), Lineage::Command(why) if why.contains("cgroup")));
        chain[0].cgroup = Some("/user.slice/troupe-77-3/nested".to_owned());
        assert!(matches!(judge(&chain, 10), Lineage::Command(_)));
        chain[0].cgroup = Some("/user.slice/troupe.service".to_owned());
        assert_eq!(judge(&chain, 10), Lineage::Unrelated);

        // A descendant of the daemon, environment cleared and unreadable.
        let chain = vec![
            ProcessFacts {
                marked: None,
                ..process(50, 10, "curl")
            },
            process(10, 1, "troupe-daemon"),
            process(1, 0, "init"),
        ];
        assert!(matches!(judge(&chain, 10), Lineage::Command(why) if why.contains("daemon")));

        // A command of an embedded run: its ancestor is a troupe process.
        let chain = vec![
            process(60, 55, "python3"),
            process(55, 1, "troupe"),
            process(1, 0, "init"),
        ];
        assert!(matches!(judge(&chain, 10), Lineage::Command(_)));
        // The peer itself may be named troupe (a client): that alone is no mark.
        assert_eq!(judge(&chain[1..], 10), Lineage::Unrelated);
    }

    #[test]
    fn proc_texts_are_parsed() {
        assert_eq!(
            parse_stat_parent("123 (a) b) c) S 77 123 123 0 -1"),
            Some((77, "a) b) c".to_owned()))
        );
        assert_eq!(parse_stat_parent("garbage"), None);
        assert_eq!(
            parse_cgroup("12:pids:/x\n0::/user.slice/troupe-1-2\n"),
            Some("/user.slice/troupe-1-2".to_owned())
        );
        assert_eq!(parse_cgroup("1:name=systemd:/\n"), None);
        assert!(environ_marked(b"PATH=/bin\0TROUPE_COMMAND=42\0"));
        assert!(!environ_marked(b"PATH=/bin\0XTROUPE_COMMAND=42\0"));
    }

    #[test]
    fn this_process_and_a_marked_child_are_told_apart() {
        let me = i32::try_from(std::process::id()).unwrap();
        assert_eq!(lineage_of(me, -1), Some(Lineage::Unrelated));
        // The child says it runs once its program (and so its environment)
        // is in place: a process caught in the middle of `exec` shows an
        // empty environment.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "echo ready; read line"])
            .env(COMMAND_VAR, "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut ready,
        )
        .unwrap();
        assert_eq!(ready, "ready\n");
        let pid = i32::try_from(child.id()).unwrap();
        let lineage = lineage_of(pid, -1);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(matches!(lineage, Some(Lineage::Command(_))), "{lineage:?}");
    }
}
