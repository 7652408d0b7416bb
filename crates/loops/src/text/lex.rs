//! Tokens of the loop-IR text form, built from the tensor IR's shared
//! [lexing core](kiln_tir::text::lex).
//!
//! The lexer works on demand from a byte offset and never fails: text that is not a token
//! becomes [`Tok::Bad`], which the parser reports with its position.

use kiln_tir::text::cursor::Token;
use kiln_tir::text::lex::{LexError, decimal, is_ident_char, is_ident_start, quoted_text, scan_while, sigil_number, unexpected_char};

pub(super) use kiln_tir::text::lex::is_ident;

/// One token. Numbers keep their source text; the parser splits off the type suffix.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Tok<'a> {
    /// `$N`: a kernel variable.
    Var(u32),
    /// `@N`: a buffer.
    Buf(u32),
    /// A keyword, statement or function name, type or kernel name: `[A-Za-z_][A-Za-z0-9_.]*`.
    Ident(&'a str),
    /// A number with its optional type suffix: `802816`, `-3i32`, `1e-5f32`,
    /// `0x7fc00001_f32`, `-inf_f32`.
    Num(&'a str),
    /// A quoted string, escapes decoded.
    Str(String),
    /// One of `( ) { } [ ] < > , : =`.
    Punct(u8),
    /// `..`.
    DotDot,
    /// End of input.
    Eof,
    /// Text that is not a token.
    Bad(LexError),
}

impl<'a> Token<'a> for Tok<'a> {
    fn lex(src: &'a str, start: usize) -> (Self, usize) {
        lex(src, start)
    }

    fn is_punct(&self, c: u8) -> bool {
        *self == Tok::Punct(c)
    }

    fn is_keyword(&self, kw: &str) -> bool {
        matches!(self, Tok::Ident(s) if *s == kw)
    }

    fn describe(&self) -> String {
        match self {
            Tok::Var(n) => format!("`${n}`"),
            Tok::Buf(n) => format!("`@{n}`"),
            Tok::Ident(s) | Tok::Num(s) => format!("`{s}`"),
            Tok::Str(_) => "a string".to_string(),
            Tok::Punct(c) => format!("`{}`", *c as char),
            Tok::DotDot => "`..`".to_string(),
            Tok::Eof => "end of input".to_string(),
            Tok::Bad(e) => e.message.clone(),
        }
    }

    fn error(&self) -> Option<&LexError> {
        match self {
            Tok::Bad(e) => Some(e),
            _ => None,
        }
    }
}

/// Lexes the token starting at `start` (trivia already skipped); returns it and its end offset.
pub(super) fn lex(src: &str, start: usize) -> (Tok<'_>, usize) {
    let s = src.as_bytes();
    let Some(&b) = s.get(start) else {
        return (Tok::Eof, start);
    };
    let next = s.get(start + 1).copied();
    match b {
        b'$' | b'@' => {
            let (n, end) = sigil_number(src, start, "number");
            let tok = match n {
                Ok(n) if b == b'$' => Tok::Var(n),
                Ok(n) => Tok::Buf(n),
                Err(e) => Tok::Bad(e),
            };
            (tok, end)
        }
        _ if is_ident_start(b) => {
            let end = scan_while(src, start, is_ident_char);
            (Tok::Ident(&src[start..end]), end)
        }
        _ if b.is_ascii_digit() || (b == b'-' && next.is_some_and(|c| c.is_ascii_digit())) => number(src, start),
        b'-' if s[start + 1..].starts_with(b"inf") => {
            let end = scan_while(src, start + 1, is_ident_char);
            (Tok::Num(&src[start..end]), end)
        }
        b'.' if next == Some(b'.') => (Tok::DotDot, start + 2),
        b'"' => {
            let (text, end) = quoted_text(src, start);
            (text.map_or_else(Tok::Bad, Tok::Str), end)
        }
        b'(' | b')' | b'{' | b'}' | b'[' | b']' | b'<' | b'>' | b',' | b':' | b'=' => (Tok::Punct(b), start + 1),
        _ => {
            let (e, end) = unexpected_char(src, start);
            (Tok::Bad(e), end)
        }
    }
}

/// `-?(0x[0-9a-fA-F]+ | DECIMAL)` followed by an optional type suffix
/// `_?[A-Za-z][A-Za-z0-9]*`; the decimal is [`decimal`], so `0..8` is three tokens.
fn number(src: &str, start: usize) -> (Tok<'_>, usize) {
    let s = src.as_bytes();
    let body = start + usize::from(s[start] == b'-');
    let mut end = if s[body..].starts_with(b"0x") || s[body..].starts_with(b"0X") {
        scan_while(src, body + 2, |c| c.is_ascii_hexdigit())
    } else {
        decimal(src, body).end
    };
    let suffix = end + usize::from(s.get(end) == Some(&b'_'));
    if s.get(suffix).is_some_and(u8::is_ascii_alphabetic) {
        end = scan_while(src, suffix, |c| c.is_ascii_alphanumeric());
    }
    (Tok::Num(&src[start..end]), end)
}

/// Appends `s` quoted, escaping what the lexer would not read back verbatim.
pub(super) fn write_quoted(out: &mut String, s: &str) {
    kiln_tir::text::lex::write_quoted(out, s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_tir::text::lex::skip_trivia;

    fn tokens(src: &str) -> Vec<Tok<'_>> {
        let mut out = Vec::new();
        let mut i = 0;
        loop {
            let (t, end) = lex(src, skip_trivia(src, i));
            if t == Tok::Eof {
                return out;
            }
            out.push(t);
            i = end;
        }
    }

    #[test]
    fn numbers_sigils_and_punctuation() {
        use Tok::*;
        assert_eq!(
            tokens("loop.for $0 in 0..802816 { // comment\n loop.store @2[$0] = max(load @1[$0], 0.0f32)"),
            vec![
                Ident("loop.for"),
                Var(0),
                Ident("in"),
                Num("0"),
                DotDot,
                Num("802816"),
                Punct(b'{'),
                Ident("loop.store"),
                Buf(2),
                Punct(b'['),
                Var(0),
                Punct(b']'),
                Punct(b'='),
                Ident("max"),
                Punct(b'('),
                Ident("load"),
                Buf(1),
                Punct(b'['),
                Var(0),
                Punct(b']'),
                Punct(b','),
                Num("0.0f32"),
                Punct(b')'),
            ]
        );
        assert_eq!(
            tokens("-3i32 1e-5f32 0x7fc00001_f32 -inf_f32 inf_f64 nan_f32 7 1e5 2.5"),
            vec![Num("-3i32"), Num("1e-5f32"), Num("0x7fc00001_f32"), Num("-inf_f32"), Ident("inf_f64"), Ident("nan_f32"), Num("7"), Num("1e5"), Num("2.5")]
        );
    }

    #[test]
    fn strings_round_trip() {
        for s in ["plain", "q\"uote\\", "new\nline\ttab\r", "\u{1}\u{7f}é😀", ""] {
            let mut quoted = String::new();
            write_quoted(&mut quoted, s);
            assert_eq!(lex(&quoted, 0), (Tok::Str(s.to_string()), quoted.len()), "{quoted}");
        }
    }

    #[test]
    fn bad_text_is_a_token_not_a_panic() {
        for src in ["\"abc", "\"a\nb\"", "\"\\q\"", "\"\\u{110000}\"", "\"\\u{}\"", "$", "@x", "$99999999999", "#", "é"] {
            assert!(matches!(lex(src, 0).0, Tok::Bad(..)), "{src}");
        }
    }
}
