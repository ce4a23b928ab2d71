//! Percent-decoding that refuses what the lenient decoder would pass through.
//!
//! `percent_encoding::percent_decode_str` leaves a `%` not followed by two hex digits as
//! it is: `%zz` decodes to itself. A DSN's `sslrootcert=%zz` or a dashboard filter
//! `?q=50%` is then taken for something its writer did not mean, so both are refused
//! here, with the name of what was wrong, before the crate decodes them.

use percent_encoding::percent_decode_str;

/// Why a percent-encoded text was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BadText {
    /// A `%` not followed by two hex digits.
    Escape,
    /// The bytes decoded are not UTF-8.
    NotUtf8,
}

/// `text` decoded, refusing a broken escape or bytes that are not UTF-8.
pub(crate) fn decode(text: &str) -> Result<String, BadText> {
    let bytes = text.as_bytes();
    let whole = bytes.iter().enumerate().all(|(i, &b)| {
        b != b'%'
            || bytes
                .get(i + 1..i + 3)
                .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    });
    if !whole {
        return Err(BadText::Escape);
    }
    percent_decode_str(text)
        .decode_utf8()
        .map(std::borrow::Cow::into_owned)
        .map_err(|_| BadText::NotUtf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_escapes_decode() {
        assert_eq!(decode("a%20b%2Fc%25").as_deref(), Ok("a b/c%"));
        assert_eq!(decode("%C3%A9").as_deref(), Ok("é"));
        assert_eq!(decode("").as_deref(), Ok(""));
        assert_eq!(decode("plain+text").as_deref(), Ok("plain+text"));
    }

    #[test]
    fn broken_escapes_and_bad_bytes_are_refused() {
        for text in ["%", "%2", "%zz", "50%", "%+1", "%-1", "a%2gb"] {
            assert_eq!(decode(text), Err(BadText::Escape), "{text}");
        }
        assert_eq!(decode("%FF%FE"), Err(BadText::NotUtf8));
        assert_eq!(decode("%C3"), Err(BadText::NotUtf8));
    }
}
