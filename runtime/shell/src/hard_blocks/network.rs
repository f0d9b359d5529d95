//! The network: downloads executed by a shell or interpreter (piped,
//! substituted or fed through a descriptor), and the netcat family and
//! `socat` running a program on what a connection sends.

use super::*;

/// The netcat family.
pub(super) fn netcat(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    walker.netcat_exec(call.program, call.args);
    None
}

/// True for a program of the netcat family.
pub(super) fn is_netcat(program: &str) -> bool {
    NETCATS.contains(&program)
}

/// `socat`.
pub(super) fn socat(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    walker.socat_exec(call.args);
    None
}

/// Programs that fetch content from the network (the netcat family and
/// `socat` print what a connection sends them, as `curl` prints a page).
pub(super) const DOWNLOADERS: &[&str] = &[
    "curl",
    "wget",
    "fetch",
    "aria2c",
    "http",
    "https",
    "lwp-request",
    "nc",
    "ncat",
    "netcat",
    "nc.openbsd",
    "nc.traditional",
    "socat",
    "telnet",
];

/// Programs of the netcat family, which can also run a program connected to
/// the network (`nc -e /bin/sh`, `ncat -c CMD`).
pub(super) const NETCATS: &[&str] = &["nc", "ncat", "netcat", "nc.openbsd", "nc.traditional"];

/// `socat` address types that reach the network.
pub(super) const SOCAT_NETWORK_ADDRESSES: &[&str] = &[
    "tcp", "udp", "openssl", "ssl", "sctp", "socks", "proxy", "vsock", "dccp", "ip-", "ip4-",
    "ip6-", "udplite",
];

/// The descriptor that stands for any a variable names (`exec {fd}<>…`,
/// `<&$fd`).
pub(super) const NAMED_FD: u32 = u32::MAX;

/// `{name}` before a redirection: the shell stores the descriptor it opens
/// in `$name`.
pub(super) fn is_named_descriptor(word: &str) -> bool {
    word.strip_prefix('{')
        .and_then(|w| w.strip_suffix('}'))
        .is_some_and(|name| !name.is_empty() && is_assignment(&format!("{name}=")))
}

/// Bash opens a connection for a redirection to or from these paths.
pub(super) fn is_network_path(raw: &str) -> bool {
    raw.starts_with("/dev/tcp/") || raw.starts_with("/dev/udp/")
}

/// The descriptors connected to the network after a command's redirections,
/// starting from `open` (those an earlier `exec` connected): `< /dev/tcp/…`,
/// `3<>/dev/tcp/…`, `<&3`, `>& /dev/tcp/… 0>&1`.
pub(super) fn network_descriptors(redirects: &[Redirect], open: &[u32]) -> Vec<u32> {
    fn set(network: &mut Vec<u32>, fd: u32, on: bool) {
        network.retain(|f| *f != fd);
        if on {
            network.push(fd);
        }
    }
    let mut network = open.to_vec();
    for redirect in redirects {
        let target = redirect.target.value.as_str();
        let to_network = is_network_path(target);
        match redirect.op {
            RedirOp::In | RedirOp::InOut => set(&mut network, redirect.fd.unwrap_or(0), to_network),
            RedirOp::Out | RedirOp::Append | RedirOp::Clobber => {
                set(&mut network, redirect.fd.unwrap_or(1), to_network);
            }
            RedirOp::OutErr | RedirOp::AppendErr => {
                set(&mut network, 1, to_network);
                set(&mut network, 2, to_network);
            }
            RedirOp::HereDoc | RedirOp::HereString => {
                set(&mut network, redirect.fd.unwrap_or(0), false);
            }
            RedirOp::DupIn | RedirOp::DupOut => {
                let default = if redirect.op == RedirOp::DupIn { 0 } else { 1 };
                let fd = redirect.fd.unwrap_or(default);
                if let Ok(source) = target.trim_end_matches('-').parse::<u32>() {
                    let from = network.contains(&source);
                    set(&mut network, fd, from);
                } else if target.starts_with('$') {
                    let from = network.contains(&NAMED_FD);
                    set(&mut network, fd, from);
                } else if redirect.op == RedirOp::DupOut && redirect.fd.is_none() && target != "-" {
                    // `>& FILE` is `&> FILE`.
                    set(&mut network, 1, to_network);
                    set(&mut network, 2, to_network);
                } else {
                    set(&mut network, fd, false);
                }
            }
        }
    }
    network
}

pub(super) fn simple_downloads(simple: &SimpleCommand, depth: usize) -> bool {
    let (program, args) = program_of(simple);
    DOWNLOADERS.contains(&program)
        || (program == "openssl" && args.iter().any(|a| a.value == "s_client"))
        || network_descriptors(&simple.redirects, &[]).contains(&0)
        || simple
            .words
            .iter()
            .flat_map(|w| &w.subs)
            .any(|sub| source_downloads(&sub.source, depth + 1))
}

pub(super) fn script_downloads(script: &Script, depth: usize) -> bool {
    simple_commands(script)
        .into_iter()
        .any(|simple| simple_downloads(simple, depth))
}

/// True when shell source runs a download program anywhere.
pub(super) fn source_downloads(source: &str, depth: usize) -> bool {
    if depth > MAX_COMMAND_NESTING {
        // Too deep to look into: assume the worst for a source that reaches
        // into a shell.
        return true;
    }
    script_downloads(&syntax::parse(source), depth)
}

impl Walker<'_, '_> {
    /// Blocks a shell, interpreter, `eval` or `source` whose arguments contain a
    /// substitution that downloads (`bash <(curl …)`, `sh -c "$(curl …)"`).
    pub(super) fn downloaded_code(&mut self, program: &str, args: &[Word], depth: usize) {
        let downloads = args
            .iter()
            .flat_map(|w| &w.subs)
            .any(|sub| source_downloads(&sub.source, depth + 1));
        if downloads {
            self.block(
                HardBlockKind::PipeToShell,
                &format!(
                    "`{program}` would execute content fetched from the network; download the script, read it, then run it"
                ),
            );
        }
    }

    /// True when a command prints what it fetched from the network: a
    /// download program, or a command reading a connection an earlier `exec`
    /// opened (`exec 3<>/dev/tcp/…; cat <&3`).
    pub(super) fn downloads(&self, command: &Command, depth: usize, piped: bool) -> bool {
        match command {
            Command::Simple(simple) => {
                let inherited: Vec<u32> = self
                    .network_fds
                    .iter()
                    .copied()
                    .filter(|fd| !(piped && *fd == 0))
                    .collect();
                simple_downloads(simple, depth)
                    || network_descriptors(&simple.redirects, &inherited).contains(&0)
            }
            Command::Subshell(script) | Command::Group(script) => script_downloads(script, depth),
            Command::Function { .. } => false,
        }
    }

    /// `nc -e /bin/sh`, `ncat -c 'bash -i'`, `ncat --sh-exec …`: a shell run
    /// on what a network connection sends.
    pub(super) fn netcat_exec(&mut self, program: &str, args: &[Word]) {
        let mut i = 0;
        while let Some(arg) = args.get(i) {
            let value = arg.value.as_str();
            let next = || args.get(i + 1).map(|w| w.value.as_str());
            let command = match value {
                "-e" | "--exec" | "-c" | "--sh-exec" => next(),
                _ => value
                    .strip_prefix("--exec=")
                    .or_else(|| value.strip_prefix("--sh-exec="))
                    .or_else(|| {
                        value
                            .strip_prefix("-e")
                            .filter(|rest| !rest.is_empty() && !value.starts_with("--"))
                    }),
            };
            if let Some(command) = command
                && text_executes_stdin(command)
            {
                self.block(
                    HardBlockKind::PipeToShell,
                    &format!(
                        "`{program} {value}` runs `{command}` on what the network connection sends; download the script, read it, then run it"
                    ),
                );
                return;
            }
            i += 1;
        }
    }

    /// `socat TCP:host:80 EXEC:sh`: a shell run on what a network connection
    /// sends.
    pub(super) fn socat_exec(&mut self, args: &[Word]) {
        let addresses: Vec<&str> = args
            .iter()
            .map(|w| w.value.as_str())
            .filter(|v| !v.starts_with('-') || v.len() == 1)
            .collect();
        let network = addresses.iter().any(|a| {
            let lower = a.to_ascii_lowercase();
            SOCAT_NETWORK_ADDRESSES
                .iter()
                .any(|kind| lower.starts_with(kind))
        });
        if !network {
            return;
        }
        for address in &addresses {
            let Some((kind, rest)) = address.split_once(':') else {
                continue;
            };
            if !matches!(kind.to_ascii_lowercase().as_str(), "exec" | "system") {
                continue;
            }
            let command = rest.split(',').next().unwrap_or(rest);
            if text_executes_stdin(command) {
                self.block(
                    HardBlockKind::PipeToShell,
                    &format!(
                        "`socat` with `{address}` runs `{command}` on what the network connection sends; download the script, read it, then run it"
                    ),
                );
                return;
            }
        }
    }
}
