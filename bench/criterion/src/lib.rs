//! evd-bench's criterion benches live in `benches/` (`cargo bench -p evd-criterion`); they measure with
//! the systems and loops of the `evd_bench` library. Cargo wants a library or a binary in every package:
//! this one is empty.
#![deny(missing_docs)]
