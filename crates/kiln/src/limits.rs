//! Resource limits: what one compilation or run may take, checked before anything is allocated,
//! so that a hostile model or request is an error and not an exhausted machine.

use kiln_onnx::import::ImportLimits;
use kiln_tir::echo;
use kiln_tir::{Graph, NodeId, OpKind, Region, ValueDef, ValueId};

use crate::{Error, Result};

/// Bounds on one model's compilation and runs. [`Default`] suits a service: a tensor of at most
/// 16 GiB (never more than the machine's memory), an arena of at most the machine's memory.
/// Constants folded at compile time are bounded by the folders themselves (shape-sized values,
/// and the optimizer's `Limits::fold_elements`).
#[derive(Clone, Debug)]
pub struct ResourceLimits {
    /// Bytes of one tensor: an input, an output or an intermediate value.
    pub max_tensor_bytes: u64,
    /// Bytes of the arena one run takes for intermediate values.
    pub max_arena_bytes: u64,
    /// Iterations of one `Loop` (its trip count).
    pub max_loop_trips: u64,
    /// Nodes and nesting of the imported graph.
    pub import: ImportLimits,
    /// Specializations (compiled code for one set of input shapes) a model keeps; past it, the
    /// least recently used is dropped, so a caller sending ever new shapes cannot grow memory
    /// without bound.
    pub max_specializations: usize,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        let memory = physical_memory();
        ResourceLimits {
            max_tensor_bytes: (16 << 30).min(memory),
            max_arena_bytes: memory,
            max_loop_trips: 1 << 32,
            import: ImportLimits::default(),
            max_specializations: 64,
        }
    }
}

/// The machine's memory in bytes (`u64::MAX` when the system does not say).
pub fn physical_memory() -> u64 {
    // SAFETY: sysconf reads system configuration and has no preconditions.
    let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    match (u64::try_from(pages), u64::try_from(page)) {
        (Ok(p), Ok(s)) if p > 0 && s > 0 => p.saturating_mul(s),
        _ => u64::MAX,
    }
}

/// `1.5 GiB` for a byte count.
pub fn show_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{b} bytes") } else { format!("{v:.1} {}", UNITS[u]) }
}

/// Parses a byte count: digits with an optional `K`, `M`, `G`, `T` (powers of 1024; `KiB`,
/// `MB`... accepted alike).
pub fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits.parse().map_err(|_| format!("{s:?} is not a byte count (e.g. 512M, 16G)"))?;
    let shift = match unit.trim().to_ascii_uppercase().trim_end_matches('B').trim_end_matches('I') {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (K, M, G or T)")),
    };
    n.checked_mul(1 << shift).ok_or_else(|| format!("{s:?} is too large"))
}

impl ResourceLimits {
    /// Checks a bound graph: every value with a static shape fits `max_tensor_bytes`, and every
    /// `Loop` with a constant trip count runs at most `max_loop_trips` times.
    pub fn check_graph(&self, g: &Graph) -> Result<()> {
        self.check_region(g, &g.body)
    }

    fn check_region(&self, g: &Graph, r: &Region) -> Result<()> {
        for &v in r.params.iter().chain(&r.consts) {
            self.check_value(g, v)?;
        }
        for &n in &r.nodes {
            let node = &g.nodes[n.index()];
            for &v in node.outputs.iter().flatten() {
                self.check_value(g, v)?;
            }
            if node.op.kind() == OpKind::Loop {
                self.check_trips(g, n)?;
            }
            for sub in &node.regions {
                self.check_region(g, sub)?;
            }
        }
        Ok(())
    }

    fn check_value(&self, g: &Graph, v: ValueId) -> Result<()> {
        let ty = g.ty(v);
        let Some(dims) = ty.known_dims() else { return Ok(()) };
        let bytes = bytes_of(ty.dtype, &dims);
        if bytes.is_some_and(|b| b <= self.max_tensor_bytes) {
            return Ok(());
        }
        let size = bytes.map_or_else(|| "more than 2^64 bytes".to_string(), show_bytes);
        Err(Error::Limit(format!(
            "{} of type {} takes {size}, over the limit of {} for one tensor (max_tensor_bytes)",
            describe(g, v),
            echo::text(&ty.to_string()),
            show_bytes(self.max_tensor_bytes)
        )))
    }

    fn check_trips(&self, g: &Graph, n: NodeId) -> Result<()> {
        let node = &g.nodes[n.index()];
        let Some(Some(m)) = node.inputs.first() else { return Ok(()) };
        let ValueDef::Const(t) = &g.values[m.index()].def else { return Ok(()) };
        let Some(trips) = t.to_i64s().and_then(|v| v.first().copied()) else { return Ok(()) };
        if trips <= 0 || (trips as u64) <= self.max_loop_trips {
            return Ok(());
        }
        Err(Error::Limit(format!(
            "node \"{}\" (Loop): trip count {trips} is over the limit of {} iterations (max_loop_trips)",
            echo::text(&node.name),
            self.max_loop_trips
        )))
    }

    /// Checks the arena a compiled specialization needs.
    pub fn check_arena(&self, bytes: u64) -> Result<()> {
        if bytes <= self.max_arena_bytes {
            return Ok(());
        }
        Err(Error::Limit(format!(
            "a run needs {} of scratch memory, over the limit of {} (max_arena_bytes)",
            show_bytes(bytes),
            show_bytes(self.max_arena_bytes)
        )))
    }

    /// Checks an input of `dtype` and `dims` before it is allocated (e.g. random inputs).
    pub fn check_input(&self, name: &str, dtype: kiln_tir::DType, dims: &[u64]) -> Result<()> {
        let bytes = bytes_of(dtype, dims);
        if bytes.is_some_and(|b| b <= self.max_tensor_bytes) {
            return Ok(());
        }
        Err(Error::Limit(format!(
            "input \"{}\" of shape {} takes {}, over the limit of {} for one tensor (max_tensor_bytes)",
            echo::text(name),
            echo::list(dims),
            bytes.map_or_else(|| "more than 2^64 bytes".to_string(), show_bytes),
            show_bytes(self.max_tensor_bytes)
        )))
    }
}

/// The bytes a tensor of `dtype` and `dims` takes (a string element counted as its handle,
/// 32 bytes, its text aside), or `None` past `u64`.
fn bytes_of(dtype: kiln_tir::DType, dims: &[u64]) -> Option<u64> {
    let n = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
    match dtype {
        kiln_tir::DType::String => n.checked_mul(32),
        d => d.storage_bytes(n),
    }
}

/// `value "y" (output of node "Expand#1")`, or an input or constant.
fn describe(g: &Graph, v: ValueId) -> String {
    let value = &g.values[v.index()];
    let name = echo::text(&value.name);
    match &value.def {
        ValueDef::Param => format!("input \"{name}\""),
        ValueDef::Const(_) => format!("constant \"{name}\""),
        ValueDef::Node { node, .. } => match &g.nodes[node.index()] {
            n if n.name.is_empty() => format!("value \"{name}\" (output of tensor.{})", n.op.kind().text_name()),
            n => format!("value \"{name}\" (output of node \"{}\")", echo::text(&n.name)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_parse_with_binary_units() {
        assert_eq!(parse_bytes("512"), Ok(512));
        assert_eq!(parse_bytes("16G"), Ok(16 << 30));
        assert_eq!(parse_bytes("3MiB"), Ok(3 << 20));
        assert_eq!(parse_bytes("2kb"), Ok(2048));
        assert!(parse_bytes("1Q").is_err());
        assert!(parse_bytes("99999999999T").is_err());
        assert_eq!(show_bytes(3 << 30), "3.0 GiB");
    }
}
