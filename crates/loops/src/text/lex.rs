//! Tokens of the loop-IR text form, string quoting and source positions.
//!
//! The lexer works on demand from a byte offset and never fails: text that is not a token
//! becomes [`Tok::Bad`], which the parser reports with its position.

use std::fmt::Write;

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
    /// Text that is not a token: a message and the offset it refers to.
    Bad(String, usize),
}

impl Tok<'_> {
    /// How an error message names the token.
    pub(super) fn describe(&self) -> String {
        match self {
            Tok::Var(n) => format!("`${n}`"),
            Tok::Buf(n) => format!("`@{n}`"),
            Tok::Ident(s) | Tok::Num(s) => format!("`{s}`"),
            Tok::Str(_) => "a string".to_string(),
            Tok::Punct(c) => format!("`{}`", *c as char),
            Tok::DotDot => "`..`".to_string(),
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

/// True if `s` prints as a bare identifier (kernel names); others are quoted.
pub(super) fn is_ident(s: &str) -> bool {
    s.bytes().next().is_some_and(is_ident_start) && s.bytes().all(is_ident_char)
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
    let next = s.get(start + 1).copied();
    match b {
        b'$' | b'@' => {
            let end = start + 1 + s[start + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
            let sigil = b as char;
            match src[start + 1..end].parse::<u32>() {
                Ok(n) if b == b'$' => (Tok::Var(n), end),
                Ok(n) => (Tok::Buf(n), end),
                Err(_) if end == start + 1 => (Tok::Bad(format!("expected digits after `{sigil}`"), start), start + 1),
                Err(_) => (Tok::Bad(format!("number `{}` is too large", &src[start..end]), start), end),
            }
        }
        _ if is_ident_start(b) => {
            let end = start + s[start..].iter().take_while(|&&c| is_ident_char(c)).count();
            (Tok::Ident(&src[start..end]), end)
        }
        _ if b.is_ascii_digit() || (b == b'-' && next.is_some_and(|c| c.is_ascii_digit())) => number(src, start),
        b'-' if s[start + 1..].starts_with(b"inf") => {
            let end = start + 1 + s[start + 1..].iter().take_while(|&&c| is_ident_char(c)).count();
            (Tok::Num(&src[start..end]), end)
        }
        b'.' if next == Some(b'.') => (Tok::DotDot, start + 2),
        b'"' => string(src, start),
        b'(' | b')' | b'{' | b'}' | b'[' | b']' | b'<' | b'>' | b',' | b':' | b'=' => (Tok::Punct(b), start + 1),
        _ => {
            let c = src[start..].chars().next().unwrap_or('?');
            (Tok::Bad(format!("unexpected character `{}`", c.escape_debug()), start), start + c.len_utf8())
        }
    }
}

/// `-?(0x[0-9a-fA-F]+ | [0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?)` followed by an optional type
/// suffix `_?[A-Za-z][A-Za-z0-9]*`. A `.` not followed by a digit ends the number, so `0..8`
/// is three tokens.
fn number(src: &str, start: usize) -> (Tok<'_>, usize) {
    let s = src.as_bytes();
    let run = |i: usize, pred: fn(&u8) -> bool| i + s[i..].iter().take_while(|c| pred(c)).count();
    let body = start + usize::from(s[start] == b'-');
    let mut end;
    if s[body..].starts_with(b"0x") || s[body..].starts_with(b"0X") {
        end = run(body + 2, u8::is_ascii_hexdigit);
    } else {
        end = run(body, u8::is_ascii_digit);
        if s.get(end) == Some(&b'.') && s.get(end + 1).is_some_and(u8::is_ascii_digit) {
            end = run(end + 1, u8::is_ascii_digit);
        }
        if matches!(s.get(end), Some(b'e' | b'E')) {
            let sign = usize::from(matches!(s.get(end + 1), Some(b'+' | b'-')));
            if s.get(end + 1 + sign).is_some_and(u8::is_ascii_digit) {
                end = run(end + 1 + sign, u8::is_ascii_digit);
            }
        }
    }
    let suffix = end + usize::from(s.get(end) == Some(&b'_'));
    if s.get(suffix).is_some_and(u8::is_ascii_alphabetic) {
        end = run(suffix, u8::is_ascii_alphanumeric);
    }
    (Tok::Num(&src[start..end]), end)
}

/// A quoted string with escapes `\" \\ \n \t \r \u{HEX}`; raw newlines are not allowed.
fn string(src: &str, start: usize) -> (Tok<'_>, usize) {
    let mut out = String::new();
    let mut chars = src[start + 1..].char_indices().map(|(i, c)| (start + 1 + i, c)).peekable();
    while let Some((i, c)) = chars.next() {
        let decoded = match c {
            '"' => return (Tok::Str(out), i + 1),
            '\n' => break,
            '\\' => match chars.next() {
                Some((_, '"')) => '"',
                Some((_, '\\')) => '\\',
                Some((_, 'n')) => '\n',
                Some((_, 't')) => '\t',
                Some((_, 'r')) => '\r',
                Some((_, 'u')) => match unicode_escape(&mut chars) {
                    Some(ch) => ch,
                    None => return (Tok::Bad("bad `\\u{...}` escape".into(), i), i + 1),
                },
                _ => return (Tok::Bad("unknown escape in string".into(), i), i + 1),
            },
            c => c,
        };
        out.push(decoded);
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

/// Appends `s` quoted, escaping what the lexer would not read back verbatim.
pub(super) fn write_quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
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

    #[test]
    fn positions_count_characters() {
        assert_eq!(line_col("ab\ncé d", 7), (2, 4));
        assert_eq!(line_col("x", 99), (1, 2));
    }
}
