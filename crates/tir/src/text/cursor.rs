//! One token of lookahead over a text form, and parse errors with a line and a column.
//!
//! Both IRs parse by recursive descent over their own token enum; what they share is this
//! cursor: the current token and its span, moving on past trivia, matching punctuation and
//! keywords, and failing with a byte offset that [`Failure::locate`] turns into the
//! [`ParseError`] the caller sees.

use super::lex::{LexError, line_col, skip_trivia};

/// A token enum of one text form, as the [`Cursor`] needs to see it.
pub trait Token<'a>: Sized {
    /// Lexes the token at `start` (trivia already skipped) and returns it with its end
    /// offset. At the end of the source this is the end-of-input token. Text that is not a
    /// token is an error token ([`Token::error`]), never a panic.
    fn lex(src: &'a str, start: usize) -> (Self, usize);
    /// Whether this is the punctuation byte `c`.
    fn is_punct(&self, c: u8) -> bool;
    /// Whether this is the identifier `kw`.
    fn is_keyword(&self, kw: &str) -> bool;
    /// How an error message names the token, such as `` `%3` `` or `end of input`.
    fn describe(&self) -> String;
    /// The lexing error, if this token is text that is not a token.
    fn error(&self) -> Option<&LexError>;
}

/// An error before it is given a line and column: a byte offset and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Byte offset into the source.
    pub at: usize,
    /// What is wrong.
    pub message: String,
}

impl Failure {
    /// The error as the caller sees it, at a line and column of `src`.
    pub fn locate(self, src: &str) -> ParseError {
        let (line, column) = line_col(src, self.at);
        ParseError { line, column, message: self.message }
    }
}

/// What the parsing methods return.
pub type PResult<T> = Result<T, Failure>;

/// An error in a text form, at a position in the source: a syntax error, or an error the
/// parser checks beyond syntax (an undefined value, a variable declared with two types).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct ParseError {
    /// 1-based line.
    pub line: u32,
    /// 1-based column, counted in characters.
    pub column: u32,
    /// What is wrong.
    pub message: String,
}

/// The source and one token of lookahead, spanning `start..end`.
///
/// The lexer works on demand from [`Cursor::end`], so a parser may step around it where its
/// grammar is not token-shaped (the tensor IR cuts shape dims out of the source) by setting
/// `end` and calling [`Cursor::bump`].
#[derive(Clone, Debug)]
pub struct Cursor<'a, T> {
    /// The whole source.
    pub src: &'a str,
    /// The lookahead token.
    pub tok: T,
    /// Where the lookahead starts.
    pub start: usize,
    /// Where the lookahead ends, and lexing resumes.
    pub end: usize,
}

impl<'a, T: Token<'a>> Cursor<'a, T> {
    /// A cursor on the first token of `src`.
    pub fn new(src: &'a str) -> Self {
        let start = skip_trivia(src, 0);
        let (tok, end) = T::lex(src, start);
        Cursor { src, tok, start, end }
    }

    /// Moves to the next token; returns the one that was current.
    pub fn bump(&mut self) -> T {
        let start = skip_trivia(self.src, self.end);
        let (tok, end) = T::lex(self.src, start);
        self.start = start;
        self.end = end;
        std::mem::replace(&mut self.tok, tok)
    }

    /// An error at byte `at`.
    pub fn failure(&self, at: usize, message: impl Into<String>) -> Failure {
        Failure { at, message: message.into() }
    }

    /// Fails with an error at byte `at`.
    pub fn fail<R>(&self, at: usize, message: impl Into<String>) -> PResult<R> {
        Err(self.failure(at, message))
    }

    /// Fails because the current token is not `want`; a token that did not lex reports why.
    pub fn unexpected<R>(&self, want: &str) -> PResult<R> {
        match self.tok.error() {
            Some(e) => self.fail(e.at, e.message.clone()),
            None => self.fail(self.start, format!("expected {want}, found {}", self.tok.describe())),
        }
    }

    /// Consumes the punctuation `c` if it is next.
    pub fn eat(&mut self, c: u8) -> bool {
        let hit = self.tok.is_punct(c);
        if hit {
            self.bump();
        }
        hit
    }

    /// Consumes the punctuation `c`, which must be next.
    pub fn expect(&mut self, c: u8) -> PResult<()> {
        if self.eat(c) { Ok(()) } else { self.unexpected(&format!("`{}`", c as char)) }
    }

    /// Consumes the keyword `kw`, which must be next.
    pub fn expect_keyword(&mut self, kw: &str) -> PResult<()> {
        if self.tok.is_keyword(kw) {
            self.bump();
            Ok(())
        } else {
            self.unexpected(&format!("`{kw}`"))
        }
    }
}
