//! This core's f32 multiply-add peak: independent chains of fused multiply-adds on registers
//! only, 512-bit (AVX-512F), 256-bit (AVX2 + FMA) and 128-bit wide, on one thread.
//!
//! ```text
//! cargo run --release -p kiln-runtime --example fma_peak
//! ```
//!
//! Prints GFLOP/s (2 per lane per multiply-add) for each width the CPU has: the best of 20
//! timings of 10⁷ rounds of 16 multiply-adds. The ceiling the GEMM and convolution kernels are
//! measured against.

use std::time::Instant;

/// Rounds of 16 independent multiply-adds per timing.
const ROUNDS: usize = 10_000_000;

fn main() {
    #[cfg(target_arch = "x86_64")]
    {
        let widths: [(&str, usize, bool, unsafe fn(usize) -> f32); 3] = [
            ("512-bit", 16, is_x86_feature_detected!("avx512f"), x86::chains512),
            ("256-bit", 8, is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"), x86::chains256),
            ("128-bit", 4, is_x86_feature_detected!("fma"), x86::chains128),
        ];
        for (name, lanes, available, chains) in widths {
            if !available {
                println!("{name}: not on this CPU");
                continue;
            }
            let mut best = f64::MAX;
            let mut sink = 0f32;
            for _ in 0..20 {
                let t = Instant::now();
                // SAFETY: the CPU has the instruction set `chains` is compiled for.
                sink += unsafe { chains(ROUNDS) };
                best = best.min(t.elapsed().as_secs_f64());
            }
            let flops = (ROUNDS * 16 * lanes * 2) as f64;
            println!("{name}: {:.1} GFLOP/s (best of 20, {:.2} ms each; checksum {sink})", flops / best / 1e9, best * 1e3);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    println!("fma_peak measures x86-64 vector widths only");
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// 16 independent chains (more than the multiply-add latency times the issue width), so
    /// only throughput limits the loop.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn chains512(rounds: usize) -> f32 {
        let (a, b) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
        let mut acc = [_mm512_set1_ps(1.0); 16];
        for _ in 0..rounds {
            for s in acc.iter_mut() {
                *s = _mm512_fmadd_ps(*s, a, b);
            }
        }
        acc.iter().map(|&v| _mm512_reduce_add_ps(v)).sum()
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn chains256(rounds: usize) -> f32 {
        let (a, b) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
        let mut acc = [_mm256_set1_ps(1.0); 16];
        for _ in 0..rounds {
            for s in acc.iter_mut() {
                *s = _mm256_fmadd_ps(*s, a, b);
            }
        }
        let mut out = [0f32; 8];
        let mut total = 0.0;
        for v in acc {
            // SAFETY: `out` holds 8 floats.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), v) };
            total += out.iter().sum::<f32>();
        }
        total
    }

    #[target_feature(enable = "fma")]
    pub unsafe fn chains128(rounds: usize) -> f32 {
        let (a, b) = (_mm_set1_ps(0.999_999), _mm_set1_ps(1e-7));
        let mut acc = [_mm_set1_ps(1.0); 16];
        for _ in 0..rounds {
            for s in acc.iter_mut() {
                *s = _mm_fmadd_ps(*s, a, b);
            }
        }
        let mut out = [0f32; 4];
        let mut total = 0.0;
        for v in acc {
            // SAFETY: `out` holds 4 floats.
            unsafe { _mm_storeu_ps(out.as_mut_ptr(), v) };
            total += out.iter().sum::<f32>();
        }
        total
    }
}
