//! [`Properties`]: an ordered string map read from Java `.properties` text.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::str::FromStr;

use super::error::ConfigError;
use super::secret::{RedactedMap, shown_key};

/// String settings in the order they were first set, as a Kafka worker or connector reads
/// them from a `.properties` file.
///
/// Setting a key again replaces its value and keeps its place. Two `Properties` are equal
/// when they hold the same keys and values, whatever the order. `Debug` shows secret values
/// (`sasl.jaas.config`, `*.password`, keys containing `secret`, ...) as `[redacted]`.
///
/// ```
/// use kafka_share_sink::Properties;
///
/// let props = Properties::parse(
///     "# the connector\n\
///      name = orders-sink\n\
///      topics: orders,\\\n\
///      \x20       payments\n\
///      consumer.override.sasl.jaas.config=org.example.Login required password=\"hunter2\";\n",
/// )?;
/// assert_eq!(props.get("name"), Some("orders-sink"));
/// assert_eq!(props.get("topics"), Some("orders,payments"));
/// assert!(!format!("{props:?}").contains("hunter2"));
/// # Ok::<(), kafka_share_sink::ConfigError>(())
/// ```
#[derive(Clone, Default)]
pub struct Properties {
    entries: Vec<(String, String)>,
    index: HashMap<String, usize>,
}

impl Properties {
    /// No settings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads Java `.properties` text as `java.util.Properties.load(Reader)` reads it:
    ///
    /// - a line whose first non-blank character is `#` or `!` is a comment (a comment does
    ///   not go on at the next line, whatever it ends with); blank lines are skipped; leading
    ///   spaces, tabs and form feeds are ignored; lines end at `\n`, `\r` or `\r\n`;
    /// - `key=value`, `key: value` and `key value` all work; blanks around the separator are
    ///   dropped, trailing blanks of the value are kept;
    /// - a line ending in an odd number of backslashes goes on at the next line, whose
    ///   leading blanks are dropped (the lines are joined without a separator); a blank
    ///   next line ends the entry, and a backslash at the end of the text is dropped;
    /// - escapes: `\t`, `\n`, `\r`, `\f`, `\uXXXX` (UTF-16, surrogate pairs included), and a
    ///   backslash before any other character stands for that character (`\\`, `\=`, `\:`,
    ///   `\#`, `\ `).
    ///
    /// A key set twice keeps its last value. Every text Java reads is read the same, except
    /// where Java would go on with a secret spilled over several keys. Fails with
    /// [`ConfigError::Syntax`], which gives the line and the key, never the value:
    ///
    /// - on a malformed `\uXXXX` escape (as Java does), and on one that encodes a lone
    ///   surrogate (which Java accepts but a Rust string cannot hold);
    /// - on a value cut at a line end that was meant to go on: a PEM block (a key or
    ///   certificates) whose `-----BEGIN` has no `-----END` after it in the entry (in its
    ///   value, or on a line of its own), or a `sasl.jaas.config` without the `;` every JAAS
    ///   entry ends with. Java
    ///   would read each following line of the block as a key of its own (and a key is shown
    ///   in logs and errors: an unknown one is warned about), so a private key or a password
    ///   written across lines without a `\` at their ends would reach the logs line by line.
    ///
    /// ```
    /// use kafka_share_sink::Properties;
    /// let props = Properties::parse("a\\=b = c\\u00e9\\n\nkey value with spaces  \n! comment")?;
    /// assert_eq!(props.get("a=b"), Some("cé\n"));
    /// assert_eq!(props.get("key"), Some("value with spaces  "));
    /// # Ok::<(), kafka_share_sink::ConfigError>(())
    /// ```
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let mut props = Self::new();
        for (line_no, logical) in LogicalLines::new(text) {
            let (key, value) = split_entry(&logical);
            let key = unescape(key).map_err(|problem| ConfigError::Syntax {
                line: line_no,
                problem: format!("{problem} in a key"),
            })?;
            let value = unescape(value).map_err(|problem| ConfigError::Syntax {
                line: line_no,
                problem: format!("{problem} in the value of `{}`", key.escape_debug()),
            })?;
            if let Some(problem) = cut_at_line_end(&key, &value) {
                return Err(ConfigError::Syntax {
                    line: line_no,
                    problem,
                });
            }
            props.insert(key, value);
        }
        Ok(props)
    }

    /// Reads a UTF-8 `.properties` file; see [`parse`](Self::parse). An unreadable file
    /// fails with [`ConfigError::Io`], which names the path.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text)
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.index.get(key).map(|&i| self.entries[i].1.as_str())
    }

    /// True if `key` is set.
    pub fn contains_key(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// Sets `key`, returning its previous value. A new key goes last; a known one keeps its
    /// place.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) -> Option<String> {
        let key = key.into();
        let value = value.into();
        match self.index.get(&key) {
            Some(&i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            None => {
                self.index.insert(key.clone(), self.entries.len());
                self.entries.push((key, value));
                None
            }
        }
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let i = self.index.remove(key)?;
        let (_, value) = self.entries.remove(i);
        for slot in self.index.values_mut() {
            if *slot > i {
                *slot -= 1;
            }
        }
        Some(value)
    }

    /// Every setting, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + Clone + '_ {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// How many settings there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no settings.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The settings whose key starts with `prefix`, with the prefix removed, in order.
    pub(crate) fn with_prefix<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.iter()
            .filter_map(move |(k, v)| k.strip_prefix(prefix).map(|rest| (rest, v)))
    }
}

impl fmt::Debug for Properties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        RedactedMap(self.iter()).fmt(f)
    }
}

impl PartialEq for Properties {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

impl Eq for Properties {}

impl FromStr for Properties {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Properties {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut props = Self::new();
        props.extend(iter);
        props
    }
}

impl<K: Into<String>, V: Into<String>> Extend<(K, V)> for Properties {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.insert(k, v);
        }
    }
}

type Entry = (String, String);

impl<'a> IntoIterator for &'a Properties {
    type Item = (&'a str, &'a str);
    type IntoIter =
        std::iter::Map<std::slice::Iter<'a, Entry>, fn(&'a Entry) -> (&'a str, &'a str)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// The logical lines of `.properties` text, as `java.util.Properties` reads them: comments
/// and blank lines skipped, leading blanks dropped, continuation lines joined (their
/// backslash and the next line's leading blanks dropped). Each comes with the number (from
/// 1) of the natural line where it starts; its escapes are still to be resolved.
struct LogicalLines<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    /// The number of the natural line the next character is on.
    line: usize,
}

impl<'a> LogicalLines<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            chars: text.chars().peekable(),
            line: 1,
        }
    }

    /// The next character, counting line ends (`\r\n` once).
    fn bump(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        if c == '\n' || (c == '\r' && self.chars.peek() != Some(&'\n')) {
            self.line += 1;
        }
        Some(c)
    }
}

impl Iterator for LogicalLines<'_> {
    type Item = (usize, String);

    fn next(&mut self) -> Option<Self::Item> {
        let mut line = String::new();
        let mut start = self.line;
        // At the start of a natural line: blanks are skipped, and so are line ends unless
        // this line continues another (then an empty line ends the logical one).
        let mut skip_blanks = true;
        let mut continued = false;
        // After a continuation ended by `\r`: a `\n` right after it belongs to it.
        let mut skip_lf = false;
        let mut odd_backslashes = false;
        loop {
            let Some(c) = self.bump() else {
                // The end of the text; a backslash there is dropped.
                if line.is_empty() {
                    return None;
                }
                if odd_backslashes {
                    line.pop();
                }
                return Some((start, line));
            };
            if std::mem::take(&mut skip_lf) && c == '\n' {
                continue;
            }
            let line_end = c == '\n' || c == '\r';
            if skip_blanks {
                if is_blank(c) || (line_end && !continued) {
                    continue;
                }
                skip_blanks = false;
                continued = false;
            }
            if line.is_empty() && (c == '#' || c == '!') {
                // A comment, up to and including its line end: it never continues.
                while let Some(c) = self.bump() {
                    if c == '\n' || c == '\r' {
                        break;
                    }
                }
                skip_blanks = true;
                continue;
            }
            if !line_end {
                if line.is_empty() {
                    start = self.line;
                }
                line.push(c);
                odd_backslashes = c == '\\' && !odd_backslashes;
                continue;
            }
            if line.is_empty() {
                // A line that continued into an empty line: nothing; read on.
                skip_blanks = true;
                continue;
            }
            if self.chars.peek().is_none() || !odd_backslashes {
                if odd_backslashes {
                    line.pop();
                }
                return Some((start, line));
            }
            // A continuation: drop the backslash, go on at the next line's first non-blank.
            line.pop();
            odd_backslashes = false;
            skip_blanks = true;
            continued = true;
            skip_lf = c == '\r';
        }
    }
}

/// What is wrong with an entry that was cut at a line end, if it looks so: see
/// [`Properties::parse`]. Names the key when it is one, never shows the value.
fn cut_at_line_end(key: &str, value: &str) -> Option<String> {
    const CONTINUE: &str = "in a .properties file a value goes on at the next line only when its \
                            line ends with `\\`, so the next lines of the block would be read \
                            as keys of their own; end every line of the PEM text but the last \
                            with `\\` (or write the line breaks as `\\n`)";
    let begins = key.matches("-----BEGIN").count() + value.matches("-----BEGIN").count();
    let ends = key.matches("-----END").count() + value.matches("-----END").count();
    if begins > ends {
        if key.contains("-----BEGIN") {
            // The line of the marker is no entry: the value it belongs to ended a line early.
            return Some(format!(
                "a PEM block (`-----BEGIN ...`) starts a line of its own, cut from the value \
                 it belongs to: {CONTINUE}"
            ));
        }
        return Some(format!(
            "the value of `{}` starts a PEM block (`-----BEGIN ...`) that does not end in it: \
             {CONTINUE}",
            shown_key(key)
        ));
    }
    // No `;` at all: every JAAS entry ends with one (a comment may follow it).
    let jaas = key.to_ascii_lowercase().ends_with("sasl.jaas.config");
    if jaas && !value.trim().is_empty() && !value.contains(';') {
        return Some(format!(
            "the value of `{}` has no `;`, which ends every JAAS entry: if it goes \
             on at the next line, end its lines with `\\` (a value goes on at the next line only \
             then, and the next line would be read as a key of its own)",
            shown_key(key)
        ));
    }
    None
}

fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\u{c}')
}

fn trim_blank_start(s: &str) -> &str {
    s.trim_start_matches(is_blank)
}

/// Splits a logical line at the first unescaped `=`, `:` or blank; blanks and one `=` or
/// `:` after the key are skipped. Both parts are still escaped.
fn split_entry(line: &str) -> (&str, &str) {
    let mut escaped = false;
    let mut key_end = line.len();
    let mut value_start = line.len();
    let mut has_separator = false;
    for (i, c) in line.char_indices() {
        if !escaped && (c == '=' || c == ':') {
            key_end = i;
            value_start = i + 1;
            has_separator = true;
            break;
        }
        if !escaped && is_blank(c) {
            key_end = i;
            value_start = i + c.len_utf8();
            break;
        }
        escaped = c == '\\' && !escaped;
    }
    let mut rest = &line[value_start..];
    loop {
        rest = trim_blank_start(rest);
        match rest.chars().next() {
            Some(c @ ('=' | ':')) if !has_separator => {
                has_separator = true;
                rest = &rest[c.len_utf8()..];
            }
            _ => break,
        }
    }
    (&line[..key_end], rest)
}

/// Resolves the escapes of a key or value. The error says what is wrong, without the text.
fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            // A lone backslash at the very end (a continuation at the end of the text).
            None => {}
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let unit = hex4(&mut chars)?;
                let code = if (0xD800..0xDC00).contains(&unit) {
                    let low = match (chars.next(), chars.next()) {
                        (Some('\\'), Some('u')) => hex4(&mut chars)?,
                        _ => return Err(lone_surrogate()),
                    };
                    if !(0xDC00..0xE000).contains(&low) {
                        return Err(lone_surrogate());
                    }
                    0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                } else {
                    unit
                };
                out.push(char::from_u32(code).ok_or_else(lone_surrogate)?);
            }
            Some(other) => out.push(other),
        }
    }
    Ok(out)
}

fn hex4(chars: &mut std::str::Chars<'_>) -> Result<u32, String> {
    let mut unit = 0;
    for _ in 0..4 {
        let digit = chars.next().and_then(|c| c.to_digit(16)).ok_or_else(|| {
            "malformed \\uXXXX escape (write four hex digits after \\u)".to_owned()
        })?;
        unit = unit * 16 + digit;
    }
    Ok(unit)
}

fn lone_surrogate() -> String {
    "\\uXXXX escape encodes a lone UTF-16 surrogate (write a high surrogate followed by a low one, or the character itself)"
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Vec<(String, String)> {
        Properties::parse(text)
            .unwrap()
            .iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn separators_and_blanks() {
        assert_eq!(
            parse("a=1\nb: 2\nc 3\n  d  =  4  \ne\nf=\ng :=5\nh\t\t6\n"),
            pairs(&[
                ("a", "1"),
                ("b", "2"),
                ("c", "3"),
                ("d", "4  "),
                ("e", ""),
                ("f", ""),
                ("g", "=5"),
                ("h", "6"),
            ])
        );
    }

    #[test]
    fn comments_and_blank_lines() {
        assert_eq!(
            parse("# c\n   ! c\n\n \t \na=1 # not a comment\n#x=2\\\ny=3"),
            pairs(&[("a", "1 # not a comment"), ("y", "3")])
        );
    }

    #[test]
    fn line_continuations() {
        assert_eq!(
            parse("a=one,\\\n    two,\\\r\n\tthree\nb=x\\\\\nc=y"),
            pairs(&[("a", "one,two,three"), ("b", "x\\"), ("c", "y")])
        );
        // A continued line that starts with `#` is data, not a comment.
        assert_eq!(parse("a=1\\\n#2"), pairs(&[("a", "1#2")]));
        // An empty continuation line ends the entry; a backslash at the end of the text is
        // dropped.
        assert_eq!(parse("a=1\\\n\nb=2\\"), pairs(&[("a", "1"), ("b", "2")]));
        // Old Mac line ends.
        assert_eq!(parse("a=1\rb=2"), pairs(&[("a", "1"), ("b", "2")]));
        // What java.util.Properties does with a line that is only a backslash: it goes on
        // at the next line as if it were a new one (a comment there is a comment), and an
        // empty line after it makes nothing; at the end of the text it is an empty key.
        assert_eq!(parse("\\\n#foo\nkey=v"), pairs(&[("key", "v")]));
        assert_eq!(parse("\\\n\nb=2"), pairs(&[("b", "2")]));
        assert_eq!(parse(" \\"), pairs(&[("", "")]));
        assert_eq!(parse("\\\n"), pairs(&[("", "")]));
        // A comment never continues; `\r\n` after a continuation is one line end.
        assert_eq!(parse("#a\\\nb=1"), pairs(&[("b", "1")]));
        assert_eq!(parse("a\\\r\n b\\\r\r\nc"), pairs(&[("ab", ""), ("c", "")]));
    }

    #[test]
    fn syntax_errors_give_the_line_where_the_entry_starts() {
        let err = Properties::parse("a=1\r\n\r\n# c\n  b=2\\\n  \\u00zz").unwrap_err();
        assert!(err.to_string().starts_with("line 4: "), "{err}");
    }

    #[test]
    fn escapes() {
        assert_eq!(
            parse("k\\ e\\:y\\=x = \\t\\n\\r\\f\\\\\\=\\:\\#\\b\\u0041\\ud83d\\ude00"),
            pairs(&[("k e:y=x", "\t\n\r\u{c}\\=:#bA😀")])
        );
    }

    #[test]
    fn malformed_unicode_escapes_name_the_line_and_key_not_the_value() {
        let err = Properties::parse("a=1\nsecret.key=ab\\u12G4cd").unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("line 2: malformed \\uXXXX escape"),
            "{text}"
        );
        assert!(text.contains("`secret.key`"), "{text}");
        assert!(!text.contains("ab"), "{text}");
        let err = Properties::parse("x=\\ud800").unwrap_err();
        assert!(err.to_string().contains("lone UTF-16 surrogate"), "{err}");
        let err = Properties::parse("\\u00=1").unwrap_err();
        assert!(err.to_string().contains("in a key"), "{err}");
    }

    /// A PEM key or a JAAS entry pasted over several lines without a `\\` at their ends:
    /// Java would read each next line as a key (and keys are shown); the parse refuses it,
    /// naming the line and the key, never a byte of the value or of the lines after it.
    #[test]
    fn a_secret_cut_at_a_line_end_is_refused_without_its_text() {
        let body = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQghzPtCG1OS3q9tSgj";
        let pem =
            format!("-----BEGIN PRIVATE KEY-----\n{body}\nSECRETSECRET\n-----END PRIVATE KEY-----");
        for (text, line, key) in [
            (
                format!("a=1\nssl.keystore.key={pem}\n"),
                2,
                "ssl.keystore.key",
            ),
            (
                format!("consumer.override.ssl.truststore.certificates = {pem}"),
                1,
                "consumer.override.ssl.truststore.certificates",
            ),
            // `openssl pkcs12` output: the value is its first line, the block a line later.
            (
                format!("ssl.keystore.key=Bag Attributes\n    localKeyID: 01\n{pem}"),
                3,
                "",
            ),
            (
                "x=y\n\nsasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule \
                 required\n  username=\"alice\"\n  password=\"SECRETSECRET\";\n"
                    .to_owned(),
                3,
                "sasl.jaas.config",
            ),
            (
                "producer.override.sasl.jaas.config=M required password=\"SECRETSECRET\"\n"
                    .to_owned(),
                1,
                "producer.override.sasl.jaas.config",
            ),
        ] {
            let err = Properties::parse(&text).expect_err(&text);
            let shown = format!("{err} {err:?}");
            assert!(shown.starts_with(&format!("line {line}: ")), "{shown}");
            if key.is_empty() {
                assert!(shown.contains("starts a line of its own"), "{shown}");
            } else {
                assert!(shown.contains(&format!("`{key}`")), "{shown}");
            }
            assert!(shown.contains("`\\`"), "{shown}");
            for secret in [body, "SECRETSECRET", "MIGH", "alice"] {
                assert!(!shown.contains(secret), "{shown}");
            }
        }
        // Whole values read, on one line, with `\n` escapes or over continuation lines.
        let continued = pem.replace('\n', "\\\n    ");
        let escaped = pem.replace('\n', "\\n");
        for text in [
            format!("ssl.keystore.key={continued}"),
            format!("ssl.keystore.key={escaped}"),
            format!("ssl.keystore.key={}", pem.replace('\n', " ")),
            "sasl.jaas.config=M required \\\n  password=\"p\";  \n".to_owned(),
            "sasl.jaas.config=M required password=\"p\"; // rotated monthly\n".to_owned(),
            "sasl.jaas.config=\nnot.a.pem=-----END X".to_owned(),
        ] {
            Properties::parse(&text).expect(&text);
        }
    }

    #[test]
    fn repeated_key_keeps_place_and_last_value() {
        let props = Properties::parse("a=1\nb=2\na=3").unwrap();
        assert_eq!(props.iter().collect::<Vec<_>>(), [("a", "3"), ("b", "2")]);
    }

    #[test]
    fn remove_keeps_the_index_right() {
        let mut props: Properties = [("a", "1"), ("b", "2"), ("c", "3")].into_iter().collect();
        assert_eq!(props.remove("a"), Some("1".to_owned()));
        assert_eq!(props.get("c"), Some("3"));
        assert_eq!(props.remove("a"), None);
        props.insert("a", "4");
        assert_eq!(
            props.iter().collect::<Vec<_>>(),
            [("b", "2"), ("c", "3"), ("a", "4")]
        );
    }

    #[test]
    fn equality_ignores_order() {
        let a: Properties = [("a", "1"), ("b", "2")].into_iter().collect();
        let b: Properties = [("b", "2"), ("a", "1")].into_iter().collect();
        let c: Properties = [("b", "2"), ("a", "2")].into_iter().collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
