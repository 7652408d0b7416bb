//! The lexing core shared by the text forms of kiln's IRs: identifiers, numbers, quoted
//! strings, `//` comments, and the line and column of a byte offset.
//!
//! Each IR keeps its own token enum (its sigils, its punctuation, how its numbers carry a type)
//! and builds it from these pieces, so the tensor IR and the loop IR cannot drift apart in how
//! they quote a name, skip a comment or count a column. Every function works on demand from a
//! byte offset into the source and never panics: text that is not a token comes back as a
//! [`LexError`] together with the offset where lexing may resume.
//!
//! ```
//! use kiln_tir::text::lex::{decimal, quoted_text, skip_trivia, write_quoted};
//!
//! let src = "  // a comment\n  \"tab\\there\" 1.5e-3f32";
//! let start = skip_trivia(src, 0);
//! let (text, end) = quoted_text(src, start);
//! assert_eq!(text.as_deref(), Ok("tab\there"));
//! let number = decimal(src, skip_trivia(src, end));
//! assert!(number.is_float);
//! assert_eq!(&src[end + 1..number.end], "1.5e-3");
//!
//! let mut out = String::new();
//! write_quoted(&mut out, b"tab\there");
//! assert_eq!(out, "\"tab\\there\"");
//! ```

use std::fmt::Write;

/// Text that is not a token: what is wrong, and the byte offset it refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LexError {
    /// What is wrong, as a parser reports it.
    pub message: String,
    /// Byte offset into the source.
    pub at: usize,
}

impl LexError {
    /// An error at byte `at`.
    pub fn new(message: impl Into<String>, at: usize) -> LexError {
        LexError { message: message.into(), at }
    }
}

/// Whether `b` may start an identifier: `[A-Za-z_]`.
pub fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

/// Whether `b` may continue an identifier: `[A-Za-z0-9_.]`, the `.` joining dialect names
/// such as `tensor.conv` and `loop.for`.
pub fn is_ident_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'.'
}

/// True if `s` lexes as one identifier, so a printer may write it bare rather than quoted.
pub fn is_ident(s: &str) -> bool {
    s.bytes().next().is_some_and(is_ident_start) && s.bytes().all(is_ident_char)
}

/// The offset of the first byte at or after `i` that does not satisfy `pred`.
pub fn scan_while(src: &str, i: usize, pred: impl Fn(u8) -> bool) -> usize {
    let s = src.as_bytes();
    let i = i.min(s.len());
    i + s[i..].iter().take_while(|&&c| pred(c)).count()
}

/// The offset of the first byte at or after `i` that is not whitespace or inside a `//` comment.
pub fn skip_trivia(src: &str, mut i: usize) -> usize {
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

/// A sigil at `start` followed by a decimal `u32`, as in `%12`, `$0` or `@3`; returns the
/// number and the end offset. `what` names the number when it is too large (`value number`).
pub fn sigil_number(src: &str, start: usize, what: &str) -> (Result<u32, LexError>, usize) {
    let end = scan_while(src, start + 1, |c| c.is_ascii_digit());
    match src[start + 1..end].parse::<u32>() {
        Ok(n) => (Ok(n), end),
        Err(_) if end == start + 1 => {
            let sigil = src[start..].chars().next().unwrap_or('?');
            (Err(LexError::new(format!("expected digits after `{sigil}`"), start)), start + 1)
        }
        Err(_) => (Err(LexError::new(format!("{what} `{}` is too large", &src[start..end]), start)), end),
    }
}

/// The extent of an unsigned decimal number scanned by [`decimal`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decimal {
    /// The offset just past the number.
    pub end: usize,
    /// Whether it has a fraction or an exponent, which makes it a float in both text forms.
    pub is_float: bool,
}

/// `[0-9]*(\.[0-9]+)?([eE][+-]?[0-9]+)?` from `i`, which is what `str::parse` reads for both
/// integers and floats. A `.` not followed by a digit ends the number, so `0..8` is `0`, `..`,
/// `8`; an `e` not followed by digits is left for a type suffix or an identifier.
pub fn decimal(src: &str, i: usize) -> Decimal {
    let s = src.as_bytes();
    let digits = |i: usize| scan_while(src, i, |c| c.is_ascii_digit());
    let mut end = digits(i);
    let mut is_float = false;
    if s.get(end) == Some(&b'.') && s.get(end + 1).is_some_and(u8::is_ascii_digit) {
        end = digits(end + 1);
        is_float = true;
    }
    if matches!(s.get(end), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(s.get(end + 1), Some(b'+' | b'-')));
        if s.get(end + 1 + sign).is_some_and(u8::is_ascii_digit) {
            end = digits(end + 1 + sign);
            is_float = true;
        }
    }
    Decimal { end, is_float }
}

/// Which escapes a quoted string may use.
#[derive(Clone, Copy, PartialEq)]
enum Escapes {
    /// `\" \\ \n \t \r \u{HEX}`: every string is UTF-8.
    Text,
    /// Those and `\xHH`, a byte that need not be UTF-8.
    Bytes,
}

/// A quoted string at `start` with escapes `\" \\ \n \t \r \u{HEX} \xHH`, decoded to bytes
/// (`\xHH` may spell bytes that are not UTF-8, as string tensors hold); returns it and its end
/// offset. Raw newlines are not allowed inside.
pub fn quoted_bytes(src: &str, start: usize) -> (Result<Vec<u8>, LexError>, usize) {
    quoted(src, start, Escapes::Bytes)
}

/// A quoted string at `start` with escapes `\" \\ \n \t \r \u{HEX}` (no `\xHH`, so it is always
/// text); returns it and its end offset. Raw newlines are not allowed inside.
pub fn quoted_text(src: &str, start: usize) -> (Result<String, LexError>, usize) {
    let (bytes, end) = quoted(src, start, Escapes::Text);
    // Without `\xHH` every byte comes from a `char`, so the conversion cannot fail; an error
    // rather than a panic keeps the lexer total all the same.
    let text = bytes.and_then(|b| String::from_utf8(b).map_err(|_| LexError::new("string is not UTF-8", start)));
    (text, end)
}

fn quoted(src: &str, start: usize, escapes: Escapes) -> (Result<Vec<u8>, LexError>, usize) {
    let mut out = Vec::new();
    let mut chars = src[start + 1..].char_indices().map(|(i, c)| (start + 1 + i, c)).peekable();
    while let Some((i, c)) = chars.next() {
        let decoded = match c {
            '"' => return (Ok(out), i + 1),
            '\n' => break,
            '\\' => match chars.next() {
                Some((_, '"')) => '"',
                Some((_, '\\')) => '\\',
                Some((_, 'n')) => '\n',
                Some((_, 't')) => '\t',
                Some((_, 'r')) => '\r',
                Some((_, 'x')) if escapes == Escapes::Bytes => {
                    let hex: String = (0..2).filter_map(|_| chars.next_if(|(_, h)| h.is_ascii_hexdigit())).map(|(_, h)| h).collect();
                    match u8::from_str_radix(&hex, 16) {
                        Ok(byte) if hex.len() == 2 => out.push(byte),
                        _ => return (Err(LexError::new("`\\x` needs two hex digits", i)), i + 1),
                    }
                    continue;
                }
                Some((_, 'u')) => match unicode_escape(&mut chars) {
                    Some(ch) => ch,
                    None => return (Err(LexError::new("bad `\\u{...}` escape", i)), i + 1),
                },
                _ => return (Err(LexError::new("unknown escape in string", i)), i + 1),
            },
            c => c,
        };
        let mut buf = [0u8; 4];
        out.extend_from_slice(decoded.encode_utf8(&mut buf).as_bytes());
    }
    (Err(LexError::new("unterminated string", start)), src.len())
}

/// The rest of `\u{HEX}` after the `u`: one to six hex digits naming a scalar value.
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

/// Appends `s` quoted, escaping what the lexer would not read back verbatim: `"`, `\`, `\n`,
/// `\t`, `\r`, other control characters as `\u{..}`, and bytes that are not UTF-8 as `\xHH`
/// (so UTF-8 input reads back with [`quoted_text`] as well as [`quoted_bytes`]).
pub fn write_quoted(out: &mut String, s: &[u8]) {
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

/// The error for a character at `start` that begins no token, and the offset after it.
pub fn unexpected_char(src: &str, start: usize) -> (LexError, usize) {
    let c = src[start..].chars().next().unwrap_or('?');
    (LexError::new(format!("unexpected character `{}`", c.escape_debug()), start), start + c.len_utf8())
}

/// The 1-based line and column (in characters) of byte `offset`.
pub fn line_col(src: &str, offset: usize) -> (u32, u32) {
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

    #[test]
    fn strings_round_trip_as_bytes_and_as_text() {
        for s in ["plain", "q\"uote\\", "new\nline\ttab\r", "\u{1}\u{7f}é😀", ""] {
            let mut quoted = String::new();
            write_quoted(&mut quoted, s.as_bytes());
            assert_eq!(quoted_bytes(&quoted, 0), (Ok(s.as_bytes().to_vec()), quoted.len()), "{quoted}");
            assert_eq!(quoted_text(&quoted, 0), (Ok(s.to_string()), quoted.len()), "{quoted}");
        }
    }

    #[test]
    fn byte_escapes_are_for_byte_strings_only() {
        assert_eq!(quoted_bytes("\"\\x41\\xff\"", 0).0, Ok(b"A\xff".to_vec()));
        assert_eq!(quoted_text("\"\\x41\"", 0).0, Err(LexError::new("unknown escape in string", 1)));
    }

    #[test]
    fn bad_strings_are_errors_not_panics() {
        for src in ["\"abc", "\"a\nb\"", "\"\\q\"", "\"\\u{110000}\"", "\"\\u{}\"", "\"\\x4\"", "\"\\u{1234567}\"", "\"\\u{12"] {
            assert!(quoted_bytes(src, 0).0.is_err(), "{src}");
            assert!(quoted_text(src, 0).0.is_err(), "{src}");
        }
        assert_eq!(quoted_text("\"abc", 0), (Err(LexError::new("unterminated string", 0)), 4));
    }

    #[test]
    fn decimals_stop_where_a_suffix_or_range_begins() {
        fn scan(s: &str) -> (&str, bool) {
            let d = decimal(s, 0);
            (&s[..d.end], d.is_float)
        }
        assert_eq!(scan("802816"), ("802816", false));
        assert_eq!(scan("1.5e-5f32"), ("1.5e-5", true));
        assert_eq!(scan("1e5"), ("1e5", true));
        assert_eq!(scan("0..8"), ("0", false));
        assert_eq!(scan("7i64"), ("7", false));
        assert_eq!(scan("1.5e_f32"), ("1.5", true));
        assert_eq!(scan("2E+3,"), ("2E+3", true));
    }

    #[test]
    fn sigil_numbers_name_what_is_wrong() {
        assert_eq!(sigil_number("%12 ", 0, "value number"), (Ok(12), 3));
        assert_eq!(sigil_number("$x", 0, "number"), (Err(LexError::new("expected digits after `$`", 0)), 1));
        assert_eq!(sigil_number("@99999999999", 0, "number"), (Err(LexError::new("number `@99999999999` is too large", 0)), 12));
    }

    #[test]
    fn trivia_and_identifiers() {
        assert_eq!(skip_trivia("  // one\n// two\n\t x", 0), 18);
        assert_eq!(skip_trivia("// only", 0), 7);
        assert!(is_ident("loop.for") && is_ident("_x1") && !is_ident("1x") && !is_ident("") && !is_ident("a b"));
        assert_eq!(unexpected_char("é", 0), (LexError::new("unexpected character `é`", 0), 2));
    }

    #[test]
    fn positions_count_characters() {
        assert_eq!(line_col("ab\ncé d", 7), (2, 4));
        assert_eq!(line_col("x", 99), (1, 2));
    }
}
