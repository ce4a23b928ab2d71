//! The small parts of HTTP the dashboard needs and tiny_http leaves to its user: query
//! strings and urlencoded forms, Basic credentials, and the same-origin check of actions.

/// `application/x-www-form-urlencoded` pairs (a query string or a form body), decoded;
/// `None` when a percent escape is malformed or the text is not UTF-8.
pub(super) fn pairs(text: &str) -> Option<Vec<(String, String)>> {
    text.split('&')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            Some((decode(key)?, decode(value)?))
        })
        .collect()
}

fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// `text` escaped for a query string value.
pub(super) fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The `user:password` of an `Authorization: Basic ...` header value.
pub(super) fn basic_credentials(header: &str) -> Option<Vec<u8>> {
    let (scheme, value) = header.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    base64_decode(value.trim())
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    }
    let text = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    for chunk in text.chunks(4) {
        if chunk.len() == 1 {
            return None;
        }
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= value(c)? << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

/// Whether `a` equals `b`, taking the same time whatever bytes differ (only the lengths
/// may show), so that a password cannot be guessed byte by byte from response times.
pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (i, x) in a.iter().enumerate() {
        // Compare against something of b's even when b is shorter, so the loop's length
        // depends on a (the request's) alone.
        let y = b.get(i).copied().unwrap_or(!*x);
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

/// Whether a state-changing request comes from a page of this server: its `Origin` (or,
/// without one, its `Referer`) names the host the request was sent to, and the browser
/// does not call it cross-site. Requests that carry neither header are refused too: a
/// browser sends `Origin` with every POST, and a script can send it as well.
pub(super) fn same_origin(
    host: Option<&str>,
    origin: Option<&str>,
    referer: Option<&str>,
    fetch_site: Option<&str>,
) -> bool {
    if matches!(fetch_site, Some(site) if site != "same-origin" && site != "none") {
        return false;
    }
    let Some(host) = host else {
        return false;
    };
    let authority = |url: &str| -> Option<String> {
        let rest = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))?;
        Some(
            rest.split('/')
                .next()
                .unwrap_or_default()
                .to_ascii_lowercase(),
        )
    };
    let host = host.to_ascii_lowercase();
    match (origin, referer) {
        (Some(origin), _) if origin != "null" => authority(origin).as_deref() == Some(&host),
        (_, Some(referer)) => authority(referer).as_deref() == Some(&host),
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
        assert_eq!(pairs("a=%zz"), None);
        assert_eq!(pairs("a=%e2%82"), None, "not UTF-8");
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

    #[test]
    fn only_same_origin_requests_pass() {
        let host = Some("127.0.0.1:8080");
        assert!(same_origin(host, Some("http://127.0.0.1:8080"), None, None));
        assert!(same_origin(
            host,
            None,
            Some("http://127.0.0.1:8080/failures"),
            Some("same-origin")
        ));
        assert!(!same_origin(host, Some("http://evil.example"), None, None));
        assert!(!same_origin(
            host,
            None,
            Some("http://127.0.0.1:8080.evil.example/"),
            None
        ));
        assert!(!same_origin(
            host,
            Some("http://127.0.0.1:8080"),
            None,
            Some("cross-site")
        ));
        assert!(!same_origin(host, None, None, None));
        assert!(!same_origin(host, Some("null"), None, None));
        assert!(!same_origin(
            None,
            Some("http://127.0.0.1:8080"),
            None,
            None
        ));
    }
}
