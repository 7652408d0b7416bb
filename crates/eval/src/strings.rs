//! String ops: StringConcat, StringSplit, StringNormalizer. Compiled code holds no strings;
//! compiled models run these here, between compiled stages.

use bytes::Bytes;
use kiln_tir::op::CaseChange;
use kiln_tir::{DType, Op};

use crate::args::Args;
use crate::array::{Arr, Buf, broadcast_shape, broadcast_to};
use crate::error::{Result, invalid};

/// Evaluates `op` if it is one of this module's.
pub(crate) fn eval(op: &Op, a: &Args) -> Option<Result<Vec<Arr>>> {
    Some(match op {
        Op::StringConcat(_) => concat(a),
        Op::StringSplit(o) => split(a, o.delimiter.as_deref(), o.maxsplit),
        Op::StringNormalizer(o) => normalize(a, o.case_change_action, o.is_case_sensitive != 0, &o.stopwords),
        _ => return None,
    })
}

fn strings(op: &'static str, x: &Arr) -> Result<Vec<Bytes>> {
    match &x.buf {
        Buf::S(v) => Ok(v.clone()),
        _ => Err(invalid(op, format!("element type {} (expected string)", x.dtype))),
    }
}

fn string_arr(shape: Vec<usize>, v: Vec<Bytes>) -> Arr {
    Arr { dtype: DType::String, shape, buf: Buf::S(v) }
}

/// StringConcat(X, Y): elementwise concatenation, broadcast.
fn concat(a: &Args) -> Result<Vec<Arr>> {
    let (x, y) = (a.arr(0)?, a.arr(1)?);
    let shape = broadcast_shape(a.op, &x.shape, &y.shape)?;
    let (x, y) = (strings(a.op, &broadcast_to(a.op, &x, &shape)?)?, strings(a.op, &broadcast_to(a.op, &y, &shape)?)?);
    let out = x.iter().zip(&y).map(|(p, q)| Bytes::from([p.as_ref(), q.as_ref()].concat())).collect();
    Ok(vec![string_arr(shape, out)])
}

/// Splits like Python's `str.split(delimiter, maxsplit)`: no (or an empty) delimiter splits at
/// runs of whitespace and drops empty pieces; a delimiter keeps them.
fn split_one(s: &str, delimiter: Option<&str>, maxsplit: Option<usize>) -> Vec<String> {
    let mut left = maxsplit.unwrap_or(usize::MAX);
    match delimiter.filter(|d| !d.is_empty()) {
        Some(d) => {
            let mut out = Vec::new();
            let mut rest = s;
            while left > 0 {
                let Some(i) = rest.find(d) else { break };
                out.push(rest[..i].to_string());
                rest = &rest[i + d.len()..];
                left -= 1;
            }
            out.push(rest.to_string());
            out
        }
        None => {
            let mut out = Vec::new();
            let mut rest = s.trim_start();
            while left > 0 && !rest.is_empty() {
                let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                out.push(rest[..end].to_string());
                rest = rest[end..].trim_start();
                left -= 1;
            }
            if !rest.is_empty() {
                out.push(rest.to_string());
            }
            out
        }
    }
}

/// StringSplit(X): each string's pieces along a new last axis padded with empty strings to the
/// most pieces, and the number of pieces.
fn split(a: &Args, delimiter: Option<&str>, maxsplit: Option<i64>) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let maxsplit = maxsplit.filter(|&m| m >= 0).map(|m| m as usize);
    let pieces: Vec<Vec<String>> = strings(a.op, &x)?.iter().map(|s| split_one(&String::from_utf8_lossy(s), delimiter, maxsplit)).collect();
    let width = pieces.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::with_capacity(pieces.len() * width);
    for p in &pieces {
        out.extend(p.iter().map(|s| Bytes::from(s.clone())));
        out.extend(std::iter::repeat_n(Bytes::new(), width - p.len()));
    }
    let mut shape = x.shape.clone();
    shape.push(width);
    Ok(vec![string_arr(shape, out), Arr::i64s(x.shape.clone(), pieces.iter().map(|p| p.len() as i64))])
}

/// StringNormalizer(X) of shape `[C]` or `[1, C]`: stop words removed (case-insensitively
/// unless `case_sensitive`), then the case changed; a single empty string when nothing is left.
fn normalize(a: &Args, case: CaseChange, case_sensitive: bool, stopwords: &[String]) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let two_d = match x.shape[..] {
        [_] => false,
        [1, _] => true,
        _ => return Err(invalid(a.op, format!("input must have shape [C] or [1, C], found {:?}", x.shape))),
    };
    let fold = |s: &str| if case_sensitive { s.to_string() } else { s.to_lowercase() };
    let stops: Vec<String> = stopwords.iter().map(|s| fold(s)).collect();
    let mut kept: Vec<Bytes> = strings(a.op, &x)?
        .iter()
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .filter(|s| !stops.contains(&fold(s)))
        .map(|s| match case {
            CaseChange::Lower => s.to_lowercase(),
            CaseChange::Upper => s.to_uppercase(),
            CaseChange::None => s,
        })
        .map(Bytes::from)
        .collect();
    if kept.is_empty() {
        kept.push(Bytes::new());
    }
    let shape = if two_d { vec![1, kept.len()] } else { vec![kept.len()] };
    Ok(vec![string_arr(shape, kept)])
}
