//! Payload and headers rendering on the dashboard's job page.
#![no_main]
libfuzzer_sys::fuzz_target!(|input: (&[u8], usize)| {
    pgqueuer::fuzzing::web_payload(input.0, input.1);
});
