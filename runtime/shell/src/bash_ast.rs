//! A strict reading of a command line with the `tree-sitter-bash` grammar, for
//! the decisions that *grant* something: an allow rule with a wildcard, and the
//! read-only classification. Where [`super::syntax`] builds every command
//! it can from the same tree for hard blocks (and a line it cannot read is
//! refused outright), this module says when it is *not sure*: a syntax error, a node kind
//! it does not know, a command or process substitution, an arithmetic
//! context, a parameter expansion with an operator that evaluates code. Such a
//! line gets a [`Doubt`], and a line with a doubt is never granted anything on
//! the strength of a pattern.
//!
//! For a line without doubt it lists every simple command (its assignments,
//! its words when they are literal) and every redirection, and says whether
//! the line is *plain*: only simple commands joined by `|`, `&&`, `||`, `;` and
//! newlines, nothing in the background, no compound commands, functions or
//! negation. It evaluates nothing and touches no file; where redirections point
//! is `engine`'s question.

use std::cell::RefCell;

use tree_sitter::{Node, Parser, Tree};

/// Lines longer than this are not parsed strictly (they get a doubt); hard
/// blocks still read them.
pub(crate) const MAX_STRICT_BYTES: usize = 64 * 1024;

/// Named node kinds whose meaning the analysis knows. Anything else is a doubt.
const KNOWN_NAMED: &[&str] = &[
    "program",
    "list",
    "pipeline",
    "command",
    "command_name",
    "word",
    "string",
    "string_content",
    "raw_string",
    "ansi_c_string",
    "concatenation",
    "simple_expansion",
    "expansion",
    "variable_name",
    "special_variable_name",
    "variable_assignment",
    "variable_assignments",
    "number",
    "brace_expression",
    "redirected_statement",
    "file_redirect",
    "file_descriptor",
    "heredoc_redirect",
    "heredoc_start",
    "heredoc_body",
    "heredoc_content",
    "heredoc_end",
    "herestring_redirect",
    "comment",
    "subshell",
    "compound_statement",
    "negated_command",
    "if_statement",
    "elif_clause",
    "else_clause",
    "while_statement",
    "for_statement",
    "do_group",
    "case_statement",
    "case_item",
    "function_definition",
    "declaration_command",
    "unset_command",
    "test_command",
    "test_operator",
    "binary_expression",
    "unary_expression",
    "parenthesized_expression",
    "ternary_expression",
    "postfix_expression",
];

/// Named node kinds of a plain line (see the module docs).
const PLAIN_NAMED: &[&str] = &[
    "program",
    "list",
    "pipeline",
    "command",
    "command_name",
    "word",
    "string",
    "string_content",
    "raw_string",
    "ansi_c_string",
    "concatenation",
    "simple_expansion",
    "expansion",
    "variable_name",
    "special_variable_name",
    "variable_assignment",
    "number",
    "brace_expression",
    "redirected_statement",
    "file_redirect",
    "file_descriptor",
    "heredoc_redirect",
    "heredoc_start",
    "heredoc_body",
    "heredoc_content",
    "heredoc_end",
    "herestring_redirect",
    "comment",
];

/// Children of `${…}` that only read a variable (a default, an error, a
/// length). Operators such as `@P` (prompt expansion, which runs
/// substitutions) or subscripts (arithmetic) are doubts.
const PLAIN_EXPANSION_PARTS: &[&str] = &[
    "${",
    "}",
    "variable_name",
    "special_variable_name",
    ":-",
    "-",
    ":?",
    "?",
    ":+",
    "+",
    "#",
    "word",
    "string",
    "raw_string",
    "string_content",
    "simple_expansion",
    "concatenation",
];

/// Why a line is not read with confidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Doubt {
    /// The grammar found a syntax error (or had to invent a missing token).
    SyntaxError,
    /// `$(…)` or backticks: a command whose output becomes part of the line.
    CommandSubstitution,
    /// `<(…)` or `>(…)`.
    ProcessSubstitution,
    /// `$((…))`, `((…))`, `[[ … ]]` and other arithmetic or test contexts,
    /// which evaluate variables as code.
    Arithmetic,
    /// A parameter expansion with an operator that is not a plain read.
    ExpansionOperator,
    /// A node kind the analysis does not know.
    UnknownSyntax(String),
    /// A redirection followed by more words (`cmd > out more`), which the
    /// grammar reads as part of the redirection.
    WordsAfterRedirection,
    /// Longer than `MAX_STRICT_BYTES`.
    TooLong,
    /// The parser gave no tree.
    NoTree,
}

impl Doubt {
    /// A clause for a reason: "it contains `$(…)` or backticks".
    pub fn describe(&self) -> String {
        match self {
            Self::SyntaxError => "the shell syntax does not parse cleanly".to_owned(),
            Self::CommandSubstitution => "it contains a command substitution (`$(…)` or backticks)".to_owned(),
            Self::ProcessSubstitution => "it contains a process substitution (`<(…)` or `>(…)`)".to_owned(),
            Self::Arithmetic => "it contains an arithmetic or `[[ … ]]` expression, which can evaluate variables as code".to_owned(),
            Self::ExpansionOperator => "it contains a `${…}` expansion with an operator that can run code".to_owned(),
            Self::UnknownSyntax(kind) => format!("it uses shell syntax the checker does not know (`{kind}`)"),
            Self::WordsAfterRedirection => "words follow a redirection target, which is ambiguous".to_owned(),
            Self::TooLong => format!("it is longer than {MAX_STRICT_BYTES} bytes"),
            Self::NoTree => "the shell parser gave no result".to_owned(),
        }
    }
}

/// What a redirection does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedirectKind {
    /// `>`, `>>`, `>|`, `&>`, `&>>`, and `>&FILE`: writes a file.
    Write,
    /// `<`: reads a file.
    Read,
    /// `2>&1`, `>&2`, `<&0`, `>&-`: duplicates or closes a descriptor.
    Duplicate,
    /// `<<`, `<<-`, `<<<`: text given on standard input.
    Text,
    /// `<>` and anything else: reads and writes.
    ReadWrite,
}

/// One redirection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirection {
    /// What it does.
    pub kind: RedirectKind,
    /// The target after quote removal, when it is literal.
    pub target: Option<String>,
}

/// One simple command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimpleCommand {
    /// How many `NAME=value` assignments precede the program.
    pub(crate) assignments: usize,
    /// The program and its arguments after quote removal; `None` for a word
    /// that holds an expansion (`$X`, `${X}`, `{1..3}`).
    pub(crate) words: Vec<Option<String>>,
}

impl SimpleCommand {
    /// The program word, when literal.
    pub fn program(&self) -> Option<&str> {
        self.words.first().and_then(|w| w.as_deref())
    }

    /// The program and its arguments after quote removal; `None` for a word
    /// that holds an expansion.
    pub fn words(&self) -> impl Iterator<Item = Option<&str>> {
        self.words.iter().map(Option::as_deref)
    }
}

/// The strict reading of one line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Syntax {
    /// Why the line is not read with confidence, if it is not (the first
    /// reason met).
    pub doubt: Option<Doubt>,
    /// Only simple commands joined by `|`, `|&`, `&&`, `||`, `;`, newlines.
    pub(crate) plain: bool,
    /// Something runs in the background (`&`).
    pub(crate) background: bool,
    /// Every simple command, in source order (meaningful without doubt).
    pub commands: Vec<SimpleCommand>,
    /// Every redirection, in source order (meaningful without doubt).
    pub redirections: Vec<Redirection>,
}

impl Syntax {
    /// Whether something on the line runs in the background (`&`).
    pub fn runs_in_background(&self) -> bool {
        self.background
    }

    /// True when the line was read with confidence.
    pub(crate) fn confident(&self) -> bool {
        self.doubt.is_none()
    }

    fn doubt(&mut self, doubt: Doubt) {
        if self.doubt.is_none() {
            self.doubt = Some(doubt);
        }
    }
}

thread_local! {
    /// One parser per thread: building one costs more than parsing a line.
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
    /// The tree of the last line hard blocks read, for the strict reading of
    /// the same line that follows (the permission engine reads each line
    /// both ways). Taken once: a line read again is parsed again.
    static HANDED: RefCell<Option<(String, Tree)>> = const { RefCell::new(None) };
}

/// Keeps the tree of a whole line for the strict reading of that line.
pub(crate) fn hand_over(source: &str, tree: &Tree) {
    if source.len() <= MAX_STRICT_BYTES {
        HANDED.with(|cell| *cell.borrow_mut() = Some((source.to_owned(), tree.clone())));
    }
}

/// The tree handed over for `source`, if it was the last line read.
fn take_handed(source: &str) -> Option<Tree> {
    HANDED.with(|cell| match cell.borrow_mut().take() {
        Some((line, tree)) if line == source => Some(tree),
        _ => None,
    })
}

/// The `tree-sitter-bash` tree of `source`, with the thread's parser.
pub(crate) fn parse_tree(source: &str) -> Option<Tree> {
    PARSER.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            let mut parser = Parser::new();
            // Fails only when the grammar was built for an incompatible
            // library version, which the crate versions rule out; treated as
            // "no tree" (a doubt) all the same.
            parser
                .set_language(&tree_sitter_bash::LANGUAGE.into())
                .ok()?;
            *slot = Some(parser);
        }
        slot.as_mut()?.parse(source, None)
    })
}

/// Reads `source` strictly. Never fails: what cannot be read with confidence
/// gets a [`Doubt`].
pub fn analyse(source: &str) -> Syntax {
    let mut syntax = Syntax {
        plain: true,
        ..Syntax::default()
    };
    if source.len() > MAX_STRICT_BYTES {
        syntax.doubt(Doubt::TooLong);
        syntax.plain = false;
        return syntax;
    }
    let Some(tree) = take_handed(source).or_else(|| parse_tree(source)) else {
        syntax.doubt(Doubt::NoTree);
        syntax.plain = false;
        return syntax;
    };
    let root = tree.root_node();
    if root.has_error() {
        syntax.doubt(Doubt::SyntaxError);
    }
    let bytes = source;
    // Iterative walk: a deeply nested line cannot exhaust the stack.
    let mut cursor = root.walk();
    loop {
        let node = cursor.node();
        visit(node, bytes, &mut syntax);
        if cursor.goto_first_child() {
            continue;
        }
        loop {
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                if syntax.doubt.is_some() {
                    syntax.plain = false;
                }
                return syntax;
            }
        }
    }
}

/// Looks at one node (its children are visited by the walk).
fn visit(node: Node<'_>, src: &str, syntax: &mut Syntax) {
    let kind = node.kind();
    if node.is_error() || node.is_missing() {
        syntax.doubt(Doubt::SyntaxError);
        return;
    }
    if !node.is_named() {
        if kind == "&" {
            syntax.background = true;
            syntax.plain = false;
        }
        return;
    }
    match kind {
        "command_substitution" => syntax.doubt(Doubt::CommandSubstitution),
        "process_substitution" => syntax.doubt(Doubt::ProcessSubstitution),
        // The grammar leaves backticks in a here-document as text; bash runs
        // them when the delimiter is unquoted.
        "heredoc_body" if expanding_backticks(node, src) => {
            syntax.doubt(Doubt::CommandSubstitution);
        }
        "arithmetic_expansion" | "c_style_for_statement" | "subscript" => {
            syntax.doubt(Doubt::Arithmetic);
        }
        // `[[ … ]]` (not `[ … ]`, the `test` builtin, which compares
        // integers without evaluating them) and `(( … ))` evaluate
        // variables as arithmetic expressions. The expression nodes inside
        // them are judged here, by their container.
        "test_command" if last_child_kind(node) != Some("]") => {
            syntax.doubt(Doubt::Arithmetic);
        }
        "compound_statement" if first_child_kind(node) == Some("((") => {
            syntax.doubt(Doubt::Arithmetic);
        }
        "expansion" => {
            let mut cursor = node.walk();
            let plain = node
                .children(&mut cursor)
                .all(|child| PLAIN_EXPANSION_PARTS.contains(&child.kind()));
            if !plain {
                syntax.doubt(Doubt::ExpansionOperator);
            }
        }
        "command" => {
            syntax.commands.push(simple_command(node, src));
            // `ca\<newline>t`: bash reads one word where the grammar reads
            // two, so the words above are not what runs.
            if split_by_continuation(node, src) {
                syntax.doubt(Doubt::SyntaxError);
            }
        }
        "file_redirect" | "heredoc_redirect" | "herestring_redirect" => {
            if let Some(redirection) = redirection(node, src, syntax) {
                syntax.redirections.push(redirection);
            }
        }
        _ if !KNOWN_NAMED.contains(&kind) => {
            syntax.doubt(Doubt::UnknownSyntax(kind.to_owned()));
        }
        _ => {}
    }
    if !PLAIN_NAMED.contains(&kind) {
        syntax.plain = false;
    }
}

/// True when two parts of a command are separated only by backslash-newlines.
fn split_by_continuation(node: Node<'_>, src: &str) -> bool {
    let mut cursor = node.walk();
    let mut previous: Option<usize> = None;
    for child in node.children(&mut cursor) {
        if let Some(end) = previous
            && end < child.start_byte()
            && src
                .get(end..child.start_byte())
                .is_some_and(|gap| gap.split("\\\n").all(str::is_empty))
        {
            return true;
        }
        previous = Some(child.end_byte());
    }
    false
}

/// A here-document body with backticks under an unquoted delimiter.
fn expanding_backticks(body: Node<'_>, src: &str) -> bool {
    let quoted = body.parent().is_some_and(|redirect| {
        let mut cursor = redirect.walk();
        redirect
            .children(&mut cursor)
            .filter(|c| c.kind() == "heredoc_start")
            .any(|c| {
                src.get(c.byte_range())
                    .is_some_and(|t| t.contains(['\'', '"', '\\']))
            })
    });
    !quoted && src.get(body.byte_range()).is_some_and(|t| t.contains('`'))
}

fn first_child_kind(node: Node<'_>) -> Option<&'static str> {
    node.child(0).map(|c| c.kind())
}

fn last_child_kind(node: Node<'_>) -> Option<&'static str> {
    node.child(node.child_count().checked_sub(1)?)
        .map(|c| c.kind())
}

fn simple_command(node: Node<'_>, src: &str) -> SimpleCommand {
    let mut command = SimpleCommand::default();
    let mut cursor = node.walk();
    for child in node.children(&mut cursor) {
        match child.kind() {
            "variable_assignment" => command.assignments += 1,
            "command_name" => {
                let word = child.named_child(0).and_then(|w| literal(w, src));
                command.words.push(word);
            }
            "file_redirect" | "heredoc_redirect" | "herestring_redirect" | "comment" => {}
            _ if child.is_named() => command.words.push(literal(child, src)),
            _ => {}
        }
    }
    command
}

fn redirection(node: Node<'_>, src: &str, syntax: &mut Syntax) -> Option<Redirection> {
    if node.kind() != "file_redirect" {
        return Some(Redirection {
            kind: RedirectKind::Text,
            target: None,
        });
    }
    let mut operator = None;
    let mut destinations = Vec::new();
    let mut cursor = node.walk();
    for child in node.children(&mut cursor) {
        if !child.is_named() {
            operator = Some(child.kind());
        } else if child.kind() != "file_descriptor" {
            destinations.push(child);
        }
    }
    if destinations.len() > 1 {
        syntax.doubt(Doubt::WordsAfterRedirection);
    }
    let target = destinations.first().and_then(|d| literal(*d, src));
    let kind = match operator? {
        ">" | ">>" | ">|" | "&>" | "&>>" => RedirectKind::Write,
        "<" => RedirectKind::Read,
        ">&" | "<&" | ">&-" | "<&-" => {
            let fd = target.as_deref().is_some_and(|t| {
                t == "-" || (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            });
            if fd || operator == Some(">&-") || operator == Some("<&-") {
                RedirectKind::Duplicate
            } else if operator == Some("<&") {
                RedirectKind::Read
            } else {
                RedirectKind::Write
            }
        }
        _ => RedirectKind::ReadWrite,
    };
    Some(Redirection { kind, target })
}

/// The value of a word after quote removal when it holds no expansion
/// (read by the same code as the words hard blocks walk).
fn literal(node: Node<'_>, src: &str) -> Option<String> {
    super::syntax::literal_value(node, src)
}

/// Backslash removal outside quotes: `\x` is `x`, a trailing `\` stays.
pub(crate) fn unescape_unquoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('\n') => {}
                Some(next) => out.push(next),
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Backslash removal inside double quotes: only before `$`, `` ` ``, `"`,
/// `\` and a newline.
pub(crate) fn unescape_double(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.peek() {
                Some('$' | '`' | '"' | '\\') => {
                    if let Some(next) = chars.next() {
                        out.push(next);
                    }
                }
                Some('\n') => {
                    chars.next();
                }
                _ => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doubt(line: &str) -> Option<Doubt> {
        analyse(line).doubt
    }

    #[test]
    fn confident_lines() {
        for line in [
            "cargo test --all",
            "cargo test 2>&1 | tail -n 50",
            "ls -la && git status; echo done",
            "FOO=1 make -j4",
            "echo \"$HOME\" ${USER} ${X:-default}",
            "cat <<EOF > notes.md\nhello $USER\nEOF",
            "cat <<'EOF' > notes.md\nrun `make`\nEOF",
            "grep -rn 'fn main' src/ || true",
            "if [ -f x ]; then echo y; fi",
            "[ \"$a\" -eq 1 ] && [ ! -d out ]",
            "for f in *.rs; do wc -l \"$f\"; done",
            "(cd sub && make)",
            "f() { ls; }; f",
            "export A=1",
            "echo {a,b} x{1..3}",
            "# only a comment",
            "",
        ] {
            assert_eq!(doubt(line), None, "{line:?}");
        }
    }

    #[test]
    fn doubtful_lines() {
        for (line, expected) in [
            ("echo $(date)", Doubt::CommandSubstitution),
            ("echo `id`", Doubt::CommandSubstitution),
            ("echo \"$(cat ~/.ssh/id_rsa)\"", Doubt::CommandSubstitution),
            ("cat <<EOF\n$(rm -rf ~)\nEOF", Doubt::CommandSubstitution),
            ("cat <<EOF\n`rm -rf ~`\nEOF", Doubt::CommandSubstitution),
            (
                "cat <<EOF\nx `rm -rf ~` $y\nEOF",
                Doubt::CommandSubstitution,
            ),
            ("diff <(ls a) <(ls b)", Doubt::ProcessSubstitution),
            ("tee >(sh)", Doubt::ProcessSubstitution),
            ("echo $((x + 1))", Doubt::Arithmetic),
            ("[[ $x -eq 1 ]] && ls", Doubt::Arithmetic),
            ("(( i++ ))", Doubt::Arithmetic),
            ("echo ${x@P}", Doubt::ExpansionOperator),
            ("echo ${a[$i]}", Doubt::ExpansionOperator),
            ("echo $(( a[0] ))", Doubt::Arithmetic),
            ("a=(1 2)", Doubt::UnknownSyntax("array".to_owned())),
            ("ls |", Doubt::SyntaxError),
            ("ca\\\nt f", Doubt::SyntaxError),
            ("echo 'unterminated", Doubt::SyntaxError),
            ("if true; then", Doubt::SyntaxError),
            ("cargo test > out --all", Doubt::WordsAfterRedirection),
        ] {
            assert_eq!(doubt(line), Some(expected), "{line:?}");
        }
        let long = "a".repeat(MAX_STRICT_BYTES + 1);
        assert_eq!(doubt(&long), Some(Doubt::TooLong));
    }

    #[test]
    fn commands_and_words() {
        let syntax = analyse("A=1 sudo ls -la 'my dir' \"x\\\"y\" a\\ b $HOME | wc -l");
        assert!(syntax.confident() && syntax.plain && !syntax.background);
        assert_eq!(syntax.commands.len(), 2);
        assert_eq!(syntax.commands[0].assignments, 1);
        assert_eq!(
            syntax.commands[0].words,
            vec![
                Some("sudo".to_owned()),
                Some("ls".to_owned()),
                Some("-la".to_owned()),
                Some("my dir".to_owned()),
                Some("x\"y".to_owned()),
                Some("a b".to_owned()),
                None
            ]
        );
        assert_eq!(syntax.commands[1].program(), Some("wc"));
    }

    #[test]
    fn redirections() {
        let syntax = analyse("cmd <<< hi > out.txt 2>&1 < in >> log &> all 2>/dev/null >&2");
        let kinds: Vec<(RedirectKind, Option<&str>)> = syntax
            .redirections
            .iter()
            .map(|r| (r.kind, r.target.as_deref()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (RedirectKind::Text, None),
                (RedirectKind::Write, Some("out.txt")),
                (RedirectKind::Duplicate, Some("1")),
                (RedirectKind::Read, Some("in")),
                (RedirectKind::Write, Some("log")),
                (RedirectKind::Write, Some("all")),
                (RedirectKind::Write, Some("/dev/null")),
                (RedirectKind::Duplicate, Some("2")),
            ]
        );
        let to_variable = analyse("echo x > \"$OUT\"");
        assert_eq!(to_variable.redirections[0].target, None);
        let to_file = analyse("echo x >& out");
        assert_eq!(to_file.redirections[0].kind, RedirectKind::Write);
    }

    #[test]
    fn plainness() {
        assert!(analyse("ls; cat a | wc -l && pwd || echo no").plain);
        for line in [
            "ls &",
            "(ls)",
            "{ ls; }",
            "! ls",
            "f() { ls; }",
            "if a; then b; fi",
        ] {
            assert!(!analyse(line).plain, "{line:?}");
        }
        assert!(analyse("sleep 1 &").background);
    }

    #[test]
    fn a_tree_handed_over_is_read_once() {
        let line = "ls -la | wc -l";
        let fresh = analyse(line);
        let _ = super::super::syntax::parse_line(line);
        assert!(HANDED.with(|cell| cell.borrow().is_some()));
        assert_eq!(analyse(line), fresh);
        assert!(HANDED.with(|cell| cell.borrow().is_none()));
        // Another line's tree is not used, and is dropped.
        let _ = super::super::syntax::parse_line("rm -rf x");
        assert_eq!(analyse(line), fresh);
        assert!(HANDED.with(|cell| cell.borrow().is_none()));
    }

    #[test]
    fn deep_nesting_does_not_overflow() {
        for open in ["(", "$(", "{ ", "`"] {
            let close = match open {
                "(" | "$(" => ")",
                "{ " => "; }",
                _ => "`",
            };
            let deep = format!("{}x{}", open.repeat(5_000), close.repeat(5_000));
            let syntax = analyse(&deep);
            assert!(!syntax.plain, "{open}");
        }
    }
}
