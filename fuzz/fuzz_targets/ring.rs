#![no_main]
//! See `evd_fuzz::ring`. Built without `--cfg shuttle` (the core on real
//! threads); with it this target only says so.

#[cfg(not(shuttle))]
libfuzzer_sys::fuzz_target!(|input: evd_fuzz::ring::Input| {
    evd_fuzz::ring::run(&input);
});

#[cfg(shuttle)]
libfuzzer_sys::fuzz_target!(|_data: &[u8]| {
    panic!("the ring target drives real threads: build it without --cfg shuttle");
});
