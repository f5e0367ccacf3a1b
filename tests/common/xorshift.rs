//! The seeded generator the adversarial tests share: xorshift64, so a
//! failing seed replays the same inputs on any machine (no `rand` needed).

/// xorshift64 (Marsaglia); the seed must be odd or at least non-zero.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n` (`0` for `n == 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}
