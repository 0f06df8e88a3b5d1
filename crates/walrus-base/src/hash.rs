//! A fast hasher for in-memory hash tables keyed by walrus's own values (page ids, tids,
//! grouping and join keys): a word at a time, rotate-xor-multiply (the Firefox/rustc
//! "Fx" scheme). SipHash's resistance to chosen collisions buys nothing for tables a
//! statement builds over its own data (PostgreSQL's hash tables are not keyed either)
//! and costs ~20 ns a lookup: a tenth of a hash join's time.

use std::hash::{BuildHasherDefault, Hasher};

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

/// The hasher (see the module comment).
#[derive(Default, Clone, Copy)]
pub struct WordHasher(u64);

impl WordHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for WordHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(c);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            // The tail's length in its free top byte: "a" and "a\0" differ.
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last) ^ ((rest.len() as u64) << 56));
        }
    }

    #[inline]
    fn write_u8(&mut self, v: u8) {
        self.add(v as u64);
    }

    #[inline]
    fn write_u16(&mut self, v: u16) {
        self.add(v as u64);
    }

    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.add(v as u64);
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }

    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }

    #[inline]
    fn write_i64(&mut self, v: i64) {
        self.add(v as u64);
    }
}

/// A `HashMap` / `HashSet` hasher builder for [`WordHasher`].
pub type WordHash = BuildHasherDefault<WordHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::hash::{BuildHasher, Hash};

    fn hash<T: Hash>(v: &T) -> u64 {
        WordHash::default().hash_one(v)
    }

    #[test]
    fn equal_values_hash_equal_and_close_values_spread() {
        assert_eq!(hash(&(3u32, 7u16)), hash(&(3u32, 7u16)));
        assert_eq!(hash(&"walrus"), hash(&String::from("walrus")));
        // Strings that differ only past a word boundary, or only in length.
        assert_ne!(hash(&"abcdefgh1"), hash(&"abcdefgh2"));
        assert_ne!(hash(&"a"), hash(&"a\0"));
        // Consecutive integers land in distinct buckets of a small table (a hash
        // table's index is the hash's low bits).
        let buckets: HashSet<u64> = (0..64u64).map(|i| hash(&i) & 63).collect();
        assert_eq!(buckets.len(), 64);
    }
}
