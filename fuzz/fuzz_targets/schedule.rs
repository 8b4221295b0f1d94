#![no_main]
//! See `evd_fuzz::schedule`. Needs `RUSTFLAGS="--cfg shuttle"` (as
//! `scripts/fuzz` builds it); without it this target only says so.

#[cfg(shuttle)]
libfuzzer_sys::fuzz_target!(|input: evd_fuzz::schedule::Input| {
    evd_fuzz::schedule::run(&input);
});

#[cfg(not(shuttle))]
libfuzzer_sys::fuzz_target!(|_data: &[u8]| {
    panic!("build the schedule target with RUSTFLAGS=\"--cfg shuttle\" (scripts/fuzz does)");
});
