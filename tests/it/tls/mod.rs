//! TLS with libpq's settings, against servers of the tests' own: a CA, a server
//! certificate for `localhost` and `127.0.0.1`, and a client certificate are made with
//! `openssl` at test time; the server accepts only TLS (`hostssl`, plaintext rejected)
//! and `cert` authentication for one user.

mod connect;
mod fleet;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::harness::Throwaway;

/// The user that authenticates with its client certificate.
pub const CERT_USER: &str = "tlsuser";
/// The one user the server lets in without TLS (to compare with plaintext).
pub const PLAIN_USER: &str = "plainuser";

/// Certificates made for a test server.
pub struct Certs {
    pub dir: PathBuf,
}

impl Certs {
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
    /// A CA that signed nothing of this server's.
    pub fn other_ca(&self) -> PathBuf {
        self.dir.join("other-ca.crt")
    }
    pub fn client_cert(&self) -> PathBuf {
        self.dir.join("client.crt")
    }
    pub fn client_key(&self) -> PathBuf {
        self.dir.join("client.key")
    }

    /// Makes the CA, the other CA, the server's certificate (for `localhost` and
    /// `127.0.0.1`) and a client certificate for [`CERT_USER`], in `dir`.
    pub fn make(dir: &Path) -> Certs {
        std::fs::create_dir_all(dir).unwrap();
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .unwrap_or_else(|e| {
                    panic!("openssl is needed for the TLS tests (apt-get install openssl): {e}")
                });
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for (name, subject) in [
            ("ca", "/CN=pgqueuer test CA"),
            ("other-ca", "/CN=another CA"),
        ] {
            let (key, crt) = (format!("{name}.key"), format!("{name}.crt"));
            let mut args = vec!["req", "-x509"];
            args.extend(ec);
            args.extend([
                "-keyout", &key, "-out", &crt, "-days", "3", "-subj", subject,
            ]);
            openssl(&args);
        }
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("client.ext"),
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n",
        )
        .unwrap();
        for (name, subject) in [("server", "/CN=localhost"), ("client", "/CN=tlsuser")] {
            let (key, csr, crt, ext) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.crt"),
                format!("{name}.ext"),
            );
            let mut args = vec!["req"];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &csr, "-subj", subject]);
            openssl(&args);
            openssl(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &crt,
                "-days",
                "3",
                "-extfile",
                &ext,
            ]);
        }
        use std::os::unix::fs::PermissionsExt;
        for key in ["server.key", "client.key"] {
            std::fs::set_permissions(dir.join(key), std::fs::Permissions::from_mode(0o600))
                .unwrap();
        }
        Certs {
            dir: dir.to_owned(),
        }
    }
}

/// A server that accepts only TLS, with its certificates.
pub struct TlsServer {
    pub server: Throwaway,
    pub certs: Certs,
}

impl TlsServer {
    /// `key=value` DSN of database `postgres` as `user`, with `extra` settings.
    pub fn dsn(&self, user: &str, extra: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user={user} dbname=postgres {extra}",
            self.server.server.port
        )
    }

    /// A DSN that verifies everything.
    pub fn verified_dsn(&self) -> String {
        self.dsn(
            "postgres",
            &format!(
                "sslmode=verify-full sslrootcert={}",
                self.certs.ca().display()
            ),
        )
    }
}

/// The TLS server the tests share (made once per test process, with the schema
/// installed in database `postgres` and the certificate user created).
pub fn tls_server() -> &'static TlsServer {
    static SERVER: OnceLock<TlsServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("pgqueuer-tls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let certs = Certs::make(&dir);
        let cert = |name: &str| dir.join(name).display().to_string();
        let conf = [
            "ssl = on".to_owned(),
            format!("ssl_cert_file = '{}'", cert("server.crt")),
            format!("ssl_key_file = '{}'", cert("server.key")),
            format!("ssl_ca_file = '{}'", cert("ca.crt")),
        ];
        let conf: Vec<&str> = conf.iter().map(String::as_str).collect();
        let hba = [
            "hostssl all tlsuser 127.0.0.1/32 cert",
            "hostssl all all 127.0.0.1/32 trust",
            "hostnossl all plainuser 127.0.0.1/32 trust",
            "hostnossl all all 0.0.0.0/0 reject",
        ];
        // The server reads its key as its own user: hand the files over first.
        let server = {
            // The directory must be reachable by the server's user.
            let status = Command::new("chmod").arg("755").arg(&dir).status().unwrap();
            assert!(status.success());
            if is_root() {
                for file in ["server.key", "server.crt", "ca.crt"] {
                    let status = Command::new("chown")
                        .arg("postgres:postgres")
                        .arg(dir.join(file))
                        .status()
                        .unwrap();
                    assert!(status.success(), "chown {file}");
                }
            }
            Throwaway::with_conf(&hba, &conf).expect("a TLS throwaway server")
        };
        let tls = TlsServer { server, certs };
        let mut admin = pgqueuer::connect_one(&tls.verified_dsn(), "pgqueuer-tests")
            .expect("the TLS server answers over verify-full");
        admin
            .batch_execute(&format!(
                "CREATE ROLE {CERT_USER} LOGIN SUPERUSER; CREATE ROLE {PLAIN_USER} LOGIN SUPERUSER"
            ))
            .unwrap();
        pgqueuer::upgrade(&mut admin).unwrap();
        tls
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0\n"))
        .unwrap_or(false)
}
