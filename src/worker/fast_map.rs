//! Hash maps for the worker's per-job lookups, with a hasher that costs a multiply per
//! word instead of SipHash's rounds.
//!
//! Every job a worker runs is looked up several times on the way: its entrypoint by name
//! (to find the handler, to count the claim, to place it among the owned jobs) and its
//! id (owned, rate-gated, removed once written). With the standard library's SipHash
//! those lookups cost a few hundred instructions per job, more than reading the job's
//! row. SipHash's strength, resistance to keys chosen to collide, is not needed here:
//! the names are the worker's own registrations, and the ids are at most the jobs the
//! worker holds at once (its threads and one claim ahead, a few hundred), so keys
//! crafted to collide (ids written into the table by a hostile program) can at worst
//! turn a lookup into a scan of those few hundred.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` hashed by [`FastHasher`].
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// Folds each word in with a rotate, a xor and a multiply by an odd constant (Knuth's
/// multiplicative hashing, the golden ratio's 64-bit fraction).
#[derive(Default, Clone, Copy)]
pub(crate) struct FastHasher(u64);

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(GOLDEN);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let mut buf = [0u8; 8];
            buf.copy_from_slice(word);
            self.add(u64::from_le_bytes(buf));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            // The length in the unused top byte: "a" and "a\0" fill the word alike.
            let mut buf = [0u8; 8];
            buf[..rest.len()].copy_from_slice(rest);
            buf[7] = rest.len() as u8;
            self.add(u64::from_le_bytes(buf));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_i64(&mut self, n: i64) {
        self.add(n as u64);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    /// The product's high bits are its best mixed; `hashbrown` picks a bucket by the low
    /// bits and a tag by the top seven, so the high half is rotated down.
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn hash<T: std::hash::Hash + ?Sized>(value: &T) -> u64 {
        BuildHasherDefault::<FastHasher>::default().hash_one(value)
    }

    #[test]
    fn sequential_ids_spread_over_the_buckets_of_a_small_table() {
        // Job ids come from a sequence: a claim's batch is a run of neighbours.
        for start in [1i64, 1_000_003, i64::MAX - 512] {
            let mut buckets = [0u32; 256];
            for id in start..start + 512 {
                buckets[(hash(&id) & 255) as usize] += 1;
            }
            let fullest = buckets.iter().max().copied().unwrap_or(0);
            assert!(
                fullest <= 8,
                "512 ids from {start}: {fullest} in one bucket"
            );
        }
    }

    #[test]
    fn names_that_differ_anywhere_hash_apart() {
        let names = [
            "fetch", "fetch\0", "fetcH", "fetch_1", "fetch_2", "", "a", "b",
        ];
        let mut hashes: Vec<u64> = names.iter().map(|n| hash(*n)).collect();
        hashes.sort_unstable();
        hashes.dedup();
        assert_eq!(hashes.len(), names.len());
        let long_a = "x".repeat(40) + "a";
        let long_b = "x".repeat(40) + "b";
        assert_ne!(hash(long_a.as_str()), hash(long_b.as_str()));
    }

    #[test]
    fn a_fast_map_finds_what_it_holds() {
        let mut map: FastMap<i64, usize> = FastMap::default();
        for id in 0..10_000i64 {
            map.insert(id * 7_919, id as usize);
        }
        assert!((0..10_000i64).all(|id| map.get(&(id * 7_919)) == Some(&(id as usize))));
        assert_eq!(map.get(&1), None);
    }
}
