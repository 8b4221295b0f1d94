#![no_main]
//! See `evd_fuzz::api`.

libfuzzer_sys::fuzz_target!(|input: evd_fuzz::api::Input| {
    evd_fuzz::api::run(&input);
});
