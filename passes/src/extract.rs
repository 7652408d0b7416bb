//! Extraction that counts shared work once.
//!
//! egg's `Extractor` (and [`Tree`], which computes the same faster) picks, per class, the node of least *tree* cost: a class used twice is
//! paid twice. That misjudges exactly the graphs fusion matters for. In `g · sigmoid(g)` (SiLU)
//! with `g = x·W`, the tree cost of `sigmoid(g)` includes the product, so the fused
//! `fused_matmul(x, W, act = sigmoid)` looks cheaper, and the extracted graph computes the
//! product twice: once for the fused copy and once for the other use of `g`.
//!
//! [`share`] starts from the tree extraction and improves it by local search over the DAG
//! cost, the sum of each reachable class's own cost counted once. For every chosen class it
//! tries each other node of the class, and keeps a switch that lowers the DAG cost. The change
//! in cost is computed from reference counts (the classes a switch makes reachable are added,
//! those it leaves unreachable subtracted), so a try costs the size of the sub-DAG it touches.
//! A switch whose node would reach its own class (a cycle) is skipped.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use egg::{CostFunction, Id};

use crate::analysis::Egraph;
use crate::cost::CostModel;
use crate::lang::ENode;

/// The least tree cost of every class and the node that achieves it: what egg's [`Extractor`]
/// computes, on a worklist. A class is costed again only when one of its children got cheaper
/// (egg passes over every class until nothing changes, as many passes as the graph is deep).
/// As there, a class keeps the first node found at its least cost.
pub struct Tree<'e> {
    eg: &'e Egraph,
    best: HashMap<Id, (f64, ENode)>,
}

impl<'e> Tree<'e> {
    /// The costs of `eg`'s classes under `model`.
    pub fn new(eg: &'e Egraph, mut model: CostModel<'e>) -> Tree<'e> {
        let mut best: HashMap<Id, (f64, ENode)> = HashMap::with_capacity(eg.number_of_classes());
        let mut queue: VecDeque<Id> = eg.classes().map(|c| c.id).collect();
        let mut queued: HashSet<Id> = queue.iter().copied().collect();
        while let Some(c) = queue.pop_front() {
            queued.remove(&c);
            let mut found: Option<(f64, &ENode)> = None;
            for n in eg[c].iter() {
                if !n.args.iter().all(|&a| best.contains_key(&eg.find(a))) {
                    continue;
                }
                let cost = model.cost(n, |a| best[&eg.find(a)].0);
                if found.is_none_or(|(f, _)| cost < f) {
                    found = Some((cost, n));
                }
            }
            let Some((cost, node)) = found else { continue };
            if best.get(&c).is_some_and(|&(old, _)| cost >= old) {
                continue;
            }
            best.insert(c, (cost, node.clone()));
            for p in eg[c].parents() {
                let p = eg.find(p);
                if queued.insert(p) {
                    queue.push_back(p);
                }
            }
        }
        Tree { eg, best }
    }

    /// The cheapest node of class `c`. Panics when the class has no finite-cost node, which
    /// is a kiln bug (every class of a converted graph has one).
    pub fn find_best_node(&self, c: Id) -> &ENode {
        &self.best[&self.eg.find(c)].1
    }

    /// The least tree cost of class `c` (infinite when it has none).
    pub fn find_best_cost(&self, c: Id) -> f64 {
        self.best.get(&self.eg.find(c)).map_or(f64::INFINITY, |b| b.0)
    }
}

/// Gains below this are noise.
const EPSILON: f64 = 1e-6;
/// Rounds over every class; each after the first only runs if the previous switched something.
const ROUNDS: usize = 4;

/// The node to emit per class: the tree extraction's, improved for sharing. Classes the
/// roots do not reach may be missing (ask the tree extraction for those).
pub fn share<'e>(eg: &'e Egraph, roots: &[Id], tree: &Tree<'e>) -> HashMap<Id, ENode> {
    let mut s = Search { eg, tree, model: CostModel::new(eg), own: HashMap::new(), pick: HashMap::new(), refs: HashMap::new() };
    for &r in roots {
        s.add_class(eg.find(r));
    }
    for _ in 0..ROUNDS {
        let mut switched = false;
        let classes: BTreeSet<Id> = s.refs.iter().filter(|(_, n)| **n > 0).map(|(c, _)| *c).collect();
        let mut order = s.post_order(roots);
        for c in classes {
            if s.refs.get(&c).copied().unwrap_or(0) == 0 {
                continue;
            }
            let current = s.pick[&c].clone();
            let alternatives: Vec<ENode> = eg[c].nodes.iter().map(|n| canonical(eg, n)).filter(|n| *n != current).collect();
            for alt in alternatives {
                if !s.extractable(&alt) || s.reaches(&alt, c, &order) {
                    continue;
                }
                let old = s.pick[&c].clone();
                let delta = s.switch(c, &old, &alt);
                if delta < -EPSILON {
                    switched = true;
                    order = s.post_order(roots);
                } else {
                    s.switch(c, &alt, &old);
                }
            }
        }
        if !switched {
            break;
        }
    }
    s.pick.retain(|c, _| s.refs.get(c).copied().unwrap_or(0) > 0);
    s.pick
}

fn canonical(eg: &Egraph, n: &ENode) -> ENode {
    let mut n = n.clone();
    for a in n.args.iter_mut() {
        *a = eg.find(*a);
    }
    n
}

struct Search<'a, 'e> {
    eg: &'e Egraph,
    tree: &'a Tree<'e>,
    model: CostModel<'e>,
    own: HashMap<ENode, f64>,
    /// The node chosen per class (reachable or once reachable).
    pick: HashMap<Id, ENode>,
    /// Uses of each class by the chosen nodes of reachable classes, and by the roots.
    refs: HashMap<Id, usize>,
}

impl Search<'_, '_> {
    fn own(&mut self, n: &ENode) -> f64 {
        if let Some(&c) = self.own.get(n) {
            return c;
        }
        let c = self.model.own(n);
        self.own.insert(n.clone(), c);
        c
    }

    fn pick_of(&mut self, c: Id) -> ENode {
        if let Some(n) = self.pick.get(&c) {
            return n.clone();
        }
        let n = canonical(self.eg, self.tree.find_best_node(c));
        self.pick.insert(c, n.clone());
        n
    }

    /// One more use of class `c`; returns the cost of what became reachable.
    fn add_class(&mut self, c: Id) -> f64 {
        let mut added = 0.0;
        let mut stack = vec![c];
        while let Some(c) = stack.pop() {
            let r = self.refs.entry(c).or_insert(0);
            *r += 1;
            if *r == 1 {
                let n = self.pick_of(c);
                added += self.own(&n);
                stack.extend(n.args.iter().copied());
            }
        }
        added
    }

    /// One use fewer of class `c`; returns the cost of what became unreachable.
    fn remove_class(&mut self, c: Id) -> f64 {
        let mut removed = 0.0;
        let mut stack = vec![c];
        while let Some(c) = stack.pop() {
            let r = self.refs.entry(c).or_insert(1);
            *r -= 1;
            if *r == 0 {
                let n = self.pick_of(c);
                removed += self.own(&n);
                stack.extend(n.args.iter().copied());
            }
        }
        removed
    }

    /// Makes `to` class `c`'s node instead of `from`; returns the change in DAG cost.
    fn switch(&mut self, c: Id, from: &ENode, to: &ENode) -> f64 {
        let mut delta = self.own(to) - self.own(from);
        // Uses of the new node first, so operands both share are never dropped in between.
        for &a in &to.args {
            delta += self.add_class(a);
        }
        self.pick.insert(c, to.clone());
        for &a in &from.args {
            delta -= self.remove_class(a);
        }
        delta
    }

    /// Whether `n` can be emitted at all: a finite own cost, and operands the tree
    /// extraction could emit.
    fn extractable(&mut self, n: &ENode) -> bool {
        self.own(n).is_finite() && n.args.iter().all(|&a| self.tree.find_best_cost(a).is_finite())
    }

    /// Reachable classes in post-order (operands before users), as positions.
    fn post_order(&mut self, roots: &[Id]) -> HashMap<Id, usize> {
        let mut order = HashMap::new();
        let mut seen = std::collections::HashSet::new();
        for &r in roots {
            let r = self.eg.find(r);
            let mut stack = vec![(r, false)];
            while let Some((c, done)) = stack.pop() {
                if done {
                    let at = order.len();
                    order.insert(c, at);
                    continue;
                }
                if !seen.insert(c) {
                    continue;
                }
                stack.push((c, true));
                let n = self.pick_of(c);
                stack.extend(n.args.iter().map(|&a| (a, false)));
            }
        }
        order
    }

    /// Whether an operand of `n` reaches class `c` through the chosen nodes. A reachable class
    /// before `c` in post-order (`order`) is not above it, so the search stops there.
    fn reaches(&mut self, n: &ENode, c: Id, order: &HashMap<Id, usize>) -> bool {
        let limit = order.get(&c).copied().unwrap_or(usize::MAX);
        let mut seen = std::collections::HashSet::new();
        let mut stack: Vec<Id> = n.args.clone();
        while let Some(x) = stack.pop() {
            if x == c {
                return true;
            }
            if order.get(&x).is_some_and(|&o| o < limit) || !seen.insert(x) {
                continue;
            }
            let next = self.pick_of(x);
            stack.extend(next.args.iter().copied());
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use egg::{Extractor, Runner};

    use super::*;
    use crate::{analysis, convert, rules, Limits};

    /// Each class's least tree cost is the one egg's fixpoint extractor finds, on the
    /// saturated e-graph of every optimizer file test.
    #[test]
    fn tree_costs_are_eggs() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/filetests/opt");
        let mut graphs = 0;
        for entry in std::fs::read_dir(&dir).expect("the optimizer's file tests") {
            let path = entry.expect("a directory entry").path();
            let text = std::fs::read_to_string(&path).expect("readable");
            let input = text.split("// ----- expected -----").next().unwrap_or_default();
            let Ok(g) = kiln_tir::text::parse(input) else { continue };
            let limits = Limits::default();
            let conv = convert::to_egraph(&g, limits.fold_elements);
            let runner: Runner<ENode, analysis::Tir, ()> = Runner::new(analysis::Tir::new(limits.fold_elements)).with_egraph(conv.eg).with_iter_limit(limits.iterations).run(&rules::rewrites(&rules::all()));
            let eg = &runner.egraph;
            let (ours, eggs) = (Tree::new(eg, CostModel::new(eg)), Extractor::new(eg, CostModel::new(eg)));
            for class in eg.classes() {
                let (a, b) = (ours.find_best_cost(class.id), eggs.find_best_cost(class.id));
                assert!(a == b || (a - b).abs() <= 1e-9 * b.abs(), "{}: class {}: {a} against egg's {b}", path.display(), class.id);
            }
            graphs += 1;
        }
        assert!(graphs >= 10, "only {graphs} file tests parsed");
    }
}
