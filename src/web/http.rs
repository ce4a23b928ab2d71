//! The small parts of HTTP the dashboard needs above hyper: query strings and
//! urlencoded forms, Basic credentials, the names the dashboard answers for (its host
//! allowlist) and the same-origin check of actions.

use std::fmt;
use std::net::SocketAddr;

/// Why a parameter (of a query string, a form or the path) was refused; its `Display`
/// names the parameter and says what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BadParam {
    /// The parameter's name as sent (decoded where it could be), or a description of
    /// where the value was (`the entrypoint name in the path`).
    pub name: String,
    pub why: Broken,
}

/// What was wrong with a parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Broken {
    /// A `%` not followed by two hex digits.
    Escape,
    /// The decoded bytes are not UTF-8.
    NotUtf8,
    /// A NUL character (`%00`).
    Nul,
}

impl fmt::Display for BadParam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = &self.name;
        match self.why {
            Broken::Escape => write!(
                f,
                "the parameter `{name}` is not valid: a % must be followed by two hex digits"
            ),
            Broken::NotUtf8 => write!(
                f,
                "the parameter `{name}` is not valid: its %-escapes do not decode to UTF-8 text"
            ),
            Broken::Nul => write!(
                f,
                "the parameter `{name}` is not valid: it holds a NUL character (%00), which \
                 PostgreSQL text cannot store, so no entrypoint name or other stored value \
                 has one"
            ),
        }
    }
}

/// `application/x-www-form-urlencoded` pairs (a query string or a form body), decoded.
///
/// # Errors
/// The first parameter whose name or value has a broken %-escape, is not UTF-8 or holds
/// a NUL character.
pub(super) fn pairs(text: &str) -> Result<Vec<(String, String)>, BadParam> {
    text.split('&')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            let name = decode(key).map_err(|why| BadParam {
                // The name as sent, cut: it could not be decoded.
                name: key.chars().take(64).collect(),
                why,
            })?;
            let value = decode(value).map_err(|why| BadParam {
                name: name.chars().take(64).collect(),
                why,
            })?;
            Ok((name, value))
        })
        .collect()
}

/// One percent-encoded value (`+` is a space), decoded.
///
/// # Errors
/// As [`pairs`].
pub(super) fn decode(text: &str) -> Result<String, Broken> {
    // `+` first: an escaped `%2B` is a plus sign, not a space.
    let decoded = crate::percent::decode(&text.replace('+', " ")).map_err(|why| match why {
        crate::percent::BadText::Escape => Broken::Escape,
        crate::percent::BadText::NotUtf8 => Broken::NotUtf8,
    })?;
    if decoded.contains('\0') {
        return Err(Broken::Nul);
    }
    Ok(decoded)
}

/// What [`encode`] escapes: all but letters, digits and `-_.~` (RFC 3986's unreserved).
const QUERY_VALUE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `text` escaped for a query string value.
pub(super) fn encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, QUERY_VALUE).to_string()
}

/// The `user:password` of an `Authorization: Basic ...` header value.
pub(super) fn basic_credentials(header: &str) -> Option<Vec<u8>> {
    let (scheme, value) = header.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    base64_decode(value.trim())
}

/// Standard base64, with or without its `=` padding (clients differ).
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    base64::Engine::decode(&BASE64, text).ok()
}

/// Whether `a` equals `b`, taking the same time whatever bytes differ (only the lengths
/// may show), so that a password cannot be guessed byte by byte from response times.
pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    subtle::ConstantTimeEq::ct_eq(a, b).into()
}

/// The names (`Host` values) the dashboard answers for. A page of a name not on the
/// list could be a DNS-rebinding attack: a page of `evil.example`, whose name the
/// attacker points at 127.0.0.1 after it loaded, would read the dashboard as its own
/// origin. Always allowed: the bound address and the loopback names (`localhost`,
/// `127.0.0.1`, `[::1]`), each with the bound port; more from
/// [`super::WebOptions::allowed_hosts`].
#[derive(Debug, Clone)]
pub(super) struct Hosts {
    allowed: Vec<Allowed>,
    /// `*` was given: every name is allowed (the check is off).
    any: bool,
}

/// One allowed name, lower case, an IPv6 address in brackets.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Allowed {
    name: String,
    /// `None`: any port.
    port: Option<u16>,
}

/// `host[:port]` split and checked: the name lower case without a final dot, the port
/// a number. `None` when it is not an authority (user info, a path, spaces, a bad port).
fn authority(text: &str) -> Option<(String, Option<u16>)> {
    let text = text.trim();
    if text.is_empty()
        || text.len() > 300
        || !text.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'[' | b']')
        })
    {
        return None;
    }
    let (name, port) = if let Some(rest) = text.strip_prefix('[') {
        let (address, after) = rest.split_once(']')?;
        if address.is_empty() || address.contains(['[', ']']) {
            return None;
        }
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?),
        };
        (format!("[{address}]"), port)
    } else {
        match text.split_once(':') {
            Some((name, port)) => (name.to_owned(), Some(port)),
            None => (text.to_owned(), None),
        }
    };
    if name.is_empty() || name.contains([':', '[', ']']) && !name.starts_with('[') {
        return None;
    }
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => Some(p.parse().ok()?),
        Some(_) => return None,
    };
    let mut name = name.to_ascii_lowercase();
    if name.len() > 1 && name.ends_with('.') {
        name.pop();
    }
    Some((name, port))
}

/// Checks one entry of an allowlist (`name`, `name:port`, `[v6]:port`, or `*`).
///
/// # Errors
/// Why it is not one.
pub(super) fn check_allowed_host(entry: &str) -> Result<(), String> {
    if entry.trim() == "*" || authority(entry).is_some() {
        Ok(())
    } else {
        Err(format!(
            "`{entry}` is not a host name with an optional port (like dash.example.com, \
             dash.example.com:8080 or [fd00::1]:8080)"
        ))
    }
}

impl Hosts {
    /// The bound address, the loopback names on its port, and `extra` (checked already
    /// with [`check_allowed_host`]; a bad entry is skipped).
    pub(super) fn new(bound: SocketAddr, extra: &[String]) -> Hosts {
        let port = Some(bound.port());
        let ip = match bound {
            SocketAddr::V4(a) => a.ip().to_string(),
            SocketAddr::V6(a) => format!("[{}]", a.ip()),
        };
        let mut allowed: Vec<Allowed> = [ip.as_str(), "localhost", "127.0.0.1", "[::1]"]
            .iter()
            .map(|name| Allowed {
                name: (*name).to_owned(),
                port,
            })
            .collect();
        let mut any = false;
        for entry in extra {
            if entry.trim() == "*" {
                any = true;
            } else if let Some((name, port)) = authority(entry) {
                allowed.push(Allowed { name, port });
            }
        }
        allowed.dedup();
        Hosts { allowed, any }
    }

    /// Whether requests for `host` (a `Host` header or an absolute URL's authority) are
    /// answered. A name allowed with a port matches that port, and no port when it is
    /// 80 (a browser leaves the default port out).
    pub(super) fn allows(&self, host: &str) -> bool {
        if self.any {
            return true;
        }
        let Some((name, port)) = authority(host) else {
            return false;
        };
        self.allowed.iter().any(|a| {
            a.name == name
                && match (a.port, port) {
                    (None, _) => true,
                    (Some(want), Some(got)) => want == got,
                    (Some(want), None) => want == 80,
                }
        })
    }
}

/// Whether a state-changing request comes from a page of this server: its `Origin` (or,
/// without one, its `Referer`) is an `http(s)` URL of a name the dashboard answers for,
/// and the browser does not call it cross-site. The request's own `Host` proves
/// nothing (a rebinding page sends its own name as both). Requests that carry neither
/// header are refused too: a browser sends `Origin` with every POST, and a script can
/// send it as well.
pub(super) fn same_origin(
    hosts: &Hosts,
    origin: Option<&str>,
    referer: Option<&str>,
    fetch_site: Option<&str>,
) -> bool {
    if matches!(fetch_site, Some(site) if site != "same-origin" && site != "none") {
        return false;
    }
    let allowed = |url: &str| -> bool {
        let Some(rest) = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))
        else {
            return false;
        };
        let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
        hosts.allows(host)
    };
    match (origin, referer) {
        (Some(origin), _) if origin != "null" => allowed(origin),
        (_, Some(referer)) => allowed(referer),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_decode_escapes_and_repeated_keys() {
        let got = pairs("ids=1&ids=22&q=a+b%2Fc&empty=&flag").unwrap();
        let want: Vec<(String, String)> = [
            ("ids", "1"),
            ("ids", "22"),
            ("q", "a b/c"),
            ("empty", ""),
            ("flag", ""),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        assert_eq!(got, want);
        let broken = |text: &str| pairs(text).unwrap_err();
        assert_eq!(broken("a=%zz").why, Broken::Escape);
        assert_eq!(broken("a=1&b=%").name, "b");
        assert_eq!(broken("a=%+1").why, Broken::Escape);
        assert_eq!(broken("a=%e2%82").why, Broken::NotUtf8, "not UTF-8");
        assert_eq!(
            broken("entrypoint=%00"),
            BadParam {
                name: "entrypoint".into(),
                why: Broken::Nul
            }
        );
        assert_eq!(
            broken("%zz=1").name,
            "%zz",
            "a broken name is named as sent"
        );
        assert_eq!(broken("x%00=1").why, Broken::Nul);
        assert!(
            broken("entrypoint=%00")
                .to_string()
                .contains("`entrypoint`")
        );
        assert_eq!(decode(&encode("x y/é&=")).unwrap(), "x y/é&=");
    }

    #[test]
    fn basic_credentials_decode() {
        assert_eq!(
            basic_credentials("Basic YWRtaW46czNjcjN0").unwrap(),
            b"admin:s3cr3t"
        );
        assert_eq!(basic_credentials("basic YTpi").unwrap(), b"a:b");
        assert_eq!(basic_credentials("Basic YQ==").unwrap(), b"a");
        assert_eq!(basic_credentials("Bearer abc"), None);
        assert_eq!(basic_credentials("Basic ***"), None);
    }

    #[test]
    fn constant_time_eq_compares_bytes_and_lengths() {
        assert!(constant_time_eq(b"admin:pw", b"admin:pw"));
        assert!(!constant_time_eq(b"admin:pw", b"admin:pX"));
        assert!(!constant_time_eq(b"admin:p", b"admin:pw"));
        assert!(!constant_time_eq(b"admin:pww", b"admin:pw"));
        assert!(constant_time_eq(b"", b""));
    }

    fn hosts() -> Hosts {
        Hosts::new(
            "127.0.0.1:8080".parse().unwrap(),
            &["dash.example.com".into(), "Other.Example:9000".into()],
        )
    }

    #[test]
    fn the_allowlist_takes_its_names_and_no_others() {
        let hosts = hosts();
        for ok in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST:8080",
            "localhost.:8080",
            "[::1]:8080",
            "dash.example.com",
            "dash.example.com:443",
            "other.example:9000",
        ] {
            assert!(hosts.allows(ok), "{ok}");
        }
        for refused in [
            "evil.test:8080",
            "localhost:8081",
            "localhost",
            "127.0.0.1",
            "other.example",
            "other.example:9001",
            "dash.example.com.evil.test",
            "user@localhost:8080",
            "localhost:8080/x",
            "localhost:80a",
            "[::1",
            "",
            "localhost:99999",
        ] {
            assert!(!hosts.allows(refused), "{refused}");
        }
        let on_80 = Hosts::new("127.0.0.1:80".parse().unwrap(), &[]);
        assert!(on_80.allows("localhost") && on_80.allows("localhost:80"));
        let v6 = Hosts::new("[::]:7000".parse().unwrap(), &[]);
        assert!(v6.allows("[::]:7000") && v6.allows("[::1]:7000"));
        let any = Hosts::new("127.0.0.1:1".parse().unwrap(), &["*".into()]);
        assert!(any.allows("evil.test"));
        assert!(check_allowed_host("dash.example.com:8080").is_ok());
        assert!(check_allowed_host("[fd00::1]:8080").is_ok());
        assert!(check_allowed_host("*").is_ok());
        for bad in ["http://x", "a b", "x:y", "", "x/y", "[::1"] {
            assert!(check_allowed_host(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_same_origin_requests_pass() {
        let hosts = hosts();
        let hosts = &hosts;
        assert!(same_origin(
            hosts,
            Some("http://127.0.0.1:8080"),
            None,
            None
        ));
        assert!(same_origin(
            hosts,
            Some("https://dash.example.com"),
            None,
            None
        ));
        assert!(same_origin(
            hosts,
            None,
            Some("http://127.0.0.1:8080/failures"),
            Some("same-origin")
        ));
        assert!(!same_origin(hosts, Some("http://evil.example"), None, None));
        // DNS rebinding: the page's own name, on the dashboard's port.
        assert!(!same_origin(
            hosts,
            Some("http://evil.test:8080"),
            None,
            None
        ));
        assert!(!same_origin(
            hosts,
            None,
            Some("http://127.0.0.1:8080.evil.example/"),
            None
        ));
        assert!(!same_origin(
            hosts,
            Some("http://127.0.0.1:8080"),
            None,
            Some("cross-site")
        ));
        assert!(!same_origin(hosts, None, None, None));
        assert!(!same_origin(hosts, Some("null"), None, None));
        assert!(!same_origin(
            hosts,
            Some("ftp://127.0.0.1:8080"),
            None,
            None
        ));
    }
}
