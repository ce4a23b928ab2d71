//! A job's headers: read exactly as stored, whatever valid `jsonb` they hold, and checked
//! before this crate writes them.
//!
//! `jsonb` keeps numbers as `numeric` (a header of `1e400` is a 401-digit number) and
//! accepts nesting as deep as the server's stack allows, while `serde_json` holds numbers
//! as 64-bit values and stops parsing at 128 levels. Rows come from psql, Python and other
//! programs, so a claimed job's headers are read as the JSON text PostgreSQL prints and
//! parsed only when asked for ([`Headers::value`]): no value a producer can store makes a
//! job unreadable.

use std::fmt;
use std::sync::OnceLock;

use serde_json::Value;

/// A job's headers as stored: the JSON text of the `headers` column (as PostgreSQL
/// prints `jsonb`), and its parsed value once asked for.
///
/// Every valid `jsonb` value reads; [`Headers::value`] is `None` only for the few that
/// `serde_json` cannot hold (a number beyond the range of `f64`, nesting deeper than 128
/// levels), and [`Headers::problem`] then says why. [`Headers::as_json`] always gives the
/// text.
pub struct Headers {
    text: Box<str>,
    /// Parsed on first use: most handlers never read headers, and a claim reads many.
    parsed: OnceLock<Result<Value, String>>,
}

impl Headers {
    /// Headers from their JSON text (read from the database).
    pub(crate) fn from_json_text(text: impl Into<Box<str>>) -> Headers {
        Headers {
            text: text.into(),
            parsed: OnceLock::new(),
        }
    }

    /// The headers' JSON text, exactly as PostgreSQL gave it.
    pub fn as_json(&self) -> &str {
        &self.text
    }

    /// The headers as a JSON value; `None` when `serde_json` cannot hold them (see
    /// [`Headers::problem`]).
    pub fn value(&self) -> Option<&Value> {
        self.parsed().as_ref().ok()
    }

    /// Why [`Headers::value`] is `None` (`number out of range at line 1 column 11`, say);
    /// `None` when it is not.
    pub fn problem(&self) -> Option<&str> {
        self.parsed().as_ref().err().map(String::as_str)
    }

    /// The value of one key of a headers object; `None` when there is no such key, the
    /// headers are not an object, or they cannot be parsed.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.value()?.get(key)
    }

    /// The headers as a JSON value when they can be parsed, else their text as a JSON
    /// string: what a JSON report of a job shows.
    pub fn to_json_value(&self) -> Value {
        self.value()
            .cloned()
            .unwrap_or_else(|| Value::String(self.text.to_string()))
    }

    fn parsed(&self) -> &Result<Value, String> {
        self.parsed
            .get_or_init(|| serde_json::from_str(&self.text).map_err(|e| e.to_string()))
    }
}

impl Clone for Headers {
    fn clone(&self) -> Headers {
        Headers::from_json_text(self.text.clone())
    }
}

impl PartialEq for Headers {
    fn eq(&self, other: &Headers) -> bool {
        self.text == other.text
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Headers").field(&self.text).finish()
    }
}

impl fmt::Display for Headers {
    /// The JSON text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The `headers` column as read from a row: SQL NULL and JSON `null` (what PgQueuer
/// writes for a job without headers) read as `None`, without allocating.
pub(crate) struct StoredHeaders(pub(crate) Option<Headers>);

impl<'a> postgres::types::FromSql<'a> for StoredHeaders {
    fn from_sql(
        ty: &postgres::types::Type,
        raw: &'a [u8],
    ) -> std::result::Result<StoredHeaders, Box<dyn std::error::Error + Sync + Send>> {
        // JSONB's binary form is a version byte (1) before the text; JSON's is the text.
        let text = match (ty == &postgres::types::Type::JSONB, raw) {
            (true, [1, text @ ..]) => text,
            (false, text) => text,
            (true, _) => return Err("unsupported JSONB encoding version".into()),
        };
        let text = std::str::from_utf8(text)?;
        if text.trim_matches(|c: char| c.is_ascii_whitespace()) == "null" {
            return Ok(StoredHeaders(None));
        }
        Ok(StoredHeaders(Some(Headers::from_json_text(text))))
    }

    fn from_sql_null(
        _: &postgres::types::Type,
    ) -> std::result::Result<StoredHeaders, Box<dyn std::error::Error + Sync + Send>> {
        Ok(StoredHeaders(None))
    }

    fn accepts(ty: &postgres::types::Type) -> bool {
        <Value as postgres::types::FromSql>::accepts(ty)
    }
}

/// The deepest nesting of arrays and objects accepted in headers to enqueue. Every reader
/// can parse them: `serde_json` stops at 128 levels, Python's `json` near 1,000.
pub(crate) const MAX_HEADERS_DEPTH: usize = 64;

/// Checks headers before they are written: nested at most [`MAX_HEADERS_DEPTH`] levels
/// and no NUL character in any key or string (`jsonb` refuses it). Walks the value with
/// a stack of its own, so that a value nested deeper than a thread's stack allows is
/// reported, not a crash. The error says what is wrong.
pub(crate) fn check_new_headers(headers: &Value) -> Result<(), String> {
    let mut stack: Vec<(&Value, usize)> = vec![(headers, 1)];
    while let Some((value, depth)) = stack.pop() {
        match value {
            Value::String(s) if s.contains('\0') => {
                return Err("contains a NUL character, which jsonb cannot store".into());
            }
            Value::Array(_) | Value::Object(_) if depth > MAX_HEADERS_DEPTH => {
                return Err(format!(
                    "nests arrays and objects more than {MAX_HEADERS_DEPTH} levels deep \
                     (NewJob::MAX_HEADERS_DEPTH), deeper than every reader can parse"
                ));
            }
            Value::Array(items) => stack.extend(items.iter().map(|v| (v, depth + 1))),
            Value::Object(map) => {
                if map.keys().any(|k| k.contains('\0')) {
                    return Err("contains a NUL character, which jsonb cannot store".into());
                }
                stack.extend(map.values().map(|v| (v, depth + 1)));
            }
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use postgres::types::{FromSql, Type};
    use serde_json::json;

    fn read(ty: &Type, raw: &[u8]) -> Result<Option<Headers>, String> {
        StoredHeaders::from_sql(ty, raw)
            .map(|h| h.0)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn headers_read_json_null_as_none_and_keep_any_valid_json_as_text() {
        assert_eq!(read(&Type::JSONB, b"\x01null").unwrap(), None);
        assert_eq!(read(&Type::JSON, b"null").unwrap(), None);
        assert_eq!(read(&Type::JSON, b" null ").unwrap(), None);
        let otel = read(&Type::JSONB, b"\x01{\"otel\": {\"traceparent\": \"x\"}}")
            .unwrap()
            .unwrap();
        assert_eq!(otel.get("otel"), Some(&json!({"traceparent": "x"})));
        assert_eq!(otel.problem(), None);
        let array = read(&Type::JSON, b"[1]").unwrap().unwrap();
        assert_eq!(array.value(), Some(&json!([1])));
        assert_eq!(array.get("k"), None);
        assert!(
            read(&Type::JSONB, b"\x02null")
                .unwrap_err()
                .contains("JSONB encoding version")
        );
        assert!(read(&Type::JSONB, b"").is_err());
        assert!(read(&Type::JSONB, b"\x01\xff").is_err());
        assert!(StoredHeaders::accepts(&Type::JSONB) && StoredHeaders::accepts(&Type::JSON));
        assert!(!StoredHeaders::accepts(&Type::TEXT));
    }

    /// What serde_json cannot hold (a 401-digit number, 200 levels of nesting) still
    /// reads: the text is kept, the value is `None` with the reason.
    #[test]
    fn headers_serde_json_cannot_hold_read_as_text_with_the_reason() {
        let huge = format!("{{\"n\": 1{}}}", "0".repeat(400));
        let h = Headers::from_json_text(huge.as_str());
        assert_eq!(h.as_json(), huge);
        assert_eq!(h.value(), None);
        assert!(
            h.problem().unwrap().contains("number out of range"),
            "{h:?}"
        );
        assert_eq!(h.to_json_value(), Value::String(huge.clone()));
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let h = Headers::from_json_text(deep.as_str());
        assert!(h.problem().unwrap().contains("recursion limit"), "{h:?}");
        assert_eq!(h.clone(), h);
        assert_eq!(h.to_string(), deep);
    }

    #[test]
    fn new_headers_deeper_than_the_bound_or_with_nul_are_refused_without_recursion() {
        let mut deep = json!(1);
        for _ in 0..MAX_HEADERS_DEPTH {
            deep = json!({ "k": deep });
        }
        check_new_headers(&deep).unwrap();
        let deeper = json!({ "k": deep });
        assert!(
            check_new_headers(&deeper)
                .unwrap_err()
                .contains("64 levels")
        );
        // Far deeper than any thread's stack could recurse over.
        let mut very = json!(null);
        for _ in 0..200_000 {
            very = Value::Array(vec![very]);
        }
        assert!(check_new_headers(&very).is_err());
        // The value is dropped on a thread with room: serde_json's drop recurses.
        std::thread::Builder::new()
            .stack_size(256 << 20)
            .spawn(move || drop(very))
            .unwrap()
            .join()
            .unwrap();
        assert!(
            check_new_headers(&json!({"a": ["x\0y"]}))
                .unwrap_err()
                .contains("NUL")
        );
        assert!(
            check_new_headers(&json!({"a\0": 1}))
                .unwrap_err()
                .contains("NUL")
        );
    }
}
