#![no_main]
//! See `evd_fuzz::ring`.

libfuzzer_sys::fuzz_target!(|input: evd_fuzz::ring::Input| {
    evd_fuzz::ring::run(&input);
});
