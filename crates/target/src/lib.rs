//! The target a model is compiled for, chosen once and passed down the pipeline.
//!
//! A [`Target`] is a triple, the CPU features code may use, and where runtime calls go
//! ([`Runtime`]). [`Target::host`] is the only place the compiler asks the CPU what it has;
//! every stage below the embedding API reads a `Target` instead, so an object file for another
//! machine and a file test on any machine see the same decisions.
//!
//! Its text form, `x86_64-unknown-linux-gnu +avx2 +fma +avx512f runtime=jit`, is what
//! `kiln dump` prints and what scheduling file tests name in their `// target` line:
//!
//! ```
//! use kiln_target::{Feature, Runtime, Target};
//!
//! let t: Target = "x86_64-unknown-linux-gnu +avx2 +fma".parse().unwrap();
//! assert!(t.has(Feature::Avx2) && !t.has(Feature::Avx512f));
//! assert_eq!(t.runtime, Runtime::Jit);
//! assert_eq!(t.to_string().parse::<Target>().unwrap(), t);
//! ```
#![deny(missing_docs)]

use std::fmt;
use std::str::FromStr;

pub use target_lexicon::{Architecture, Triple};

/// A CPU feature that changes what kiln generates or which runtime kernels it packs for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Feature {
    /// x86-64 SSE3.
    Sse3,
    /// x86-64 SSSE3.
    Ssse3,
    /// x86-64 SSE4.1.
    Sse41,
    /// x86-64 SSE4.2.
    Sse42,
    /// x86-64 POPCNT.
    Popcnt,
    /// x86-64 LZCNT.
    Lzcnt,
    /// x86-64 BMI1.
    Bmi1,
    /// x86-64 BMI2.
    Bmi2,
    /// x86-64 AVX.
    Avx,
    /// x86-64 AVX2.
    Avx2,
    /// x86-64 FMA3.
    Fma,
    /// x86-64 AVX-512 Foundation.
    Avx512f,
    /// x86-64 AVX-512 doubleword and quadword instructions.
    Avx512dq,
    /// x86-64 AVX-512 vector length extensions.
    Avx512vl,
    /// x86-64 AVX-512 byte and word instructions.
    Avx512bw,
    /// x86-64 AVX-512 vector neural network instructions (int8 dot products).
    Avx512vnni,
    /// AArch64 Advanced SIMD.
    Neon,
}

impl Feature {
    /// Every feature, in the order the text form lists them.
    pub const ALL: [Feature; 17] = [
        Feature::Sse3,
        Feature::Ssse3,
        Feature::Sse41,
        Feature::Sse42,
        Feature::Popcnt,
        Feature::Lzcnt,
        Feature::Bmi1,
        Feature::Bmi2,
        Feature::Avx,
        Feature::Avx2,
        Feature::Fma,
        Feature::Avx512f,
        Feature::Avx512dq,
        Feature::Avx512vl,
        Feature::Avx512bw,
        Feature::Avx512vnni,
        Feature::Neon,
    ];

    /// The name the text form uses (Cranelift's setting is `has_` and this name).
    pub fn name(self) -> &'static str {
        match self {
            Feature::Sse3 => "sse3",
            Feature::Ssse3 => "ssse3",
            Feature::Sse41 => "sse41",
            Feature::Sse42 => "sse42",
            Feature::Popcnt => "popcnt",
            Feature::Lzcnt => "lzcnt",
            Feature::Bmi1 => "bmi1",
            Feature::Bmi2 => "bmi2",
            Feature::Avx => "avx",
            Feature::Avx2 => "avx2",
            Feature::Fma => "fma",
            Feature::Avx512f => "avx512f",
            Feature::Avx512dq => "avx512dq",
            Feature::Avx512vl => "avx512vl",
            Feature::Avx512bw => "avx512bw",
            Feature::Avx512vnni => "avx512vnni",
            Feature::Neon => "neon",
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// A set of [`Feature`]s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Features(u32);

impl Features {
    /// No feature beyond the architecture's baseline.
    pub const NONE: Features = Features(0);

    /// Whether `f` is in the set.
    pub fn has(self, f: Feature) -> bool {
        self.0 & f.bit() != 0
    }

    /// The set with `f` added.
    pub fn with(self, f: Feature) -> Features {
        Features(self.0 | f.bit())
    }

    /// The features in the set, in [`Feature::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = Feature> {
        Feature::ALL.into_iter().filter(move |&f| self.has(f))
    }

    /// The features this process's CPU has (of those kiln uses).
    pub fn host() -> Features {
        let mut f = Features::NONE;
        #[cfg(target_arch = "x86_64")]
        {
            let detected = [
                (Feature::Sse3, std::arch::is_x86_feature_detected!("sse3")),
                (Feature::Ssse3, std::arch::is_x86_feature_detected!("ssse3")),
                (Feature::Sse41, std::arch::is_x86_feature_detected!("sse4.1")),
                (Feature::Sse42, std::arch::is_x86_feature_detected!("sse4.2")),
                (Feature::Popcnt, std::arch::is_x86_feature_detected!("popcnt")),
                (Feature::Lzcnt, std::arch::is_x86_feature_detected!("lzcnt")),
                (Feature::Bmi1, std::arch::is_x86_feature_detected!("bmi1")),
                (Feature::Bmi2, std::arch::is_x86_feature_detected!("bmi2")),
                (Feature::Avx, std::arch::is_x86_feature_detected!("avx")),
                (Feature::Avx2, std::arch::is_x86_feature_detected!("avx2")),
                (Feature::Fma, std::arch::is_x86_feature_detected!("fma")),
                (Feature::Avx512f, std::arch::is_x86_feature_detected!("avx512f")),
                (Feature::Avx512dq, std::arch::is_x86_feature_detected!("avx512dq")),
                (Feature::Avx512vl, std::arch::is_x86_feature_detected!("avx512vl")),
                (Feature::Avx512bw, std::arch::is_x86_feature_detected!("avx512bw")),
                (Feature::Avx512vnni, std::arch::is_x86_feature_detected!("avx512vnni")),
            ];
            for (feature, present) in detected {
                if present {
                    f = f.with(feature);
                }
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            if std::arch::is_aarch64_feature_detected!("neon") {
                f = f.with(Feature::Neon);
            }
        }
        f
    }
}

impl FromIterator<Feature> for Features {
    fn from_iter<I: IntoIterator<Item = Feature>>(iter: I) -> Features {
        iter.into_iter().fold(Features::NONE, Features::with)
    }
}

/// Where generated code's runtime calls (GEMM, convolution, ...) go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Runtime {
    /// JIT code in this process, calling the runtime linked into it.
    Jit,
    /// An object file linked with the runtime's static library (`libkiln_runtime.a`).
    Static,
    /// An object file with no runtime: every call lowered to generated code.
    None,
}

impl Runtime {
    /// The name the text form uses.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Jit => "jit",
            Runtime::Static => "static",
            Runtime::None => "none",
        }
    }
}

/// What a model is compiled for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// The target triple.
    pub triple: Triple,
    /// CPU features the code and the runtime kernels may use.
    pub features: Features,
    /// Where runtime calls go.
    pub runtime: Runtime,
}

/// Why a target's text form does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// The triple is not one `target-lexicon` knows.
    #[error("unknown target triple \"{0}\"")]
    Triple(String),
    /// A `+feature` kiln does not know.
    #[error("unknown CPU feature \"{0}\" (known: {known})", known = Feature::ALL.map(Feature::name).join(", "))]
    Feature(String),
    /// A `runtime=` value other than `jit`, `static` or `none`.
    #[error("unknown runtime \"{0}\" (known: jit, static, none)")]
    Runtime(String),
    /// A feature of another architecture than the triple's.
    #[error("feature \"{feature}\" is not one of {arch}")]
    WrongArchitecture {
        /// The feature's name.
        feature: &'static str,
        /// The triple's architecture.
        arch: String,
    },
    /// The text has no triple.
    #[error("empty target")]
    Empty,
}

impl Target {
    /// This process's machine, for JIT code: the only CPU detection in the compiler.
    pub fn host() -> Target {
        Target { triple: Triple::host(), features: Features::host(), runtime: Runtime::Jit }
    }

    /// `triple` with only its architecture's baseline features, for an object file.
    pub fn baseline(triple: Triple, runtime: Runtime) -> Target {
        Target { triple, features: Features::NONE, runtime }
    }

    /// Whether the code may use `f`.
    pub fn has(&self, f: Feature) -> bool {
        self.features.has(f)
    }

    /// The triple's architecture.
    pub fn arch(&self) -> Architecture {
        self.triple.architecture
    }

    /// Whether the code may call the runtime's routines (else they are lowered to loops).
    pub fn has_runtime(&self) -> bool {
        self.runtime != Runtime::None
    }
}

fn feature_arch(f: Feature) -> &'static str {
    match f {
        Feature::Neon => "aarch64",
        _ => "x86_64",
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.triple)?;
        for feature in self.features.iter() {
            write!(f, " +{}", feature.name())?;
        }
        write!(f, " runtime={}", self.runtime.name())
    }
}

impl FromStr for Target {
    type Err = TargetError;

    /// `TRIPLE [+FEATURE]... [runtime=jit|static|none]`; the runtime defaults to `jit`.
    fn from_str(s: &str) -> Result<Target, TargetError> {
        let mut words = s.split_whitespace();
        let triple_text = words.next().ok_or(TargetError::Empty)?;
        let triple = Triple::from_str(triple_text).map_err(|_| TargetError::Triple(triple_text.to_string()))?;
        let arch = triple.architecture.to_string();
        let mut target = Target::baseline(triple, Runtime::Jit);
        for word in words {
            if let Some(name) = word.strip_prefix('+') {
                let feature = Feature::ALL
                    .into_iter()
                    .find(|f| f.name() == name)
                    .ok_or_else(|| TargetError::Feature(name.to_string()))?;
                if feature_arch(feature) != arch {
                    return Err(TargetError::WrongArchitecture { feature: feature.name(), arch });
                }
                target.features = target.features.with(feature);
            } else if let Some(name) = word.strip_prefix("runtime=") {
                target.runtime = [Runtime::Jit, Runtime::Static, Runtime::None]
                    .into_iter()
                    .find(|r| r.name() == name)
                    .ok_or_else(|| TargetError::Runtime(name.to_string()))?;
            } else {
                return Err(TargetError::Feature(word.to_string()));
            }
        }
        Ok(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_form_round_trips_and_rejects_what_it_does_not_know() {
        let t: Target = "aarch64-unknown-linux-gnu +neon runtime=none".parse().unwrap();
        assert_eq!(t.runtime, Runtime::None);
        assert!(t.has(Feature::Neon));
        assert_eq!(t.to_string(), "aarch64-unknown-linux-gnu +neon runtime=none");
        assert_eq!(Target::host().to_string().parse::<Target>().unwrap(), Target::host());
        assert_eq!("".parse::<Target>(), Err(TargetError::Empty));
        assert!(matches!("nonsense-cpu".parse::<Target>(), Err(TargetError::Triple(_))));
        assert!(matches!("x86_64-unknown-linux-gnu +sse9".parse::<Target>(), Err(TargetError::Feature(_))));
        assert!(matches!("x86_64-unknown-linux-gnu +neon".parse::<Target>(), Err(TargetError::WrongArchitecture { .. })));
        assert!(matches!("x86_64-unknown-linux-gnu runtime=gpu".parse::<Target>(), Err(TargetError::Runtime(_))));
    }
}
