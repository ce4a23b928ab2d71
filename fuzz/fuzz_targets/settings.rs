//! `PGQUEUER_*` settings from the environment.
#![no_main]
libfuzzer_sys::fuzz_target!(|env: Vec<(String, String)>| pgqueuer::fuzzing::settings(&env));
