//! Runs one program through the loop-IR interpreter and through the JIT on identical memory
//! and asserts the two agree: the same status and the same bytes in every buffer.
//!
//! Float elements compare bit for bit, except that any NaN equals any NaN (Cranelift does not
//! specify NaN payloads, nor does the interpreter's `f64` detour), and where a buffer is given
//! a looser [`Tol`].

use kiln_loops::interp::{self, InterpError};
use kiln_loops::*;
use kiln_testkit::Rng;

/// How elements of one buffer must agree.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tol {
    /// Bit-identical (NaN matches NaN).
    Exact,
    /// Also `+0 == −0`: the interpreter's `f64::min`/`max` may return either zero.
    ZeroSign,
    /// Within this many units in the last place.
    Ulps(u64),
}

/// A program under construction with the initial contents of its buffers.
pub struct Harness {
    pub p: Program,
    memory: Vec<Vec<u8>>,
    tol: Vec<Tol>,
}

/// Every scalar type.
pub const TYPES: [ScalarType; 11] = [
    ScalarType::Bool,
    ScalarType::I8,
    ScalarType::I16,
    ScalarType::I32,
    ScalarType::I64,
    ScalarType::U8,
    ScalarType::U16,
    ScalarType::U32,
    ScalarType::U64,
    ScalarType::F32,
    ScalarType::F64,
];

/// Little-endian bytes of element bit patterns (sub-byte elements packed, lowest bits first).
pub fn to_bytes(elem: ElemType, bits: &[u64]) -> Vec<u8> {
    if elem.is_packed() {
        let w = elem.bits() as usize;
        let mut out = vec![0u8; elem.storage_bytes(bits.len() as u64) as usize];
        for (i, b) in bits.iter().enumerate() {
            out[i * w / 8] |= ((*b as u8) & ((1 << w) - 1) as u8) << (i * w % 8);
        }
        return out;
    }
    let n = elem.bits() as usize / 8;
    bits.iter().flat_map(|b| b.to_le_bytes()[..n].to_vec()).collect()
}

/// The element bit patterns of little-endian `bytes` (the inverse of [`to_bytes`]).
pub fn from_bytes(elem: ElemType, bytes: &[u8]) -> Vec<u64> {
    if elem.is_packed() {
        let w = elem.bits() as usize;
        return (0..bytes.len() * 8 / w).map(|i| u64::from(bytes[i * w / 8] >> (i * w % 8)) & ((1 << w) - 1)).collect();
    }
    let n = elem.bits() as usize / 8;
    bytes
        .chunks_exact(n)
        .map(|c| {
            let mut b = [0u8; 8];
            b[..n].copy_from_slice(c);
            u64::from_le_bytes(b)
        })
        .collect()
}

/// The bit pattern of a value of `t` given as `f64` or `i64` intent.
pub fn int_bits(t: ScalarType, v: i64) -> u64 {
    match t.bytes() {
        8 => v as u64,
        n => (v as u64) & ((1u64 << (8 * n)) - 1),
    }
}

/// Interesting values of `t` as bit patterns: edges of the range, values around shift widths,
/// signed zeros, NaN and infinities, saturation bounds, halves for rounding, and a few
/// pseudo-random ones.
pub fn samples(t: ScalarType) -> Vec<u64> {
    let mut rng = Rng::new(0x9e37_79b9 ^ t.bytes() as u64 ^ ((t as u64) << 8));
    match t {
        ScalarType::Bool => vec![0, 1],
        ScalarType::F32 => {
            let mut v: Vec<f32> = vec![
                0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.7, -3.7, 7.0, 127.5, 128.0, -129.0, 255.5, 256.0, 32767.9, -32769.0,
                65535.5, 2147483520.0, 2147483648.0, -2147483904.0, 4294967040.0, 4294967296.0, 9.2233715e18, 1.8446743e19, 1e30, -1e30,
                f32::MAX, f32::MIN_POSITIVE, 1e-40, -1e-45, f32::INFINITY, f32::NEG_INFINITY, f32::NAN,
            ];
            v.extend((0..8).map(|_| (rng.next_u64() as i32 as f32) / 65536.0));
            v.into_iter().map(|x| u64::from(x.to_bits())).collect()
        }
        ScalarType::F64 => {
            let mut v: Vec<f64> = vec![
                0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.7, -3.7, 7.0, 127.5, 128.0, -129.0, 255.5, 256.0, 32767.9, -32769.0,
                65535.5, 2147483647.5, 2147483648.0, -2147483649.0, 4294967295.5, 4294967296.0, f64::from_bits(0x43df_ffff_ffff_ffff), 9.223372036854775e18,
                1.8446744073709552e19, 1e300, -1e300, f64::MAX, f64::MIN_POSITIVE, 5e-324, 1e-310, 3.4028235677973366e38, 1e39,
                f64::INFINITY, f64::NEG_INFINITY, f64::NAN,
            ];
            v.extend((0..8).map(|_| (rng.next_u64() as i64 as f64) / 4294967296.0));
            v.into_iter().map(f64::to_bits).collect()
        }
        t => {
            let w = 8 * i128::from(t.bytes());
            let (min, max) = if t.is_signed_int() { (-(1i128 << (w - 1)), (1i128 << (w - 1)) - 1) } else { (0, (1i128 << w) - 1) };
            let mut v: Vec<i128> = vec![0, 1, 2, 3, 5, 7, -1, -2, -7, w - 1, w, w + 1, 63, 64, 65, 100, -100, min, max, min + 1, max - 1, max / 3];
            v.extend((0..6).map(|_| rng.next_u64() as i64 as i128));
            let mut bits: Vec<u64> = v.into_iter().map(|x| int_bits(t, x as i64)).collect();
            bits.sort_unstable();
            bits.dedup();
            bits
        }
    }
}

impl Harness {
    pub fn new() -> Harness {
        Harness { p: Program::default(), memory: Vec::new(), tol: Vec::new() }
    }

    fn add(&mut self, elem: ElemType, len: u64, kind: BufferKind, bytes: Vec<u8>, tol: Tol) -> BufId {
        self.memory.push(bytes);
        self.tol.push(tol);
        self.p.add_buffer(Buffer { name: format!("b{}", self.p.buffers.len()), elem, len, kind })
    }

    /// An input holding the given element bit patterns.
    pub fn input(&mut self, elem: ElemType, bits: &[u64]) -> BufId {
        let n = self.p.buffers.len();
        self.add(elem, bits.len() as u64, BufferKind::Input(n), to_bytes(elem, bits), Tol::Exact)
    }

    /// An input of scalar type `t`.
    pub fn input_of(&mut self, t: ScalarType, bits: &[u64]) -> BufId {
        self.input(ElemType::Scalar(t), bits)
    }

    /// An output of `len` elements, initially a recognizable byte pattern.
    pub fn output(&mut self, elem: ElemType, len: u64) -> BufId {
        self.output_tol(elem, len, Tol::Exact)
    }

    /// An output compared with tolerance `tol`.
    pub fn output_tol(&mut self, elem: ElemType, len: u64, tol: Tol) -> BufId {
        let n = self.p.buffers.len();
        let bytes = vec![0x5a; elem.storage_bytes(len) as usize];
        self.add(elem, len, BufferKind::Output(n), bytes, tol)
    }

    /// An intermediate buffer.
    pub fn temp(&mut self, elem: ElemType, len: u64) -> BufId {
        let bytes = vec![0; elem.storage_bytes(len) as usize];
        self.add(elem, len, BufferKind::Temp, bytes, Tol::Exact)
    }

    /// Appends a kernel.
    pub fn push(&mut self, k: Kernel) {
        self.p.kernels.push(k);
    }

    /// The memory after the interpreter has run the program (for checking what it computes).
    pub fn interpreted(&self) -> Vec<Vec<u8>> {
        let mut memory = self.memory.clone();
        interp::run(&self.p, &mut memory).unwrap_or_else(|e| panic!("the test program is wrong: {e}"));
        memory
    }

    /// Runs both ways, asserts agreement, and returns the status (`Err(code)` for a failed check).
    pub fn run(&self) -> Result<(), u32> {
        self.run_on(1)
    }

    /// As [`run`](Self::run), with the JIT code run inside a thread pool of `threads` (its
    /// parallel loops split over it).
    pub fn run_on(&self, threads: usize) -> Result<(), u32> {
        let mut want = self.memory.clone();
        let want_status = match interp::run(&self.p, &mut want) {
            Ok(()) => Ok(()),
            Err(InterpError::Check { code, .. }) => Err(code),
            Err(e) => panic!("the test program is wrong: {e}"),
        };

        let jit = kiln_codegen::compile_jit(&self.p).unwrap_or_else(|e| panic!("compile: {e}"));
        // 8-byte aligned copies, at least one word each so every pointer is valid.
        let mut words: Vec<Vec<u64>> = self.memory.iter().map(|m| vec![0u64; m.len().div_ceil(8).max(1)]).collect();
        for (w, m) in words.iter_mut().zip(&self.memory) {
            bytes_of_mut(w)[..m.len()].copy_from_slice(m);
        }
        let table: Vec<*mut u8> = words.iter_mut().map(|w| w.as_mut_ptr().cast::<u8>()).collect();
        // SAFETY: one live, large-enough buffer per program buffer; the interpreter has just
        // checked every access of this program is in bounds.
        let pool = kiln_runtime::pool::Pool::new(threads).expect("threads");
        let got_status = pool.enter(|| unsafe { jit.run(&table) });
        assert_eq!(got_status, want_status, "status differs (jit vs interpreter)");

        for (i, (w, m)) in words.iter().zip(&want).enumerate() {
            let got = &bytes_of(w)[..m.len()];
            let b = &self.p.buffers[i];
            compare_buffer(&b.name, b.elem, self.tol[i], got, m);
        }
        want_status
    }
}

fn bytes_of(w: &[u64]) -> &[u8] {
    // SAFETY: u64 has no padding; u8 has alignment 1.
    unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), w.len() * 8) }
}

fn bytes_of_mut(w: &mut [u64]) -> &mut [u8] {
    // SAFETY: as above; every byte pattern is a valid u64.
    unsafe { std::slice::from_raw_parts_mut(w.as_mut_ptr().cast::<u8>(), w.len() * 8) }
}

/// Asserts a buffer's bytes agree under `tol` (the padding of packed buffers included).
fn compare_buffer(name: &str, elem: ElemType, tol: Tol, got: &[u8], want: &[u8]) {
    let (g, w) = (from_bytes(elem, got), from_bytes(elem, want));
    let mut bad = Vec::new();
    for (i, (&g, &w)) in g.iter().zip(&w).enumerate() {
        if !float_agree(elem, tol, g, w) {
            bad.push(format!("[{i}] jit {g:#x} interp {w:#x}"));
        }
    }
    assert!(bad.is_empty(), "buffer {name} ({}): {} of {} elements differ: {}", elem.name(), bad.len(), g.len(), bad.iter().take(8).cloned().collect::<Vec<_>>().join(", "));
}

fn float_agree(elem: ElemType, tol: Tol, g: u64, w: u64) -> bool {
    if g == w {
        return true;
    }
    // (is NaN, is zero, ordered bits) per float format.
    let (g_nan, w_nan, g_zero, w_zero, gi, wi) = match elem {
        ElemType::Scalar(ScalarType::F32) => {
            let (a, b) = (f32::from_bits(g as u32), f32::from_bits(w as u32));
            (a.is_nan(), b.is_nan(), a == 0.0, b == 0.0, ordered32(a), ordered32(b))
        }
        ElemType::Scalar(ScalarType::F64) => {
            let (a, b) = (f64::from_bits(g), f64::from_bits(w));
            (a.is_nan(), b.is_nan(), a == 0.0, b == 0.0, ordered64(a), ordered64(b))
        }
        ElemType::F16 => ((g & 0x7fff) > 0x7c00, (w & 0x7fff) > 0x7c00, g & 0x7fff == 0, w & 0x7fff == 0, g as i64, w as i64),
        ElemType::BF16 => ((g & 0x7fff) > 0x7f80, (w & 0x7fff) > 0x7f80, g & 0x7fff == 0, w & 0x7fff == 0, g as i64, w as i64),
        // Integers, and the float8/float4 formats, whose NaNs both sides encode alike.
        _ => return false,
    };
    if g_nan || w_nan {
        return g_nan && w_nan;
    }
    match tol {
        Tol::Exact => false,
        Tol::ZeroSign => g_zero && w_zero,
        Tol::Ulps(u) => gi.abs_diff(wi) <= u,
    }
}

/// Maps float bits to integers whose order and differences are the floats' order and ulp distance.
fn ordered32(x: f32) -> i64 {
    let b = x.to_bits() as i32;
    i64::from(if b < 0 { i32::MIN - b } else { b })
}

fn ordered64(x: f64) -> i64 {
    let b = x.to_bits() as i64;
    if b < 0 { i64::MIN - b } else { b }
}

/// A one-loop kernel over `len` elements; the closure gets the index and returns statements.
pub fn map_kernel(name: &str, len: u64, body: impl FnOnce(&mut Kernel, Expr) -> Vec<Stmt>) -> Kernel {
    let mut k = Kernel::new(name);
    k.body = k.nest(&[len], |k, i| body(k, i[0].clone()));
    k
}
