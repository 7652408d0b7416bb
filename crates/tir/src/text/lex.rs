//! Tokens of the text form, string quoting and source positions.
//!
//! The lexer works on demand from a byte offset, so the parser can step around it where the
//! grammar is not token-shaped: shape dims (`seq*4+1`) are cut out of the source between
//! commas and brackets and handed to [`Dim::parse`](crate::Dim::parse).

use std::fmt::Write;

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
    /// Text that is not a token: a message and the offset it refers to.
    Bad(String, usize),
}

impl Tok<'_> {
    /// How an error message names the token.
    pub(super) fn describe(&self) -> String {
        match self {
            Tok::Value(n) => format!("`%{n}`"),
            Tok::Symbol(s) => format!("`@{s}`"),
            Tok::Ident(s) | Tok::Int(s) | Tok::Float(s) => format!("`{s}`"),
            Tok::Hex(s) => format!("`0x{s}`"),
            Tok::Str(_) => "a string".to_string(),
            Tok::Punct(c) => format!("`{}`", *c as char),
            Tok::Arrow => "`->`".to_string(),
            Tok::Eof => "end of input".to_string(),
            Tok::Bad(msg, _) => msg.clone(),
        }
    }
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_ident_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'.'
}

/// The offset of the first byte at or after `i` that is not whitespace or inside a `//` comment.
pub(super) fn skip_trivia(src: &str, mut i: usize) -> usize {
    let s = src.as_bytes();
    loop {
        while i < s.len() && s[i].is_ascii_whitespace() {
            i += 1;
        }
        if !s[i.min(s.len())..].starts_with(b"//") {
            return i;
        }
        while i < s.len() && s[i] != b'\n' {
            i += 1;
        }
    }
}

/// Lexes the token starting at `start` (trivia already skipped); returns it and its end offset.
pub(super) fn lex(src: &str, start: usize) -> (Tok<'_>, usize) {
    let s = src.as_bytes();
    let Some(&b) = s.get(start) else {
        return (Tok::Eof, start);
    };
    let run = |from: usize, pred: fn(u8) -> bool| from + s[from..].iter().take_while(|&&c| pred(c)).count();
    match b {
        b'%' => {
            let end = run(start + 1, |c| c.is_ascii_digit());
            match src[start + 1..end].parse::<u32>() {
                Ok(n) => (Tok::Value(n), end),
                Err(_) if end == start + 1 => (Tok::Bad("expected digits after `%`".into(), start), end.max(start + 1)),
                Err(_) => (Tok::Bad(format!("value number `{}` is too large", &src[start..end]), start), end),
            }
        }
        b'@' => {
            let end = run(start + 1, is_ident_char);
            if end == start + 1 {
                return (Tok::Bad("expected a name after `@`".into(), start), start + 1);
            }
            (Tok::Symbol(&src[start + 1..end]), end)
        }
        _ if is_ident_start(b) => {
            let end = run(start, is_ident_char);
            (Tok::Ident(&src[start..end]), end)
        }
        b'0' if matches!(s.get(start + 1), Some(b'x' | b'X')) => {
            let end = run(start + 2, |c| c.is_ascii_hexdigit());
            if end == start + 2 {
                return (Tok::Bad("expected hex digits after `0x`".into(), start), end);
            }
            (Tok::Hex(&src[start + 2..end]), end)
        }
        _ if b.is_ascii_digit() || (b == b'-' && s.get(start + 1).is_some_and(u8::is_ascii_digit)) => number(src, start),
        b'-' if s.get(start + 1) == Some(&b'>') => (Tok::Arrow, start + 2),
        b'-' if s[start + 1..].starts_with(b"inf") && !s.get(start + 4).is_some_and(|&c| is_ident_char(c)) => (Tok::Float(&src[start..start + 4]), start + 4),
        b'"' => string(src, start),
        b'(' | b')' | b'{' | b'}' | b'[' | b']' | b'<' | b'>' | b',' | b':' | b'=' | b'-' | b'*' | b'+' => (Tok::Punct(b), start + 1),
        _ => {
            let c = src[start..].chars().next().unwrap_or('?');
            (Tok::Bad(format!("unexpected character `{}`", c.escape_debug()), start), start + c.len_utf8())
        }
    }
}

/// `-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?`: an `Int` without fraction and exponent.
fn number(src: &str, start: usize) -> (Tok<'_>, usize) {
    let s = src.as_bytes();
    let digits = |i: usize| i + s[i..].iter().take_while(|c| c.is_ascii_digit()).count();
    let mut end = digits(start + usize::from(s[start] == b'-'));
    let mut float = false;
    if s.get(end) == Some(&b'.') && s.get(end + 1).is_some_and(u8::is_ascii_digit) {
        end = digits(end + 1);
        float = true;
    }
    if matches!(s.get(end), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(s.get(end + 1), Some(b'+' | b'-')));
        if s.get(end + 1 + sign).is_some_and(u8::is_ascii_digit) {
            end = digits(end + 1 + sign);
            float = true;
        }
    }
    let text = &src[start..end];
    (if float { Tok::Float(text) } else { Tok::Int(text) }, end)
}

/// A quoted string with escapes `\" \\ \n \t \r \u{HEX} \xHH`; raw newlines are not allowed.
fn string(src: &str, start: usize) -> (Tok<'_>, usize) {
    let mut out = Vec::new();
    let mut chars = src[start + 1..].char_indices().map(|(i, c)| (start + 1 + i, c)).peekable();
    while let Some((i, c)) = chars.next() {
        let escaped = match c {
            '"' => return (Tok::Str(out), i + 1),
            '\n' => break,
            '\\' => match chars.next() {
                Some((_, '"')) => '"',
                Some((_, '\\')) => '\\',
                Some((_, 'n')) => '\n',
                Some((_, 't')) => '\t',
                Some((_, 'r')) => '\r',
                Some((_, 'x')) => {
                    let hex: String = (0..2).filter_map(|_| chars.next_if(|(_, h)| h.is_ascii_hexdigit())).map(|(_, h)| h).collect();
                    match u8::from_str_radix(&hex, 16) {
                        Ok(byte) if hex.len() == 2 => out.push(byte),
                        _ => return (Tok::Bad("`\\x` needs two hex digits".into(), i), i + 1),
                    }
                    continue;
                }
                Some((_, 'u')) => match unicode_escape(&mut chars) {
                    Some(ch) => ch,
                    None => return (Tok::Bad("bad `\\u{...}` escape".into(), i), i + 1),
                },
                _ => return (Tok::Bad("unknown escape in string".into(), i), i + 1),
            },
            c => c,
        };
        let mut buf = [0u8; 4];
        out.extend_from_slice(escaped.encode_utf8(&mut buf).as_bytes());
    }
    (Tok::Bad("unterminated string".into(), start), src.len())
}

fn unicode_escape(chars: &mut std::iter::Peekable<impl Iterator<Item = (usize, char)>>) -> Option<char> {
    chars.next_if(|&(_, c)| c == '{')?;
    let mut code = 0u32;
    for n in 0.. {
        match chars.next()?.1 {
            '}' if n > 0 => return char::from_u32(code),
            h if n < 6 => code = code * 16 + h.to_digit(16)?,
            _ => return None,
        }
    }
    None
}

/// Appends `s` quoted, escaping what the lexer would not read back verbatim; bytes that are
/// not UTF-8 are written `\xHH`.
pub(super) fn write_quoted(out: &mut String, s: &[u8]) {
    out.push('"');
    for chunk in s.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c if c.is_control() => {
                    let _ = write!(out, "\\u{{{:x}}}", c as u32);
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out.push('"');
}

/// The 1-based line and column (in characters) of byte `offset`.
pub(super) fn line_col(src: &str, offset: usize) -> (u32, u32) {
    let mut offset = offset.min(src.len());
    while !src.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &src[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let column = before[line_start..].chars().count() + 1;
    (u32::try_from(line).unwrap_or(u32::MAX), u32::try_from(column).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn positions_count_characters() {
        assert_eq!(line_col("ab\ncé d", 7), (2, 4));
        assert_eq!(line_col("x", 99), (1, 2));
    }
}
