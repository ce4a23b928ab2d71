//! NOTIFY payloads: any role can send one on the queue's channel.
#![no_main]
libfuzzer_sys::fuzz_target!(|payload: &str| pgqueuer::fuzzing::notify_payload(payload));
