//! Entry points for fuzzing the parsers of outside input (feature `fuzzing`, used by the
//! `cargo fuzz` targets in `fuzz/`; the property tests at the bottom drive the same
//! checks in `cargo test`). Not part of the API: each function takes raw input, runs one
//! parser over it, and panics only when an invariant breaks (a parser itself must never
//! panic, whatever it is given).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::cron::Cron;
use crate::events::Event;
use crate::settings::Settings;

/// A NOTIFY payload, as any role may send one on the channel: parsing never panics, and
/// whatever parses writes back to text that parses to the same event.
pub fn notify_payload(payload: &str) {
    if let Ok(event) = Event::parse(payload) {
        let text = event.to_json();
        let again = Event::parse(&text).unwrap_or_else(|e| {
            panic!("{payload:?} parsed, but its own text {text:?} did not: {e}")
        });
        assert_eq!(again, event, "{payload:?} -> {text:?}");
    }
}

/// A cron expression from the schedules table (any program may write one), and a time:
/// parsing never panics, and the next fire time is strictly after the time given, for
/// times between 1970 and the year 9999.
pub fn cron_expression(expression: &str, seconds: u64) {
    let Ok(cron) = Cron::parse(expression) else {
        return;
    };
    let seconds = seconds % 253_402_300_799; // 9999-12-31T23:59:59Z
    let t = UNIX_EPOCH + Duration::from_secs(seconds);
    let next = cron.next_after(t);
    assert!(next > t, "{expression:?}: next_after({seconds}) = {next:?}");
}

/// A DSN and the libpq variables beside it: resolving never panics, and a resolved
/// configuration always has a host and the network deadline set.
pub fn dsn(text: &str, env: &[(String, String)]) {
    let lookup = |key: &str| env.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    let _ = crate::tls::split_dsn(text);
    let redacted = crate::connect::redact_dsn(text);
    if let Ok(target) = crate::connect::resolve_target(text, &lookup, "fuzz") {
        let config = target.config();
        assert!(!config.get_hosts().is_empty(), "{text:?}: no host");
        assert!(
            config.get_tcp_user_timeout().is_some(),
            "{text:?}: no deadline"
        );
        // A password the driver reads never shows, where it is written once, as is.
        if let Some(password) = config.get_password().map(String::from_utf8_lossy)
            && password.len() >= 6
            && text.matches(&*password).count() == 1
        {
            assert!(
                !redacted.contains(&*password),
                "{text:?} shows its password: {redacted:?}"
            );
        }
    }
}

/// `PGQUEUER_*` variables: reading never panics, and settings that read validate (every
/// name they give is one the crate can quote into SQL).
pub fn settings(env: &[(String, String)]) {
    let lookup = |key: &str| env.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    if let Ok(settings) = Settings::from_lookup(lookup) {
        settings
            .validate()
            .unwrap_or_else(|e| panic!("settings read from {env:?} do not validate: {e}"));
    }
}

/// Text a handler returns as its error: after `storable_text` it holds no NUL (which
/// PostgreSQL's `text` and `jsonb` refuse) and stays within its bound plus the note.
pub fn handler_text(text: &str, max: usize) {
    let max = max % (1 << 16);
    let stored = crate::job::storable_text(text, max);
    assert!(!stored.contains('\0'));
    assert!(
        stored.len() <= max.max(1) * 6 + 64,
        "{} > {max}",
        stored.len()
    );
    if !text.contains('\0') && text.len() <= max {
        assert_eq!(stored, text);
    }
}

/// A time from a row another program wrote, formatted the two ways PgQueuer's payloads
/// carry times: never panics, and the text reads back.
pub fn timestamp(seconds: i64, nanos: u32) {
    let t = if seconds >= 0 {
        UNIX_EPOCH
            + Duration::new(
                seconds.unsigned_abs() % 253_402_300_799,
                nanos % 1_000_000_000,
            )
    } else {
        UNIX_EPOCH - Duration::from_secs(seconds.unsigned_abs() % 62_135_596_800)
    };
    for style in [
        crate::time::TimeStyle::Postgres,
        crate::time::TimeStyle::Python,
    ] {
        let text = crate::time::format_time(t, style);
        let back: SystemTime = crate::time::parse_time(&text)
            .unwrap_or_else(|e| panic!("{t:?} formatted as {text:?} does not parse: {e}"));
        let micros = |t: SystemTime| match t.duration_since(UNIX_EPOCH) {
            Ok(d) => i128::try_from(d.as_micros()).unwrap_or(i128::MAX),
            Err(e) => -i128::try_from(e.duration().as_micros()).unwrap_or(i128::MAX),
        };
        assert_eq!(micros(back), micros(t), "{text}");
    }
}

/// The dashboard's query strings, forms, header values and host names (feature `web`).
#[cfg(feature = "web")]
pub fn web_request_text(text: &str) {
    crate::web::fuzz::request_text(text);
}

/// The payload view ([`PayloadView`](crate::PayloadView): what `pgq job` prints and the
/// dashboard's job page shows) and the dashboard's headers view (feature `web`).
#[cfg(feature = "web")]
pub fn web_payload(shown: &[u8], extra: usize) {
    crate::web::fuzz::payload(shown, extra);
}

#[cfg(test)]
mod properties {
    //! The fuzzing checks as property tests: a short run in every `cargo test` (the
    //! `cargo fuzz` targets run them for longer by hand; see `fuzz/README.md`).

    use proptest::prelude::*;

    /// Payloads near the real ones: the three kinds with fields cut, doubled or replaced.
    fn payload() -> impl Strategy<Value = String> {
        let kinds = prop_oneof![
            Just("table_changed_event"),
            Just("cancellation_event"),
            Just("health_check_event"),
            ".{0,20}"
                .prop_map(|s| Box::leak(s.into_boxed_str()) as &str)
                .boxed(),
        ];
        let time = prop_oneof![
            Just("2026-11-29T19:18:23.097731Z".to_owned()),
            Just("2026-11-29T19:18:00.820631+00:00".to_owned()),
            "[0-9T:+Z.-]{0,40}",
            "\\PC{0,30}",
        ];
        let ids = prop_oneof![
            Just("[1,2]".to_owned()),
            "\\[(-?[0-9]{1,25},?){0,5}\\]",
            "\\PC{0,20}",
        ];
        (kinds, time.clone(), time, ids, "\\PC{0,20}").prop_map(|(kind, sent, received, ids, extra)| {
            format!(
                r#"{{"channel":"ch_pgqueuer","operation":"insert","table":"pgqueuer","sent_at":"{sent}","type":"{kind}","received_at":"{received}","ids":{ids},"id":"{extra}"}}"#
            )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn notify_payloads_never_panic(payload in payload()) {
            super::notify_payload(&payload);
        }

        #[test]
        fn any_text_as_a_notify_payload_never_panics(payload in "\\PC{0,200}") {
            super::notify_payload(&payload);
        }

        #[test]
        fn cron_expressions_never_panic(
            expression in "([0-9*/,L#W?-]{1,8} ){4,6}[0-9*/,a-zA-Z-]{0,8}",
            seconds in any::<u64>(),
        ) {
            super::cron_expression(&expression, seconds);
        }

        #[test]
        fn any_text_as_a_cron_expression_never_panics(expression in "\\PC{0,60}", seconds in any::<u64>()) {
            super::cron_expression(&expression, seconds);
        }

        #[test]
        fn dsns_never_panic(
            dsn in prop_oneof![
                "postgres(ql)?://[a-z:@%0-9]{0,20}(/[a-z]{0,8})?(\\?[a-z_]{1,16}=[a-z0-9%-]{0,10}(&[a-z_]{1,16}=[a-z0-9]{0,6}){0,3})?",
                "([a-z_]{1,16}=('[^']{0,10}'|[a-z0-9]{0,10}) ?){0,5}",
                "\\PC{0,80}",
            ],
            env in proptest::collection::vec(
                (prop_oneof![Just("PGHOST"), Just("PGPORT"), Just("PGUSER"), Just("PGQUEUER_DSN"), Just("PGDATABASE")]
                    .prop_map(str::to_owned), "\\PC{0,20}"),
                0..4,
            ),
        ) {
            super::dsn(&dsn, &env);
        }

        #[test]
        fn passwords_never_show_in_any_form_the_driver_reads(
            password in "[A-Za-z0-9]{8,16}",
            form in 0..6usize,
            space in " {0,2}",
        ) {
            let dsn = match form {
                0 => format!("host=db password{space}={space}{password} dbname=q"),
                1 => format!("host=db password{space}={space}'{password}'"),
                2 => format!("postgres://u:{password}@db/q"),
                3 => format!("postgres://db/q?password={password}"),
                4 => format!("postgres://db/q?pass%77ord={password}&sslmode=disable"),
                _ => format!("host=db sslpassword={password}"),
            };
            let redacted = crate::connect::redact_dsn(&dsn);
            prop_assert!(!redacted.contains(&password), "{} -> {}", dsn, redacted);
            super::dsn(&dsn, &[]);
        }

        #[test]
        fn settings_never_panic(
            env in proptest::collection::vec(
                (prop_oneof![
                    Just("PGQUEUER_PREFIX"), Just("PGQUEUER_SCHEMA"), Just("PGQUEUER_QUEUE_TABLE"),
                    Just("PGQUEUER_CHANNEL"), Just("PGQUEUER_DURABILITY"), Just("QUEUE_TABLE"),
                ].prop_map(str::to_owned), "\\PC{0,70}"),
                0..5,
            ),
        ) {
            super::settings(&env);
        }

        #[test]
        fn handler_texts_are_always_storable(text in "(\\PC|\\x00){0,300}", max in 0usize..400) {
            super::handler_text(&text, max);
        }

        #[test]
        fn timestamps_read_back(seconds in any::<i64>(), nanos in any::<u32>()) {
            super::timestamp(seconds, nanos);
        }

        #[cfg(feature = "web")]
        #[test]
        fn web_request_texts_never_panic(
            text in prop_oneof![
                "([a-z_]{0,6}=([a-z0-9+]|%[0-9a-fA-F]{2}|%[^0-9a-fA-F]?|%00){0,6}&?){0,5}",
                "(https?://)?[a-z.]{0,12}(:[0-9]{0,6})?(/[a-z]*)?",
                "\\[[0-9a-f:]{0,12}\\](:[0-9]{1,5})?",
                "Basic [A-Za-z0-9+/=]{0,24}",
                "\\PC{0,80}",
            ]
        ) {
            super::web_request_text(&text);
        }

        #[cfg(feature = "web")]
        #[test]
        fn web_payload_views_stay_bounded(
            shown in prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..600),
                "\\{(\"[a-z\\x00]{0,4}\":[0-9\\[\\]{}\",]{0,8},?){0,8}\\}".prop_map(String::into_bytes),
                "\\[{0,200}".prop_map(String::into_bytes),
            ],
            extra in any::<usize>(),
        ) {
            super::web_payload(&shown, extra);
        }
    }
}
