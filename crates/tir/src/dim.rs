//! Tensor dimensions: known sizes or polynomials over named symbols (`batch`, `seq*4`, `seq+1`).
//!
//! A symbolic dim is kept as an expanded polynomial with integer coefficients, so two
//! spellings of the same size compare equal and print identically. Division is exact or it
//! fails: shape inference never invents a rounding rule for an unknown size.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// One dimension of a tensor shape.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    /// A size known at compile time.
    Known(u64),
    /// A size that depends on named symbols bound when the model is compiled for concrete inputs.
    Sym(Arc<Poly>),
}

/// A product of symbols, sorted; repeated symbols are powers.
pub type Monomial = Vec<String>;

/// A polynomial over symbols with integer coefficients and at least one non-constant term.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Poly {
    terms: BTreeMap<Monomial, i64>,
}

impl Dim {
    /// The dim named by one symbol.
    pub fn sym(name: &str) -> Dim {
        let mut terms = BTreeMap::new();
        terms.insert(vec![name.to_string()], 1);
        Dim::Sym(Arc::new(Poly { terms }))
    }

    /// The known size, if there is one.
    pub fn known(&self) -> Option<u64> {
        match self {
            Dim::Known(n) => Some(*n),
            Dim::Sym(_) => None,
        }
    }

    /// The polynomial's terms. Known sizes past `i64::MAX` have no term form: `None`.
    fn terms(&self) -> Option<BTreeMap<Monomial, i64>> {
        match self {
            Dim::Known(0) => Some(BTreeMap::new()),
            Dim::Known(n) => Some(BTreeMap::from([(Vec::new(), i64::try_from(*n).ok()?)])),
            Dim::Sym(p) => Some(p.terms.clone()),
        }
    }

    /// Builds a dim from terms, or `None` when the result is a negative constant or overflows.
    fn from_terms(mut terms: BTreeMap<Monomial, i64>) -> Option<Dim> {
        terms.retain(|_, c| *c != 0);
        if terms.keys().all(|m| m.is_empty()) {
            let c = terms.get(&Vec::new()).copied().unwrap_or(0);
            return u64::try_from(c).ok().map(Dim::Known);
        }
        Some(Dim::Sym(Arc::new(Poly { terms })))
    }

    /// `self + other`.
    pub fn add(&self, other: &Dim) -> Option<Dim> {
        if let (Dim::Known(a), Dim::Known(b)) = (self, other) {
            return a.checked_add(*b).map(Dim::Known);
        }
        let mut t = self.terms()?;
        for (m, c) in other.terms()? {
            let e = t.entry(m).or_insert(0);
            *e = e.checked_add(c)?;
        }
        Dim::from_terms(t)
    }

    /// `self - other`, or `None` if the result is known to be negative.
    pub fn sub(&self, other: &Dim) -> Option<Dim> {
        if let (Dim::Known(a), Dim::Known(b)) = (self, other) {
            return a.checked_sub(*b).map(Dim::Known);
        }
        let mut t = self.terms()?;
        for (m, c) in other.terms()? {
            let e = t.entry(m).or_insert(0);
            *e = e.checked_sub(c)?;
        }
        Dim::from_terms(t)
    }

    /// `self * other`.
    pub fn mul(&self, other: &Dim) -> Option<Dim> {
        if let (Dim::Known(a), Dim::Known(b)) = (self, other) {
            return a.checked_mul(*b).map(Dim::Known);
        }
        let mut t: BTreeMap<Monomial, i64> = BTreeMap::new();
        for (ma, ca) in self.terms()? {
            for (mb, cb) in other.terms()? {
                let mut m = ma.clone();
                m.extend(mb.iter().cloned());
                m.sort();
                let e = t.entry(m).or_insert(0);
                *e = e.checked_add(ca.checked_mul(cb)?)?;
            }
        }
        Dim::from_terms(t)
    }

    /// `self / other` when the division is exact term by term; `None` otherwise.
    ///
    /// Exact division by a known size divides every coefficient; division by a single
    /// monomial removes it from every term. Anything else is not representable.
    pub fn div_exact(&self, other: &Dim) -> Option<Dim> {
        match (self, other) {
            (_, Dim::Known(0)) => None,
            (Dim::Known(a), Dim::Known(b)) => (a % b == 0).then(|| Dim::Known(a / b)),
            (_, Dim::Known(b)) => {
                let b = i64::try_from(*b).ok()?;
                let mut t = BTreeMap::new();
                for (m, c) in self.terms()? {
                    if c % b != 0 {
                        return None;
                    }
                    t.insert(m, c / b);
                }
                Dim::from_terms(t)
            }
            (_, Dim::Sym(p)) => {
                if self == other {
                    return Some(Dim::Known(1));
                }
                let [(dm, dc)] = p.terms.iter().collect::<Vec<_>>()[..] else {
                    return None;
                };
                let mut t = BTreeMap::new();
                for (m, c) in self.terms()? {
                    if c % dc != 0 {
                        return None;
                    }
                    let mut rest = m.clone();
                    for s in dm {
                        let i = rest.iter().position(|r| r == s)?;
                        rest.remove(i);
                    }
                    t.insert(rest, c / dc);
                }
                Dim::from_terms(t)
            }
        }
    }

    /// The symbols this dim mentions.
    pub fn symbols(&self) -> Vec<&str> {
        let mut out: Vec<&str> = match self {
            Dim::Known(_) => Vec::new(),
            Dim::Sym(p) => p.terms.keys().flatten().map(String::as_str).collect(),
        };
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Replaces symbols by the sizes `lookup` gives; unbound symbols stay symbolic. `None` if
    /// the result is negative or overflows.
    pub fn substitute(&self, lookup: &dyn Fn(&str) -> Option<u64>) -> Option<Dim> {
        let Dim::Sym(p) = self else {
            return Some(self.clone());
        };
        // Accumulate every term before normalizing: `seq-2` has a negative constant term.
        let mut t: BTreeMap<Monomial, i64> = BTreeMap::new();
        for (m, c) in &p.terms {
            let mut coeff = *c;
            let mut rest = Vec::new();
            for s in m {
                match lookup(s) {
                    Some(v) => coeff = coeff.checked_mul(i64::try_from(v).ok()?)?,
                    None => rest.push(s.clone()),
                }
            }
            let e = t.entry(rest).or_insert(0);
            *e = e.checked_add(coeff)?;
        }
        Dim::from_terms(t)
    }

    /// Subtraction that allows an intermediate negative constant inside a polynomial.
    fn sub_signed(&self, other: &Dim) -> Option<Dim> {
        let mut t = self.terms()?;
        for (m, c) in other.terms()? {
            let e = t.entry(m).or_insert(0);
            *e = e.checked_sub(c)?;
        }
        Dim::from_terms(t)
    }

    /// Parses the text form: integers, symbols, `+`, `-`, `*` and parentheses.
    pub fn parse(text: &str) -> Result<Dim, String> {
        let mut p = DimParser { s: text.as_bytes(), i: 0 };
        let d = p.expr()?;
        p.skip_ws();
        if p.i != p.s.len() {
            return Err(format!("unexpected `{}` in dim `{text}`", &text[p.i..]));
        }
        Ok(d)
    }
}

impl From<u64> for Dim {
    fn from(n: u64) -> Dim {
        Dim::Known(n)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = match self {
            Dim::Known(n) => return write!(f, "{n}"),
            Dim::Sym(p) => p,
        };
        // Non-constant terms first (in monomial order), the constant last: `seq*4+1`.
        let mut first = true;
        let ordered = p.terms.iter().filter(|(m, _)| !m.is_empty()).chain(p.terms.iter().filter(|(m, _)| m.is_empty()));
        for (m, &c) in ordered {
            if c < 0 {
                f.write_str("-")?;
            } else if !first {
                f.write_str("+")?;
            }
            first = false;
            let a = c.unsigned_abs();
            f.write_str(&m.join("*"))?;
            if m.is_empty() {
                write!(f, "{a}")?;
            } else if a != 1 {
                write!(f, "*{a}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// True if `s` can be printed as a symbol without quoting.
pub fn is_symbol(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_') && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

struct DimParser<'a> {
    s: &'a [u8],
    i: usize,
}

impl DimParser<'_> {
    fn skip_ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.i).copied()
    }

    fn expr(&mut self) -> Result<Dim, String> {
        let mut neg = false;
        if self.peek() == Some(b'-') {
            self.i += 1;
            neg = true;
        }
        let first = self.term()?;
        let mut acc = if neg { Dim::Known(0).sub_signed(&first) } else { Some(first) }.ok_or("dim overflow")?;
        loop {
            match self.peek() {
                Some(b'+') => {
                    self.i += 1;
                    let t = self.term()?;
                    acc = acc.add(&t).ok_or("dim overflow")?;
                }
                Some(b'-') => {
                    self.i += 1;
                    let t = self.term()?;
                    acc = acc.sub_signed(&t).ok_or("negative or overflowing dim")?;
                }
                _ => return Ok(acc),
            }
        }
    }

    fn term(&mut self) -> Result<Dim, String> {
        let mut acc = self.factor()?;
        while self.peek() == Some(b'*') {
            self.i += 1;
            let f = self.factor()?;
            acc = acc.mul(&f).ok_or("dim overflow")?;
        }
        Ok(acc)
    }

    fn factor(&mut self) -> Result<Dim, String> {
        match self.peek() {
            Some(b'(') => {
                self.i += 1;
                let e = self.expr()?;
                if self.peek() != Some(b')') {
                    return Err("expected `)` in dim".into());
                }
                self.i += 1;
                Ok(e)
            }
            Some(c) if c.is_ascii_digit() => {
                let start = self.i;
                while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.s[start..self.i]).map_err(|e| e.to_string())?;
                text.parse::<u64>().map(Dim::Known).map_err(|e| format!("bad dim `{text}`: {e}"))
            }
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                let start = self.i;
                while self.i < self.s.len() && (self.s[self.i].is_ascii_alphanumeric() || self.s[self.i] == b'_') {
                    self.i += 1;
                }
                let name = std::str::from_utf8(&self.s[start..self.i]).map_err(|e| e.to_string())?;
                Ok(Dim::sym(name))
            }
            Some(c) => Err(format!("unexpected `{}` in dim", c as char)),
            None => Err("dim ends early".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Dim {
        Dim::parse(s).unwrap()
    }

    #[test]
    fn arithmetic_normalizes() {
        assert_eq!(d("seq*4").to_string(), "seq*4");
        assert_eq!(d("4*seq").to_string(), "seq*4");
        assert_eq!(d("seq+1-1").to_string(), "seq");
        assert_eq!(d("(seq+1)*2").to_string(), "seq*2+2");
        assert_eq!(d("batch*seq").div_exact(&d("seq")), Some(d("batch")));
        assert_eq!(d("seq*4").div_exact(&Dim::Known(2)), Some(d("seq*2")));
        assert_eq!(d("seq*3").div_exact(&Dim::Known(2)), None);
        assert_eq!(d("7").known(), Some(7));
        assert_eq!(d("seq-seq+3"), Dim::Known(3));
    }

    #[test]
    fn substitute_binds() {
        let bound = d("batch*seq*4+1").substitute(&|s| (s == "seq").then_some(8)).unwrap();
        assert_eq!(bound.to_string(), "batch*32+1");
        let all = bound.substitute(&|_| Some(2)).unwrap();
        assert_eq!(all, Dim::Known(65));
    }

    #[test]
    fn substitute_through_negative_terms() {
        assert_eq!(d("seq-2").substitute(&|_| Some(5)), Some(Dim::Known(3)));
        assert_eq!(d("seq-2").substitute(&|_| Some(1)), None);
        assert_eq!(d("b-a").to_string(), "-a+b");
        assert_eq!(d("-a+b"), d("b-a"));
    }

    #[test]
    fn huge_known_dims_do_not_wrap() {
        assert_eq!(Dim::Known(u64::MAX).add(&d("n")), None);
        assert_eq!(Dim::Known(u64::MAX).mul(&Dim::Known(1)), Some(Dim::Known(u64::MAX)));
    }

    #[test]
    fn print_parse_round_trip() {
        for s in ["n", "n*2", "a*b+c-4", "seq*seq", "x-1"] {
            assert_eq!(d(s).to_string(), s);
        }
    }
}
