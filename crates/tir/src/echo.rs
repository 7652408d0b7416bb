//! Bounded echo of user data in messages: a model can hold a megabyte name or a million-element
//! attribute, and an error names it without repeating all of it.

use std::borrow::Cow;
use std::fmt::Display;

/// Characters of a name or text kept in a message.
pub const TEXT_CHARS: usize = 120;
/// Elements of a list kept in a message.
pub const LIST_ITEMS: usize = 16;

/// `s`, or its first [`TEXT_CHARS`] characters and "… (N more characters)".
pub fn text(s: &str) -> Cow<'_, str> {
    match s.char_indices().nth(TEXT_CHARS) {
        None => Cow::Borrowed(s),
        Some((cut, _)) => {
            let more = s[cut..].chars().count();
            Cow::Owned(format!("{}… ({more} more characters)", &s[..cut]))
        }
    }
}

/// `[a, b, …]` with at most [`LIST_ITEMS`] elements, then "… (N more)".
pub fn list<T: Display>(items: &[T]) -> String {
    let shown: Vec<String> = items.iter().take(LIST_ITEMS).map(|x| x.to_string()).collect();
    match items.len().saturating_sub(LIST_ITEMS) {
        0 => format!("[{}]", shown.join(", ")),
        more => format!("[{}, … ({more} more)]", shown.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_text_and_lists_are_cut_with_a_count() {
        assert_eq!(super::text("abc"), "abc");
        let long = "é".repeat(1000);
        let cut = super::text(&long);
        assert!(cut.ends_with("… (880 more characters)"), "{cut}");
        assert_eq!(super::list(&[1, 2]), "[1, 2]");
        let l: Vec<u32> = (0..100).collect();
        assert!(super::list(&l).ends_with(", 15, … (84 more)]"));
    }
}
