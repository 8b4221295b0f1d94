#![no_main]
//! See `evd_fuzz::transitions`.

libfuzzer_sys::fuzz_target!(|input: evd_fuzz::transitions::Input| {
    evd_fuzz::transitions::run(&input);
});
