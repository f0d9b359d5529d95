//! `troupe chat`: the interactive terminal session. Each message is a turn —
//! a run on the chat's session, in the daemon or (with `--no-daemon`) in
//! this process — shown as it streams (the answer rendered as Markdown, a
//! spinner with the step and tokens, one line per tool call, sub-agents
//! labelled by path), with approvals asked in place. Esc or Ctrl-C cancels a
//! turn; Ctrl-C or Ctrl-D at the prompt leaves. Text typed while a turn runs
//! is queued for the agent's next model call, or sent as the next message
//! when the turn ends first. Lines are edited with the usual keys and kept in
//! a history file in the data directory.

pub(crate) mod backend;
pub(crate) mod command;
pub(crate) mod keys;
pub(crate) mod markdown;
pub(crate) mod screen;
pub(crate) mod turn;
pub(crate) mod view;

use std::io::IsTerminal;
use std::path::PathBuf;

use rustyline::error::ReadlineError;
use rustyline::history::FileHistory;
use rustyline::{Config as EditorConfig, Editor};
use troupe_agent::agent_tool::agent_tool_definition;
use troupe_agent::catalogue::ToolCatalogue;
use troupe_agent::roles::RoleTools;
use troupe_config::TrustStore;
use troupe_protocol::api::View;
use troupe_protocol::events::RunStatus;
use troupe_protocol::model::Usage;
use troupe_protocol::permission::PermissionMode;
use troupe_tools::skills::commands::CommandSet;
use troupe_tools::skills::{SkillSet, SkillWarning};

use self::backend::{Backend, ChatError};
use self::command::{ChatInput, SlashCommand, help_text};
use self::screen::Screen;
use crate::project::{Locations, RunOptions, configured, trust_question};
use crate::sanitize::for_terminal;
use crate::signals::StopSignals;
use crate::task_plan_view::TaskPlans;
use crate::{ChatArgs, EXIT_RUNTIME, EXIT_USAGE, RunFlags};

/// The line history file in the data directory.
pub(crate) const HISTORY_FILE: &str = "chat_history";

/// Lines kept in the history file.
const HISTORY_LINES: usize = 2_000;

/// The chat's state between turns.
struct Chat {
    backend: Backend,
    /// The session the next turn continues (`None`: a new one).
    session: Option<String>,
    /// How turns are set up (`/mode` and `/model` change it).
    flags: RunFlags,
    locations: Locations,
    /// Tokens of this chat's turns.
    usage: Usage,
    /// What was typed but not sent as the last turn ended.
    typed_ahead: String,
    turns: u32,
    color: bool,
    /// The mode `/do` returns to.
    plan: command::PlanSwitch,
    /// The agents' task plans as this chat's turns showed them (`/steps`).
    task_plans: TaskPlans,
}

/// Runs `troupe chat`; returns the exit code.
pub(crate) async fn chat(args: ChatArgs, color: bool) -> u8 {
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        eprintln!(
            "troupe: `troupe chat` needs a terminal; for scripts use `troupe run PROMPT` (or `-` to read it from stdin)"
        );
        return EXIT_USAGE;
    }
    let locations = match Locations::from_process() {
        Ok(locations) => locations,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    // A continued session keeps its own directory unless --cwd moves it.
    if (args.session.is_none() && !args.continue_last) || args.cwd.is_some() {
        match crate::root_guard::check_project_dir(
            &locations,
            args.cwd.as_deref(),
            args.confirm_cwd,
        )
        .await
        {
            Ok(warnings) => {
                for warning in warnings {
                    eprintln!("troupe: {}", for_terminal(&warning));
                }
            }
            Err(err) => {
                eprintln!("troupe: {}", for_terminal(&err.message));
                return err.code;
            }
        }
    }
    let Some(mut signals) = StopSignals::listen_or_report() else {
        return EXIT_RUNTIME;
    };
    let backend = match Backend::open(&locations, args.no_daemon).await {
        Ok(backend) => backend,
        Err(err) => {
            eprintln!("troupe: {}", err.message);
            return err.code;
        }
    };
    let mut chat = Chat {
        backend,
        session: None,
        flags: RunFlags {
            provider: args.provider,
            model: args.model,
            mode: args.mode,
            cwd: args.cwd,
            repository: None,
            revision: None,
            confirm_cwd: args.confirm_cwd,
            json: false,
            max_turns: args.max_turns,
            budget_tokens: args.budget_tokens,
            timeout: args.timeout,
            no_daemon: args.no_daemon,
            detach: false,
        },
        locations,
        usage: Usage::default(),
        typed_ahead: String::new(),
        turns: 0,
        color,
        plan: command::PlanSwitch::default(),
        task_plans: TaskPlans::default(),
    };
    if let Some(id) = args.session {
        chat.resume(&id).await;
    } else if args.continue_last {
        let root = crate::sessions::project_of(&chat.project_dir());
        let rendered = chat
            .backend
            .view(crate::sessions::latest_session_view(root.clone()))
            .await;
        match crate::sessions::latest_session_id(&rendered, &root) {
            Ok(id) => chat.resume(&id).await,
            Err((code, message)) => {
                eprintln!("troupe: {message}");
                chat.backend.close().await;
                return code;
            }
        }
    }
    let history = chat.locations.data_dir.join(HISTORY_FILE);
    let mut editor = match line_editor(&history) {
        Ok(editor) => editor,
        Err(err) => {
            eprintln!("troupe: the line editor cannot start: {err}");
            chat.backend.close().await;
            return EXIT_RUNTIME;
        }
    };
    eprintln!("{}", chat.banner());
    let asked = chat.ask_trust(editor).await;
    editor = match asked {
        Some(editor) => editor,
        None => {
            chat.backend.close().await;
            return 0;
        }
    };
    for warning in chat.custom_commands().1 {
        eprintln!(
            "troupe: custom command ignored: {}",
            for_terminal(&warning.to_string())
        );
    }
    let mut code = 0;
    loop {
        let prompt = chat.prompt();
        let initial = std::mem::take(&mut chat.typed_ahead);
        let read = tokio::task::spawn_blocking(move || {
            let line = editor.readline_with_initial(&prompt, (&initial, ""));
            (editor, line)
        });
        let (returned, line) = tokio::select! {
            read = read => match read {
                Ok(read) => read,
                Err(err) => {
                    eprintln!("troupe: the line editor failed: {err}");
                    code = EXIT_RUNTIME;
                    break;
                }
            },
            signal = signals.recv() => {
                code = signal.exit_code();
                break;
            }
        };
        editor = returned;
        let line = match line {
            Ok(line) => line,
            Err(ReadlineError::Interrupted | ReadlineError::Eof) => break,
            Err(err) => {
                eprintln!("troupe: reading the line failed: {err}");
                code = EXIT_RUNTIME;
                break;
            }
        };
        if !line.trim().is_empty() {
            let _ = editor.add_history_entry(line.as_str());
            if let Err(err) = editor.append_history(&history) {
                tracing::debug!(%err, "the chat history was not saved");
            }
        }
        match command::parse(&line) {
            ChatInput::Nothing => {}
            ChatInput::Message(message) => {
                if let Some(exit) = chat.converse(message, &mut signals).await {
                    code = exit;
                    break;
                }
            }
            ChatInput::Command(SlashCommand::Exit) => break,
            ChatInput::Command(SlashCommand::Plan(task)) => {
                chat.enter_plan();
                if let Some(task) = task
                    && let Some(exit) = chat.converse(task, &mut signals).await
                {
                    code = exit;
                    break;
                }
            }
            ChatInput::Command(SlashCommand::Do(note)) => {
                if let Some(message) = chat.leave_plan(note.as_deref())
                    && let Some(exit) = chat.converse(message, &mut signals).await
                {
                    code = exit;
                    break;
                }
            }
            ChatInput::Command(SlashCommand::Unknown(name)) => match chat.expand_custom(&line) {
                Some(message) => {
                    eprintln!(
                        "» {}",
                        for_terminal(&troupe_protocol::events::preview(&message))
                    );
                    if let Some(exit) = chat.converse(message, &mut signals).await {
                        code = exit;
                        break;
                    }
                }
                None => chat.command(SlashCommand::Unknown(name)).await,
            },
            ChatInput::Command(command) => chat.command(command).await,
        }
    }
    chat.backend.close().await;
    code
}

/// The chat's first lines: the model (and its provider), the mode and the
/// project, then the keys; with no usable provider, why, and that messages
/// cannot be answered until one is configured.
pub(crate) fn banner(
    provider: Result<(String, String), String>,
    mode: PermissionMode,
    project: &std::path::Path,
) -> String {
    let keys = "/help lists commands · Ctrl-L clears the screen · Ctrl-C or Ctrl-D leaves";
    let project = for_terminal(&project.display().to_string()).into_owned();
    match provider {
        Ok((model, name)) => format!(
            "troupe chat · model {} ({}) · mode {} · project {project}\n{keys}",
            for_terminal(&model),
            for_terminal(&name),
            mode.as_str()
        ),
        Err(why) => format!(
            "troupe chat · no model · mode {} · project {project}\ntroupe: {}\n\
             (messages cannot be answered until a provider is configured; /model and /help \
             still work)\n{keys}",
            mode.as_str(),
            for_terminal(&why)
        ),
    }
}

/// A line editor with the history of earlier chats.
fn line_editor(history: &PathBuf) -> rustyline::Result<Editor<(), FileHistory>> {
    let config = EditorConfig::builder()
        .max_history_size(HISTORY_LINES)?
        .auto_add_history(false)
        .build();
    let mut editor = Editor::with_config(config)?;
    if history.exists()
        && let Err(err) = editor.load_history(history)
    {
        eprintln!(
            "troupe: the chat history {} is unreadable: {err}",
            history.display()
        );
    }
    Ok(editor)
}

impl Chat {
    /// Asks once whether to trust the project when its configuration has
    /// settings that apply only to trusted projects; a yes records it as
    /// `troupe trust` does. Returns the editor, or `None` when the person
    /// left (Ctrl-C, Ctrl-D).
    async fn ask_trust(
        &self,
        mut editor: Editor<(), FileHistory>,
    ) -> Option<Editor<(), FileHistory>> {
        let question = match trust_question(&self.locations, &self.options()) {
            Ok(Some(question)) => question,
            Ok(None) => return Some(editor),
            Err(err) => {
                eprintln!("troupe: {err}");
                return Some(editor);
            }
        };
        eprintln!(
            "The project {} asks for settings and files that apply only in a project you \
             trust: {}.\nUntil then they are ignored (deny and ask rules always apply).",
            question.root.display(),
            question.listing()
        );
        let prompt = format!(
            "Trust {} (review its files first)? [y/N] ",
            question.root.display()
        );
        let (editor, answer) = tokio::task::spawn_blocking(move || {
            let answer = editor.readline(&prompt);
            (editor, answer)
        })
        .await
        .ok()?;
        match answer {
            Ok(answer) if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") => {
                match TrustStore::new(&self.locations.data_dir).set(&question.root, true) {
                    Ok(root) => eprintln!(
                        "(trusted {}; its settings apply from now on)",
                        root.display()
                    ),
                    Err(err) => eprintln!("troupe: {err}"),
                }
                Some(editor)
            }
            Ok(_) => {
                eprintln!(
                    "(not trusted; trust it later with `troupe trust {}`)",
                    question.root.display()
                );
                Some(editor)
            }
            Err(_) => None,
        }
    }

    /// What the chat says as it starts: the model, the mode and the project,
    /// and the keys; or, when no provider can be used, why (before anything
    /// is typed).
    fn banner(&self) -> String {
        let project = crate::sessions::project_of(&self.project_dir());
        let provider = self
            .configured()
            .map_err(|err| err.message)
            .and_then(|configured| configured.provider)
            .map(|provider| (provider.model, provider.name));
        banner(provider, self.mode(), &project)
    }

    /// The prompt: the mode when it is not the default.
    fn prompt(&self) -> String {
        match self.flags.mode {
            Some(mode) if mode != PermissionMode::Default => format!("[{}] › ", mode.as_str()),
            _ => "› ".to_string(),
        }
    }

    /// Runs `message` as a turn, then whatever was typed during it that the
    /// agent did not take. Returns an exit code when the chat must end.
    async fn converse(&mut self, message: String, signals: &mut StopSignals) -> Option<u8> {
        let mut next = Some(message);
        while let Some(message) = next.take() {
            let started = match self
                .backend
                .start_turn(&message, self.session.as_deref(), &self.flags)
                .await
            {
                Ok(started) => started,
                Err(ChatError { message, .. }) => {
                    eprintln!("troupe: {message}");
                    return None;
                }
            };
            for warning in &started.warnings {
                eprintln!("troupe: {}", crate::sanitize::for_terminal(warning));
            }
            if self.session.as_deref() != Some(started.session_id.as_str()) {
                eprintln!("(session {})", troupe_store::short_id(&started.session_id));
            }
            self.session = Some(started.session_id.clone());
            let mut link = started.link;
            let screen = Screen::new(self.color, false);
            let end = turn::follow_turn(
                &mut link,
                &screen,
                signals,
                &self.project_dir(),
                &mut self.task_plans,
            )
            .await;
            screen.close();
            self.usage.add(&end.usage);
            self.turns += 1;
            self.typed_ahead = end.typed;
            if let Some(signal) = end.signal {
                return Some(signal.exit_code());
            }
            if !end.unsent.is_empty() {
                let text = end.unsent.join("\n\n");
                if end.status == RunStatus::Cancelled {
                    eprintln!("(not sent, the turn was cancelled: {text})");
                } else {
                    eprintln!(
                        "» sending what you wrote: {}",
                        troupe_protocol::events::preview(&text)
                    );
                    next = Some(text);
                }
            }
        }
        None
    }

    /// The directory the conversation works in: `--cwd` (from the current
    /// directory) or the current directory.
    fn project_dir(&self) -> PathBuf {
        let current = std::env::current_dir().unwrap_or_default();
        match &self.flags.cwd {
            Some(dir) => current.join(dir),
            None => current,
        }
    }

    /// Continues session `id` (its id, short id, or a unique prefix of
    /// either) from the next turn on.
    async fn resume(&mut self, id: &str) {
        let rendered = self
            .backend
            .view(View::SessionShow { id: id.to_string() })
            .await;
        if rendered.code != 0 {
            eprint!("{}", rendered.stderr);
            return;
        }
        eprint!("{}", rendered.stdout);
        // The first line of `sessions show` is `session   FULL_ID`.
        let full = rendered
            .stdout
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("session "))
            .map(str::trim)
            .filter(|found| !found.is_empty())
            .unwrap_or(id);
        self.session = Some(full.to_string());
        eprintln!("(continuing session {})", troupe_store::short_id(full));
    }

    async fn command(&mut self, command: SlashCommand) {
        match command {
            SlashCommand::Help => {
                eprintln!("{}", help_text());
                let custom = command::custom_help(&self.custom_commands().0);
                if !custom.is_empty() {
                    // Descriptions come from the repository's files.
                    eprintln!("{}", for_terminal(&custom));
                }
            }
            SlashCommand::Skills => eprintln!("{}", for_terminal(&self.skills())),
            SlashCommand::Steps => eprintln!("{}", self.task_plans.summary()),
            SlashCommand::Memory(note) => eprintln!("{}", for_terminal(&self.memory(note))),
            SlashCommand::Mcp => {
                eprintln!("(starting the MCP servers to list them…)");
                let text = crate::mcp::servers_text(&self.locations, &self.options()).await;
                eprintln!("{}", for_terminal(&text));
            }
            SlashCommand::Clear => {
                self.session = None;
                eprintln!("(a new conversation starts with your next message)");
            }
            SlashCommand::Sessions | SlashCommand::Resume(None) => {
                let rendered = self
                    .backend
                    .view(View::SessionsList {
                        json: false,
                        project: None,
                        tree: true,
                        limit: None,
                    })
                    .await;
                eprint!("{}{}", rendered.stdout, rendered.stderr);
                eprintln!("(continue one with /resume ID)");
            }
            SlashCommand::Resume(Some(id)) => self.resume(&id).await,
            SlashCommand::Mode(None) => eprintln!("mode: {}", self.mode().as_str()),
            SlashCommand::Mode(Some(name)) => match PermissionMode::parse(&name) {
                Some(mode) => {
                    self.plan.forget();
                    self.flags.mode = Some(mode);
                    eprintln!("(mode {} from the next message on)", mode.as_str());
                }
                None => eprintln!("unknown mode {name:?}: default, accept-edits, plan or bypass"),
            },
            SlashCommand::Model(None) => match self.configured().map(|c| c.provider) {
                Ok(Ok(provider)) => eprintln!("model: {} ({})", provider.model, provider.name),
                Ok(Err(err)) | Err(ChatError { message: err, .. }) => eprintln!("{err}"),
            },
            SlashCommand::Model(Some(model)) => {
                eprintln!("(model {model} from the next message on)");
                self.flags.model = Some(model);
            }
            SlashCommand::Cost => eprintln!("{}", self.cost()),
            SlashCommand::Tools => match self.tools() {
                Ok(text) | Err(ChatError { message: text, .. }) => eprintln!("{text}"),
            },
            SlashCommand::Agents => match self.configured() {
                Ok(configured) => {
                    eprintln!("Sub-agent roles (the `agent` tool starts them):");
                    for role in configured.roles.iter() {
                        let tools = match &role.tools {
                            RoleTools::All => "all tools".to_string(),
                            RoleTools::ReadOnly => "read-only tools".to_string(),
                            RoleTools::Only(names) => names.join(", "),
                        };
                        eprintln!("  {:<12} {} ({tools})", role.name, role.description);
                    }
                }
                Err(err) => eprintln!("{}", err.message),
            },
            SlashCommand::Rewind(argument) => self.rewind(argument.as_deref()).await,
            SlashCommand::Undo(argument) => self.undo(argument.as_deref()).await,
            SlashCommand::Compact => match self.session.clone() {
                None => eprintln!("(nothing to compact: no conversation yet)"),
                Some(session) => {
                    eprintln!("(compacting the conversation…)");
                    match self.backend.compact(&session, &self.flags).await {
                        Ok(text) | Err(ChatError { message: text, .. }) => eprintln!("{text}"),
                    }
                }
            },
            SlashCommand::Unknown(name) => {
                eprintln!(
                    "unknown command {name}; /help lists them (start with // to send a line beginning with /)"
                );
            }
            // Handled where a turn can start.
            SlashCommand::Exit | SlashCommand::Plan(_) | SlashCommand::Do(_) => {}
        }
    }

    /// `/rewind`: the conversation's turns (its runs, numbered), or with
    /// `N`, what going back to the end of turn N changes, then done.
    async fn rewind(&mut self, argument: Option<&str>) {
        let Some(session) = self.session.clone() else {
            eprintln!("(nothing to rewind: no conversation yet)");
            return;
        };
        let Some(argument) = argument else {
            let rendered = self
                .backend
                .view(View::Rewind {
                    id: session.clone(),
                    to: None,
                })
                .await;
            eprint!("{}{}", rendered.stdout, rendered.stderr);
            if let Ok(list) = self.backend.checkpoints(&session).await {
                eprint!("{}", crate::undo::run_files_text(&list.runs));
            }
            eprintln!("(go back to the end of a turn with /rewind N)");
            return;
        };
        let (to, scope) = match command::rewind_target(argument) {
            Ok(target) => target,
            Err(message) => {
                eprintln!("{message}");
                return;
            }
        };
        if scope.conversation {
            let rendered = self
                .backend
                .view(View::Rewind {
                    id: session.clone(),
                    to: Some(to),
                })
                .await;
            eprint!("{}{}", rendered.stdout, rendered.stderr);
            if rendered.code != 0 {
                return;
            }
        }
        match self.backend.rewind(&session, to, scope).await {
            Ok(text) | Err(ChatError { message: text, .. }) => eprintln!("{text}"),
        }
    }

    /// `/undo [redo]`: the files back to before the last turn that changed
    /// them, or forward again; files changed outside are not overwritten
    /// (`troupe undo --force` does).
    async fn undo(&mut self, argument: Option<&str>) {
        let Some(session) = self.session.clone() else {
            eprintln!("(nothing to undo: no conversation yet)");
            return;
        };
        let redo = match argument.map(str::trim) {
            None | Some("") => false,
            Some("redo") => true,
            Some(other) => {
                eprintln!("/undo takes nothing or `redo`, not {other:?}");
                return;
            }
        };
        let request = crate::undo::UndoRequest {
            redo,
            apply: true,
            ..crate::undo::UndoRequest::default()
        };
        match self.backend.undo(&session, request).await {
            Ok(report) => eprint!("{}", crate::undo::report_text(&report)),
            Err(ChatError { message, .. }) => eprintln!("{message}"),
        }
    }

    /// `/plan`: plan mode from the next message on, keeping the mode to
    /// return to.
    fn enter_plan(&mut self) {
        if self.plan.enter(self.mode()) {
            self.flags.mode = Some(PermissionMode::Plan);
            eprintln!(
                "(plan mode from the next message on: read-only tools; /do carries out the plan)"
            );
        } else {
            eprintln!("(already in plan mode; /do carries out the plan)");
        }
    }

    /// `/do`: back to the mode before `/plan`; the message that carries out
    /// the plan, or `None` when there is nothing to carry out.
    fn leave_plan(&mut self, note: Option<&str>) -> Option<String> {
        let Some(mode) = self.plan.leave(self.mode()) else {
            eprintln!("(not in plan mode: /plan starts planning)");
            return None;
        };
        self.flags.mode = Some(mode);
        if self.session.is_none() {
            eprintln!(
                "(mode {} again; no plan to carry out yet: no conversation)",
                mode.as_str()
            );
            return None;
        }
        eprintln!("(mode {} again; carrying out the plan)", mode.as_str());
        Some(command::do_message(note))
    }

    fn options(&self) -> RunOptions {
        RunOptions {
            cwd: self.flags.cwd.clone(),
            provider: self.flags.provider.clone(),
            model: self.flags.model.clone(),
            mode: self.flags.mode,
            ..RunOptions::default()
        }
    }

    fn configured(&self) -> Result<crate::project::Configured, ChatError> {
        Ok(configured(&self.locations, &self.options())?)
    }

    /// The mode of the next turn: chosen with `/mode`, else configured.
    fn mode(&self) -> PermissionMode {
        self.flags.mode.unwrap_or_else(|| {
            self.configured()
                .map(|c| c.config.permissions.mode)
                .unwrap_or_default()
        })
    }

    /// `/cost`: this chat's tokens, and their price when the provider has one.
    fn cost(&self) -> String {
        let usage = &self.usage;
        let mut text = format!(
            "{} turn(s): {} input, {} output, {} cache read, {} cache write tokens ({} in all)",
            self.turns,
            usage.input,
            usage.output,
            usage.cache_read,
            usage.cache_write,
            usage.total()
        );
        match self.configured().map(|c| c.provider) {
            Ok(Ok(provider)) => match provider.price {
                Some(price) => {
                    text.push_str(&format!("\ncost: ${:.4} at {}'s prices", price.cost_usd(usage), provider.name));
                }
                None => text.push_str(&format!(
                    "\ncost: unknown (no price configured for provider {}; see `price` in the configuration)",
                    provider.name
                )),
            },
            Ok(Err(_)) | Err(_) => text.push_str("\ncost: unknown (no provider configured)"),
        }
        text
    }

    /// The custom commands (those named like a built-in dropped) and the
    /// warnings about files that were skipped. Read at each use, so edits
    /// apply at once.
    fn custom_commands(&self) -> (CommandSet, Vec<SkillWarning>) {
        let Ok(configured) = self.configured() else {
            return Default::default();
        };
        let (commands, mut warnings) = CommandSet::load(
            self.locations.config_dir.as_deref(),
            &configured.project_root,
        );
        let (commands, shadowing) = commands.without(command::is_builtin);
        warnings.extend(shadowing);
        (commands, warnings)
    }

    /// The message a custom command typed as `line` sends, if `line` names one.
    fn expand_custom(&self, line: &str) -> Option<String> {
        let (name, arguments) = command::invocation(line)?;
        let (commands, _) = self.custom_commands();
        commands.get(name).map(|custom| custom.expand(arguments))
    }

    /// `/memory`: the project memory a new session would start with; with
    /// a note, the note appended to it first.
    fn memory(&self, note: Option<String>) -> String {
        let root = match self.configured() {
            Ok(configured) => configured.project_root,
            Err(err) => return err.message,
        };
        let path = troupe_tools::memory::memory_path(&root);
        if let Some(note) = note {
            return match troupe_tools::memory::append_note(&root, &note) {
                Ok(path) => format!(
                    "(remembered in {}; new sessions start with it)",
                    path.display()
                ),
                Err(err) => format!("not remembered: {err}"),
            };
        }
        command::memory_text(
            &path,
            troupe_tools::memory::load_for_prompt(&root).as_deref(),
        )
    }

    /// `/skills`: the skills a session started now would offer.
    fn skills(&self) -> String {
        let configured = match self.configured() {
            Ok(configured) => configured,
            Err(err) => return err.message,
        };
        let (skills, warnings) =
            SkillSet::load(self.locations.config_dir.as_deref(), configured.own_files());
        let mut text = if skills.is_empty() {
            "No skills (add .troupe/skills/NAME/SKILL.md; see docs/skills.md).".to_string()
        } else {
            let mut text = String::from("Skills (the agent loads them with `load_skill`):");
            for skill in skills.iter() {
                text.push_str(&format!(
                    "\n  {:<12} {} ({})",
                    skill.name,
                    skill.description,
                    skill.path.display()
                ));
            }
            text
        };
        for warning in warnings {
            text.push_str(&format!("\nskill ignored: {warning}"));
        }
        text
    }

    /// `/tools`: the tools offered to the agent in the next turn's mode.
    fn tools(&self) -> Result<String, ChatError> {
        let configured = self.configured()?;
        let mode = self.mode();
        let (skills, _) =
            SkillSet::load(self.locations.config_dir.as_deref(), configured.own_files());
        let catalogue = ToolCatalogue::new(
            crate::setup::registry_with_skills(skills, &configured.config.web),
            Some(agent_tool_definition(&configured.roles)),
        )
        .map_err(|err| ChatError {
            message: err.to_string(),
            code: EXIT_RUNTIME,
        })?;
        let mut text = format!("Tools offered in {} mode:\n", mode.as_str());
        for tool in catalogue.offered(mode) {
            let summary = tool.description.lines().next().unwrap_or_default();
            text.push_str(&format!("  {:<12} {summary}\n", tool.name));
        }
        Ok(text.trim_end().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_banner_names_model_mode_and_project_or_why_there_is_no_model() {
        let project = std::path::Path::new("/work/app");
        let text = banner(
            Ok(("claude-x".into(), "claude".into())),
            PermissionMode::AcceptEdits,
            project,
        );
        assert_eq!(
            text.lines().next(),
            Some("troupe chat · model claude-x (claude) · mode accept-edits · project /work/app")
        );
        assert!(text.contains("Ctrl-L clears the screen"), "{text}");
        let text = banner(
            Err("no provider configured: set ANTHROPIC_API_KEY".into()),
            PermissionMode::Default,
            project,
        );
        assert!(
            text.starts_with("troupe chat · no model · mode default · project /work/app\ntroupe: no provider configured"),
            "{text}"
        );
    }
}
