//! Debian packages the tests need (PgBouncer, tc, a browser), installed on first use
//! when missing so that a fresh machine's `cargo test` needs no step by hand: through
//! `apt-get` when the tests run as root, otherwise a failure that says what to install.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// One installation at a time in this process (apt's own lock covers other processes,
/// which then fail with apt's message).
static APT: Mutex<()> = Mutex::new(());

/// The first of `candidates` that exists, installing `package` when none does.
/// `why` says which tests need it, for the failure message.
pub fn binary(candidates: &[&str], package: &str, why: &str) -> PathBuf {
    let found = || candidates.iter().map(Path::new).find(|p| p.exists());
    if let Some(path) = found() {
        return path.to_owned();
    }
    let _one = APT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(path) = found() {
        return path.to_owned();
    }
    if let Err(e) = install(package) {
        panic!(
            "{package} is not installed and could not be installed ({e}): {why}. Install it \
             (`apt-get install {package}`, which .ci/run does)"
        );
    }
    match found() {
        Some(path) => path.to_owned(),
        None => panic!("apt-get installed {package} but none of {candidates:?} exists: {why}"),
    }
}

fn install(package: &str) -> Result<(), String> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if !root {
        return Err("the tests install packages only when run as root".into());
    }
    eprintln!("pgqueuer tests: installing {package} with apt-get (once per machine)");
    let run = |args: &[&str]| -> Result<(), String> {
        let out = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .map_err(|e| format!("cannot run apt-get: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "apt-get {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    };
    run(&["update", "-qq"])?;
    run(&["install", "-y", "-qq", package])
}
