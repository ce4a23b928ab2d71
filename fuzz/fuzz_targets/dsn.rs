//! DSNs and the libpq variables beside them.
#![no_main]
libfuzzer_sys::fuzz_target!(|input: (&str, Vec<(String, String)>)| {
    pgqueuer::fuzzing::dsn(input.0, &input.1);
});
