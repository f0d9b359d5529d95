//! What a line typed at the chat prompt means: a message for the agent, or
//! one of the slash commands; and the plan-mode switch of `/plan` and `/do`.

use troupe_protocol::permission::PermissionMode;
use troupe_tools::skills::commands::CommandSet;

use crate::rewind::RewindScope;

/// One line typed at the idle prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChatInput {
    /// Nothing to do (an empty line).
    Nothing,
    /// A message for the agent.
    Message(String),
    /// A slash command.
    Command(SlashCommand),
}

/// The chat's slash commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SlashCommand {
    /// `/help`: list the commands.
    Help,
    /// `/clear`: the next message starts a new session.
    Clear,
    /// `/sessions`: list recent sessions.
    Sessions,
    /// `/resume [ID]`: continue a stored session (without an id: list them).
    Resume(Option<String>),
    /// `/mode [MODE]`: show or set the permission mode of the next turns.
    Mode(Option<String>),
    /// `/model [ID]`: show or set the model of the next turns.
    Model(Option<String>),
    /// `/cost`: tokens and cost of this chat so far.
    Cost,
    /// `/tools`: the tools the agent is offered.
    Tools,
    /// `/agents`: the sub-agent roles the agent may start.
    Agents,
    /// `/compact`: summarise the conversation's older part now.
    Compact,
    /// `/rewind [N [conversation|code|both]]`: list the conversation's turns,
    /// or go back to the end of turn N.
    Rewind(Option<String>),
    /// `/undo [redo]`: the files back to before the last turn that changed
    /// them (or forward again).
    Undo(Option<String>),
    /// `/skills`: the skills the agent may load.
    Skills,
    /// `/steps`: the agents' task plans (their `update_plan` steps).
    Steps,
    /// `/plan [TASK]`: plan mode from the next message on (and send TASK).
    Plan(Option<String>),
    /// `/do [NOTE]`: back to the mode before `/plan`, and carry out the plan.
    Do(Option<String>),
    /// `/memory [NOTE]`: show the project memory, or add a note to it.
    Memory(Option<String>),
    /// `/mcp`: the MCP servers, their state, tools and last error.
    Mcp,
    /// `/exit`: leave the chat.
    Exit,
    /// A command that does not exist.
    Unknown(String),
}

/// The commands with their one-line help, in the order `/help` lists them.
pub(crate) const COMMANDS: &[(&str, &str)] = &[
    ("/help", "list these commands"),
    ("/clear", "start a new conversation (a new session)"),
    ("/sessions", "list recent sessions"),
    (
        "/resume ID",
        "continue a stored session (an id or a unique prefix)",
    ),
    (
        "/mode [MODE]",
        "show or set the mode: default, accept-edits, plan, bypass",
    ),
    ("/model [ID]", "show or set the model of the next turns"),
    ("/cost", "tokens and cost of this chat"),
    ("/tools", "the tools the agent is offered"),
    ("/agents", "the sub-agent roles it may start"),
    (
        "/compact",
        "summarise the older part of this conversation now",
    ),
    (
        "/rewind [N]",
        "list the turns, or go back to the end of turn N (conversation and files)",
    ),
    (
        "/undo [redo]",
        "the files back to before the last turn that changed them (redo: forward again)",
    ),
    ("/skills", "the skills the agent may load"),
    (
        "/steps",
        "the agents' task plans (✔ done, ◼ doing, ◻ to do)",
    ),
    (
        "/plan [TASK]",
        "plan mode: read-only tools, the agent plans (and gets TASK)",
    ),
    (
        "/do [NOTE]",
        "leave plan mode for the mode before it and carry out the plan",
    ),
    (
        "/memory [NOTE]",
        "show the project memory (.troupe/memory.md), or add a note",
    ),
    ("/mcp", "the MCP servers: state, tools, last error"),
    ("/exit", "leave (Ctrl-C or Ctrl-D at the prompt too)"),
];

/// Reads one line typed at the prompt. A line starting with `/` is a
/// command (`//` sends the rest, starting with `/`, as a message); anything
/// else that is not blank is a message, kept as typed.
pub(crate) fn parse(line: &str) -> ChatInput {
    let trimmed = line.trim();
    if trimmed.is_empty() {
        return ChatInput::Nothing;
    }
    if let Some(literal) = trimmed.strip_prefix("//") {
        return ChatInput::Message(format!("/{literal}"));
    }
    let Some(command) = trimmed.strip_prefix('/') else {
        return ChatInput::Message(line.trim_end().to_string());
    };
    let (name, rest) = match command.split_once(char::is_whitespace) {
        Some((name, rest)) => (name, Some(rest.trim().to_string())),
        None => (command, None),
    };
    let argument = rest.filter(|rest| !rest.is_empty());
    ChatInput::Command(match name.to_ascii_lowercase().as_str() {
        "help" | "?" => SlashCommand::Help,
        "clear" | "new" => SlashCommand::Clear,
        "sessions" => SlashCommand::Sessions,
        "resume" => SlashCommand::Resume(argument),
        "mode" => SlashCommand::Mode(argument),
        "model" => SlashCommand::Model(argument),
        "cost" => SlashCommand::Cost,
        "tools" => SlashCommand::Tools,
        "agents" => SlashCommand::Agents,
        "compact" => SlashCommand::Compact,
        "rewind" => SlashCommand::Rewind(argument),
        "undo" => SlashCommand::Undo(argument),
        "skills" => SlashCommand::Skills,
        "steps" => SlashCommand::Steps,
        "plan" => SlashCommand::Plan(argument),
        "do" => SlashCommand::Do(argument),
        "memory" => SlashCommand::Memory(argument),
        "mcp" => SlashCommand::Mcp,
        "exit" | "quit" => SlashCommand::Exit,
        _ => SlashCommand::Unknown(format!("/{name}")),
    })
}

/// What `/rewind N [conversation|code|both]` asks for: the turn and what
/// goes back (both when not said), or why the argument is not understood.
pub(crate) fn rewind_target(argument: &str) -> Result<(u64, RewindScope), String> {
    let mut words = argument.split_whitespace();
    let usage = || {
        format!(
            "/rewind takes a turn number and, optionally, conversation, code or both (not {argument:?})"
        )
    };
    let to = words
        .next()
        .and_then(|word| word.parse::<u64>().ok())
        .ok_or_else(usage)?;
    let scope = match words.next().map(str::to_ascii_lowercase).as_deref() {
        None | Some("both") => RewindScope::from_flags(false, false),
        Some("conversation") => RewindScope::from_flags(false, true),
        Some("code") => RewindScope::from_flags(true, false),
        Some(_) => return Err(usage()),
    };
    if words.next().is_some() {
        return Err(usage());
    }
    Ok((to, scope))
}

/// The message `/do` sends: carry out the plan, then what was typed after
/// `/do`, if anything.
pub(crate) fn do_message(note: Option<&str>) -> String {
    const CARRY_OUT: &str = "Carry out the plan you made above, step by step.";
    match note.map(str::trim).filter(|note| !note.is_empty()) {
        Some(note) => format!("{CARRY_OUT}\n\n{note}"),
        None => CARRY_OUT.to_string(),
    }
}

/// `/memory`'s text: the memory file at `path` and its content (`None`: no
/// file, or a blank one).
pub(crate) fn memory_text(path: &std::path::Path, memory: Option<&str>) -> String {
    match memory {
        Some(memory) => format!(
            "Project memory ({}; new sessions start with it, this conversation keeps the \
             memory it started with):\n{}",
            path.display(),
            memory.trim_end()
        ),
        None => format!(
            "No project memory yet ({}). /memory NOTE adds a note; so does the agent's \
             remember tool when you ask it to remember something.",
            path.display()
        ),
    }
}

/// The mode `/do` returns to: the one in force when `/plan` was typed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct PlanSwitch {
    before: Option<PermissionMode>,
}

impl PlanSwitch {
    /// `/plan` typed in mode `current`: false when already planning (the
    /// mode to return to stays the one kept first).
    pub(crate) fn enter(&mut self, current: PermissionMode) -> bool {
        if current == PermissionMode::Plan {
            return false;
        }
        self.before = Some(current);
        true
    }

    /// `/do` typed in mode `current`: the mode to return to, or `None` when
    /// not planning. Plan mode that did not start with `/plan` (a flag or the
    /// configuration) returns to the default mode.
    pub(crate) fn leave(&mut self, current: PermissionMode) -> Option<PermissionMode> {
        if current != PermissionMode::Plan {
            self.before = None;
            return None;
        }
        Some(self.before.take().unwrap_or(PermissionMode::Default))
    }

    /// `/mode` chose a mode: nothing to return to any more.
    pub(crate) fn forget(&mut self) {
        self.before = None;
    }
}

/// `/help`'s text.
pub(crate) fn help_text() -> String {
    let width = COMMANDS
        .iter()
        .map(|(name, _)| name.len())
        .max()
        .unwrap_or(0);
    let mut text = String::from("Commands:\n");
    for (name, help) in COMMANDS {
        text.push_str(&format!("  {name:width$}  {help}\n"));
    }
    text.push_str(
        "While the agent works: type to queue a message for its next step (Enter sends it), \
         Esc or Ctrl-C cancels the turn.",
    );
    text
}

/// True when `/name` is a built-in command (custom commands never shadow one).
pub(crate) fn is_builtin(name: &str) -> bool {
    !matches!(
        parse(&format!("/{name}")),
        ChatInput::Command(SlashCommand::Unknown(_))
    )
}

/// The name and arguments of a line typed as `/NAME ARGS`, for a custom
/// command; `None` for messages and `//` lines.
pub(crate) fn invocation(line: &str) -> Option<(&str, &str)> {
    let trimmed = line.trim();
    if trimmed.starts_with("//") {
        return None;
    }
    let command = trimmed.strip_prefix('/')?;
    Some(match command.split_once(char::is_whitespace) {
        Some((name, rest)) => (name, rest.trim()),
        None => (command, ""),
    })
}

/// The custom commands section of `/help` (nothing without custom commands).
pub(crate) fn custom_help(commands: &CommandSet) -> String {
    if commands.is_empty() {
        return String::new();
    }
    let mut text = String::from("Custom commands (sent as a message; ARGS replace $ARGUMENTS):\n");
    for command in commands.iter() {
        let name = format!("/{} [ARGS]", command.name);
        let from = command.path.display();
        if command.description.is_empty() {
            text.push_str(&format!("  {name}  ({from})\n"));
        } else {
            text.push_str(&format!("  {name}  {} ({from})\n", command.description));
        }
    }
    text.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(line: &str) -> SlashCommand {
        match parse(line) {
            ChatInput::Command(command) => command,
            other => panic!("{line:?} gave {other:?}"),
        }
    }

    #[test]
    fn compact_is_a_command_listed_in_the_help() {
        assert_eq!(command("/compact"), SlashCommand::Compact);
        assert_eq!(command("/COMPACT"), SlashCommand::Compact);
        assert!(help_text().contains("/compact"));
    }

    #[test]
    fn rewind_is_a_command_listed_in_the_help_with_its_turn_and_scope() {
        assert_eq!(command("/rewind"), SlashCommand::Rewind(None));
        assert_eq!(command("/undo"), SlashCommand::Undo(None));
        assert_eq!(
            command("/undo redo"),
            SlashCommand::Undo(Some("redo".into()))
        );
        assert_eq!(
            command("/rewind 2 conversation"),
            SlashCommand::Rewind(Some("2 conversation".into()))
        );
        assert!(help_text().contains("/rewind [N]"));
        let both = RewindScope::from_flags(false, false);
        assert_eq!(rewind_target("2"), Ok((2, both)));
        assert_eq!(
            rewind_target("1 Conversation"),
            Ok((1, RewindScope::from_flags(false, true)))
        );
        assert_eq!(
            rewind_target("3 code"),
            Ok((3, RewindScope::from_flags(true, false)))
        );
        for bad in ["two", "-1", "1 files", "1 code extra", ""] {
            assert!(rewind_target(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn skills_is_a_command_listed_in_the_help() {
        assert_eq!(command("/skills"), SlashCommand::Skills);
        assert_eq!(command("/steps"), SlashCommand::Steps);
        assert!(help_text().contains("/skills"));
    }

    #[test]
    fn plan_and_do_are_commands_listed_in_the_help() {
        assert_eq!(command("/plan"), SlashCommand::Plan(None));
        assert_eq!(
            command("/plan  split lib.rs "),
            SlashCommand::Plan(Some("split lib.rs".into()))
        );
        assert_eq!(command("/do"), SlashCommand::Do(None));
        assert_eq!(
            command("/DO skip step 3"),
            SlashCommand::Do(Some("skip step 3".into()))
        );
        let help = help_text();
        assert!(help.contains("/plan [TASK]") && help.contains("/do [NOTE]"));
        assert!(is_builtin("plan") && is_builtin("do"));
    }

    #[test]
    fn memory_and_mcp_are_commands_listed_in_the_help() {
        assert_eq!(command("/memory"), SlashCommand::Memory(None));
        assert_eq!(
            command("/memory use pnpm "),
            SlashCommand::Memory(Some("use pnpm".into()))
        );
        assert_eq!(command("/mcp"), SlashCommand::Mcp);
        let help = help_text();
        assert!(help.contains("/memory [NOTE]") && help.contains("/mcp "));
        let path = std::path::Path::new("/p/.troupe/memory.md");
        assert!(
            memory_text(path, None).starts_with("No project memory yet (/p/.troupe/memory.md)")
        );
        assert!(memory_text(path, Some("- a\n")).ends_with("started with):\n- a"));
    }

    #[test]
    fn do_returns_to_the_mode_before_plan() {
        let mut switch = PlanSwitch::default();
        assert!(switch.enter(PermissionMode::AcceptEdits));
        // A second /plan keeps the mode to return to.
        assert!(!switch.enter(PermissionMode::Plan));
        assert_eq!(
            switch.leave(PermissionMode::Plan),
            Some(PermissionMode::AcceptEdits)
        );
        // Not planning: nothing to do.
        assert_eq!(switch.leave(PermissionMode::AcceptEdits), None);
        // Plan mode from a flag or the configuration returns to default.
        assert_eq!(
            switch.leave(PermissionMode::Plan),
            Some(PermissionMode::Default)
        );
        // /mode in between forgets the mode before /plan.
        assert!(switch.enter(PermissionMode::Bypass));
        switch.forget();
        assert_eq!(
            switch.leave(PermissionMode::Plan),
            Some(PermissionMode::Default)
        );
    }

    #[test]
    fn the_do_message_carries_the_note() {
        assert_eq!(
            do_message(None),
            "Carry out the plan you made above, step by step."
        );
        assert_eq!(do_message(Some("  ")), do_message(None));
        assert_eq!(
            do_message(Some("skip step 3")),
            "Carry out the plan you made above, step by step.\n\nskip step 3"
        );
    }

    #[test]
    fn custom_command_invocations() {
        assert_eq!(
            invocation("/review  src/lib.rs  now "),
            Some(("review", "src/lib.rs  now"))
        );
        assert_eq!(invocation(" /review"), Some(("review", "")));
        assert_eq!(invocation("//review"), None);
        assert_eq!(invocation("review"), None);
        for builtin in ["help", "HELP", "quit", "skills", "compact", "tools"] {
            assert!(is_builtin(builtin), "{builtin}");
        }
        assert!(!is_builtin("review"));
    }

    #[test]
    fn custom_commands_are_listed_with_their_description() {
        assert_eq!(custom_help(&CommandSet::default()), "");
        let dir = tempfile::tempdir().unwrap();
        let commands = dir.path().join(".troupe/commands");
        std::fs::create_dir_all(&commands).unwrap();
        std::fs::write(
            commands.join("review.md"),
            "---\ndescription: Review a file\n---\nR",
        )
        .unwrap();
        std::fs::write(commands.join("fix.md"), "Fix $ARGUMENTS").unwrap();
        let (set, _) = CommandSet::load(None, dir.path());
        let help = custom_help(&set);
        let lines: Vec<&str> = help.lines().collect();
        assert!(lines[0].starts_with("Custom commands"));
        assert!(lines[1].starts_with("  /fix [ARGS]  ("), "{help}");
        assert!(
            lines[2].starts_with("  /review [ARGS]  Review a file ("),
            "{help}"
        );
    }

    #[test]
    fn messages_are_kept_as_typed() {
        assert_eq!(parse("   "), ChatInput::Nothing);
        assert_eq!(parse(""), ChatInput::Nothing);
        assert_eq!(
            parse("  fix the *bug*  \n"),
            ChatInput::Message("  fix the *bug*".into())
        );
        assert_eq!(
            parse("//etc/hosts is odd"),
            ChatInput::Message("/etc/hosts is odd".into())
        );
    }

    #[test]
    fn commands_and_their_arguments() {
        assert_eq!(command("/help"), SlashCommand::Help);
        assert_eq!(command(" /HELP "), SlashCommand::Help);
        assert_eq!(command("/clear"), SlashCommand::Clear);
        assert_eq!(command("/sessions"), SlashCommand::Sessions);
        assert_eq!(command("/resume"), SlashCommand::Resume(None));
        assert_eq!(
            command("/resume  0193ab "),
            SlashCommand::Resume(Some("0193ab".into()))
        );
        assert_eq!(command("/mode"), SlashCommand::Mode(None));
        assert_eq!(
            command("/mode plan"),
            SlashCommand::Mode(Some("plan".into()))
        );
        assert_eq!(
            command("/model claude-x"),
            SlashCommand::Model(Some("claude-x".into()))
        );
        assert_eq!(command("/cost"), SlashCommand::Cost);
        assert_eq!(command("/tools"), SlashCommand::Tools);
        assert_eq!(command("/agents"), SlashCommand::Agents);
        assert_eq!(command("/exit"), SlashCommand::Exit);
        assert_eq!(command("/quit"), SlashCommand::Exit);
        assert_eq!(
            command("/frobnicate x"),
            SlashCommand::Unknown("/frobnicate".into())
        );
    }

    #[test]
    fn help_names_every_command() {
        let help = help_text();
        for name in [
            "/help",
            "/clear",
            "/sessions",
            "/resume",
            "/mode",
            "/model",
            "/cost",
            "/tools",
            "/agents",
            "/exit",
        ] {
            assert!(help.contains(name), "{name}");
        }
    }
}
