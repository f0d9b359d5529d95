//! A small, lenient shell tokenizer and parser, enough to see which simple
//! commands a command line runs. It owns the syntax only (quotes, escapes,
//! operators, redirections, here-documents, `$(…)`, backticks, process
//! substitution, subshells, groups, function definitions); what the commands
//! mean is `hard_blocks`' business, and nothing here runs or expands anything.
//!
//! Parsing never fails: malformed input (an unterminated quote, a stray `)`) is
//! read as far as it makes sense, the way a careful reader would, so that a
//! hostile line cannot hide a command behind a syntax error. Variables are kept
//! as written (`$HOME` stays `$HOME`); substitutions are recorded with their
//! source text so the analysis can parse them in turn.

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
}

/// The body of a here-document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HereDoc {
    /// The lines between the operator's line and the delimiter.
    pub(crate) body: String,
    /// False when the delimiter was quoted (no expansion, no substitution).
    pub(crate) expands: bool,
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
    /// The command's source text (from its first to its last token).
    pub(crate) source: String,
}

/// One element of a pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// A simple command.
    Simple(SimpleCommand),
    /// `( … )`: runs in a child shell.
    Subshell(Script),
    /// `{ …; }`: runs in the current shell.
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

/// A parsed command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Script {
    /// And-or lists separated by `;`, `&` or newlines.
    pub(crate) lists: Vec<AndOr>,
    /// True when nesting went past [`MAX_PARSE_DEPTH`] and the rest was read flat.
    pub(crate) too_deep: bool,
}

/// Deepest nesting of subshells, groups and function bodies the parser follows.
/// Deeper input is still read (flattened) and flagged in `Script::too_deep`.
pub const MAX_PARSE_DEPTH: usize = 32;

/// Parses a command line. Never fails.
pub fn parse(source: &str) -> Script {
    let tokens = Lexer::new(source).run();
    let mut parser = Parser {
        tokens,
        pos: 0,
        source,
        too_deep: false,
    };
    let mut script = parser.script(0, Terminator::End);
    script.too_deep |= parser.too_deep;
    script
}

/// The substitutions in text that undergoes expansion (an unquoted here-document
/// body, the inside of `${…}`).
pub fn substitutions_in_text(text: &str) -> Vec<Substitution> {
    let mut lexer = Lexer::new(text);
    let mut word = Word::default();
    lexer.double_quoted(&mut word, false);
    word.subs
}

// ---------------------------------------------------------------- tokens

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    AndIf,
    OrIf,
    Semi,
    Amp,
    Pipe,
    LParen,
    RParen,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Word(Word),
    Op {
        op: Op,
        start: usize,
        end: usize,
    },
    Redir {
        op: RedirOp,
        fd: Option<u32>,
        start: usize,
        end: usize,
        heredoc: Option<HereDoc>,
    },
    Newline,
}

struct PendingHereDoc {
    token: usize,
    delimiter: String,
    strip_tabs: bool,
    expands: bool,
}

struct Lexer {
    chars: Vec<(usize, char)>,
    len: usize,
    pos: usize,
    tokens: Vec<Tok>,
    /// Index of a `<<` token whose delimiter word comes next, and whether it strips tabs.
    heredoc_op: Option<(usize, bool)>,
    /// The descriptor number read just before a redirection operator.
    pending_fd: Option<u32>,
    pending: Vec<PendingHereDoc>,
}

fn is_meta(c: char) -> bool {
    matches!(
        c,
        ' ' | '\t' | '\n' | ';' | '&' | '|' | '(' | ')' | '<' | '>'
    )
}

impl Lexer {
    fn new(source: &str) -> Self {
        Self {
            chars: source.char_indices().collect(),
            len: source.len(),
            pos: 0,
            tokens: Vec::new(),
            heredoc_op: None,
            pending_fd: None,
            pending: Vec::new(),
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).map(|&(_, c)| c)
    }

    fn peek_at(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).map(|&(_, c)| c)
    }

    /// Byte offset of the current position.
    fn offset(&self) -> usize {
        self.chars.get(self.pos).map_or(self.len, |&(i, _)| i)
    }

    fn run(mut self) -> Vec<Tok> {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' | '\r' => self.pos += 1,
                '\\' if self.peek_at(1) == Some('\n') => self.pos += 2,
                '\n' => {
                    self.pos += 1;
                    self.tokens.push(Tok::Newline);
                    self.read_heredoc_bodies();
                }
                '#' => {
                    while self.peek().is_some_and(|c| c != '\n') {
                        self.pos += 1;
                    }
                }
                ';' => {
                    let start = self.offset();
                    self.pos += 1;
                    // `;;`, `;&`, `;;&` end a case branch: a separator all the same.
                    while matches!(self.peek(), Some(';' | '&')) {
                        self.pos += 1;
                    }
                    self.push_op(Op::Semi, start);
                }
                '&' => {
                    let start = self.offset();
                    match self.peek_at(1) {
                        Some('&') => {
                            self.pos += 2;
                            self.push_op(Op::AndIf, start);
                        }
                        Some('>') => {
                            self.pos += 2;
                            let op = if self.peek() == Some('>') {
                                self.pos += 1;
                                RedirOp::AppendErr
                            } else {
                                RedirOp::OutErr
                            };
                            self.push_redir(op, start);
                        }
                        _ => {
                            self.pos += 1;
                            self.push_op(Op::Amp, start);
                        }
                    }
                }
                '|' => {
                    let start = self.offset();
                    match self.peek_at(1) {
                        Some('|') => {
                            self.pos += 2;
                            self.push_op(Op::OrIf, start);
                        }
                        Some('&') => {
                            self.pos += 2;
                            self.push_op(Op::Pipe, start);
                        }
                        _ => {
                            self.pos += 1;
                            self.push_op(Op::Pipe, start);
                        }
                    }
                }
                '(' => {
                    let start = self.offset();
                    self.pos += 1;
                    self.push_op(Op::LParen, start);
                }
                ')' => {
                    let start = self.offset();
                    self.pos += 1;
                    self.push_op(Op::RParen, start);
                }
                '<' | '>' if self.peek_at(1) != Some('(') => self.redirection(),
                _ => self.word_token(),
            }
        }
        self.read_heredoc_bodies();
        self.tokens
    }

    fn push_op(&mut self, op: Op, start: usize) {
        let end = self.offset();
        self.tokens.push(Tok::Op { op, start, end });
    }

    fn push_redir(&mut self, op: RedirOp, start: usize) {
        let end = self.offset();
        self.tokens.push(Tok::Redir {
            op,
            fd: self.pending_fd.take(),
            start,
            end,
            heredoc: None,
        });
    }

    fn redirection(&mut self) {
        let start = self.offset();
        let first = self.peek();
        self.pos += 1;
        let next = self.peek();
        let op = match (first, next) {
            (Some('<'), Some('<')) => {
                self.pos += 1;
                match self.peek() {
                    Some('<') => {
                        self.pos += 1;
                        RedirOp::HereString
                    }
                    Some('-') => {
                        self.pos += 1;
                        self.heredoc_op = Some((self.tokens.len(), true));
                        RedirOp::HereDoc
                    }
                    _ => {
                        self.heredoc_op = Some((self.tokens.len(), false));
                        RedirOp::HereDoc
                    }
                }
            }
            (Some('<'), Some('>')) => {
                self.pos += 1;
                RedirOp::InOut
            }
            (Some('<'), Some('&')) => {
                self.pos += 1;
                RedirOp::DupIn
            }
            (Some('<'), _) => RedirOp::In,
            (_, Some('>')) => {
                self.pos += 1;
                RedirOp::Append
            }
            (_, Some('|')) => {
                self.pos += 1;
                RedirOp::Clobber
            }
            (_, Some('&')) => {
                self.pos += 1;
                RedirOp::DupOut
            }
            _ => RedirOp::Out,
        };
        self.push_redir(op, start);
    }

    fn word_token(&mut self) {
        // A run of digits directly before `<` or `>` names a file descriptor.
        let mut ahead = 0;
        while self.peek_at(ahead).is_some_and(|c| c.is_ascii_digit()) {
            ahead += 1;
        }
        if ahead > 0
            && matches!(self.peek_at(ahead), Some('<' | '>'))
            && self.peek_at(ahead + 1) != Some('(')
        {
            let digits: String = (0..ahead).filter_map(|i| self.peek_at(i)).collect();
            self.pending_fd = digits.parse().ok();
            self.pos += ahead;
            return;
        }
        let start = self.offset();
        let mut word = Word {
            start,
            ..Word::default()
        };
        self.word_body(&mut word);
        word.end = self.offset();
        if let Some((token, strip_tabs)) = self.heredoc_op.take() {
            self.pending.push(PendingHereDoc {
                token,
                delimiter: word.value.clone(),
                strip_tabs,
                expands: !word.quoted,
            });
        }
        self.tokens.push(Tok::Word(word));
    }

    /// Reads one word up to an unquoted metacharacter.
    fn word_body(&mut self, word: &mut Word) {
        while let Some(c) = self.peek() {
            match c {
                '\\' => {
                    self.pos += 1;
                    match self.peek() {
                        Some('\n') => self.pos += 1,
                        Some(next) => {
                            word.value.push(next);
                            word.quoted = true;
                            self.pos += 1;
                        }
                        None => word.value.push('\\'),
                    }
                }
                '\'' => {
                    self.pos += 1;
                    word.quoted = true;
                    while let Some(c) = self.peek() {
                        self.pos += 1;
                        if c == '\'' {
                            break;
                        }
                        word.value.push(c);
                    }
                }
                '"' => {
                    self.pos += 1;
                    word.quoted = true;
                    self.double_quoted(word, true);
                }
                '$' => self.dollar(word, false),
                '`' => self.backtick(word),
                '<' | '>' if self.peek_at(1) == Some('(') => {
                    let opener = c;
                    self.pos += 2;
                    let inner = self.balanced_paren();
                    word.value.push(opener);
                    word.value.push('(');
                    word.value.push_str(&inner);
                    word.value.push(')');
                    word.subs.push(Substitution {
                        process: true,
                        source: inner,
                    });
                }
                c if is_meta(c) => break,
                c => {
                    word.value.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    /// Reads the inside of double quotes (after the opening quote). With
    /// `closing` false, reads to the end of the input (here-document bodies).
    fn double_quoted(&mut self, word: &mut Word, closing: bool) {
        while let Some(c) = self.peek() {
            match c {
                '"' if closing => {
                    self.pos += 1;
                    return;
                }
                '\\' => {
                    self.pos += 1;
                    match self.peek() {
                        Some('\n') => self.pos += 1,
                        Some(next @ ('$' | '`' | '"' | '\\')) => {
                            word.value.push(next);
                            self.pos += 1;
                        }
                        Some(next) => {
                            word.value.push('\\');
                            word.value.push(next);
                            self.pos += 1;
                        }
                        None => word.value.push('\\'),
                    }
                }
                '$' => self.dollar(word, true),
                '`' => self.backtick(word),
                c => {
                    word.value.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    /// Reads what follows a `$`.
    fn dollar(&mut self, word: &mut Word, in_double_quotes: bool) {
        self.pos += 1;
        match self.peek() {
            Some('(') => {
                self.pos += 1;
                let inner = self.balanced_paren();
                word.value.push_str("$(");
                word.value.push_str(&inner);
                word.value.push(')');
                word.subs.push(Substitution {
                    process: false,
                    source: inner,
                });
            }
            Some('{') => {
                self.pos += 1;
                let inner = self.balanced_brace();
                word.subs.extend(substitutions_in_text(&inner));
                word.value.push_str("${");
                word.value.push_str(&inner);
                word.value.push('}');
            }
            Some('\'') if !in_double_quotes => {
                self.pos += 1;
                word.quoted = true;
                self.ansi_c(word);
            }
            Some('"') if !in_double_quotes => {
                self.pos += 1;
                word.quoted = true;
                self.double_quoted(word, true);
            }
            _ => word.value.push('$'),
        }
    }

    /// Reads a backtick substitution (after the opening backtick).
    fn backtick(&mut self, word: &mut Word) {
        self.pos += 1;
        let mut inner = String::new();
        while let Some(c) = self.peek() {
            self.pos += 1;
            match c {
                '`' => break,
                '\\' => match self.peek() {
                    Some(next @ ('`' | '\\' | '$')) => {
                        inner.push(next);
                        self.pos += 1;
                    }
                    _ => inner.push('\\'),
                },
                c => inner.push(c),
            }
        }
        word.value.push('`');
        word.value.push_str(&inner);
        word.value.push('`');
        word.subs.push(Substitution {
            process: false,
            source: inner,
        });
    }

    /// Reads up to the `)` matching an already consumed `(`; returns the inside.
    fn balanced_paren(&mut self) -> String {
        let mut inner = String::new();
        let mut depth = 1usize;
        while let Some(c) = self.peek() {
            self.pos += 1;
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        return inner;
                    }
                }
                '\\' => {
                    inner.push(c);
                    if let Some(next) = self.peek() {
                        inner.push(next);
                        self.pos += 1;
                    }
                    continue;
                }
                '\'' | '"' | '`' => {
                    inner.push(c);
                    self.copy_quoted(c, &mut inner);
                    continue;
                }
                _ => {}
            }
            inner.push(c);
        }
        inner
    }

    /// Reads up to the `}` matching an already consumed `${`; returns the inside.
    fn balanced_brace(&mut self) -> String {
        let mut inner = String::new();
        let mut depth = 1usize;
        while let Some(c) = self.peek() {
            self.pos += 1;
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return inner;
                    }
                }
                '\\' => {
                    inner.push(c);
                    if let Some(next) = self.peek() {
                        inner.push(next);
                        self.pos += 1;
                    }
                    continue;
                }
                '\'' | '"' => {
                    inner.push(c);
                    self.copy_quoted(c, &mut inner);
                    continue;
                }
                _ => {}
            }
            inner.push(c);
        }
        inner
    }

    /// Copies a quoted stretch verbatim up to and including the closing `quote`.
    fn copy_quoted(&mut self, quote: char, out: &mut String) {
        while let Some(c) = self.peek() {
            self.pos += 1;
            out.push(c);
            if c == '\\' && quote != '\'' {
                if let Some(next) = self.peek() {
                    out.push(next);
                    self.pos += 1;
                }
            } else if c == quote {
                return;
            }
        }
    }

    /// Reads an ANSI-C quoted string `$'…'` (after the opening quote).
    fn ansi_c(&mut self, word: &mut Word) {
        while let Some(c) = self.peek() {
            self.pos += 1;
            match c {
                '\'' => return,
                '\\' => {
                    let Some(esc) = self.peek() else {
                        word.value.push('\\');
                        return;
                    };
                    self.pos += 1;
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
                        word.value.push(ch);
                        continue;
                    }
                    // Bash's numeric escapes: `\xHH`, `\uHHHH`, `\UHHHHHHHH`, `\NNN` (octal).
                    let (radix, max_digits) = match esc {
                        'x' => (16, 2),
                        'u' => (16, 4),
                        'U' => (16, 8),
                        '0'..='7' => {
                            self.pos -= 1;
                            (8, 3)
                        }
                        _ => {
                            word.value.push('\\');
                            word.value.push(esc);
                            continue;
                        }
                    };
                    let mut digits = String::new();
                    while digits.len() < max_digits
                        && self.peek().is_some_and(|d| d.is_digit(radix))
                    {
                        if let Some(d) = self.peek() {
                            digits.push(d);
                        }
                        self.pos += 1;
                    }
                    match u32::from_str_radix(&digits, radix)
                        .ok()
                        .and_then(char::from_u32)
                    {
                        Some(ch) => word.value.push(ch),
                        None => {
                            word.value.push('\\');
                            word.value.push(esc);
                        }
                    }
                }
                c => word.value.push(c),
            }
        }
    }

    /// Reads the bodies of here-documents opened on the line just ended.
    fn read_heredoc_bodies(&mut self) {
        for pending in std::mem::take(&mut self.pending) {
            let mut body = String::new();
            loop {
                if self.peek().is_none() {
                    break;
                }
                let mut line = String::new();
                while let Some(c) = self.peek() {
                    self.pos += 1;
                    if c == '\n' {
                        break;
                    }
                    line.push(c);
                }
                let compared = if pending.strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    line.as_str()
                };
                if compared == pending.delimiter {
                    break;
                }
                body.push_str(compared);
                body.push('\n');
            }
            if let Some(Tok::Redir { heredoc, .. }) = self.tokens.get_mut(pending.token) {
                *heredoc = Some(HereDoc {
                    body,
                    expands: pending.expands,
                });
            }
        }
    }
}

// ---------------------------------------------------------------- parser

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Terminator {
    End,
    RParen,
    RBrace,
}

struct Parser<'a> {
    tokens: Vec<Tok>,
    pos: usize,
    source: &'a str,
    too_deep: bool,
}

fn token_span(tok: &Tok) -> Option<(usize, usize)> {
    match tok {
        Tok::Word(w) => Some((w.start, w.end)),
        Tok::Op { start, end, .. } | Tok::Redir { start, end, .. } => Some((*start, *end)),
        Tok::Newline => None,
    }
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos)
    }

    fn peek_word(&self, offset: usize) -> Option<&str> {
        match self.tokens.get(self.pos + offset) {
            Some(Tok::Word(w)) => Some(w.value.as_str()),
            _ => None,
        }
    }

    fn is_op(&self, offset: usize, op: Op) -> bool {
        matches!(self.tokens.get(self.pos + offset), Some(Tok::Op { op: o, .. }) if *o == op)
    }

    fn skip_newlines(&mut self) {
        while matches!(self.peek(), Some(Tok::Newline)) {
            self.pos += 1;
        }
    }

    fn script(&mut self, depth: usize, terminator: Terminator) -> Script {
        let mut script = Script::default();
        loop {
            while matches!(
                self.peek(),
                Some(
                    Tok::Newline
                        | Tok::Op {
                            op: Op::Semi | Op::Amp,
                            ..
                        }
                )
            ) {
                self.pos += 1;
            }
            let Some(tok) = self.peek() else { break };
            match (tok, terminator) {
                (Tok::Op { op: Op::RParen, .. }, Terminator::RParen) => {
                    self.pos += 1;
                    break;
                }
                (Tok::Word(w), Terminator::RBrace) if w.value == "}" && !w.quoted => {
                    self.pos += 1;
                    break;
                }
                // A stray `)` (a case pattern, unbalanced input) separates commands.
                (Tok::Op { op: Op::RParen, .. }, _) => {
                    self.pos += 1;
                    continue;
                }
                _ => {}
            }
            let before = self.pos;
            let mut list = self.and_or(depth);
            if self.is_op(0, Op::Amp) {
                self.pos += 1;
                list.background = true;
            }
            if !(list.first.commands.is_empty() && list.rest.is_empty()) {
                script.lists.push(list);
            }
            if self.pos == before {
                self.pos += 1;
            }
        }
        script
    }

    fn and_or(&mut self, depth: usize) -> AndOr {
        let first = self.pipeline(depth);
        let mut rest = Vec::new();
        loop {
            let connector = if self.is_op(0, Op::AndIf) {
                Connector::And
            } else if self.is_op(0, Op::OrIf) {
                Connector::Or
            } else {
                break;
            };
            self.pos += 1;
            self.skip_newlines();
            rest.push((connector, self.pipeline(depth)));
        }
        AndOr {
            first,
            rest,
            background: false,
        }
    }

    fn pipeline(&mut self, depth: usize) -> Pipeline {
        let mut pipeline = Pipeline::default();
        if let Some(command) = self.command(depth) {
            pipeline.commands.push(command);
        }
        while self.is_op(0, Op::Pipe) {
            self.pos += 1;
            self.skip_newlines();
            if let Some(command) = self.command(depth) {
                pipeline.commands.push(command);
            }
        }
        pipeline
    }

    fn command(&mut self, depth: usize) -> Option<Command> {
        if depth >= MAX_PARSE_DEPTH {
            self.too_deep = true;
            return self.simple().map(Command::Simple);
        }
        if self.is_op(0, Op::LParen) {
            self.pos += 1;
            // Redirections after the `)` stay in the token stream and are read
            // as a simple command without words, so their targets are checked.
            let body = self.script(depth + 1, Terminator::RParen);
            return Some(Command::Subshell(body));
        }
        match self.peek() {
            Some(Tok::Word(w)) if w.value == "{" && !w.quoted => {
                self.pos += 1;
                let body = self.script(depth + 1, Terminator::RBrace);
                return Some(Command::Group(body));
            }
            _ => {}
        }
        if self.peek_word(0) == Some("function")
            && let Some(name) = self.peek_word(1).map(str::to_owned)
        {
            self.pos += 2;
            if self.is_op(0, Op::LParen) && self.is_op(1, Op::RParen) {
                self.pos += 2;
            }
            return Some(self.function(name, depth));
        }
        if let Some(name) = self.peek_word(0).map(str::to_owned)
            && self.is_op(1, Op::LParen)
            && self.is_op(2, Op::RParen)
        {
            self.pos += 3;
            return Some(self.function(name, depth));
        }
        self.simple().map(Command::Simple)
    }

    fn function(&mut self, name: String, depth: usize) -> Command {
        self.skip_newlines();
        let body = match self.command(depth + 1) {
            Some(command) => Script {
                lists: vec![AndOr {
                    first: Pipeline {
                        commands: vec![command],
                    },
                    rest: Vec::new(),
                    background: false,
                }],
                too_deep: false,
            },
            None => Script::default(),
        };
        Command::Function { name, body }
    }

    fn simple(&mut self) -> Option<SimpleCommand> {
        let mut words = Vec::new();
        let mut redirects = Vec::new();
        let mut span: Option<(usize, usize)> = None;
        while let Some(tok) = self.peek() {
            let tok_span = token_span(tok);
            match tok {
                Tok::Word(w) => {
                    words.push(w.clone());
                    self.pos += 1;
                }
                Tok::Redir {
                    op, fd, heredoc, ..
                } => {
                    let (op, fd) = (*op, *fd);
                    let heredoc = heredoc.clone();
                    self.pos += 1;
                    let target = match self.peek() {
                        Some(Tok::Word(w)) => {
                            let w = w.clone();
                            self.pos += 1;
                            span = extend(span, Some((w.start, w.end)));
                            w
                        }
                        _ => Word::default(),
                    };
                    redirects.push(Redirect {
                        op,
                        fd,
                        target,
                        heredoc,
                    });
                }
                Tok::Op { .. } | Tok::Newline => break,
            }
            span = extend(span, tok_span);
        }
        if words.is_empty() && redirects.is_empty() {
            return None;
        }
        let source = span
            .and_then(|(start, end)| self.source.get(start..end))
            .unwrap_or_default()
            .trim()
            .to_owned();
        Some(SimpleCommand {
            words,
            redirects,
            source,
        })
    }
}

fn extend(span: Option<(usize, usize)>, more: Option<(usize, usize)>) -> Option<(usize, usize)> {
    match (span, more) {
        (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
        (None, s) | (s, None) => s,
    }
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
    fn malformed_input_is_read_leniently() {
        assert_eq!(
            words("echo 'unterminated"),
            vec![vec!["echo", "unterminated"]]
        );
        assert_eq!(words(") ) rm x (("), vec![vec!["rm", "x"]]);
        assert_eq!(words("echo $(rm -rf"), vec![vec!["echo", "$(rm -rf)"]]);
        assert!(parse("").lists.is_empty());
        assert!(words("&& || ; |").is_empty());
        assert_eq!(words("(echo a) > out"), vec![vec!["echo", "a"], vec![]]);
    }

    #[test]
    fn deep_nesting_is_flagged_without_overflow() {
        let deep = format!("{}x{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(parse(&deep).too_deep);
        let shallow = "((x))";
        assert!(!parse(shallow).too_deep);
    }

    #[test]
    fn expanding_text_substitutions() {
        let subs = substitutions_in_text("line $(curl x) and `id` and '$(not quoted here)'");
        let sources: Vec<&str> = subs.iter().map(|s| s.source.as_str()).collect();
        assert_eq!(sources, vec!["curl x", "id", "not quoted here"]);
    }
}
