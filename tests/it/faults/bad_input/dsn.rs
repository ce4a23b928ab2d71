//! Connection strings that cannot work.

use super::Tally;

/// An unknown DSN option, a string that is no DSN, a port out of range and a refused
/// port: each is an error that says which.
#[test]
fn bad_dsns_get_clear_errors() {
    let mut tally = Tally::default();
    let connect = |dsn: &str| pgqueuer::connect(dsn).map(drop);
    tally.expect_err(
        "unknown DSN option",
        connect("postgres://u@127.0.0.1/db?bogus_option=1"),
        &["invalid connection settings", "bogus_option"],
    );
    tally.expect_err(
        "not a DSN at all",
        connect("this is not a dsn"),
        &["invalid connection settings"],
    );
    tally.expect_err(
        "port out of range",
        connect("postgres://u@127.0.0.1:99999/db"),
        &["invalid connection settings"],
    );
    tally.expect_err(
        "refused port",
        connect("postgres://u@127.0.0.1:1/db"),
        &["could not connect to u@127.0.0.1:1/db", "refused"],
    );
    tally.finish("bad DSNs");
}
