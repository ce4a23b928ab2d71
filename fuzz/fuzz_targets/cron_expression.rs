//! Cron expressions, as any program may write them to the schedules table.
#![no_main]
libfuzzer_sys::fuzz_target!(|input: (&str, u64)| {
    pgqueuer::fuzzing::cron_expression(input.0, input.1);
});
