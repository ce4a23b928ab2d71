//! TLS on every connection this crate opens, with libpq's settings and their meanings.
//!
//! libpq reads `sslmode`, `sslrootcert`, `sslcert` and `sslkey` from the connection
//! string or from `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT` and `PGSSLKEY`, and falls back
//! to `~/.postgresql/root.crt`, `postgresql.crt` and `postgresql.key` when those exist.
//! The `postgres` driver knows only `disable`, `prefer` and `require`, and no file
//! settings, so the four are taken out of the connection string here ([`split_dsn`]),
//! resolved as libpq resolves them ([`TlsSettings::resolve`]), and turned into a rustls
//! configuration whose certificate check is the mode's ([`TlsSettings::connector`]):
//!
//! | `sslmode` | encrypts | verifies the chain | verifies the name |
//! |---|---|---|---|
//! | `disable` | no | - | - |
//! | `allow`, `prefer` (default) | when the server offers it | with a root certificate file, as `verify-ca` | no |
//! | `require` | yes | with a root certificate file, as `verify-ca` | no |
//! | `verify-ca` | yes | yes | no |
//! | `verify-full` | yes | yes | yes |
//!
//! `sslrootcert=system` uses the operating system's trusted roots and, as in libpq 16,
//! makes `verify-full` the default and anything weaker an error.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::error::{Error, Result};

/// The TLS connector of every connection: rustls, whatever the mode (the driver does not
/// use it for `sslmode=disable`).
pub(crate) type Connector = tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(text: &str, source: &'static str) -> Result<SslMode> {
        Ok(match text.trim().to_ascii_lowercase().as_str() {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => {
                return Err(Error::InvalidSetting {
                    setting: source,
                    value: text.to_owned(),
                    reason: "expected disable, allow, prefer, require, verify-ca or verify-full \
                             (libpq's sslmode)"
                        .into(),
                });
            }
        })
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// The mode the driver is given: it encrypts (or tries to) and leaves the checks to
    /// the connector.
    fn driver(self) -> postgres::config::SslMode {
        match self {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Allow | SslMode::Prefer => postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                postgres::config::SslMode::Require
            }
        }
    }
}

/// Where the root certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RootCert {
    File(PathBuf),
    /// The operating system's trusted roots (`sslrootcert=system`).
    System,
}

impl fmt::Display for RootCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RootCert::File(path) => write!(f, "{}", path.display()),
            RootCert::System => f.write_str("the system's trusted roots (sslrootcert=system)"),
        }
    }
}

/// The libpq TLS settings of one connection target, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsSettings {
    pub(crate) mode: SslMode,
    /// The roots the server's chain is checked against; `None`: not checked.
    pub(crate) root: Option<RootCert>,
    /// A client certificate chain and its key, for `cert` authentication.
    pub(crate) client: Option<(PathBuf, PathBuf)>,
}

/// The TLS keys taken out of a connection string.
pub(crate) const TLS_KEYS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// libpq settings this crate cannot honour: named in an error rather than ignored.
const UNSUPPORTED: [&str; 9] = [
    "sslpassword",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "sslcompression",
    "sslcertmode",
    "sslnegotiation",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
];

impl TlsSettings {
    /// Resolves the settings as libpq does: a connection string's own values (`params`,
    /// from [`split_dsn`]) first, then `PGSSL*` from `env`, then the files under
    /// `$HOME/.postgresql` that exist.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for an unknown mode, `sslrootcert=system` with a mode
    /// weaker than `verify-full`, a mode that verifies with no root certificate to verify
    /// against, or a client certificate without its key.
    pub(crate) fn resolve(
        params: &[(String, String)],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<TlsSettings> {
        let get = |key: &str, var: &'static str| -> Option<(String, &'static str)> {
            params
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| (v.clone(), "sslmode"))
                .or_else(|| env(var).filter(|v| !v.is_empty()).map(|v| (v, var)))
        };
        let home = env("HOME").map(|h| PathBuf::from(h).join(".postgresql"));
        let root = match get("sslrootcert", "PGSSLROOTCERT") {
            Some((v, _)) if v == "system" => Some(RootCert::System),
            Some((v, _)) => Some(RootCert::File(PathBuf::from(v))),
            None => home
                .as_ref()
                .map(|h| h.join("root.crt"))
                .filter(|p| p.exists())
                .map(RootCert::File),
        };
        let mode = match get("sslmode", "PGSSLMODE") {
            Some((v, source)) => {
                let source = if source == "sslmode" {
                    "sslmode"
                } else {
                    "PGSSLMODE"
                };
                let mode = SslMode::parse(&v, source)?;
                if root == Some(RootCert::System) && mode < SslMode::VerifyFull {
                    return Err(Error::InvalidSetting {
                        setting: source,
                        value: v,
                        reason: "sslrootcert=system trusts every public certificate \
                                 authority, so only sslmode=verify-full (the default with it) \
                                 makes it safe, as in libpq"
                            .into(),
                    });
                }
                mode
            }
            None if root == Some(RootCert::System) => SslMode::VerifyFull,
            None => SslMode::Prefer,
        };
        if mode >= SslMode::VerifyCa && root.is_none() {
            let default = home.map_or_else(
                || "~/.postgresql/root.crt".to_owned(),
                |h| h.join("root.crt").display().to_string(),
            );
            return Err(Error::InvalidSetting {
                setting: "sslrootcert",
                value: String::new(),
                reason: format!(
                    "sslmode={} verifies the server's certificate, and there is no root \
                     certificate to verify it against ({default} does not exist): set \
                     sslrootcert (or PGSSLROOTCERT) to the CA's file, use sslrootcert=system \
                     for the system's trusted roots, or use sslmode=require to encrypt \
                     without verifying",
                    mode.as_str()
                ),
            });
        }
        let explicit_cert = get("sslcert", "PGSSLCERT").map(|(v, _)| PathBuf::from(v));
        let explicit_key = get("sslkey", "PGSSLKEY").map(|(v, _)| PathBuf::from(v));
        let cert = explicit_cert.clone().or_else(|| {
            home.as_ref()
                .map(|h| h.join("postgresql.crt"))
                .filter(|p| p.exists())
        });
        let client = match cert {
            None => None,
            Some(cert) => {
                let key = explicit_key.or_else(|| {
                    home.as_ref()
                        .map(|h| h.join("postgresql.key"))
                        .filter(|p| p.exists())
                });
                match key {
                    Some(key) => Some((cert, key)),
                    None => {
                        return Err(Error::InvalidSetting {
                            setting: "sslkey",
                            value: String::new(),
                            reason: format!(
                                "the client certificate {} has no key: set sslkey (or PGSSLKEY) \
                                 to its private key file",
                                cert.display()
                            ),
                        });
                    }
                }
            }
        };
        // A verifying root file makes `require` (and `prefer`) verify the chain, as in
        // libpq.
        let root = if mode == SslMode::Disable { None } else { root };
        Ok(TlsSettings { mode, root, client })
    }

    /// The driver's own `sslmode` for these settings.
    pub(crate) fn driver_mode(&self) -> postgres::config::SslMode {
        self.mode.driver()
    }

    /// True when every connection of these settings is encrypted (the driver fails the
    /// connection otherwise); false for `disable`, `allow` and `prefer`, which may fall
    /// back to plaintext.
    pub(crate) fn always_encrypted(&self) -> bool {
        self.mode >= SslMode::Require
    }

    /// How the server is checked, for messages: `sslmode=verify-full against /ca.crt`.
    pub(crate) fn describe(&self) -> String {
        let check = match (&self.root, self.mode) {
            (_, SslMode::Disable) => "no TLS".to_owned(),
            (Some(root), SslMode::VerifyFull) => {
                format!("certificate and host name verified against {root}")
            }
            (Some(root), _) => format!("certificate chain verified against {root}"),
            (None, _) => "certificate not verified".to_owned(),
        };
        format!("sslmode={} ({check})", self.mode.as_str())
    }

    /// The connector for these settings: the files are read now, so an unreadable,
    /// unparsable or loosely protected one is named before any connection is tried.
    ///
    /// # Errors
    /// [`Error::ConnectionConfig`] naming the file and what is wrong with it.
    pub(crate) fn connector(&self) -> Result<Connector> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let algorithms = provider.signature_verification_algorithms;
        let verifier: Arc<dyn ServerCertVerifier> = match &self.root {
            None => Arc::new(Unverified { algorithms }),
            Some(root) => {
                let roots = Arc::new(load_roots(root)?);
                let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                    roots,
                    provider.clone(),
                )
                .build()
                .map_err(|e| {
                    Error::ConnectionConfig(format!("the root certificates of {root}: {e}"))
                })?;
                Arc::new(Verified {
                    inner: webpki,
                    check_name: self.mode == SslMode::VerifyFull,
                })
            }
        };
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::ConnectionConfig(format!("TLS versions: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match &self.client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = read_pem_certs(cert, "sslcert")?;
                check_key_permissions(key)?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                    Error::ConnectionConfig(format!(
                        "cannot read the client key sslkey={}: {e}",
                        key.display()
                    ))
                })?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    Error::ConnectionConfig(format!(
                        "the client certificate {} and its key do not go together: {e}",
                        cert.display()
                    ))
                })?
            }
        };
        Ok(Connector::new(config))
    }
}

fn load_roots(root: &RootCert) -> Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    match root {
        RootCert::File(path) => {
            for cert in read_pem_certs(path, "sslrootcert")? {
                store.add(cert).map_err(|e| {
                    Error::ConnectionConfig(format!(
                        "a certificate in sslrootcert={} is not a usable root: {e}",
                        path.display()
                    ))
                })?;
            }
        }
        RootCert::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(Error::ConnectionConfig(format!(
                    "sslrootcert=system: no trusted root certificate found on this system{}",
                    found
                        .errors
                        .first()
                        .map_or_else(String::new, |e| format!(" ({e})"))
                )));
            }
        }
    }
    Ok(store)
}

/// Every certificate of a PEM file, or an error naming the file and the setting.
fn read_pem_certs(path: &Path, setting: &str) -> Result<Vec<CertificateDer<'static>>> {
    let bytes = std::fs::read(path).map_err(|e| {
        Error::ConnectionConfig(format!("cannot read {setting}={}: {e}", path.display()))
    })?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| {
            Error::ConnectionConfig(format!(
                "{setting}={} is not a PEM certificate file: {e}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(Error::ConnectionConfig(format!(
            "{setting}={} holds no PEM certificate",
            path.display()
        )));
    }
    Ok(certs)
}

/// libpq's rule for private key files: no access for group or others (`0600`), or, for a
/// file owned by root, group read at most (`0640`).
fn check_key_permissions(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).map_err(|e| {
            Error::ConnectionConfig(format!("cannot read sslkey={}: {e}", path.display()))
        })?;
        let mode = meta.mode() & 0o777;
        let loose = if meta.uid() == 0 {
            mode & 0o037 != 0
        } else {
            mode & 0o077 != 0
        };
        if loose {
            return Err(Error::ConnectionConfig(format!(
                "the private key sslkey={} has permissions {mode:04o}, which let others read \
                 it: run chmod 0600 on it (or 0640 for a file owned by root), as libpq \
                 requires",
                path.display()
            )));
        }
    }
    Ok(())
}

/// `require` and `prefer` without a root certificate: encrypts, and checks only that the
/// server holds the key of the certificate it shows (the handshake's signatures).
#[derive(Debug)]
struct Unverified {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// `verify-ca` and `verify-full`: the chain against the roots, and for `verify-full`
/// the host name too. (The chain is checked before the name, so a name error alone
/// means the chain verified.)
#[derive(Debug)]
struct Verified {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    check_name: bool,
}

impl ServerCertVerifier for Verified {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A connection string without its TLS settings (which the driver would refuse), and
/// those settings, decoded. Both of libpq's forms are read: a `postgres://` URL's query
/// parameters and `key=value` pairs (with `'quoted values'` and backslash escapes).
///
/// # Errors
/// [`Error::ConnectionConfig`] for a libpq TLS setting this crate cannot honour, or a
/// malformed quoted value.
pub(crate) fn split_dsn(dsn: &str) -> Result<(String, Vec<(String, String)>)> {
    let trimmed = dsn.trim_start();
    let mut found = Vec::new();
    let unsupported = |key: &str| {
        Error::ConnectionConfig(format!(
            "the connection setting {key} is not supported here (pgqueuer-rs reads sslmode, \
             sslrootcert, sslcert and sslkey); remove it"
        ))
    };
    if trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://") {
        let Some((base, query)) = dsn.split_once('?') else {
            return Ok((dsn.to_owned(), found));
        };
        let mut kept = Vec::new();
        for part in query.split('&') {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            let key_text = crate::percent::decode(key).unwrap_or_else(|_| key.to_owned());
            if UNSUPPORTED.contains(&key_text.as_str()) {
                return Err(unsupported(&key_text));
            }
            if TLS_KEYS.contains(&key_text.as_str()) {
                let value = crate::percent::decode(value).map_err(|_| {
                    Error::ConnectionConfig(format!(
                        "the value of {key_text} in the DSN is not valid percent-encoded UTF-8"
                    ))
                })?;
                found.push((key_text, value));
            } else if !part.is_empty() {
                kept.push(part);
            }
        }
        let rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return Ok((rest, found));
    }
    // key=value pairs.
    let mut kept: Vec<&str> = Vec::new();
    let bytes = dsn.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= bytes.len() {
            break;
        }
        let start = i;
        while i < bytes.len() && bytes[i] != b'=' && !bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = &dsn[start..i];
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= bytes.len() || bytes[i] != b'=' {
            // Not a pair: leave it for the driver to name.
            kept.push(&dsn[start..i]);
            continue;
        }
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value = Vec::new();
        if i < bytes.len() && bytes[i] == b'\'' {
            i += 1;
            loop {
                match bytes.get(i) {
                    None => {
                        return Err(Error::ConnectionConfig(format!(
                            "the quoted value of {key} in the connection string has no closing \
                             quote"
                        )));
                    }
                    Some(b'\'') => {
                        i += 1;
                        break;
                    }
                    Some(b'\\') if i + 1 < bytes.len() => {
                        value.push(bytes[i + 1]);
                        i += 2;
                    }
                    Some(&b) => {
                        value.push(b);
                        i += 1;
                    }
                }
            }
        } else {
            while i < bytes.len() && !bytes[i].is_ascii_whitespace() {
                if bytes[i] == b'\\' && i + 1 < bytes.len() {
                    i += 1;
                }
                value.push(bytes[i]);
                i += 1;
            }
        }
        if UNSUPPORTED.contains(&key) {
            return Err(unsupported(key));
        }
        if TLS_KEYS.contains(&key) {
            let value = String::from_utf8(value)
                .map_err(|_| Error::ConnectionConfig(format!("the value of {key} is not UTF-8")))?;
            found.push((key.to_owned(), value));
        } else {
            kept.push(&dsn[start..i]);
        }
    }
    Ok((kept.join(" "), found))
}

/// Advice for a connection that failed because of TLS, from the driver's error and the
/// settings used: what happened and what to change. Empty when TLS was not the cause.
pub(crate) fn advice(error: &postgres::Error, settings: &TlsSettings, host: &str) -> String {
    use std::error::Error as _;
    if let Some(db) = error.as_db_error() {
        if db.code() == &postgres::error::SqlState::INVALID_AUTHORIZATION_SPECIFICATION
            && db.message().contains("no encryption")
        {
            return format!(
                "; the server accepts only encrypted connections here (a hostssl line in its \
                 pg_hba.conf), and this one was not encrypted ({}): use sslmode=require, or \
                 verify-full with sslrootcert",
                settings.describe()
            );
        }
        return String::new();
    }
    let mut source = error.source();
    while let Some(e) = source {
        // The handshake's error travels inside an `io::Error`, whose `source()` skips it.
        let inner = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        if let Some(tls) = e.downcast_ref::<rustls::Error>().or(inner) {
            return rustls_advice(tls, settings, host);
        }
        if e.to_string().contains("server does not support TLS") {
            return format!(
                "; the server at {host} does not offer TLS, and {} requires it: turn ssl on in \
                 the server's postgresql.conf, or use sslmode=prefer to accept plaintext",
                settings.describe()
            );
        }
        source = e.source();
    }
    String::new()
}

fn rustls_advice(error: &rustls::Error, settings: &TlsSettings, host: &str) -> String {
    let root = settings
        .root
        .as_ref()
        .map_or_else(|| "no root certificate".to_owned(), ToString::to_string);
    match error {
        rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            expected,
            presented,
        }) => format!(
            "; the server's certificate is not valid for {}: it names {}. Connect by one of \
             those names, or use sslmode=verify-ca to check the chain alone",
            expected.to_str(),
            if presented.is_empty() {
                "no host".to_owned()
            } else {
                presented
                    .iter()
                    .map(|p| plain_name(p))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ),
        rustls::Error::InvalidCertificate(CertificateError::NotValidForName) => format!(
            "; the server's certificate is not valid for {host}; connect by a name it holds, \
             or use sslmode=verify-ca"
        ),
        rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer | CertificateError::BadSignature,
        ) => format!(
            "; the certificate of {host} does not verify against {root}: set sslrootcert to \
             the file of the CA that issued the server's certificate"
        ),
        rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        ) => format!("; the certificate of {host} has expired"),
        rustls::Error::InvalidCertificate(e) => {
            format!("; the certificate of {host} was refused ({e:?}), checked against {root}")
        }
        rustls::Error::AlertReceived(alert) => format!(
            "; the server ended the TLS handshake ({alert:?}): with cert authentication, give \
             a client certificate it trusts (sslcert and sslkey)"
        ),
        other => format!("; TLS failed: {other}"),
    }
}

/// `localhost` of rustls's `DnsName("localhost")`, and `127.0.0.1` of an address's form.
fn plain_name(presented: &str) -> &str {
    if let Some((_, rest)) = presented.split_once('"') {
        return rest.split('"').next().unwrap_or(rest);
    }
    presented
        .split_once('(')
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .unwrap_or(presented)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn tls_settings_leave_both_forms_of_dsn() {
        let (rest, found) = split_dsn(
            "postgres://u:p@db:5432/app?sslmode=verify-full&application_name=x&sslrootcert=%2Fca%20dir%2Fca.crt",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u:p@db:5432/app?application_name=x");
        assert_eq!(
            found,
            [
                ("sslmode".to_owned(), "verify-full".to_owned()),
                ("sslrootcert".to_owned(), "/ca dir/ca.crt".to_owned())
            ]
        );
        let (rest, found) = split_dsn(
            "host=db sslmode = require user=u sslkey='/k e\\'y' password='a b' sslcert=/c\\ d",
        )
        .unwrap();
        assert_eq!(rest, "host=db user=u password='a b'");
        assert_eq!(
            found,
            [
                ("sslmode".to_owned(), "require".to_owned()),
                ("sslkey".to_owned(), "/k e'y".to_owned()),
                ("sslcert".to_owned(), "/c d".to_owned())
            ]
        );
        assert_eq!(
            split_dsn("postgres://db/app").unwrap().0,
            "postgres://db/app"
        );
        let e = split_dsn("host=db sslcrl=/x").unwrap_err();
        assert!(e.to_string().contains("sslcrl"), "{e}");
        assert!(split_dsn("host=db sslkey='open").is_err());
    }

    /// A TLS setting in a URL whose value is broken percent-encoding (a `%` without two hex
    /// digits, a sign where a digit belongs, bytes that are not UTF-8) is refused by name,
    /// not taken as written.
    #[test]
    fn broken_percent_encoding_in_a_tls_setting_is_refused_by_name() {
        for value in ["%zz", "50%", "%2", "%+1", "%FF%FE"] {
            let dsn = format!("postgres://db/app?sslrootcert={value}");
            let e = split_dsn(&dsn).expect_err(&dsn).to_string();
            assert!(
                e.contains("sslrootcert") && e.contains("percent-encoded"),
                "{dsn}: {e}"
            );
        }
    }

    #[test]
    fn presented_names_read_plainly() {
        assert_eq!(plain_name("DnsName(\"localhost\")"), "localhost");
        assert_eq!(plain_name("IpAddress(127.0.0.1)"), "127.0.0.1");
        assert_eq!(plain_name("db.example"), "db.example");
    }

    #[test]
    fn modes_resolve_as_libpq_resolves_them() {
        let params = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let s = TlsSettings::resolve(&[], &no_env).unwrap();
        assert_eq!((s.mode, s.root.clone()), (SslMode::Prefer, None));
        let s = TlsSettings::resolve(&params(&[("sslrootcert", "system")]), &no_env).unwrap();
        assert_eq!(
            (s.mode, s.root),
            (SslMode::VerifyFull, Some(RootCert::System))
        );
        let e = TlsSettings::resolve(
            &params(&[("sslrootcert", "system"), ("sslmode", "require")]),
            &no_env,
        )
        .unwrap_err();
        assert!(e.to_string().contains("verify-full"), "{e}");
        let e = TlsSettings::resolve(&params(&[("sslmode", "verify-ca")]), &no_env).unwrap_err();
        assert!(e.to_string().contains("no root certificate"), "{e}");
        let e = TlsSettings::resolve(&params(&[("sslmode", "sometimes")]), &no_env).unwrap_err();
        assert!(e.to_string().contains("verify-full"), "{e}");
        // The DSN's own value wins over the environment's.
        let env = |k: &str| (k == "PGSSLMODE").then(|| "disable".to_owned());
        let s = TlsSettings::resolve(&params(&[("sslmode", "require")]), &env).unwrap();
        assert_eq!(s.mode, SslMode::Require);
        assert_eq!(
            TlsSettings::resolve(&[], &env).unwrap().mode,
            SslMode::Disable
        );
        let e = TlsSettings::resolve(&params(&[("sslcert", "/c.crt")]), &no_env).unwrap_err();
        assert!(e.to_string().contains("no key"), "{e}");
    }

    #[test]
    fn a_readable_key_is_refused() {
        let dir = std::env::temp_dir().join(format!("pgq-tls-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("k.key");
        std::fs::write(&key, "not a key").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = check_key_permissions(&key).unwrap_err();
        assert!(
            e.to_string().contains("0644") && e.to_string().contains("chmod"),
            "{e}"
        );
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        check_key_permissions(&key).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
