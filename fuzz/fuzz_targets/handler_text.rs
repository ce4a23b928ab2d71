//! Handler error text on its way into `jsonb`.
#![no_main]
libfuzzer_sys::fuzz_target!(|input: (&str, usize)| {
    pgqueuer::fuzzing::handler_text(input.0, input.1);
});
