//! The patterns the document gives strings the server checks by hand: file paths and egress
//! rules.

/// A file path as sandboxd accepts it: components of 1 to 255 characters (bytes, in fact) without
/// NUL, none of them `..` (with `maxLength` 4096 beside it).
pub(super) const PATH_PATTERN: &str =
    r"^/*(?:(?!\.\.(?:/|(?![\s\S])))[^/\x00]{1,255}(?:/+|(?![\s\S])))*$";

/// The same, on the fake driver, which serves nothing outside the home: an absolute path is
/// under `/home/agent`.
pub(super) const FAKE_PATH_PATTERN: &str = concat!(
    r"^(?:/+(?:\./+)*home/+(?:\./+)*agent(?=/|(?![\s\S]))/*|(?!/))",
    r"(?:(?!\.\.(?:/|(?![\s\S])))[^/\x00]{1,255}(?:/+|(?![\s\S])))*$",
);

/// The name of a `multipart/form-data` part (`fs/write-files`) as a part's header line can carry
/// it: no control characters but tab (the form is refused whole, `400`, otherwise). What the name
/// says as a path is checked per part, and a bad one is that part's error in the `200`.
pub(super) const PART_NAME_PATTERN: &str = r"^[^\x00-\x08\x0a-\x1f\x7f]*$";

/// An egress rule as the API reads it (see `crate::egress` and `types::rules_object`): ASCII;
/// after trimming white space, an IP address, a CIDR network, or `*`, `*.NAME`, `NAME`, an IPv4 address or network, or
/// one in brackets, each with an optional `:PORT`; an IPv6 one takes a port only in brackets. The
/// addresses are read as `std` reads them, the networks as `ipnet` does (which allows leading
/// zeros in IPv4 octets, and `::` for no group at all).
pub(super) fn egress_rule_pattern() -> String {
    // ASCII only: the API refuses other white space in a rule (see `types::rules_object`).
    const WS: &str = r"[\t\n\x0b\x0c\r ]";
    const PORT: &str = r"\+?0*(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])";
    const LABEL: &str = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?";
    const H: &str = "[0-9A-Fa-f]{1,4}";
    const P4: &str = "(?:3[0-2]|[0-2]?[0-9])";
    const P6: &str = "(?:12[0-8]|1[01][0-9]|0?[0-9]?[0-9])";
    // At most 253 characters without the trailing dot.
    let name = format!(
        r"(?![A-Za-z0-9_.-]{{255}})(?![A-Za-z0-9_.-]{{253}}[A-Za-z0-9_-]){LABEL}(?:\.{LABEL})*\.?"
    );
    let v4 = |octet: &str| format!(r"{octet}(?:\.{octet}){{3}}");
    // `std` refuses leading zeros; `ipnet` takes up to three digits.
    let v4s = v4("(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])");
    let v4n = v4("(?:25[0-5]|2[0-4][0-9]|[01]?[0-9]?[0-9])");
    // `zero_min`: how many groups `::` stands for at least (1 for `std`, 0 for `ipnet`).
    let v6 = |v4: &str, zero_min: usize| {
        let total = 8 - zero_min;
        let mut alts = vec![
            format!("(?:{H}:){{7}}{H}"),
            format!("(?:{H}:){{6}}{v4}"),
            format!("(?:{H}:){{1,{}}}:", total.min(7)),
        ];
        for t in 1..total {
            alts.push(format!("(?:{H}:){{1,{}}}(?::{H}){{{t}}}", total - t));
        }
        alts.push(format!("::(?:{H}(?::{H}){{0,{}}})?", total - 1));
        for t in 0..total - 2 {
            alts.push(format!(
                "(?:{H}:){{1,{}}}:(?:{H}:){{{t}}}{v4}",
                total - 2 - t
            ));
        }
        alts.push(format!("::(?:{H}:){{0,{}}}{v4}", total - 2));
        format!("(?:{})", alts.join("|"))
    };
    let (v6s, v6n) = (v6(&v4s, 1), v6(&v4n, 0));
    let body = [
        v4s.clone(),
        v6s.clone(),
        format!("{v4n}/{P4}"),
        format!("{v6n}/{P6}"),
        format!(r"(?:\*|\*\.{name}|{name}|{v4n}/{P4}|\[(?:{v4n}/{P4}|{v4s})\])(?::{PORT})?"),
        format!(r"\[(?:{v6n}/{P6}|{v6s})\]:{PORT}"),
    ]
    .join("|");
    format!("^{WS}*(?:{body}){WS}*$")
}

/// A secret's host: an egress rule, but never `*` (on any port).
pub(super) fn secret_host_pattern() -> String {
    const WS: &str = r"[\t\n\x0b\x0c\r ]";
    let rule = egress_rule_pattern();
    let rest = rule.strip_prefix('^').unwrap_or(&rule);
    format!(r"^(?!{WS}*\*(?::[^\]]*)?{WS}*$){rest}")
}

/// What `is_control` refuses, as a class's inside: C0, DEL and C1.
const CONTROL: &str = r"\x00-\x1f\x7f-\x9f";

/// A secret's value: no control characters.
pub(super) fn secret_value_pattern() -> String {
    format!("^[^{CONTROL}]+$")
}

/// A secret's `format`: `{value}` exactly once, no control characters.
pub(super) fn secret_format_pattern() -> String {
    let other = format!(r"(?:(?!\{{value\}})[^{CONTROL}])*");
    format!(r"^{other}\{{value\}}{other}$")
}

/// A secret's header: an HTTP header name (a token) that is not one the proxy decides
/// (`crate::secrets::spec`'s list, in any case, and `Proxy-*`).
pub(super) fn secret_header_pattern(reserved: &[&str]) -> String {
    let any_case = |word: &str| -> String {
        word.chars()
            .map(|c| {
                if c.is_ascii_alphabetic() {
                    format!("[{}{}]", c.to_ascii_uppercase(), c.to_ascii_lowercase())
                } else {
                    regex_escape(c)
                }
            })
            .collect()
    };
    let names: Vec<String> = reserved.iter().map(|w| any_case(w)).collect();
    format!(
        r"^(?!(?:{})$)(?!{})[!#$%&'*+.^_`|~0-9A-Za-z-]+$",
        names.join("|"),
        any_case("proxy-")
    )
}

fn regex_escape(c: char) -> String {
    if r"\.+*?()|[]{}^$-".contains(c) {
        format!(r"\{c}")
    } else {
        c.to_string()
    }
}
