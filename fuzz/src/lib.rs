//! Fuzz targets for evd, as a library so that the seed corpus also replays as
//! ordinary unit tests (`cargo test -p evd-fuzz`) on stable Rust.
//!
//! * `schedule` (built only with `--cfg shuttle`): the real code on shuttle
//!   threads, every scheduling decision taken from the input, every CAS on
//!   the state word checked against [`spec`] as it happens.
//! * [`transitions`]: every `evd::state` function against [`spec`] on
//!   random words.
//! * `ring`: post / dequeue / batch / resize / close / drop sequences on
//!   the real ring against a `VecDeque` model, with drop-counting payloads.
//! * `api`: sequences of public API calls, bad arguments included.
//!
//! `ring` and `api` run the core on real threads, so they are built only
//! without `--cfg shuttle`; `schedule` only with it (`scripts/fuzz` builds
//! both ways, in separate target directories).

#[cfg(not(shuttle))]
pub mod api;
pub mod payload;
#[cfg(not(shuttle))]
pub mod ring;
#[cfg(shuttle)]
pub mod schedule;
pub mod semantics;
pub mod spec;
pub mod transitions;

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
