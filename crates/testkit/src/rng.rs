//! A seeded generator for reproducible test data.

/// Marsaglia's xorshift64 (shifts 13, 7, 17): fast, dependency-free and the same stream on
/// every machine, so a failing case reproduces from its seed. It is not for anything but tests.
///
/// ```
/// use kiln_testkit::Rng;
///
/// let mut rng = Rng::new(7);
/// let first = rng.next_u64();
/// assert_eq!(Rng::new(7).next_u64(), first);
/// assert!(rng.below(10) < 10);
/// assert!((-1.0..=1.0).contains(&rng.unit_f32()));
/// ```
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`. Zero, the one state xorshift never leaves, is taken as 1.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n` (0 when `n` is 0), slightly biased towards small values, which tests
    /// do not mind.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// A multiple of 1/1000 in [−1, 1], zero included.
    pub fn unit_f32(&mut self) -> f32 {
        (self.next_u64() % 2001) as f32 / 1000.0 - 1.0
    }

    /// `len` values of [`Rng::unit_f32`].
    pub fn unit_f32s(&mut self, len: usize) -> Vec<f32> {
        (0..len).map(|_| self.unit_f32()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn the_stream_is_xorshift64() {
        let mut rng = Rng::new(1);
        // x ^= x << 13; x ^= x >> 7; x ^= x << 17 from x = 1.
        assert_eq!(rng.next_u64(), 0x4082_2041);
        assert_eq!(Rng::new(0).next_u64(), Rng::new(1).next_u64());
        assert_eq!(rng.below(0), 0);
    }
}
