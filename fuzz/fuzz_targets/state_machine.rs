#![no_main]
//! See `evd_fuzz::state_machine`.

libfuzzer_sys::fuzz_target!(|input: evd_fuzz::state_machine::Input| {
    evd_fuzz::state_machine::run(&input);
});
