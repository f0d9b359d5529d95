//! The shape of a command line as hard blocks walk it: scripts of and-or
//! lists, pipelines, simple commands with their words and redirections,
//! subshells, groups and function definitions, built from the
//! `tree-sitter-bash` tree (the grammar [`super::bash_ast`] reads too, with
//! the same parser). It owns the syntax only; what the commands mean is
//! `hard_blocks`' business, and nothing here runs or expands anything.
//!
//! Words are given after quote removal, with `$VAR`, `${…}` and `$(…)` kept
//! as written (`$HOME` stays `$HOME`); command substitutions (`$(…)`,
//! backticks) and process substitutions (`<(…)`, `>(…)`) are recorded with
//! their inner source text so the analysis can parse them in turn, and
//! here-document bodies with whether they expand.
//!
//! Compound commands the grammar knows (`if`, `while`, `until`, `for`,
//! `case`, `select`, `[[ … ]]`, `(( … ))`, declaration commands such as
//! `export` and `local`, `!`) are not modelled one by one: their bodies are
//! read as a group of statements, so every simple command inside them is
//! walked, and the words of their headers (`for x in WORDS`, `case WORD in
//! PATTERNS`, the operands of `[[ … ]]`) become one more simple command whose
//! program is the keyword, so substitutions there are walked too.
//!
//! What the grammar cannot read is reported, not guessed at: a tree with an
//! ERROR or MISSING node, a line longer than [`MAX_PARSE_BYTES`], or no tree at
//! all sets [`Script::unreadable`], and a hard block refuses the line. The
//! parts of an unreadable line that do parse are still built, so a more
//! specific block can name them.
//!
//! Known gaps of the grammar (version 0.25) for lines bash accepts, and what
//! is done about them:
//! - `<>` (open for reading and writing) is not an operator the grammar
//!   knows; a `<` directly followed by `>` in a redirection is read as `<>`
//!   instead of being an error.
//! - Bash reads what follows a here-document's delimiter on its line as the
//!   rest of the statement; the grammar only reads a pipe or `&&`/`||` there.
//!   Redirections after the delimiter (`python3 - <<'EOF' 2>&1 | tail`) and
//!   a `;` (`cat > f <<'EOF'; chmod +x f`) are read by rewriting the line to
//!   its equivalent (see `heredoc_fallback`). Still errors: `&` after the
//!   delimiter, a redirection of the standard input there, two here-documents
//!   on one line, and an unterminated here-document (where bash only warns).
//! - The grammar drops a `-` written right before `2>` without an error; text
//!   it skips between the parts of a command is read as words.
//! - Backticks in a here-document body are left as text: they are looked for
//!   in the text.
//! - Errors on degenerate lines: a lone `!`, a program name that starts with
//!   `{` or `[` or holds a `#` (`{file}`, `[a-z]*`, `a#b`), a backslash at
//!   the very end of the line.

use tree_sitter::{Node, Tree};

use super::bash_ast::{self, unescape_double, unescape_unquoted};

/// One `$(…)`, backtick or `<(…)`/`>(…)` substitution inside a word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Substitution {
    /// Process substitution (`<(…)`, `>(…)`) rather than command substitution.
    pub(crate) process: bool,
    /// The shell source inside the delimiters.
    pub(crate) source: String,
}

/// A word after quote removal, with the substitutions it contains.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Word {
    /// The text with quotes and escapes removed; `$VAR` and `$(…)` kept as written.
    pub(crate) value: String,
    /// Substitutions found in the word, in order.
    pub(crate) subs: Vec<Substitution>,
    /// True when any part of the word was quoted or escaped.
    pub(crate) quoted: bool,
    /// True when the word holds no expansion of any kind (no `$`, no
    /// substitution, no ANSI-C quoting, no brace expansion): its value is
    /// exactly what the program receives.
    pub(crate) literal: bool,
    start: usize,
    end: usize,
}

/// Redirection operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedirOp {
    /// `>`
    Out,
    /// `>>`
    Append,
    /// `>|`
    Clobber,
    /// `<`
    In,
    /// `<>`
    InOut,
    /// `<<` and `<<-`
    HereDoc,
    /// `<<<`
    HereString,
    /// `>&`
    DupOut,
    /// `<&`
    DupIn,
    /// `&>`
    OutErr,
    /// `&>>`
    AppendErr,
}

impl RedirOp {
    /// True when the operator writes to its target (a `>&N` duplication of a
    /// descriptor writes to a file only when the target is not a number).
    pub fn writes(self, target: &str) -> bool {
        match self {
            Self::Out | Self::Append | Self::Clobber | Self::InOut | Self::OutErr => true,
            Self::AppendErr => true,
            Self::DupOut => !(target == "-" || target.chars().all(|c| c.is_ascii_digit())),
            Self::In | Self::HereDoc | Self::HereString | Self::DupIn => false,
        }
    }

    fn from_operator(text: &str) -> Self {
        match text {
            ">>" => Self::Append,
            ">|" => Self::Clobber,
            "<" => Self::In,
            "<>" => Self::InOut,
            ">&" | ">&-" => Self::DupOut,
            "<&" | "<&-" => Self::DupIn,
            "&>" => Self::OutErr,
            "&>>" => Self::AppendErr,
            "<<" | "<<-" => Self::HereDoc,
            "<<<" => Self::HereString,
            // `>` and anything unforeseen: read as a write, the cautious way.
            _ => Self::Out,
        }
    }
}

/// The body of a here-document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HereDoc {
    /// The lines between the operator's line and the delimiter (leading tabs
    /// removed for `<<-`), each ending with a newline.
    pub(crate) body: String,
    /// False when the delimiter was quoted (no expansion, no substitution).
    pub(crate) expands: bool,
    /// The substitutions the body runs, in order (none when it does not
    /// expand): what [`substitutions_in_text`] finds in it.
    pub(crate) subs: Vec<Substitution>,
}

/// One redirection of a simple command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    /// The operator.
    pub(crate) op: RedirOp,
    /// The descriptor written before the operator (`3` in `3<>file`), if any.
    pub(crate) fd: Option<u32>,
    /// The target word (for here-documents: the delimiter).
    pub(crate) target: Word,
    /// The here-document body, for `<<`.
    pub(crate) heredoc: Option<HereDoc>,
}

/// A simple command: words and redirections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimpleCommand {
    /// Words, assignments included, in order.
    pub(crate) words: Vec<Word>,
    /// Redirections, in order.
    pub(crate) redirects: Vec<Redirect>,
    /// The command's source text (from its first to its last token, without
    /// here-document bodies).
    pub(crate) source: String,
    start: usize,
    end: usize,
}

/// One element of a pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// A simple command.
    Simple(SimpleCommand),
    /// `( … )`: runs in a child shell.
    Subshell(Script),
    /// `{ …; }`, and the bodies of compound commands: runs in the current
    /// shell.
    Group(Script),
    /// `name() body` or `function name body`.
    Function {
        /// The function name.
        name: String,
        /// The body.
        body: Script,
    },
}

/// Commands joined by `|` or `|&`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pipeline {
    /// The commands, left to right.
    pub(crate) commands: Vec<Command>,
}

/// How a pipeline is joined to the one before it in an and-or list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connector {
    /// `&&`: runs when the previous status is success.
    And,
    /// `||`: runs when the previous status is failure.
    Or,
}

/// Pipelines joined by `&&` and `||`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AndOr {
    /// The first pipeline.
    pub(crate) first: Pipeline,
    /// The following pipelines with their connectors.
    pub(crate) rest: Vec<(Connector, Pipeline)>,
    /// True when the list was started in the background with `&`.
    pub(crate) background: bool,
}

/// Why a line could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreadable {
    /// The grammar met a syntax error (or had to invent a missing token) at
    /// this byte offset.
    Syntax(usize),
    /// Longer than [`MAX_PARSE_BYTES`].
    TooLong,
    /// The parser gave no tree.
    NoTree,
}

/// A parsed command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Script {
    /// And-or lists separated by `;`, `&` or newlines.
    pub(crate) lists: Vec<AndOr>,
    /// True when nesting went past [`MAX_PARSE_DEPTH`]; deeper parts are left out.
    pub(crate) too_deep: bool,
    /// Set when the grammar could not read the line (see the module docs).
    pub(crate) unreadable: Option<Unreadable>,
}

/// Deepest nesting of subshells, groups, compound commands, function bodies
/// and test or arithmetic expressions that is built. Deeper input is flagged
/// in `Script::too_deep`.
pub const MAX_PARSE_DEPTH: usize = 32;

/// Longest line read; longer ones are [`Unreadable::TooLong`].
pub const MAX_PARSE_BYTES: usize = 1024 * 1024;

/// Node kinds that are statements: elements of a pipeline.
const STATEMENTS: &[&str] = &[
    "command",
    "pipeline",
    "list",
    "subshell",
    "compound_statement",
    "redirected_statement",
    "negated_command",
    "if_statement",
    "while_statement",
    "for_statement",
    "c_style_for_statement",
    "case_statement",
    "function_definition",
    "declaration_command",
    "unset_command",
    "test_command",
    "variable_assignment",
    "variable_assignments",
];

/// Node kinds that hold statements (and header words) of a compound command.
const CONTAINERS: &[&str] = &["do_group", "else_clause", "elif_clause", "case_item"];

/// Node kinds of test and arithmetic expressions, read through to their
/// operands.
const EXPRESSIONS: &[&str] = &[
    "binary_expression",
    "unary_expression",
    "parenthesized_expression",
    "ternary_expression",
    "postfix_expression",
];

/// Node kinds skipped wherever they appear.
const IGNORED: &[&str] = &["comment", "heredoc_body", "heredoc_end"];

/// Parses a command line. Never fails: what cannot be read is flagged in
/// [`Script::unreadable`].
pub fn parse(source: &str) -> Script {
    parse_with(source, false)
}

/// Parses a whole command line the strict reading will read next, and hands
/// the tree over to it.
pub(crate) fn parse_line(source: &str) -> Script {
    parse_with(source, true)
}

fn parse_with(source: &str, hand_over: bool) -> Script {
    if source.len() > MAX_PARSE_BYTES {
        return Script {
            unreadable: Some(Unreadable::TooLong),
            ..Script::default()
        };
    }
    let Some(tree) = bash_ast::parse_tree(source) else {
        return Script {
            unreadable: Some(Unreadable::NoTree),
            ..Script::default()
        };
    };
    if hand_over {
        bash_ast::hand_over(source, &tree);
    }
    let root = tree.root_node();
    let Some(error) = first_error(root, source.as_bytes()) else {
        return build(root, source);
    };
    if let Some(script) = heredoc_fallback(&tree, source) {
        return script;
    }
    let mut script = build(root, source);
    script.unreadable = Some(Unreadable::Syntax(error.start_byte()));
    script
}

fn build(root: Node<'_>, source: &str) -> Script {
    let mut builder = Builder {
        src: source,
        too_deep: false,
    };
    let mut script = builder.script(root, 0);
    script.too_deep |= builder.too_deep;
    script
}

/// Most rewrites of here-document lines tried on one line.
const MAX_HEREDOC_REWRITES: usize = 4;

/// Bash reads what follows a here-document operator on its line as the rest
/// of the statement; the grammar only reads a pipe or `&&`/`||` there. When
/// the first error lies on such a line, the line is rewritten to an
/// equivalent the grammar reads, and read again:
/// - redirections after the delimiter move before the operator
///   (`python3 - <<'EOF' 2>&1 | tail` reads as `python3 - 2>&1 <<'EOF' | tail`),
///   unless one of them touches the standard input;
/// - what follows a `;` moves after the delimiter line
///   (`cat > f <<'EOF'; chmod +x f` reads as the two statements it is).
///
/// `None` when the error is elsewhere or the rewritten line still has one.
fn heredoc_fallback(tree: &Tree, source: &str) -> Option<Script> {
    let mut text = source.to_owned();
    let mut tree = tree.clone();
    for _ in 0..MAX_HEREDOC_REWRITES {
        let root = tree.root_node();
        let Some(error) = first_error(root, text.as_bytes()) else {
            return Some(build(root, &text));
        };
        text = rewrite_heredoc_line(error, &text)?;
        tree = bash_ast::parse_tree(&text)?;
    }
    None
}

fn rewrite_heredoc_line(error: Node<'_>, src: &str) -> Option<String> {
    let mut heredoc = error;
    while heredoc.kind() != "heredoc_redirect" {
        heredoc = heredoc.parent()?;
    }
    let mut cursor = heredoc.walk();
    let children: Vec<Node<'_>> = heredoc.children(&mut cursor).collect();
    let operator = children.iter().find(|c| c.kind().starts_with("<<"))?;
    let start = children.iter().find(|c| c.kind() == "heredoc_start")?;
    let end = children
        .iter()
        .find(|c| c.kind() == "heredoc_end" && !c.is_missing())?;
    let line_end = start.end_byte() + src.get(start.end_byte()..)?.find('\n')?;
    let at = error.start_byte();
    if at < start.end_byte() || at >= line_end {
        return None;
    }
    // Redirections after the delimiter, each up to its target.
    let moved_end = children
        .iter()
        .filter(|c| c.kind() == "file_redirect" && c.start_byte() < at)
        .filter_map(|redirect| redirect_target_end(*redirect))
        .max();
    if let Some(moved_end) = moved_end {
        let head = src.get(operator.start_byte()..start.end_byte())?;
        let mid = src.get(start.end_byte()..moved_end)?;
        if mid.contains('<') || mid.contains("0>") {
            return None;
        }
        let moved = format!("{} {head}", mid.trim());
        let pad = (head.len() + mid.len()).checked_sub(moved.len())?;
        return Some(format!(
            "{}{moved}{}{}",
            src.get(..operator.start_byte())?,
            " ".repeat(pad),
            src.get(moved_end..)?
        ));
    }
    if src.get(at..at + 1) != Some(";") || matches!(src.get(at + 1..at + 2), Some(";" | "&")) {
        return None;
    }
    let end_line = end.end_byte()
        + src
            .get(end.end_byte()..)?
            .find('\n')
            .unwrap_or(src.len() - end.end_byte());
    Some(format!(
        "{}{}\n{}{}",
        src.get(..at)?,
        src.get(line_end..end_line)?,
        src.get(at + 1..line_end)?,
        src.get(end_line..)?
    ))
}

/// Where a redirection's target ends (the grammar may have read more words
/// into it).
fn redirect_target_end(redirect: Node<'_>) -> Option<usize> {
    let mut cursor = redirect.walk();
    let mut after_operator = false;
    for child in redirect.children(&mut cursor) {
        if child.is_error() {
            return None;
        }
        if !child.is_named() {
            if matches!(child.kind(), ">&-" | "<&-") {
                return Some(child.end_byte());
            }
            after_operator = true;
        } else if after_operator {
            return Some(child.end_byte());
        }
    }
    None
}

/// The substitutions in text that undergoes expansion (an unquoted here-document
/// body, the inside of `${…}`): the text is read as the body of an unquoted
/// here-document.
pub fn substitutions_in_text(text: &str) -> Vec<Substitution> {
    if text.len() > MAX_PARSE_BYTES {
        return Vec::new();
    }
    let mut delimiter = "TROUPE_TEXT_END".to_owned();
    while text.lines().any(|line| line == delimiter) {
        delimiter.push('_');
    }
    let source = format!(": <<{delimiter}\n{text}\n{delimiter}\n");
    let Some(tree) = bash_ast::parse_tree(&source) else {
        return Vec::new();
    };
    let builder = Builder {
        src: &source,
        too_deep: false,
    };
    let mut subs = Vec::new();
    builder.collect_subs(tree.root_node(), &mut subs);
    subs
}

/// The value of a word node after quote removal when it holds no expansion
/// (what [`super::bash_ast`] grants on); `None` otherwise.
pub(crate) fn literal_value(node: Node<'_>, src: &str) -> Option<String> {
    let builder = Builder {
        src,
        too_deep: false,
    };
    let word = builder.word(node);
    word.literal.then_some(word.value)
}

/// Byte offset of the first ERROR or MISSING node, skipping the `<>`
/// operator the grammar does not know (see the module docs).
fn first_error<'t>(root: Node<'t>, src: &[u8]) -> Option<Node<'t>> {
    let mut cursor = root.walk();
    loop {
        let node = cursor.node();
        let tolerated = is_read_write_operator(node, src);
        if (node.is_error() || node.is_missing()) && !tolerated {
            return Some(node);
        }
        if !tolerated && node.has_error() && cursor.goto_first_child() {
            continue;
        }
        loop {
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return None;
            }
        }
    }
}

/// An ERROR node that is one half of a `<>` operator: a `>` right after a
/// `<`, or a `<` right before a `>`.
fn is_read_write_operator(node: Node<'_>, src: &[u8]) -> bool {
    if !node.is_error() || node.named_child_count() > 0 {
        return false;
    }
    let (start, end) = (node.start_byte(), node.end_byte());
    match src.get(start..end) {
        Some(b">") => start > 0 && src.get(start - 1) == Some(&b'<'),
        Some(b"<") => src.get(end) == Some(&b'>'),
        _ => false,
    }
}

/// A node still to flatten into an and-or list, or the redirections of a
/// `redirected_statement` around a pipeline, which belong to its last command.
enum Entry<'t> {
    Node(Node<'t>),
    Attach(Node<'t>, Node<'t>),
}

/// A pipeline element or the operator between two.
enum Item {
    Op(Connector),
    Pipe,
    Command(Command),
}

/// Builds the AST from a tree.
struct Builder<'s> {
    src: &'s str,
    too_deep: bool,
}

/// The redirections of a command, with what the grammar attached to them.
#[derive(Default)]
struct Redirections<'t> {
    redirects: Vec<Redirect>,
    /// Words after a redirection target (`echo > f hello`): arguments.
    words: Vec<Word>,
    /// What follows a here-document operator on its line (`| sh && x`).
    continuation: Vec<Node<'t>>,
    /// Where the redirections end in the source (here-document bodies left out).
    end: usize,
    /// A descriptor number written right before the next redirection's
    /// operator, which the grammar read as a word (`exec 0</dev/tcp/…`).
    pending_fd: Option<u32>,
}

impl<'s> Builder<'s> {
    fn text(&self, node: Node<'_>) -> &'s str {
        self.src.get(node.byte_range()).unwrap_or("")
    }

    fn deeper(&mut self, depth: usize) -> bool {
        if depth >= MAX_PARSE_DEPTH {
            self.too_deep = true;
            return false;
        }
        true
    }

    /// The statements held by `node` (the program, a subshell, a group, the
    /// body of a compound command), with its header words as a first simple
    /// command named by its keyword.
    fn script(&mut self, node: Node<'_>, depth: usize) -> Script {
        let mut lists = Vec::new();
        let mut header = Vec::new();
        self.statements_into(node, depth, &mut lists, &mut header);
        if !header.is_empty() {
            let keyword = node
                .child(0)
                .filter(|c| !c.is_named())
                .map(|c| self.synthetic(self.text(c), c));
            let words: Vec<Word> = keyword.into_iter().chain(header).collect();
            let simple = self.simple_from_words(words);
            lists.insert(0, single(Command::Simple(simple)));
        }
        Script {
            lists,
            too_deep: false,
            unreadable: None,
        }
    }

    fn statements_into(
        &mut self,
        node: Node<'_>,
        depth: usize,
        lists: &mut Vec<AndOr>,
        header: &mut Vec<Word>,
    ) {
        let mut cursor = node.walk();
        let children: Vec<Node<'_>> = node.children(&mut cursor).collect();
        for (i, child) in children.iter().enumerate() {
            let kind = child.kind();
            if kind == "in" && !child.is_named() && !header.is_empty() {
                // `for x in WORDS`, `case WORD in`: the header reads as written.
                header.push(self.synthetic("in", *child));
                continue;
            }
            if !child.is_named() || IGNORED.contains(&kind) {
                continue;
            }
            if STATEMENTS.contains(&kind) {
                let background = children.get(i + 1).is_some_and(|n| n.kind() == "&");
                let mut list = self.and_or(*child, depth);
                list.background = background;
                if !(list.first.commands.is_empty() && list.rest.is_empty()) {
                    lists.push(list);
                }
            } else if child.is_error() {
                // Error regions may nest; they count towards the limit.
                if self.deeper(depth) {
                    self.statements_into(*child, depth + 1, lists, header);
                }
            } else if CONTAINERS.contains(&kind) {
                // `do … done`, `else`, a `case` branch: one level with their
                // compound command, and never directly inside each other.
                self.statements_into(*child, depth, lists, header);
            } else {
                self.expression_words(*child, depth, header);
            }
        }
    }

    /// Flattens a statement into pipelines joined by `&&` and `||`. Lists and
    /// pipelines are flattened in source order without recursion, so a very
    /// long chain cannot exhaust the stack.
    fn and_or(&mut self, node: Node<'_>, depth: usize) -> AndOr {
        let mut items = Vec::new();
        let mut stack = vec![Entry::Node(node)];
        while let Some(entry) = stack.pop() {
            let node = match entry {
                Entry::Node(node) => node,
                Entry::Attach(outer, body) => {
                    let mut found = Redirections::default();
                    self.redirections_of(outer, Some(body), &mut found);
                    let continuation = std::mem::take(&mut found.continuation);
                    let last = items.iter_mut().rev().find_map(|item| match item {
                        Item::Command(command) => Some(command),
                        _ => None,
                    });
                    match last {
                        Some(Command::Simple(simple)) => self.attach(simple, found),
                        Some(command) => {
                            let taken =
                                std::mem::replace(command, Command::Group(Script::default()));
                            *command = self.with_redirections(taken, body.end_byte(), found);
                        }
                        None => {
                            let simple = self.make_simple(
                                found.words,
                                found.redirects,
                                body.end_byte(),
                                found.end,
                            );
                            items.push(Item::Command(Command::Simple(simple)));
                        }
                    }
                    stack.extend(continuation.into_iter().rev().map(Entry::Node));
                    continue;
                }
            };
            match node.kind() {
                "list" | "pipeline" => {
                    let mut cursor = node.walk();
                    let children: Vec<Node<'_>> = node.children(&mut cursor).collect();
                    stack.extend(children.into_iter().rev().map(Entry::Node));
                }
                // `a | b > out`: the grammar puts the redirection around the
                // pipeline; it belongs to the last command.
                "redirected_statement"
                    if node
                        .child_by_field_name("body")
                        .is_some_and(|b| matches!(b.kind(), "list" | "pipeline")) =>
                {
                    if let Some(body) = node.child_by_field_name("body") {
                        stack.push(Entry::Attach(node, body));
                        stack.push(Entry::Node(body));
                    }
                }
                "&&" => items.push(Item::Op(Connector::And)),
                "||" => items.push(Item::Op(Connector::Or)),
                "|" | "|&" => items.push(Item::Pipe),
                _ if !node.is_named() || IGNORED.contains(&node.kind()) => {}
                _ => {
                    let (command, continuation) = self.command(node, depth);
                    items.push(Item::Command(command));
                    stack.extend(continuation.into_iter().rev().map(Entry::Node));
                }
            }
        }
        let mut list = AndOr {
            first: Pipeline::default(),
            rest: Vec::new(),
            background: false,
        };
        for item in items {
            match item {
                Item::Op(connector) => list.rest.push((connector, Pipeline::default())),
                Item::Pipe => {}
                Item::Command(command) => match list.rest.last_mut() {
                    Some((_, pipeline)) => pipeline.commands.push(command),
                    None => list.first.commands.push(command),
                },
            }
        }
        list
    }

    /// One pipeline element, with the statements a here-document operator's
    /// line continues with.
    fn command<'t>(&mut self, node: Node<'t>, depth: usize) -> (Command, Vec<Node<'t>>) {
        match node.kind() {
            "command" => {
                let (simple, continuation) = self.simple(node, None);
                (Command::Simple(simple), continuation)
            }
            "redirected_statement" => self.redirected(node, depth),
            "subshell" => {
                let body = if self.deeper(depth) {
                    self.script(node, depth + 1)
                } else {
                    Script::default()
                };
                (Command::Subshell(body), Vec::new())
            }
            "compound_statement" if node.child(0).is_some_and(|c| c.kind() == "((") => {
                (self.expression_command(node, depth), Vec::new())
            }
            "test_command" => (self.expression_command(node, depth), Vec::new()),
            "function_definition" => (self.function(node, depth), Vec::new()),
            "negated_command" => {
                let Some(inner) = node.named_child(0) else {
                    return (Command::Group(Script::default()), Vec::new());
                };
                if !self.deeper(depth) {
                    return (Command::Group(Script::default()), Vec::new());
                }
                let (mut command, continuation) = self.command(inner, depth + 1);
                if let Command::Simple(simple) = &mut command {
                    // `! cmd` reads as it is written: `!` first.
                    if let Some(bang) = node.child(0) {
                        simple.words.insert(0, self.synthetic("!", bang));
                    }
                    simple.source = self.text(node).trim().to_owned();
                }
                (command, continuation)
            }
            "declaration_command"
            | "unset_command"
            | "variable_assignments"
            | "variable_assignment" => {
                let mut words = Vec::new();
                if node.kind() == "variable_assignment" {
                    words.push(self.word(node));
                } else {
                    let mut cursor = node.walk();
                    for child in node.children(&mut cursor) {
                        if child.is_named() {
                            if !IGNORED.contains(&child.kind()) {
                                words.push(self.word(child));
                            }
                        } else if words.is_empty() {
                            words.push(self.synthetic(self.text(child), child));
                        }
                    }
                }
                let mut simple = self.simple_from_words(words);
                simple.source = self.text(node).trim().to_owned();
                (Command::Simple(simple), Vec::new())
            }
            // `{ …; }`, `if`, `while`, `until`, `for`, `select`, `case` and
            // anything else: the statements inside, read as a group.
            _ => {
                let body = if self.deeper(depth) {
                    self.script(node, depth + 1)
                } else {
                    Script::default()
                };
                (Command::Group(body), Vec::new())
            }
        }
    }

    fn make_simple(
        &self,
        words: Vec<Word>,
        redirects: Vec<Redirect>,
        start: usize,
        end: usize,
    ) -> SimpleCommand {
        SimpleCommand {
            source: self.span_source(start, end),
            words: self.join_continued(words),
            redirects,
            start,
            end,
        }
    }

    /// Joins words split only by backslash-newlines: bash removes them, so
    /// `r\<newline>m` is `rm`, where the grammar reads two words.
    fn join_continued(&self, words: Vec<Word>) -> Vec<Word> {
        let mut out: Vec<Word> = Vec::with_capacity(words.len());
        for word in words {
            if let Some(last) = out.last_mut()
                && last.end < word.start
                && self
                    .src
                    .get(last.end..word.start)
                    .is_some_and(|gap| gap.split("\\\n").all(str::is_empty))
            {
                last.value.push_str(&word.value);
                last.subs.extend(word.subs);
                last.quoted |= word.quoted;
                last.literal &= word.literal;
                last.end = word.end;
                continue;
            }
            out.push(word);
        }
        out
    }

    /// Adds redirections (and the words after their targets) to a simple
    /// command.
    fn attach(&self, simple: &mut SimpleCommand, found: Redirections<'_>) {
        simple.words.extend(found.words);
        simple.words = self.join_continued(std::mem::take(&mut simple.words));
        simple.redirects.extend(found.redirects);
        simple.end = simple.end.max(found.end);
        simple.source = self.span_source(simple.start, simple.end);
    }

    /// A compound command with redirections: the redirections are read as a
    /// simple command without words after it, so their targets are checked.
    fn with_redirections(
        &self,
        command: Command,
        start: usize,
        found: Redirections<'_>,
    ) -> Command {
        let redirects_only = self.make_simple(found.words, found.redirects, start, found.end);
        Command::Group(Script {
            lists: vec![single(command), single(Command::Simple(redirects_only))],
            too_deep: false,
            unreadable: None,
        })
    }

    fn span_source(&self, start: usize, end: usize) -> String {
        self.src.get(start..end).unwrap_or("").trim().to_owned()
    }

    /// A statement with redirections (`cmd > out`, `( … ) 2>&1`, `cat <<EOF`).
    fn redirected<'t>(&mut self, node: Node<'t>, depth: usize) -> (Command, Vec<Node<'t>>) {
        let body = node.child_by_field_name("body");
        match body {
            Some(body) if body.kind() == "command" => {
                let (simple, continuation) = self.simple(body, Some(node));
                (Command::Simple(simple), continuation)
            }
            None => {
                let (simple, continuation) = self.simple(node, Some(node));
                (Command::Simple(simple), continuation)
            }
            Some(body) => {
                // The redirections of a compound command are read as a simple
                // command without words after it, so their targets are checked.
                let (command, mut continuation) = self.command(body, depth);
                let mut found = Redirections::default();
                self.redirections_of(node, Some(body), &mut found);
                continuation.append(&mut found.continuation);
                (
                    self.with_redirections(command, body.end_byte(), found),
                    continuation,
                )
            }
        }
    }

    /// A simple command from a `command` node, with the redirections of the
    /// `redirected_statement` around it.
    fn simple<'t>(
        &mut self,
        node: Node<'t>,
        outer: Option<Node<'t>>,
    ) -> (SimpleCommand, Vec<Node<'t>>) {
        let mut words = Vec::new();
        let mut found = Redirections::default();
        let mut cursor = node.walk();
        if node.kind() == "command" {
            let mut previous = node.start_byte();
            for child in node.children(&mut cursor) {
                if let Some(word) = self.skipped_word(previous, child.start_byte()) {
                    words.push(word);
                }
                previous = child.end_byte();
                match child.kind() {
                    "command_name" => {
                        if let Some(name) = child.named_child(0) {
                            words.push(self.word(name));
                        }
                    }
                    "file_redirect" | "heredoc_redirect" | "herestring_redirect" => {
                        self.redirection(child, None, &mut found);
                    }
                    kind if IGNORED.contains(&kind) || !child.is_named() => {}
                    "number" if self.before_operator(child) => {
                        found.pending_fd = self.text(child).parse().ok();
                    }
                    _ if child.is_error() => {
                        let mut inner = child.walk();
                        for part in child.named_children(&mut inner) {
                            words.push(self.word(part));
                        }
                    }
                    _ => words.push(self.word(child)),
                }
            }
        }
        if let Some(outer) = outer {
            let body = (node.id() != outer.id()).then_some(node);
            self.redirections_of(outer, body, &mut found);
        }
        words.append(&mut found.words);
        let start = node.start_byte();
        let end = words
            .iter()
            .map(|w| w.end)
            .chain(std::iter::once(found.end))
            .max()
            .unwrap_or(start)
            .max(if node.kind() == "command" {
                node.end_byte()
            } else {
                start
            });
        let simple = self.make_simple(words, found.redirects, start, end);
        (simple, found.continuation)
    }

    /// The redirections that are children of `node` (skipping its body).
    fn redirections_of<'t>(
        &mut self,
        node: Node<'t>,
        body: Option<Node<'t>>,
        found: &mut Redirections<'t>,
    ) {
        let mut cursor = node.walk();
        let children: Vec<Node<'t>> = node.children(&mut cursor).collect();
        let mut read_write = None;
        let mut previous = body.map_or(node.start_byte(), |b| b.end_byte());
        for child in children {
            if body.is_some_and(|b| b.id() == child.id()) || child.end_byte() <= previous {
                continue;
            }
            if let Some(word) = self.skipped_word(previous, child.start_byte()) {
                found.words.push(word);
            }
            previous = child.end_byte();
            match child.kind() {
                "file_redirect" | "heredoc_redirect" | "herestring_redirect" => {
                    self.redirection(child, read_write.take(), found);
                }
                // `{fd}<>file`: the grammar stops at the `<` of `<>`.
                _ if is_read_write_operator(child, self.src.as_bytes()) => {
                    read_write = Some(RedirOp::InOut);
                }
                _ if child.is_named() && !IGNORED.contains(&child.kind()) && !child.is_error() => {
                    found.words.push(self.word(child));
                }
                _ => {}
            }
        }
    }

    /// Text between two parts of a command that the grammar skipped without
    /// an error (it drops a `-` right before `2>`): read as a word.
    fn skipped_word(&self, from: usize, to: usize) -> Option<Word> {
        let gap = self.src.get(from..to)?;
        let trimmed = gap.replace("\\\n", "");
        let trimmed = trimmed.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            return None;
        }
        Some(Word {
            value: unescape_unquoted(trimmed),
            subs: Vec::new(),
            quoted: trimmed.contains('\\'),
            literal: true,
            start: from,
            end: to,
        })
    }

    /// True for a number written right before a redirection operator.
    fn before_operator(&self, node: Node<'_>) -> bool {
        matches!(self.src.as_bytes().get(node.end_byte()), Some(b'<' | b'>'))
    }

    fn redirection<'t>(
        &mut self,
        node: Node<'t>,
        forced: Option<RedirOp>,
        found: &mut Redirections<'t>,
    ) {
        let mut fd = found.pending_fd.take();
        let mut op = None;
        let mut target: Option<Word> = None;
        let mut heredoc_start = None;
        let mut body = None;
        let mut end_node = None;
        let mut nested = Vec::new();
        let mut cursor = node.walk();
        let mut end = node.start_byte();
        for child in node.children(&mut cursor) {
            let kind = child.kind();
            match kind {
                "file_descriptor" => fd = self.text(child).parse().ok(),
                "heredoc_start" => {
                    heredoc_start = Some(child);
                    end = end.max(child.end_byte());
                }
                "heredoc_body" => body = Some(child),
                "heredoc_end" => end_node = Some(child),
                "file_redirect" | "heredoc_redirect" | "herestring_redirect" => nested.push(child),
                _ if is_read_write_operator(child, self.src.as_bytes()) => {
                    op = Some(RedirOp::InOut)
                }
                _ if !child.is_named() => {
                    let text = self.text(child);
                    op = Some(RedirOp::from_operator(text));
                    end = end.max(child.end_byte());
                    if matches!(text, ">&-" | "<&-") {
                        let mut dash = self.synthetic("-", child);
                        dash.start = child.end_byte();
                        target = Some(dash);
                    }
                }
                "comment" => {}
                _ if node.kind() == "heredoc_redirect" => found.continuation.push(child),
                _ if target.is_some()
                    && child.kind() == "number"
                    && self.before_operator(child) =>
                {
                    found.pending_fd = self.text(child).parse().ok();
                }
                _ => {
                    let word = self.word(child);
                    end = end.max(child.end_byte());
                    if target.is_none() {
                        target = Some(word);
                    } else {
                        found.words.push(word);
                    }
                }
            }
        }
        let op = forced.or(op).unwrap_or(RedirOp::Out);
        let redirect = if let Some(start) = heredoc_start {
            let delimiter = self.text(start);
            Redirect {
                op: RedirOp::HereDoc,
                fd,
                target: Word {
                    value: unquote_delimiter(delimiter),
                    quoted: delimiter.contains(['\'', '"', '\\']),
                    literal: true,
                    start: start.start_byte(),
                    end: start.end_byte(),
                    subs: Vec::new(),
                },
                heredoc: Some(HereDoc {
                    body: self.heredoc_body(node, start, body, end_node),
                    expands: !delimiter.contains(['\'', '"', '\\']),
                    subs: match body {
                        Some(body) if !delimiter.contains(['\'', '"', '\\']) => {
                            let mut subs = Vec::new();
                            self.heredoc_subs(body, &mut subs);
                            subs
                        }
                        _ => Vec::new(),
                    },
                }),
            }
        } else {
            Redirect {
                op,
                fd,
                target: target.unwrap_or_default(),
                heredoc: None,
            }
        };
        found.redirects.push(redirect);
        found.end = found.end.max(end);
        for child in nested {
            self.redirection(child, None, found);
        }
    }

    /// The lines of a here-document, tabs stripped for `<<-`.
    fn heredoc_body(
        &self,
        node: Node<'_>,
        start: Node<'_>,
        body: Option<Node<'_>>,
        end: Option<Node<'_>>,
    ) -> String {
        let strip_tabs = node
            .children(&mut node.walk())
            .any(|c| !c.is_named() && c.kind() == "<<-");
        let terminated = end.is_some_and(|e| !e.is_missing());
        let region_end = match end {
            Some(e) if !e.is_missing() => e.start_byte(),
            _ => node.end_byte(),
        };
        let Some(first) = body
            .map(|b| b.start_byte())
            .or(terminated.then_some(region_end))
        else {
            return String::new();
        };
        let line_start = self
            .src
            .get(..first)
            .and_then(|before| before.rfind('\n'))
            .map_or(first, |i| i + 1)
            .max(start.end_byte())
            .min(region_end);
        let region = self.src.get(line_start..region_end).unwrap_or("");
        let mut out = String::new();
        for line in region.split_inclusive('\n') {
            if terminated && !line.ends_with('\n') {
                break;
            }
            let line = if strip_tabs {
                line.trim_start_matches('\t')
            } else {
                line
            };
            out.push_str(line);
            if !line.ends_with('\n') {
                out.push('\n');
            }
        }
        out
    }

    fn function(&mut self, node: Node<'_>, depth: usize) -> Command {
        let name = node
            .child_by_field_name("name")
            .map(|n| self.word(n).value)
            .unwrap_or_default();
        let Some(body) = node.child_by_field_name("body") else {
            return Command::Function {
                name,
                body: Script::default(),
            };
        };
        if !self.deeper(depth) {
            return Command::Function {
                name,
                body: Script::default(),
            };
        }
        let (command, _) = self.command(body, depth + 1);
        let mut lists = vec![single(command)];
        let mut found = Redirections::default();
        self.redirections_of(node, Some(body), &mut found);
        // The name word is a child too; only redirections count here.
        found.words.clear();
        if !found.redirects.is_empty() {
            let simple = self.make_simple(Vec::new(), found.redirects, body.end_byte(), found.end);
            lists.push(single(Command::Simple(simple)));
        }
        Command::Function {
            name,
            body: Script {
                lists,
                too_deep: false,
                unreadable: None,
            },
        }
    }

    /// `[[ … ]]` and `(( … ))`: one simple command named by the opening
    /// bracket, with the operands as words.
    fn expression_command(&mut self, node: Node<'_>, depth: usize) -> Command {
        let mut words = Vec::new();
        let mut cursor = node.walk();
        for child in node.children(&mut cursor) {
            if child.is_named() {
                self.expression_words(child, depth, &mut words);
            } else if matches!(child.kind(), "[" | "]" | "[[" | "]]" | "((" | "))") {
                words.push(self.synthetic(self.text(child), child));
            }
        }
        let mut simple = self.simple_from_words(words);
        simple.source = self.text(node).trim().to_owned();
        Command::Simple(simple)
    }

    /// The operands of an expression, read through its operators without
    /// recursion (flagging nesting past [`MAX_PARSE_DEPTH`]).
    fn expression_words(&mut self, node: Node<'_>, depth: usize, out: &mut Vec<Word>) {
        let mut stack = vec![(node, depth)];
        while let Some((node, level)) = stack.pop() {
            if IGNORED.contains(&node.kind()) {
                continue;
            }
            if !node.is_named() {
                // An operator (`==`, `=~`, `&&`, `!`, `(`, `+=`) as written.
                out.push(self.synthetic(self.text(node), node));
                continue;
            }
            if !EXPRESSIONS.contains(&node.kind()) {
                out.push(self.word(node));
                continue;
            }
            if !self.deeper(level) {
                continue;
            }
            let mut cursor = node.walk();
            let children: Vec<Node<'_>> = node.children(&mut cursor).collect();
            stack.extend(children.into_iter().rev().map(|c| (c, level + 1)));
        }
    }

    fn simple_from_words(&self, words: Vec<Word>) -> SimpleCommand {
        let start = words.iter().map(|w| w.start).min().unwrap_or(0);
        let end = words.iter().map(|w| w.end).max().unwrap_or(0);
        self.make_simple(words, Vec::new(), start, end)
    }

    /// A word standing for a keyword or operator token.
    fn synthetic(&self, value: &str, node: Node<'_>) -> Word {
        Word {
            value: value.to_owned(),
            subs: Vec::new(),
            quoted: false,
            literal: true,
            start: node.start_byte(),
            end: node.end_byte(),
        }
    }

    /// A word after quote removal.
    fn word(&self, node: Node<'_>) -> Word {
        let mut word = Word {
            literal: true,
            start: node.start_byte(),
            end: node.end_byte(),
            ..Word::default()
        };
        self.word_part(node, &mut word);
        word
    }

    fn word_part(&self, node: Node<'_>, word: &mut Word) {
        let text = self.text(node);
        match node.kind() {
            "word" | "number" => {
                if text.contains('\\') && text.replace("\\\n", "").contains('\\') {
                    word.quoted = true;
                }
                word.value.push_str(&unescape_unquoted(text));
            }
            "raw_string" => {
                word.quoted = true;
                let inner = text.strip_prefix('\'').unwrap_or(text);
                word.value
                    .push_str(inner.strip_suffix('\'').unwrap_or(inner));
            }
            "string" => {
                word.quoted = true;
                let mut cursor = node.walk();
                for child in node.children(&mut cursor) {
                    match child.kind() {
                        "string_content" => {
                            word.value.push_str(&unescape_double(self.text(child)));
                        }
                        _ if !child.is_named() => {
                            let part = self.text(child);
                            if part != "\"" {
                                // `$` alone, and anything unforeseen.
                                word.literal = false;
                                word.value.push_str(part);
                            }
                        }
                        _ => self.word_part(child, word),
                    }
                }
            }
            "translated_string" => {
                word.quoted = true;
                word.literal = false;
                let mut cursor = node.walk();
                for child in node.named_children(&mut cursor) {
                    self.word_part(child, word);
                }
            }
            "ansi_c_string" => {
                word.quoted = true;
                word.literal = false;
                let inner = text.strip_prefix("$'").unwrap_or(text);
                word.value
                    .push_str(&ansi_c(inner.strip_suffix('\'').unwrap_or(inner)));
            }
            "concatenation" => {
                let mut cursor = node.walk();
                for child in node.children(&mut cursor) {
                    if child.is_named() {
                        self.word_part(child, word);
                    } else {
                        word.literal = false;
                        word.value.push_str(self.text(child));
                    }
                }
            }
            "command_substitution" | "process_substitution" => {
                word.literal = false;
                let (value, sub) = self.substitution(node);
                word.value.push_str(&value);
                word.subs.push(sub);
            }
            "variable_assignment" => {
                word.literal = false;
                let mut cursor = node.walk();
                for child in node.children(&mut cursor) {
                    match child.kind() {
                        "variable_name" | "subscript" => {
                            word.value.push_str(self.text(child));
                            if child.kind() == "subscript" {
                                word.literal = false;
                                self.collect_subs(child, &mut word.subs);
                            }
                        }
                        _ if !child.is_named() => word.value.push_str(self.text(child)),
                        _ => self.word_part(child, word),
                    }
                }
            }
            "array" => {
                word.literal = false;
                word.value.push('(');
                let mut cursor = node.walk();
                let mut first = true;
                for child in node.named_children(&mut cursor) {
                    if !first {
                        word.value.push(' ');
                    }
                    first = false;
                    let mut element = Word::default();
                    self.word_part(child, &mut element);
                    word.value.push_str(&element.value);
                    word.subs.extend(element.subs);
                    word.quoted |= element.quoted;
                }
                word.value.push(')');
            }
            // `$x`, `${…}`, `$((…))`, `{a,b}`, globs' neighbours and anything
            // else: kept as written, with the substitutions inside.
            _ => {
                word.literal = false;
                word.value.push_str(text);
                self.collect_subs(node, &mut word.subs);
            }
        }
    }

    /// A substitution's value as written and its inner source.
    fn substitution(&self, node: Node<'_>) -> (String, Substitution) {
        let text = self.text(node);
        let process = node.kind() == "process_substitution";
        let first = node.child(0);
        let opener = first.map_or("", |c| self.text(c));
        if opener == "`" {
            let inner = text.strip_prefix('`').unwrap_or(text);
            let inner = unescape_backtick(inner.strip_suffix('`').unwrap_or(inner));
            return (
                format!("`{inner}`"),
                Substitution {
                    process,
                    source: inner,
                },
            );
        }
        let inner_start = first.map_or(node.start_byte(), |c| c.end_byte());
        let closes = node
            .child(node.child_count().saturating_sub(1))
            .filter(|c| c.kind() == ")" && !c.is_missing() && c.start_byte() >= inner_start);
        let inner_end = closes.map_or(node.end_byte(), |c| c.start_byte());
        let inner = self
            .src
            .get(inner_start..inner_end)
            .unwrap_or("")
            .to_owned();
        let value = format!("{opener}{inner})");
        (
            value,
            Substitution {
                process,
                source: inner,
            },
        )
    }

    /// The substitutions of a here-document body, in order. The grammar does
    /// not read backticks there: they are looked for in the text around
    /// what it did read.
    fn heredoc_subs(&self, body: Node<'_>, out: &mut Vec<Substitution>) {
        let mut text = self.text(body).to_owned();
        let base = body.start_byte();
        let mut found: Vec<(usize, Substitution)> = Vec::new();
        let mut cursor = body.walk();
        for child in body.named_children(&mut cursor) {
            if child.kind() == "heredoc_content" {
                continue;
            }
            let mut subs = Vec::new();
            self.collect_subs(child, &mut subs);
            found.extend(subs.into_iter().map(|sub| (child.start_byte() - base, sub)));
            if child.kind() != "command_substitution" {
                // Backticks inside `${…}` are left as text too.
                continue;
            }
            let range = child.start_byte() - base..child.end_byte() - base;
            if let Some(part) = text.get(range.clone()) {
                let blank = " ".repeat(part.len());
                text.replace_range(range, &blank);
            }
        }
        found.extend(backticks(&text));
        found.sort_by_key(|(at, _)| *at);
        out.extend(found.into_iter().map(|(_, sub)| sub));
    }

    /// The substitutions anywhere below `node`, not looking inside them.
    fn collect_subs(&self, node: Node<'_>, out: &mut Vec<Substitution>) {
        let mut cursor = node.walk();
        loop {
            let current = cursor.node();
            let is_sub = matches!(
                current.kind(),
                "command_substitution" | "process_substitution"
            ) && current.is_named();
            if is_sub {
                out.push(self.substitution(current).1);
            } else if current.kind() == "heredoc_body" {
                self.heredoc_subs(current, out);
            }
            if !is_sub && current.kind() != "heredoc_body" && cursor.goto_first_child() {
                continue;
            }
            loop {
                if cursor.node().id() == node.id() {
                    return;
                }
                if cursor.goto_next_sibling() {
                    break;
                }
                if !cursor.goto_parent() {
                    return;
                }
            }
        }
    }
}

fn single(command: Command) -> AndOr {
    AndOr {
        first: Pipeline {
            commands: vec![command],
        },
        rest: Vec::new(),
        background: false,
    }
}

/// A here-document delimiter after quote removal.
fn unquote_delimiter(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {}
            '\\' => {
                if let Some(next) = chars.next() {
                    out.push(next);
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// The backtick substitutions in expanding text the grammar left as
/// content, with where they start.
fn backticks(text: &str) -> Vec<(usize, Substitution)> {
    let mut subs = Vec::new();
    let mut chars = text.char_indices();
    let mut open = None;
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '`' => match open.take() {
                Some(start) => subs.push((
                    start,
                    Substitution {
                        process: false,
                        source: unescape_backtick(text.get(start..i).unwrap_or("")),
                    },
                )),
                None => open = Some(i + 1),
            },
            _ => {}
        }
    }
    if let Some(start) = open {
        subs.push((
            start,
            Substitution {
                process: false,
                source: unescape_backtick(text.get(start..).unwrap_or("")),
            },
        ));
    }
    subs
}

/// Backslash removal inside backticks: only before `` ` ``, `\` and `$`.
fn unescape_backtick(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\'
            && let Some(&next @ ('`' | '\\' | '$')) = chars.peek()
        {
            out.push(next);
            chars.next();
        } else {
            out.push(c);
        }
    }
    out
}

/// The value of the inside of `$'…'` (bash's escapes).
fn ansi_c(inner: &str) -> String {
    let mut out = String::with_capacity(inner.len());
    let chars: Vec<char> = inner.chars().collect();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        i += 1;
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(&esc) = chars.get(i) else {
            out.push('\\');
            break;
        };
        i += 1;
        let simple = match esc {
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'e' | 'E' => Some('\u{1b}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\u{b}'),
            '\\' | '\'' | '"' | '?' => Some(esc),
            _ => None,
        };
        if let Some(ch) = simple {
            out.push(ch);
            continue;
        }
        // Bash's numeric escapes: `\xHH`, `\uHHHH`, `\UHHHHHHHH`, `\NNN` (octal).
        let (radix, max_digits) = match esc {
            'x' => (16, 2),
            'u' => (16, 4),
            'U' => (16, 8),
            '0'..='7' => {
                i -= 1;
                (8, 3)
            }
            _ => {
                out.push('\\');
                out.push(esc);
                continue;
            }
        };
        let mut digits = String::new();
        while digits.len() < max_digits && chars.get(i).is_some_and(|d| d.is_digit(radix)) {
            if let Some(&d) = chars.get(i) {
                digits.push(d);
            }
            i += 1;
        }
        match u32::from_str_radix(&digits, radix)
            .ok()
            .and_then(char::from_u32)
        {
            Some(ch) => out.push(ch),
            None => {
                out.push('\\');
                out.push(esc);
            }
        }
    }
    out
}
#[cfg(test)]
mod tests {
    use super::*;

    fn simple_commands(script: &Script) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        for list in &script.lists {
            let pipelines = std::iter::once(&list.first).chain(list.rest.iter().map(|(_, p)| p));
            for pipeline in pipelines {
                for command in &pipeline.commands {
                    match command {
                        Command::Simple(sc) => {
                            out.push(sc.words.iter().map(|w| w.value.clone()).collect())
                        }
                        Command::Subshell(s) | Command::Group(s) => out.extend(simple_commands(s)),
                        Command::Function { body, .. } => out.extend(simple_commands(body)),
                    }
                }
            }
        }
        out
    }

    fn words(src: &str) -> Vec<Vec<String>> {
        simple_commands(&parse(src))
    }

    #[test]
    fn splits_compound_lines() {
        assert_eq!(
            words("a 1; b 2 && c || d | e & f\ng"),
            vec![
                vec!["a", "1"],
                vec!["b", "2"],
                vec!["c"],
                vec!["d"],
                vec!["e"],
                vec!["f"],
                vec!["g"]
            ]
        );
    }

    #[test]
    fn quotes_and_escapes_are_removed() {
        assert_eq!(
            words(r#"echo "a b" 'c;d' e\ f r''m "x\"y" 'it'\''s'"#),
            vec![vec!["echo", "a b", "c;d", "e f", "rm", "x\"y", "it's"]]
        );
        assert_eq!(words("\\rm -rf x"), vec![vec!["rm", "-rf", "x"]]);
        assert_eq!(words("$'\\x72\\155' -rf"), vec![vec!["rm", "-rf"]]);
    }

    #[test]
    fn operators_inside_quotes_do_not_split() {
        assert_eq!(
            words("echo 'a && b' \"c | d\""),
            vec![vec!["echo", "a && b", "c | d"]]
        );
    }

    #[test]
    fn substitutions_are_recorded() {
        let script = parse("echo $(date) `whoami` \"$(id -u)\" <(curl x)");
        let Command::Simple(sc) = &script.lists[0].first.commands[0] else {
            panic!("expected a simple command");
        };
        let subs: Vec<(bool, &str)> = sc
            .words
            .iter()
            .flat_map(|w| w.subs.iter().map(|s| (s.process, s.source.as_str())))
            .collect();
        assert_eq!(
            subs,
            vec![
                (false, "date"),
                (false, "whoami"),
                (false, "id -u"),
                (true, "curl x")
            ]
        );
    }

    #[test]
    fn nested_substitution_keeps_balance() {
        let script = parse("echo $(echo $(echo 'a)b') \")\") tail");
        let Command::Simple(sc) = &script.lists[0].first.commands[0] else {
            panic!("expected a simple command");
        };
        assert_eq!(sc.words.len(), 3);
        assert_eq!(sc.words[1].subs[0].source, "echo $(echo 'a)b') \")\"");
        assert_eq!(sc.words[2].value, "tail");
    }

    #[test]
    fn redirections_and_descriptors() {
        let script = parse("cmd 2>&1 >out.txt >>log 2> err <in &>all");
        let Command::Simple(sc) = &script.lists[0].first.commands[0] else {
            panic!("expected a simple command");
        };
        assert_eq!(sc.words.len(), 1);
        let r: Vec<(RedirOp, &str)> = sc
            .redirects
            .iter()
            .map(|r| (r.op, r.target.value.as_str()))
            .collect();
        assert_eq!(
            r,
            vec![
                (RedirOp::DupOut, "1"),
                (RedirOp::Out, "out.txt"),
                (RedirOp::Append, "log"),
                (RedirOp::Out, "err"),
                (RedirOp::In, "in"),
                (RedirOp::OutErr, "all")
            ]
        );
        let fds: Vec<Option<u32>> = sc.redirects.iter().map(|r| r.fd).collect();
        assert_eq!(fds, vec![Some(2), None, None, Some(2), None, None]);
        let script = parse("exec 3<>/dev/tcp/h/80 10<&3");
        let Command::Simple(exec) = &script.lists[0].first.commands[0] else {
            panic!("expected a simple command");
        };
        let r: Vec<(Option<u32>, RedirOp, &str)> = exec
            .redirects
            .iter()
            .map(|r| (r.fd, r.op, r.target.value.as_str()))
            .collect();
        assert_eq!(
            r,
            vec![
                (Some(3), RedirOp::InOut, "/dev/tcp/h/80"),
                (Some(10), RedirOp::DupIn, "3")
            ]
        );
        assert!(!RedirOp::DupOut.writes("1"));
        assert!(RedirOp::DupOut.writes("file"));
        assert_eq!(sc.source, "cmd 2>&1 >out.txt >>log 2> err <in &>all");
    }

    #[test]
    fn heredoc_bodies_are_not_commands() {
        let script = parse("cat <<EOF > notes.md\nrm -rf /\nEOF\necho done");
        assert_eq!(
            simple_commands(&script),
            vec![
                vec!["cat".to_owned()],
                vec!["echo".to_owned(), "done".to_owned()]
            ]
        );
        let Command::Simple(sc) = &script.lists[0].first.commands[0] else {
            panic!("expected a simple command");
        };
        let doc = sc.redirects[0].heredoc.as_ref().expect("heredoc body");
        assert_eq!(doc.body, "rm -rf /\n");
        assert!(doc.expands);
        let quoted = parse("bash <<'X'\n\techo $(hi)\nX\n");
        let Command::Simple(sc) = &quoted.lists[0].first.commands[0] else {
            panic!("expected a simple command");
        };
        assert!(!sc.redirects[0].heredoc.as_ref().expect("body").expands);
    }

    #[test]
    fn functions_subshells_groups() {
        let script = parse(":(){ :|:& };:");
        assert!(matches!(
            &script.lists[0].first.commands[0],
            Command::Function { name, .. } if name == ":"
        ));
        assert_eq!(
            words(":(){ :|:& };:"),
            vec![vec![":"], vec![":"], vec![":"]]
        );
        assert_eq!(
            words("(cd a && rm x); { echo b; }"),
            vec![vec!["cd", "a"], vec!["rm", "x"], vec!["echo", "b"]]
        );
        assert_eq!(
            words("function f { f | f & }; f"),
            vec![vec!["f"], vec!["f"], vec!["f"]]
        );
    }

    #[test]
    fn comments_and_continuations() {
        assert_eq!(
            words("echo a # rm -rf /\necho \\\n b"),
            vec![vec!["echo", "a"], vec!["echo", "b"]]
        );
        assert_eq!(words("echo a#b"), vec![vec!["echo", "a#b"]]);
    }

    #[test]
    fn malformed_input_is_unreadable_but_still_built() {
        // What the grammar cannot read is flagged; what it can is still built.
        let unterminated = parse("echo 'unterminated");
        assert_eq!(unterminated.unreadable, Some(Unreadable::Syntax(4)));
        assert_eq!(words("echo 'unterminated"), vec![vec!["echo"]]);
        for line in [
            ") ) rm x ((",
            "echo $(rm -rf",
            "rm -rf / \"",
            "echo ok; rm -rf ~ )",
            "&& || ; |",
            "if true; then",
            "cat <<EOF\nno end",
        ] {
            assert!(
                matches!(parse(line).unreadable, Some(Unreadable::Syntax(_))),
                "{line:?}"
            );
        }
        assert_eq!(words("rm -rf / \""), vec![vec!["rm", "-rf", "/", ""]]);
        assert_eq!(
            words("echo ok; rm -rf ~ )"),
            vec![vec!["echo", "ok"], vec!["rm", "-rf", "~"]]
        );
        assert_eq!(
            parse("echo ok; rm -rf ~ )").unreadable,
            Some(Unreadable::Syntax(18))
        );
        assert!(parse("").lists.is_empty());
        assert_eq!(parse("").unreadable, None);
        assert_eq!(words("(echo a) > out"), vec![vec!["echo", "a"], vec![]]);
        let long = "a".repeat(MAX_PARSE_BYTES + 1);
        assert_eq!(parse(&long).unreadable, Some(Unreadable::TooLong));
    }

    #[test]
    fn read_write_redirections_are_not_errors() {
        for line in [
            "exec 3<>/dev/tcp/h/80",
            "exec {fd}<>/dev/tcp/h/80",
            "sh -i 5<> /dev/tcp/h/80 0<&5",
        ] {
            let script = parse(line);
            assert_eq!(script.unreadable, None, "{line:?}");
            let Command::Simple(sc) = &script.lists[0].first.commands[0] else {
                panic!("expected a simple command");
            };
            assert_eq!(sc.redirects[0].op, RedirOp::InOut, "{line:?}");
            assert_eq!(sc.redirects[0].target.value, "/dev/tcp/h/80", "{line:?}");
        }
        // A `<` then `>` elsewhere is still an error.
        assert!(parse("echo < > x").unreadable.is_some());
    }

    #[test]
    fn deep_nesting_is_flagged_without_overflow() {
        let deep = format!("{}x{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(parse(&deep).too_deep);
        let shallow = "((x))";
        assert!(!parse(shallow).too_deep);
        // Realistic nesting is far from the limit.
        let loops = format!(
            "{}rm x{}",
            "for a in 1; do if b; then case c in d) ".repeat(8),
            ";; esac; fi; done".repeat(8)
        );
        let script = parse(&loops);
        assert!(!script.too_deep && script.unreadable.is_none());
        assert_eq!(
            words(&loops).last(),
            Some(&vec!["rm".to_owned(), "x".to_owned()])
        );
        for (open, close) in [
            ("{ ", "; }"),
            ("! ", ""),
            ("if a; then ", "; fi"),
            ("while a; do ", "; done"),
            ("f() { ", "; }"),
            ("[[ ( ", " ) ]]"),
            ("$(( (", ") ))"),
            ("echo \"$(", ")\""),
            ("a && ", ""),
            ("a | ", ""),
            ("cat <<EOF | ", ""),
        ] {
            let deep = format!("{}x{}", open.repeat(5_000), close.repeat(5_000));
            let script = parse(&deep);
            assert!(
                script.too_deep
                    || script.unreadable.is_some()
                    || open.starts_with(['a', '!', '$'])
                    || open.starts_with("echo"),
                "{open}"
            );
        }
    }

    #[test]
    fn expanding_text_substitutions() {
        let subs = substitutions_in_text("line $(curl x) and `id` and '$(not quoted here)'");
        let sources: Vec<&str> = subs.iter().map(|s| s.source.as_str()).collect();
        assert_eq!(sources, vec!["curl x", "id", "not quoted here"]);
    }

    fn first_simple(script: &Script) -> &SimpleCommand {
        match &script.lists[0].first.commands[0] {
            Command::Simple(sc) => sc,
            other => panic!("expected a simple command, got {other:?}"),
        }
    }

    #[test]
    fn substitutions_nested_two_deep_keep_their_source() {
        let script = parse(r#"echo "a$(b "$(c 'd)')")`e \`f\``" x"#);
        let sc = first_simple(&script);
        assert_eq!(sc.words[1].value, "a$(b \"$(c 'd)')\")`e `f``");
        let subs: Vec<&str> = sc.words[1].subs.iter().map(|s| s.source.as_str()).collect();
        assert_eq!(subs, vec!["b \"$(c 'd)')\"", "e `f`"]);
        // The inner one is found when the outer source is parsed in turn.
        let inner = parse(subs[0]);
        assert_eq!(first_simple(&inner).words[1].subs[0].source, "c 'd)'");
        assert!(!sc.words[1].literal && sc.words[2].literal);
        let process = parse("cat <(curl x) >(sh)");
        let sc = first_simple(&process);
        assert_eq!(sc.words[1].value, "<(curl x)");
        assert!(sc.words[1].subs[0].process && sc.words[2].subs[0].process);
        assert_eq!(sc.words[2].subs[0].source, "sh");
    }

    #[test]
    fn heredocs_quoted_unquoted_and_tab_stripped() {
        let script = parse("cat <<-EOF | sh && echo ok\n\trm -rf /\n\t$(id)\n\tEOF\necho next");
        assert_eq!(
            simple_commands(&script),
            vec![
                vec!["cat"],
                vec!["sh"],
                vec!["echo", "ok"],
                vec!["echo", "next"]
            ]
        );
        assert_eq!(script.lists[0].first.commands.len(), 2);
        assert_eq!(script.lists[0].rest.len(), 1);
        let doc = first_simple(&script).redirects[0]
            .heredoc
            .clone()
            .expect("body");
        assert_eq!(doc.body, "rm -rf /\n$(id)\n");
        assert!(doc.expands);
        assert_eq!(doc.subs, substitutions_in_text(&doc.body));
        assert_eq!(doc.subs[0].source, "id");
        for quoted in ["'EOF'", "\"EOF\"", "\\EOF", "E'O'F"] {
            let script = parse(&format!("cat <<{quoted} > out.md\n`x` $(y)\nEOF\n"));
            let sc = first_simple(&script);
            assert_eq!(sc.redirects[0].target.value, "EOF", "{quoted}");
            assert!(
                !sc.redirects[0].heredoc.as_ref().expect("body").expands,
                "{quoted}"
            );
            assert_eq!(sc.redirects[1].target.value, "out.md");
            assert_eq!(sc.source, format!("cat <<{quoted} > out.md"));
        }
        let empty = parse("cat <<EOF\nEOF");
        assert_eq!(
            first_simple(&empty).redirects[0]
                .heredoc
                .as_ref()
                .expect("body")
                .body,
            ""
        );
        let subs: Vec<String> = substitutions_in_text("a `rm x` $(b) ${c:-$(d)}\nEOF\n")
            .into_iter()
            .map(|s| s.source)
            .collect();
        assert_eq!(subs, vec!["rm x", "b", "d"]);
        let subs: Vec<String> = substitutions_in_text("$(a) `b` ${c:-`d`} $(e `f`)")
            .into_iter()
            .map(|s| s.source)
            .collect();
        assert_eq!(subs, vec!["a", "b", "d", "e `f`"]);
    }

    #[test]
    fn subshells_functions_and_background() {
        let script = parse("(cd a; rm x) & f() { g | h; } > log; function k { :; }");
        assert!(script.lists[0].background && !script.lists[1].background);
        assert!(
            matches!(&script.lists[0].first.commands[0], Command::Subshell(s) if s.lists.len() == 2)
        );
        let Command::Function { name, body } = &script.lists[1].first.commands[0] else {
            panic!("expected a function");
        };
        assert_eq!(name, "f");
        // The body, then its redirections as a command without words.
        assert_eq!(body.lists.len(), 2);
        assert!(
            matches!(&script.lists[2].first.commands[0], Command::Function { name, .. } if name == "k")
        );
        assert_eq!(
            words("a && b | c || d &"),
            vec![vec!["a"], vec!["b"], vec!["c"], vec!["d"]]
        );
        let list = &parse("a && b | c || d &").lists[0];
        assert!(list.background);
        assert_eq!(list.rest[0].0, Connector::And);
        assert_eq!(list.rest[0].1.commands.len(), 2);
        assert_eq!(list.rest[1].0, Connector::Or);
    }

    #[test]
    fn compound_commands_expose_every_command() {
        assert_eq!(
            words("if [ -f x ]; then rm a; elif b; then c; else d; fi"),
            vec![
                vec!["[", "-f", "x", "]"],
                vec!["rm", "a"],
                vec!["b"],
                vec!["c"],
                vec!["d"]
            ]
        );
        assert_eq!(
            words("for f in $(ls) b; do rm \"$f\"; done"),
            vec![vec!["for", "f", "in", "$(ls)", "b"], vec!["rm", "$f"]]
        );
        assert_eq!(
            words("while read l; do echo \"$l\"; done < f"),
            vec![vec!["read", "l"], vec!["echo", "$l"], vec![]]
        );
        assert_eq!(
            words("case \"$x\" in a|b) rm a;; *) rm b;; esac"),
            vec![
                vec!["case", "$x", "in", "a", "b", "*"],
                vec!["rm", "a"],
                vec!["rm", "b"]
            ]
        );
        assert_eq!(
            words("[[ $(id -u) -eq 0 && -f x ]] && ! rm y"),
            vec![
                vec!["[[", "$(id -u)", "-eq", "0", "&&", "-f", "x", "]]"],
                vec!["!", "rm", "y"]
            ]
        );
        assert_eq!(
            words("export A=\"$(date)\" B; local c=1; unset D; X=1 Y=2"),
            vec![
                vec!["export", "A=$(date)", "B"],
                vec!["local", "c=1"],
                vec!["unset", "D"],
                vec!["X=1", "Y=2"]
            ]
        );
        assert_eq!(
            words("(( i += $(n) ))"),
            vec![vec!["((", "i", "+=", "$(n)", "))"]]
        );
        assert_eq!(words("a=(x $(y))"), vec![vec!["a=(x $(y))"]]);
    }

    #[test]
    fn line_continuations_inside_words_join_them() {
        assert_eq!(words("r\\\nm -r\\\nf /"), vec![vec!["rm", "-rf", "/"]]);
        assert_eq!(words("echo a \\\nb"), vec![vec!["echo", "a", "b"]]);
        assert_eq!(
            words("echo \"a\\\nb\" x\\\n\\\ny"),
            vec![vec!["echo", "ab", "xy"]]
        );
    }

    #[test]
    fn redirections_the_grammar_places_oddly() {
        // Around a pipeline: they belong to its last command.
        let script = parse("curl x | tee >(sh) >/dev/null");
        let Command::Simple(tee) = &script.lists[0].first.commands[1] else {
            panic!("expected a simple command");
        };
        assert_eq!(tee.redirects[0].target.value, "/dev/null");
        assert_eq!(tee.source, "tee >(sh) >/dev/null");
        // A descriptor number before `<`, read as a word by the grammar.
        let exec = parse("exec 0</dev/tcp/h/80");
        let sc = first_simple(&exec);
        assert_eq!(sc.words.len(), 1);
        assert_eq!(sc.redirects[0].fd, Some(0));
        let dup = parse("sh >& /dev/tcp/h/1 0>&1");
        let sc = first_simple(&dup);
        let r: Vec<(Option<u32>, RedirOp, &str)> = sc
            .redirects
            .iter()
            .map(|r| (r.fd, r.op, r.target.value.as_str()))
            .collect();
        assert_eq!(
            r,
            vec![
                (None, RedirOp::DupOut, "/dev/tcp/h/1"),
                (Some(0), RedirOp::DupOut, "1")
            ]
        );
        // Words after a target are arguments.
        assert_eq!(words("echo > f hello"), vec![vec!["echo", "hello"]]);
        assert_eq!(
            first_simple(&parse("exec 3>&-")).redirects[0].target.value,
            "-"
        );
    }

    #[test]
    fn heredoc_lines_the_grammar_misreads_are_rewritten() {
        let script = parse("python3 - <<'EOF' 2>&1 | tail -20\nimport os\nEOF");
        assert_eq!(script.unreadable, None);
        assert_eq!(
            simple_commands(&script),
            vec![vec!["python3", "-"], vec!["tail", "-20"]]
        );
        let sc = first_simple(&script);
        assert_eq!(sc.redirects.len(), 2);
        assert_eq!(
            sc.redirects[1].heredoc.as_ref().expect("body").body,
            "import os\n"
        );
        let script = parse("cat > run.sh <<'EOF'; chmod +x run.sh\nrm -rf /\nEOF\necho z");
        assert_eq!(script.unreadable, None);
        assert_eq!(
            simple_commands(&script),
            vec![
                vec!["cat"],
                vec!["chmod", "+x", "run.sh"],
                vec!["echo", "z"]
            ]
        );
        let script = parse("cat <<EOF | sh; echo x\nhi\nEOF");
        assert_eq!(script.unreadable, None);
        assert_eq!(
            simple_commands(&script),
            vec![vec!["cat"], vec!["sh"], vec!["echo", "x"]]
        );
        // Not rewritten: a redirection of the standard input, a stray quote.
        assert!(parse("cat <<EOF < x | sh\nhi\nEOF").unreadable.is_some());
        assert!(parse("cat <<EOF; echo \"\nhi\nEOF").unreadable.is_some());
        assert!(parse("cat <<A <<B\nx\nA\ny\nB").unreadable.is_some());
        assert!(parse("cat <<EOF & echo\nx\nEOF").unreadable.is_some());
    }
}
