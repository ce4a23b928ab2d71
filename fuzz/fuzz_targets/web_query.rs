//! The dashboard's query strings, forms, header values and host names.
#![no_main]
libfuzzer_sys::fuzz_target!(|text: &str| pgqueuer::fuzzing::web_request_text(text));
