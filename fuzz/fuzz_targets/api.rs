#![no_main]
//! See `evd_fuzz::api`. Built without `--cfg shuttle` (the core on real
//! threads); with it this target only says so.

#[cfg(not(shuttle))]
libfuzzer_sys::fuzz_target!(|input: evd_fuzz::api::Input| {
    evd_fuzz::api::run(&input);
});

#[cfg(shuttle)]
libfuzzer_sys::fuzz_target!(|_data: &[u8]| {
    panic!("the api target drives real threads: build it without --cfg shuttle");
});
