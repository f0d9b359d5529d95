//! Power: `shutdown`, `reboot`, `halt`, `poweroff`, `init`/`telinit` to
//! run level 0 or 6, `systemctl` power verbs and targets, `kexec -e`.

use super::*;

/// `shutdown`, `reboot`, `halt`, `poweroff`.
pub(super) fn program(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    walker.power_off(&format!("`{}`", call.program));
    None
}

/// True for `shutdown`, `reboot`, `halt`, `poweroff`.
pub(super) fn is_power_program(program: &str) -> bool {
    POWER_PROGRAMS.contains(&program)
}

/// `init` and `telinit` to run level 0 or 6.
pub(super) fn runlevel(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    if call
        .args
        .iter()
        .any(|a| POWER_RUNLEVELS.contains(&a.value.as_str()))
    {
        walker.power_off(&format!("`{}` to run level 0 or 6", call.program));
    }
    None
}

/// `systemctl` power verbs and targets.
pub(super) fn systemctl(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    let args = call.args;
    if let Some(verb) = args
        .iter()
        .find(|a| POWER_VERBS.contains(&a.value.as_str()))
    {
        walker.power_off(&format!("`systemctl {}`", verb.value));
    } else if let Some(target) = args
        .iter()
        .any(|a| matches!(a.value.as_str(), "isolate" | "start" | "restart"))
        .then(|| {
            args.iter().find(|a| {
                POWER_VERBS
                    .iter()
                    .any(|verb| a.value == format!("{verb}.target"))
                    || a.value == "rescue.target"
                    || a.value == "emergency.target"
            })
        })
        .flatten()
    {
        walker.power_off(&format!("`systemctl` to `{}`", target.value));
    }
    None
}

/// `kexec -e`.
pub(super) fn kexec(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    if call
        .args
        .iter()
        .any(|a| matches!(a.value.as_str(), "-e" | "--exec"))
    {
        walker.power_off("`kexec -e`");
    }
    None
}

/// Programs that power the machine off or restart it.
pub(super) const POWER_PROGRAMS: &[&str] = &["shutdown", "reboot", "halt", "poweroff"];

/// `systemctl` verbs that power the machine off or restart it.
pub(super) const POWER_VERBS: &[&str] = &["poweroff", "reboot", "halt", "kexec", "soft-reboot"];

/// Writing a letter here makes the kernel reboot, crash or kill everything.
pub(super) const SYSRQ_TRIGGER: &str = "/proc/sysrq-trigger";

/// `init`/`telinit` run levels that halt (0) or reboot (6).
pub(super) const POWER_RUNLEVELS: &[&str] = &["0", "6"];

impl Walker<'_, '_> {
    pub(super) fn power_off(&mut self, what: &str) {
        self.block(
            HardBlockKind::PowerOff,
            &format!("{what} would shut down or restart the machine"),
        );
    }
}
