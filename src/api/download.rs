//! `Content-Disposition` for the sandbox's bytes that the API hands to a browser: a download by
//! default, so a file an agent wrote is never shown as a page of the UI's origin.

use axum::http::HeaderValue;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// What RFC 5987 leaves unescaped in `filename*=` (its `attr-char`), the rest percent-encoded.
const ATTR_CHAR: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'!')
    .remove(b'#')
    .remove(b'$')
    .remove(b'&')
    .remove(b'+')
    .remove(b'-')
    .remove(b'.')
    .remove(b'^')
    .remove(b'_')
    .remove(b'`')
    .remove(b'|')
    .remove(b'~');

/// How a response's bytes are to be shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Saved as a file named after the path.
    Attachment,
    /// Shown where it was asked for (the UI's editor reads files this way).
    Inline,
}

/// The header for `path`'s bytes: `attachment; filename="…"; filename*=UTF-8''…` (the first for
/// old clients, ASCII with anything doubtful replaced; the second exact), or `inline`.
pub fn content_disposition(path: &str, how: Disposition) -> HeaderValue {
    let name = path
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or("download");
    let kind = match how {
        Disposition::Attachment => "attachment",
        Disposition::Inline => "inline",
    };
    let plain: String = name
        .chars()
        .map(|c| match c {
            ' ' | '!' | '#'..='[' | ']'..='~' => c,
            _ => '_',
        })
        .collect();
    let exact = utf8_percent_encode(name, ATTR_CHAR);
    let value = format!("{kind}; filename=\"{plain}\"; filename*=UTF-8''{exact}");
    // Every byte is visible ASCII or a space: always a valid header value.
    HeaderValue::from_str(&value).unwrap_or(HeaderValue::from_static("attachment"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(path: &str, how: Disposition) -> String {
        content_disposition(path, how).to_str().unwrap().to_string()
    }

    #[test]
    fn names_the_file_and_escapes_what_could_break_the_header() {
        assert_eq!(
            shown("src/app.py", Disposition::Attachment),
            "attachment; filename=\"app.py\"; filename*=UTF-8''app.py"
        );
        assert_eq!(
            shown("notes/résumé \"v2\".txt", Disposition::Inline),
            "inline; filename=\"r_sum_ _v2_.txt\"; filename*=UTF-8''r%C3%A9sum%C3%A9%20%22v2%22.txt"
        );
        // A header injection attempt stays inside the value.
        let v = shown("a\r\nSet-Cookie: x=1", Disposition::Attachment);
        assert!(!v.contains('\r') && !v.contains('\n'), "{v}");
        assert_eq!(
            shown("/", Disposition::Attachment),
            "attachment; filename=\"download\"; filename*=UTF-8''download"
        );
    }
}
