//! sgemm throughput through kiln's runtime, called by its C symbol as generated code calls it.

use std::time::Instant;

// The symbol is defined by kiln-runtime (linked through the `kiln` dependency and named here
// so the linker keeps it); its signature is the contract generated code relies on.
use kiln_runtime as _;

unsafe extern "C" {
    fn kiln_rt_sgemm(a: *const f32, b: *const f32, c: *mut f32, m: i64, n: i64, k: i64, lda: i64, ldb: i64, ldc: i64, trans_a: i64, trans_b: i64, alpha: f32, beta: f32);
}

/// One measurement of `C = A·B` with square `n×n` row-major matrices.
pub struct GemmFigure {
    pub n: usize,
    pub reps: usize,
    pub median_ms: f64,
    pub best_ms: f64,
}

impl GemmFigure {
    pub fn gflops(&self, ms: f64) -> f64 {
        2.0 * (self.n as f64).powi(3) / (ms * 1e-3) / 1e9
    }

    pub fn line(&self) -> String {
        let n = self.n;
        format!(
            "sgemm {n}x{n}x{n} via kiln_rt_sgemm (1 thread): {:.1} GFLOP/s median ({:.2} ms), {:.1} GFLOP/s best, {} runs",
            self.gflops(self.median_ms),
            self.median_ms,
            self.gflops(self.best_ms),
            self.reps
        )
    }
}

/// Times `reps` calls after one warm-up call.
pub fn measure(n: usize, reps: usize) -> GemmFigure {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut fill = |len: usize| -> Vec<f32> {
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    };
    let a = fill(n * n);
    let b = fill(n * n);
    let mut c = vec![0f32; n * n];
    let ni = n as i64;
    let mut call = || {
        // SAFETY: A, B and C are n×n, row-major with leading dimension n, and disjoint.
        unsafe { kiln_rt_sgemm(a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), ni, ni, ni, ni, ni, ni, 0, 0, 1.0, 0.0) }
    };
    call();
    let mut times: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let t = Instant::now();
            call();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    GemmFigure { n, reps: times.len(), median_ms: times[times.len() / 2], best_ms: times[0] }
}
