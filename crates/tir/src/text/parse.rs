//! The parser: text back to a [`Graph`], with positioned errors and no panics on any input.
//!
//! Printed value numbers map to fresh [`ValueId`]s. Numbers are unique in the whole text, and
//! a value is visible in the region that defines it and in regions nested inside it, after its
//! definition.

use std::collections::{HashMap, HashSet};
use std::ops::{Deref, DerefMut};

use super::cursor::{Cursor, ParseError, PResult};
use super::lex::skip_trivia;
use super::token::{Tok, lex};
use crate::graph::{Graph, Region, ValueDef, ValueId};
use crate::op::{AttrError, AttrValue, OpKind};
use crate::types::TensorType;

/// Parses the text form of a graph.
pub fn parse(src: &str) -> Result<Graph, ParseError> {
    let p = Parser { cur: Cursor::new(src), graph: Graph::default(), scopes: Vec::new(), defined: HashSet::new() };
    p.graph().map_err(|f| f.locate(src))
}

/// Region nesting allowed, so that hostile input cannot exhaust the stack.
const MAX_REGION_DEPTH: usize = 48;

/// Parser state: the token cursor and the value scopes.
pub(super) struct Parser<'a> {
    cur: Cursor<'a, Tok<'a>>,
    graph: Graph,
    /// Numbers visible here, innermost region last.
    scopes: Vec<HashMap<u32, ValueId>>,
    /// Every number defined so far, anywhere.
    defined: HashSet<u32>,
}

/// The grammar reads the lookahead as `self.tok` and moves with `self.bump()`: both belong to
/// the cursor this parser shares with the loop IR's.
impl<'a> Deref for Parser<'a> {
    type Target = Cursor<'a, Tok<'a>>;

    fn deref(&self) -> &Self::Target {
        &self.cur
    }
}

impl DerefMut for Parser<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.cur
    }
}

/// What a region ends with: `return` at the top level, `yield` inside ops.
#[derive(Clone, Copy, PartialEq)]
enum Terminator {
    Return,
    Yield,
}

impl Terminator {
    fn keyword(self) -> &'static str {
        match self {
            Terminator::Return => "return",
            Terminator::Yield => "yield",
        }
    }
}

impl<'a> Parser<'a> {
    /// A quoted string, as bytes.
    pub(super) fn string(&mut self) -> PResult<Vec<u8>> {
        if let Tok::Str(_) = self.tok
            && let Tok::Str(s) = self.bump()
        {
            return Ok(s);
        }
        self.unexpected("a string")
    }

    /// A string that must be UTF-8 (names, string attributes).
    pub(super) fn text(&mut self) -> PResult<String> {
        let at = self.start;
        String::from_utf8(self.string()?).map_err(|_| self.failure(at, "string is not UTF-8"))
    }

    fn value_number(&mut self) -> PResult<(u32, usize)> {
        match self.tok {
            Tok::Value(n) => {
                let at = self.start;
                self.bump();
                Ok((n, at))
            }
            _ => self.unexpected("a value such as `%0`"),
        }
    }

    /// Claims a number for a definition; the id is bound later by [`Parser::bind`].
    fn claim(&mut self, n: u32, at: usize) -> PResult<()> {
        if self.defined.insert(n) { Ok(()) } else { self.fail(at, format!("value %{n} is already defined")) }
    }

    fn bind(&mut self, n: u32, id: ValueId) {
        if let Some(scope) = self.scopes.last_mut() {
            scope.insert(n, id);
        }
    }

    /// A use of a value: `%N`.
    fn use_value(&mut self) -> PResult<ValueId> {
        let (n, at) = self.value_number()?;
        match self.scopes.iter().rev().find_map(|s| s.get(&n)) {
            Some(&id) => Ok(id),
            None if self.defined.contains(&n) => self.fail(at, format!("value %{n} is not visible here")),
            None => self.fail(at, format!("undefined value %{n}")),
        }
    }

    /// A use or `_` for an absent optional input.
    fn use_optional(&mut self) -> PResult<Option<ValueId>> {
        if self.tok == Tok::Ident("_") {
            self.bump();
            return Ok(None);
        }
        self.use_value().map(Some)
    }

    /// A parameter definition `%N: TYPE`; the caller binds the number once the value exists.
    fn param(&mut self) -> PResult<(u32, TensorType)> {
        let (n, at) = self.value_number()?;
        self.claim(n, at)?;
        self.expect(b':')?;
        Ok((n, self.tensor_type()?))
    }

    /// `graph @NAME(PARAMS) -> (RESULT TYPES) { BODY }`. The name is not stored.
    fn graph(mut self) -> PResult<Graph> {
        self.expect_keyword("graph")?;
        match self.tok {
            Tok::Symbol(_) => {
                self.bump();
            }
            _ => return self.unexpected("a graph name such as `@main`"),
        }
        self.scopes.push(HashMap::new());
        let mut body = Region::default();
        self.expect(b'(')?;
        while !self.eat(b')') {
            if !body.params.is_empty() {
                self.expect(b',')?;
            }
            let (n, ty) = self.param()?;
            let name = if matches!(self.tok, Tok::Str(_)) { self.text()? } else { String::new() };
            let id = self.graph.add_value(ty, name, ValueDef::Param);
            self.bind(n, id);
            body.params.push(id);
        }
        if self.tok != Tok::Arrow {
            return self.unexpected("`->`");
        }
        self.bump();
        self.expect(b'(')?;
        let mut declared = Vec::new();
        while !self.eat(b')') {
            if !declared.is_empty() {
                self.expect(b',')?;
            }
            let ty = self.tensor_type()?;
            let name = if matches!(self.tok, Tok::Str(_)) { self.text()? } else { String::new() };
            declared.push((ty, name));
        }
        self.expect(b'{')?;
        let results = self.region_body(&mut body, Terminator::Return, 0)?;
        if results.len() != declared.len() {
            let at = results.first().map_or(self.start, |r| r.1);
            return self.fail(at, format!("`return` has {} values but the graph declares {} results", results.len(), declared.len()));
        }
        for ((id, at), (ty, name)) in results.into_iter().zip(declared) {
            let value = &self.graph.values[id.index()];
            if value.ty != ty {
                return self.fail(at, format!("type mismatch: the value has type `{:?}` but the graph result is declared `{ty:?}`", value.ty));
            }
            if !value.name.is_empty() && !name.is_empty() && value.name != name {
                return self.fail(at, format!("the value is named {:?}, not {name:?}", value.name));
            }
            if value.name.is_empty() {
                self.graph.values[id.index()].name = name;
            }
            body.results.push(id);
        }
        if self.tok != Tok::Eof {
            return self.unexpected("end of input after the graph");
        }
        self.graph.body = body;
        Ok(self.graph)
    }

    /// Statements up to and including the terminator and the closing `}`; returns the
    /// terminator's values with their positions.
    fn region_body(&mut self, region: &mut Region, term: Terminator, depth: usize) -> PResult<Vec<(ValueId, usize)>> {
        loop {
            match self.tok {
                Tok::Ident(kw) if kw == term.keyword() => {
                    self.bump();
                    let mut results = Vec::new();
                    while !self.eat(b'}') {
                        if !results.is_empty() {
                            self.expect(b',')?;
                        }
                        let at = self.start;
                        results.push((self.use_value()?, at));
                    }
                    return Ok(results);
                }
                Tok::Ident(kw @ ("return" | "yield")) => {
                    let hint = if kw == "return" { "nested regions end with `yield`" } else { "the graph ends with `return`" };
                    return self.fail(self.start, format!("unexpected `{kw}`: {hint}"));
                }
                Tok::Punct(b'}') => return self.fail(self.start, format!("region must end with `{}`", term.keyword())),
                Tok::Value(_) | Tok::Ident(_) => self.statement(region, depth)?,
                _ => return self.unexpected("a statement"),
            }
        }
    }

    /// `LHS = const ...`, `LHS = weight ...` or `[LHS =] tensor.OP(...) ...`.
    fn statement(&mut self, region: &mut Region, depth: usize) -> PResult<()> {
        let mut lhs: Vec<Option<(u32, usize)>> = Vec::new();
        if matches!(self.tok, Tok::Value(_) | Tok::Ident("_")) {
            loop {
                if self.tok == Tok::Ident("_") {
                    self.bump();
                    lhs.push(None);
                } else {
                    let (n, at) = self.value_number()?;
                    self.claim(n, at)?;
                    lhs.push(Some((n, at)));
                }
                if !self.eat(b',') {
                    break;
                }
            }
            self.expect(b'=')?;
        }
        let kw_at = self.start;
        if let Tok::Ident(kw @ ("const" | "weight")) = self.tok {
            let [Some((n, _))] = lhs[..] else {
                return self.fail(kw_at, format!("`{kw}` defines exactly one value"));
            };
            self.bump();
            let (name, t) = if kw == "const" { (String::new(), self.dense()?) } else { self.weight_ref()? };
            let id = self.graph.add_value(t.ty(), name, ValueDef::Const(t));
            self.bind(n, id);
            region.consts.push(id);
            return Ok(());
        }
        self.node(region, lhs, depth)
    }

    /// `tensor.OP(INPUTS) {ATTRS} : TYPES loc("NAME") { REGIONS }` after the outputs.
    fn node(&mut self, region: &mut Region, lhs: Vec<Option<(u32, usize)>>, depth: usize) -> PResult<()> {
        let op_at = self.start;
        let kind = match self.tok {
            Tok::Ident(name) => match name.strip_prefix("tensor.").and_then(OpKind::from_text_name) {
                Some(kind) => kind,
                None => return self.fail(op_at, format!("unknown op `{name}`")),
            },
            _ => return self.unexpected("an op such as `tensor.add`"),
        };
        self.bump();
        self.expect(b'(')?;
        let mut inputs = Vec::new();
        while !self.eat(b')') {
            if !inputs.is_empty() {
                self.expect(b',')?;
            }
            inputs.push(self.use_optional()?);
        }
        let op = self.attributes(kind, op_at)?;
        let present = lhs.iter().flatten().count();
        let mut types = Vec::new();
        if present > 0 {
            self.expect(b':')?;
            for i in 0..present {
                if i > 0 {
                    self.expect(b',')?;
                }
                types.push(self.tensor_type()?);
            }
        }
        let mut name = String::new();
        if self.tok == Tok::Ident("loc") {
            self.bump();
            self.expect(b'(')?;
            name = self.text()?;
            self.expect(b')')?;
        }
        let regions = self.regions(kind, depth)?;
        let mut types = types.into_iter();
        let outputs = lhs.iter().map(|o| o.and_then(|_| types.next().map(|ty| (ty, String::new())))).collect();
        let node = self.graph.add_node(op, name, inputs, outputs, regions);
        region.nodes.push(node);
        let ids = self.graph.nodes[node.index()].outputs.clone();
        for (slot, id) in lhs.into_iter().zip(ids) {
            if let (Some((n, _)), Some(id)) = (slot, id) {
                self.bind(n, id);
            }
        }
        Ok(())
    }

    /// An optional `{name = value, ...}` dict, converted to the op's typed attributes.
    fn attributes(&mut self, kind: OpKind, op_at: usize) -> PResult<crate::op::Op> {
        let mut attrs: Vec<(String, AttrValue)> = Vec::new();
        let mut positions: Vec<usize> = Vec::new();
        if self.tok == Tok::Punct(b'{') && self.attr_dict_ahead() {
            self.bump();
            while !self.eat(b'}') {
                if !attrs.is_empty() {
                    self.expect(b',')?;
                }
                let at = self.start;
                let Tok::Ident(key) = self.tok else {
                    return self.unexpected("an attribute name");
                };
                if attrs.iter().any(|(k, _)| k == key) {
                    return self.fail(at, format!("attribute `{key}` is given twice"));
                }
                self.bump();
                self.expect(b'=')?;
                attrs.push((key.to_string(), self.attr_value()?));
                positions.push(at);
            }
        }
        let keys: Vec<String> = attrs.iter().map(|(k, _)| k.clone()).collect();
        kind.with_attrs(attrs).map_err(|e| {
            let key = match &e {
                AttrError::Missing(_) => None,
                AttrError::Unknown(k) | AttrError::Invalid { attr: k, .. } => Some(k.as_str()),
            };
            let at = key.and_then(|k| keys.iter().position(|x| x == k)).map_or(op_at, |i| positions[i]);
            self.failure(at, format!("`tensor.{}`: {e}", kind.text_name()))
        })
    }

    /// True if the `{` at the cursor opens an attribute dict (`{}` or `{name =`), not regions.
    fn attr_dict_ahead(&self) -> bool {
        let (first, end) = lex(self.src, skip_trivia(self.src, self.end));
        let (second, _) = lex(self.src, skip_trivia(self.src, end));
        first == Tok::Punct(b'}') || (matches!(first, Tok::Ident(_)) && second == Tok::Punct(b'='))
    }

    /// `{ name(PARAMS) { BODY } ... }` with exactly the regions the op kind has.
    fn regions(&mut self, kind: OpKind, depth: usize) -> PResult<Vec<Region>> {
        let names = kind.region_names();
        let op = kind.text_name();
        let expected = || names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
        if names.is_empty() {
            if self.tok == Tok::Punct(b'{') {
                return self.fail(self.start, format!("`tensor.{op}` has no regions"));
            }
            return Ok(Vec::new());
        }
        if depth + 1 > MAX_REGION_DEPTH {
            return self.fail(self.start, "regions nested too deeply");
        }
        if self.tok != Tok::Punct(b'{') {
            return self.unexpected(&format!("`{{` and the regions of `tensor.{op}` ({})", expected()));
        }
        self.bump();
        let mut regions = Vec::new();
        for (i, &want) in names.iter().enumerate() {
            match self.tok {
                Tok::Ident(got) if got == want => {}
                Tok::Punct(b'}') => {
                    return self.fail(self.start, format!("`tensor.{op}` expects {} regions ({}), found {i}", names.len(), expected()));
                }
                _ => return self.unexpected(&format!("region `{want}` of `tensor.{op}`")),
            }
            self.bump();
            self.scopes.push(HashMap::new());
            let mut region = Region::default();
            self.expect(b'(')?;
            while !self.eat(b')') {
                if !region.params.is_empty() {
                    self.expect(b',')?;
                }
                let (n, ty) = self.param()?;
                let id = self.graph.add_value(ty, String::new(), ValueDef::Param);
                self.bind(n, id);
                region.params.push(id);
            }
            self.expect(b'{')?;
            let results = self.region_body(&mut region, Terminator::Yield, depth + 1)?;
            region.results = results.into_iter().map(|r| r.0).collect();
            self.scopes.pop();
            regions.push(region);
        }
        if self.tok != Tok::Punct(b'}') {
            let at = self.start;
            return self.fail(at, format!("`tensor.{op}` expects {} regions ({}), found more", names.len(), expected()));
        }
        self.bump();
        Ok(regions)
    }
}
