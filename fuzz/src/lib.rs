//! Fuzz targets for evd, as a library so that the seed corpus also replays as
//! ordinary unit tests (`cargo test -p evd-fuzz`) on stable Rust.
//!
//! * [`state_machine`]: a deterministic simulator of the concurrent protocol,
//!   built from the real `evd::state` transition functions and stepped by a
//!   fuzzer-chosen interleaving, checked against [`spec`] after every step.
//! * [`ring`]: post / dequeue / batch / resize / close / drop sequences on
//!   the real ring against a `VecDeque` model, with drop-counting payloads.
//! * [`api`]: sequences of public API calls, bad arguments included.

pub mod api;
pub mod payload;
pub mod ring;
pub mod spec;
pub mod state_machine;

/// Replay every file of `seeds/<target>/` (and `regressions/<target>/`)
/// through `run`, decoding it as libFuzzer's `fuzz_target!` does.
#[cfg(test)]
pub(crate) fn replay<T: for<'a> arbitrary::Arbitrary<'a>>(target: &str, run: impl Fn(&T)) -> usize {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut n = 0;
    for dir in ["seeds", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        let mut files: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files {
            let bytes = std::fs::read(&f).unwrap();
            if let Ok(input) = T::arbitrary_take_rest(arbitrary::Unstructured::new(&bytes)) {
                run(&input);
                n += 1;
            }
        }
    }
    n
}

/// A small deterministic generator for the smoke tests (xorshift64*).
#[cfg(test)]
pub(crate) struct Rng(pub u64);

#[cfg(test)]
impl Rng {
    pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| {
                self.0 ^= self.0 >> 12;
                self.0 ^= self.0 << 25;
                self.0 ^= self.0 >> 27;
                (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
            })
            .collect()
    }
}
