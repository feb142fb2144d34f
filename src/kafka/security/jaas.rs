//! `sasl.jaas.config`, read as the Java client reads it (`JaasConfig`, over
//! `java.io.StreamTokenizer`): `<LoginModule class> <flag> key=value ... ;` where values are
//! words or quoted strings (double or single quotes, backslash escapes), `//` and `/* */`
//! comments may appear anywhere, and a client takes exactly one entry.
//!
//! Errors never include a value, nor any word of the text that is not a known login module
//! or option name (the string holds passwords, and a password with a space or a stray quote
//! splits into words that would read as names): they say what was expected where, by token
//! number.

use std::collections::BTreeMap;

/// One login module entry.
pub(crate) struct JaasEntry {
    /// The login module class, e.g. `org.apache.kafka.common.security.plain.PlainLoginModule`.
    pub(crate) module: String,
    /// The options, by key. Their values may be secrets: never shown.
    pub(crate) options: BTreeMap<String, String>,
}

impl std::fmt::Debug for JaasEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JaasEntry")
            .field("module", &self.module)
            .field("option_keys", &self.options.keys().collect::<Vec<_>>())
            .finish()
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Token {
    Word(String),
    Quoted(String),
    Punct(char),
}

/// Java's StreamTokenizer word characters as JaasConfig sets them up: letters (and every
/// character from U+00A0 up), digits, `.`, `-`, `_`, `$`.
fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '$') || u32::from(c) >= 0xA0
}

fn tokens(text: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() || u32::from(c) < 0x20 => {}
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' || c == '\r' {
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = '\0';
                let mut closed = false;
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        closed = true;
                        break;
                    }
                    last = c;
                }
                if !closed {
                    return Err("a /* comment is not closed".to_owned());
                }
            }
            '"' | '\'' => {
                let quote = c;
                let mut value = String::new();
                let mut closed = false;
                while let Some(c) = chars.next() {
                    match c {
                        c if c == quote => {
                            closed = true;
                            break;
                        }
                        '\n' | '\r' => break,
                        '\\' => match chars.next() {
                            Some('n') => value.push('\n'),
                            Some('t') => value.push('\t'),
                            Some('r') => value.push('\r'),
                            Some('b') => value.push('\u{8}'),
                            Some('f') => value.push('\u{c}'),
                            Some('a') => value.push('\u{7}'),
                            Some('v') => value.push('\u{b}'),
                            Some(d @ '0'..='7') => {
                                // Up to three octal digits, as Java reads them.
                                let mut n = d.to_digit(8).unwrap_or(0);
                                let max_digits = if d <= '3' { 3 } else { 2 };
                                for _ in 1..max_digits {
                                    match chars.peek().and_then(|c| c.to_digit(8)) {
                                        Some(next) => {
                                            n = n * 8 + next;
                                            chars.next();
                                        }
                                        None => break,
                                    }
                                }
                                value.push(char::from_u32(n).unwrap_or('\u{fffd}'));
                            }
                            Some(other) => value.push(other),
                            None => break,
                        },
                        other => value.push(other),
                    }
                }
                if !closed {
                    return Err("a quoted value is not closed on its line".to_owned());
                }
                out.push(Token::Quoted(value));
            }
            c if is_word(c) => {
                let mut word = String::from(c);
                while let Some(&next) = chars.peek() {
                    if !is_word(next) {
                        break;
                    }
                    word.push(next);
                    chars.next();
                }
                out.push(Token::Word(word));
            }
            other => out.push(Token::Punct(other)),
        }
    }
    Ok(out)
}

/// Parses a client `sasl.jaas.config`: exactly one entry.
pub(crate) fn parse(text: &str) -> Result<JaasEntry, String> {
    let tokens = tokens(text)?;
    let mut entries = Vec::new();
    let mut rest = tokens.into_iter().enumerate().peekable();
    while let Some((i, token)) = rest.next() {
        let Token::Word(module) = token else {
            return Err(format!(
                "token {}: expected a login module class name",
                i + 1
            ));
        };
        match rest.next() {
            Some((_, Token::Word(flag)))
                if ["required", "requisite", "sufficient", "optional"]
                    .iter()
                    .any(|f| f.eq_ignore_ascii_case(&flag)) => {}
            Some((i, _)) => {
                return Err(format!(
                    "token {}: expected a control flag (required, requisite, sufficient or optional) after the login module {}",
                    i + 1,
                    module_name(&module)
                ));
            }
            None => {
                return Err(format!(
                    "the entry of the login module {} ends before its control flag (e.g. `required`)",
                    module_name(&module)
                ));
            }
        }
        let mut options = BTreeMap::new();
        loop {
            let (key, at) = match rest.next() {
                Some((_, Token::Punct(';'))) => break,
                Some((i, Token::Word(key))) => (key, i + 1),
                Some((i, _)) => {
                    return Err(format!(
                        "token {}: expected an option name or the `;` that ends the entry",
                        i + 1
                    ));
                }
                None => {
                    return Err(format!(
                        "the entry of the login module {} does not end with `;`",
                        module_name(&module)
                    ));
                }
            };
            match rest.next() {
                Some((_, Token::Punct('='))) => {}
                _ => {
                    return Err(format!(
                        "{} has no `=` (quote a value that has spaces: password=\"...\")",
                        option_name(&key, at)
                    ));
                }
            }
            let value = match rest.next() {
                Some((_, Token::Word(v) | Token::Quoted(v))) => v,
                _ => return Err(format!("{} has no value", option_name(&key, at))),
            };
            options.insert(key, value);
        }
        entries.push(JaasEntry { module, options });
    }
    let count = entries.len();
    let mut entries = entries.into_iter();
    match (entries.next(), entries.next()) {
        (Some(entry), None) => Ok(entry),
        (None, _) => Err("no login module is given".to_owned()),
        (Some(_), Some(_)) => Err(format!(
            "{count} login modules are given; a client takes exactly one"
        )),
    }
}

/// The login modules whose names errors may show.
const KNOWN_MODULES: &[&str] = &[
    "org.apache.kafka.common.security.plain.PlainLoginModule",
    "org.apache.kafka.common.security.scram.ScramLoginModule",
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
    "com.sun.security.auth.module.Krb5LoginModule",
];

/// The options whose names errors may show.
const KNOWN_OPTIONS: &[&str] = &[
    "username",
    "password",
    "tokenauth",
    "unsecuredLoginStringClaim_sub",
    "unsecuredLoginLifetimeSeconds",
    "useKeyTab",
    "storeKey",
    "keyTab",
    "principal",
];

/// A login module as errors show it: by name when it is a known one, else by its length
/// only (a word where the class name goes may be a misplaced password).
pub(crate) fn module_name(module: &str) -> String {
    if KNOWN_MODULES.contains(&module) {
        format!("`{module}`")
    } else {
        format!(
            "(an unknown class name of {} characters, not shown)",
            module.chars().count()
        )
    }
}

/// An option as errors show it: `the option `password``, or by position for a word that is
/// not a known option name.
fn option_name(key: &str, token: usize) -> String {
    let known = KNOWN_OPTIONS.contains(&key)
        || key.starts_with("unsecuredLoginExtension_")
        || key.starts_with("unsecuredLoginNumberClaim_")
        || key.starts_with("unsecuredLoginListClaim_");
    if known {
        format!("the option `{key}`")
    } else {
        format!("the word at token {token} (read as an option name, not shown)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_java_reads() {
        let entry = parse(
            "org.apache.kafka.common.security.plain.PlainLoginModule required \
             username=\"alice\" password='al\\\"ice-\\n\\101secret';",
        )
        .expect("parsed");
        assert_eq!(
            entry.module,
            "org.apache.kafka.common.security.plain.PlainLoginModule"
        );
        assert_eq!(entry.options["username"], "alice");
        assert_eq!(entry.options["password"], "al\"ice-\nAsecret");

        let entry = parse(
            "// a comment\n org.apache.kafka.common.security.scram.ScramLoginModule /* x */ \
             REQUIRED\n username=bob_1$ password=\"p w\" tokenauth=true ; ",
        )
        .expect("parsed");
        assert_eq!(entry.options["username"], "bob_1$");
        assert_eq!(entry.options["password"], "p w");
        assert_eq!(entry.options["tokenauth"], "true");

        let entry = parse("a.B required;").expect("no options");
        assert!(entry.options.is_empty());
    }

    #[test]
    fn errors_say_what_is_wrong_but_never_the_values() {
        for (text, expected) in [
            ("", "no login module"),
            ("   // only a comment", "no login module"),
            (
                "m required username=\"u\" password=\"hunter2\"",
                "does not end with `;`",
            ),
            ("m username=\"u\";", "control flag"),
            ("m", "before its control flag"),
            ("m required username \"hunter2\";", "has no `=`"),
            ("m required username=;", "has no value"),
            ("m required password=\"hunter2;", "not closed"),
            ("m required /* hunter2", "not closed"),
            ("m required; n required;", "2 login modules"),
            ("\"m\" required;", "login module class name"),
            ("m required = ;", "option name"),
            // A password with a space, unquoted: its second word reads as an option name.
            (
                "m required username=u password=abc hunter2;",
                "token 9 (read as an option name",
            ),
            ("hunter2", "unknown class name of 7 characters"),
            ("hunter2 required username=\"u\"", "does not end with `;`"),
        ] {
            let error = parse(text).expect_err(text);
            assert!(error.contains(expected), "{text}: {error}");
            assert!(!error.contains("hunter2"), "{text}: {error}");
        }
    }

    #[test]
    fn debug_shows_option_names_only() {
        let entry = parse("m required username=\"u\" password=\"hunter2\";").expect("parsed");
        let debug = format!("{entry:?}");
        assert!(
            debug.contains("password") && !debug.contains("hunter2"),
            "{debug}"
        );
    }
}
