//! How a job's payload shows to people: [`PayloadView`], what `pgq job` prints and the
//! dashboard's job page shows.

use std::fmt::{self, Write as _};

/// What a [`PayloadView`] read a payload as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PayloadKind {
    /// UTF-8 text, shown as it is.
    Text,
    /// A JSON object or array, pretty-printed.
    Json,
    /// Bytes that are not UTF-8, shown as a hex dump.
    Hex,
}

impl PayloadKind {
    /// `text`, `JSON` or `hex`.
    pub fn as_str(self) -> &'static str {
        match self {
            PayloadKind::Text => "text",
            PayloadKind::Json => "JSON",
            PayloadKind::Hex => "hex",
        }
    }
}

impl fmt::Display for PayloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job's payload as people read it, bounded: UTF-8 text as it is (its first
/// [`PayloadView::TEXT_BYTES`]), a JSON object or array pretty-printed (when the whole
/// payload is at hand and no longer than that; at most [`PayloadView::PRETTY_BYTES`] of
/// the pretty text), anything else as a hex dump of its first
/// [`PayloadView::HEX_BYTES`], 16 bytes a line after their offset. Whatever a payload
/// holds, the view is at most about 32 KiB.
///
/// ```
/// use pgqueuer::{PayloadKind, PayloadView};
///
/// let view = PayloadView::of(br#"{"to":"a@example.com"}"#);
/// assert_eq!(view.kind, PayloadKind::Json);
/// assert_eq!(view.text, "{\n  \"to\": \"a@example.com\"\n}");
/// assert_eq!(view.size_note(), "22 bytes");
///
/// let view = PayloadView::of(&[0xff, 0xfe, 0x00, 0x41]);
/// assert_eq!(view.kind, PayloadKind::Hex);
/// assert_eq!(view.text, "00000000  ff fe 00 41\n");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PayloadView {
    /// What the payload was read as.
    pub kind: PayloadKind,
    /// The rendering. A pretty-printed JSON text that was cut ends in `\n…`.
    pub text: String,
    /// How many of the payload's bytes [`PayloadView::text`] shows (all of them for
    /// JSON, whose pretty text alone may be cut).
    pub shown: usize,
    /// The whole payload's size in bytes.
    pub size: usize,
}

impl PayloadView {
    /// The most bytes of a text payload shown, and the largest JSON payload
    /// pretty-printed.
    pub const TEXT_BYTES: usize = 16 << 10;
    /// The most bytes of pretty-printed JSON shown (the indentation can make a short
    /// text long).
    pub const PRETTY_BYTES: usize = 32 << 10;
    /// The most bytes of a binary payload dumped (256 lines).
    pub const HEX_BYTES: usize = 4 << 10;

    /// The view of a whole payload.
    pub fn of(payload: &[u8]) -> PayloadView {
        PayloadView::new(payload, payload.len())
    }

    /// The view of a payload of `size` bytes of which `first` holds the first ones (all
    /// of them, or a prefix a statement read; a `size` below `first.len()` counts as
    /// `first.len()`). A prefix may end inside a character: the text up to it is still
    /// text.
    pub fn new(first: &[u8], size: usize) -> PayloadView {
        let size = size.max(first.len());
        let whole = first.len() == size;
        let text = match std::str::from_utf8(first) {
            Ok(text) => Some(text),
            Err(e) if !whole && e.error_len().is_none() => {
                std::str::from_utf8(&first[..e.valid_up_to()]).ok()
            }
            Err(_) => None,
        };
        let Some(text) = text else {
            let shown = first.len().min(PayloadView::HEX_BYTES);
            return PayloadView {
                kind: PayloadKind::Hex,
                text: hex_dump(&first[..shown]),
                shown,
                size,
            };
        };
        if whole
            && size <= PayloadView::TEXT_BYTES
            && let Ok(value) = serde_json::from_str::<serde_json::Value>(text)
            && (value.is_object() || value.is_array())
        {
            let pretty = serde_json::to_string_pretty(&value).unwrap_or_else(|_| text.to_owned());
            let (cut, was_cut) = cut(&pretty, PayloadView::PRETTY_BYTES);
            return PayloadView {
                kind: PayloadKind::Json,
                text: if was_cut {
                    format!("{cut}\n…")
                } else {
                    pretty.clone()
                },
                shown: size,
                size,
            };
        }
        let (text, _) = cut(text, PayloadView::TEXT_BYTES);
        PayloadView {
            kind: PayloadKind::Text,
            shown: text.len(),
            text: text.to_owned(),
            size,
        }
    }

    /// How much of the payload shows: `12 bytes`, or `first 16384 of 10485760 bytes`.
    pub fn size_note(&self) -> String {
        size_note(self.shown, self.size)
    }
}

/// How much of something of `whole` bytes shows when `shown` bytes do: `12 bytes`, or
/// `first 16384 of 10485760 bytes`.
pub(crate) fn size_note(shown: usize, whole: usize) -> String {
    if shown < whole {
        format!("first {shown} of {whole} bytes")
    } else {
        format!("{whole} bytes")
    }
}

/// `text` cut to `max` bytes at a character boundary, and whether it was cut.
pub(crate) fn cut(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

/// 16 bytes a line, each line after its offset: `00000010  ff fe 00 41 \n`.
fn hex_dump(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 3 + bytes.len() / 16 * 11 + 11);
    for (i, line) in bytes.chunks(16).enumerate() {
        let _ = write!(out, "{:08x}  ", i * 16);
        for (k, b) in line.iter().enumerate() {
            let sep = if k + 1 == line.len() { "" } else { " " };
            let _ = write!(out, "{b:02x}{sep}");
        }
        out.push('\n');
    }
    out
}

/// A view of outside bytes is bounded and says what it shows (see `crate::fuzzing`).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn check_bounded(first: &[u8], size: usize) {
    let view = PayloadView::new(first, size);
    assert!(
        view.text.len() <= PayloadView::PRETTY_BYTES + 4
            && view.shown <= view.size
            && view.size >= first.len(),
        "{} bytes shown as {} ({view:?})",
        first.len(),
        view.text.len()
    );
    if view.kind == PayloadKind::Text {
        assert!(first.starts_with(view.text.as_bytes()), "{view:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_shows_as_is_json_pretty_and_bytes_as_hex() {
        let view = PayloadView::of(b"to=a@example.com");
        assert_eq!(
            (view.kind, view.text.as_str(), view.size_note().as_str()),
            (PayloadKind::Text, "to=a@example.com", "16 bytes")
        );
        let view = PayloadView::of(br#"[1,{"a":null}]"#);
        assert_eq!(view.kind, PayloadKind::Json);
        assert!(view.text.starts_with("[\n  1,\n  {\n    \"a\": null"));
        // A JSON scalar is text.
        assert_eq!(PayloadView::of(b"42").kind, PayloadKind::Text);
        let bytes: Vec<u8> = (0x80..0x94).collect();
        let view = PayloadView::of(&bytes);
        assert_eq!(view.kind, PayloadKind::Hex);
        assert_eq!(
            view.text,
            "00000000  80 81 82 83 84 85 86 87 88 89 8a 8b 8c 8d 8e 8f\n\
             00000010  90 91 92 93\n"
        );
        assert_eq!(PayloadView::of(b"").text, "");
    }

    #[test]
    fn prefixes_and_large_payloads_are_bounded_and_say_so() {
        // A prefix cut inside a character is still text, up to it.
        let view = PayloadView::new("aé".as_bytes().get(..2).unwrap(), 10);
        assert_eq!((view.kind, view.text.as_str()), (PayloadKind::Text, "a"));
        assert_eq!(view.size_note(), "first 1 of 10 bytes");
        // JSON that is not all there is text.
        assert_eq!(PayloadView::new(b"{}", 3).kind, PayloadKind::Text);
        let big = vec![b'p'; 10 << 20];
        let view = PayloadView::of(&big);
        assert_eq!(view.text.len(), PayloadView::TEXT_BYTES);
        assert_eq!(view.size_note(), "first 16384 of 10485760 bytes");
        let binary = vec![0xff; 1 << 20];
        let view = PayloadView::of(&binary);
        assert_eq!((view.kind, view.shown), (PayloadKind::Hex, 4096));
        assert_eq!(view.text.lines().count(), 256);
        // JSON whose pretty text is long is cut, and says so.
        let wide = format!("[{}]", vec![r#"{"a":1}"#; 2000].join(","));
        let view = PayloadView::of(wide.as_bytes());
        assert_eq!(view.kind, PayloadKind::Json);
        assert!(view.text.ends_with("\n…") && view.text.len() <= PayloadView::PRETTY_BYTES + 4);
        // JSON too large to pretty-print is text.
        let large = format!("[{}]", vec!["1"; 10_000].join(","));
        assert_eq!(PayloadView::of(large.as_bytes()).kind, PayloadKind::Text);
    }
}
