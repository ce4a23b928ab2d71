//! Warnings that must reach someone even when the application installed no logger.

/// True when no logger is installed: `log`'s max level is `Off`, as it is until a logger
/// is set up (`env_logger::init()` and its kin raise it).
pub(crate) fn no_logger() -> bool {
    log::max_level() == log::LevelFilter::Off
}

/// Logs at `warn`, and with no logger installed prints to stderr as well, as Python's
/// `logging` does with its last-resort handler: a failing handler must never go unseen.
pub(crate) fn warn_always(message: std::fmt::Arguments<'_>) {
    log::warn!("{message}");
    if no_logger() {
        eprintln!("pgqueuer: {message}");
    }
}
