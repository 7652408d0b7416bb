//! The tensor IR's tokens, built from the shared [lexing core](super::lex).
//!
//! The lexer works on demand from a byte offset, so the parser can step around it where the
//! grammar is not token-shaped: shape dims (`seq*4+1`) are cut out of the source between
//! commas and brackets and handed to [`Dim::parse`](crate::Dim::parse).

use super::cursor::Token;
use super::lex::{LexError, decimal, is_ident_char, is_ident_start, quoted_bytes, scan_while, sigil_number, unexpected_char};

/// One token. Numbers keep their source text; the parser converts them for the type at hand.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Tok<'a> {
    /// `%N`.
    Value(u32),
    /// `@name`.
    Symbol(&'a str),
    /// A keyword, op name, dtype or attribute name: `[A-Za-z_][A-Za-z0-9_.]*`.
    Ident(&'a str),
    /// A decimal integer, possibly negative.
    Int(&'a str),
    /// Hexadecimal digits after `0x`.
    Hex(&'a str),
    /// A decimal number with a fraction or an exponent, or `-inf`.
    Float(&'a str),
    /// A quoted string, escapes decoded (it may hold any bytes).
    Str(Vec<u8>),
    /// One of `( ) { } [ ] < > , : = - * +`.
    Punct(u8),
    /// `->`.
    Arrow,
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
            Tok::Value(n) => format!("`%{n}`"),
            Tok::Symbol(s) => format!("`@{s}`"),
            Tok::Ident(s) | Tok::Int(s) | Tok::Float(s) => format!("`{s}`"),
            Tok::Hex(s) => format!("`0x{s}`"),
            Tok::Str(_) => "a string".to_string(),
            Tok::Punct(c) => format!("`{}`", *c as char),
            Tok::Arrow => "`->`".to_string(),
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
    match b {
        b'%' => {
            let (n, end) = sigil_number(src, start, "value number");
            (n.map_or_else(Tok::Bad, Tok::Value), end)
        }
        b'@' => {
            let end = scan_while(src, start + 1, is_ident_char);
            if end == start + 1 {
                return (Tok::Bad(LexError::new("expected a name after `@`", start)), start + 1);
            }
            (Tok::Symbol(&src[start + 1..end]), end)
        }
        _ if is_ident_start(b) => {
            let end = scan_while(src, start, is_ident_char);
            (Tok::Ident(&src[start..end]), end)
        }
        b'0' if matches!(s.get(start + 1), Some(b'x' | b'X')) => {
            let end = scan_while(src, start + 2, |c| c.is_ascii_hexdigit());
            if end == start + 2 {
                return (Tok::Bad(LexError::new("expected hex digits after `0x`", start)), end);
            }
            (Tok::Hex(&src[start + 2..end]), end)
        }
        _ if b.is_ascii_digit() || (b == b'-' && s.get(start + 1).is_some_and(u8::is_ascii_digit)) => {
            // `-?` then a decimal: an `Int` without fraction and exponent, else a `Float`.
            let number = decimal(src, start + usize::from(b == b'-'));
            let text = &src[start..number.end];
            (if number.is_float { Tok::Float(text) } else { Tok::Int(text) }, number.end)
        }
        b'-' if s.get(start + 1) == Some(&b'>') => (Tok::Arrow, start + 2),
        b'-' if s[start + 1..].starts_with(b"inf") && !s.get(start + 4).is_some_and(|&c| is_ident_char(c)) => (Tok::Float(&src[start..start + 4]), start + 4),
        b'"' => {
            let (bytes, end) = quoted_bytes(src, start);
            (bytes.map_or_else(Tok::Bad, Tok::Str), end)
        }
        b'(' | b')' | b'{' | b'}' | b'[' | b']' | b'<' | b'>' | b',' | b':' | b'=' | b'-' | b'*' | b'+' => (Tok::Punct(b), start + 1),
        _ => {
            let (e, end) = unexpected_char(src, start);
            (Tok::Bad(e), end)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::lex::{skip_trivia, write_quoted};

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
    fn numbers_and_punctuation() {
        use Tok::*;
        assert_eq!(
            tokens("%12 = -3 1.5e-5 -inf 0x3c00 -> // comment\n tensor.conv{}"),
            vec![Value(12), Punct(b'='), Int("-3"), Float("1.5e-5"), Float("-inf"), Hex("3c00"), Arrow, Ident("tensor.conv"), Punct(b'{'), Punct(b'}')]
        );
        assert_eq!(tokens("1e5 2.0 7"), vec![Float("1e5"), Float("2.0"), Int("7")]);
    }

    #[test]
    fn strings_round_trip() {
        for s in ["plain", "q\"uote\\", "new\nline\ttab\r", "\u{1}\u{7f}é😀", ""] {
            let mut quoted = String::new();
            write_quoted(&mut quoted, s.as_bytes());
            assert_eq!(lex(&quoted, 0), (Tok::Str(s.as_bytes().to_vec()), quoted.len()), "{quoted}");
        }
        let mut quoted = String::new();
        write_quoted(&mut quoted, b"a\xff\xc3");
        assert_eq!(quoted, "\"a\\xff\\xc3\"");
        assert_eq!(lex(&quoted, 0).0, Tok::Str(b"a\xff\xc3".to_vec()));
    }

    #[test]
    fn bad_strings_are_tokens_not_panics() {
        for src in ["\"abc", "\"a\nb\"", "\"\\q\"", "\"\\u{110000}\"", "\"\\u{}\"", "\"\\x4\"", "\"\\u{1234567}\""] {
            assert!(matches!(lex(src, 0).0, Tok::Bad(..)), "{src}");
        }
    }
}
