//! No secret in any output.
//!
//! A property test feeds secret-bearing settings (passwords with quotes, backslashes, spaces
//! and non-ASCII characters in JAAS strings written every way, well and badly; PEM private keys
//! whole and mangled; OAuth client secrets; keystore and truststore passwords) through every
//! configuration path, as `.properties` text and from there:
//!
//! - [`Properties::parse`] (also with a malformed escape inside the secret);
//! - [`Security::from_properties`], [`KafkaProducerConfig::from_properties`];
//! - [`ConnectorConfig::resolve`] with the settings under the worker's `consumer.*` or the
//!   connector's `consumer.override.*` / `producer.override.*` prefixes, then
//!   `kafka_consumer_config` and `dead_letter_queue_config`;
//!
//! and through the connection paths, one client per case — [`KafkaShareConsumer::connect`],
//! `KafkaProducer::connect` and `KafkaAdmin::builder(..).connect()`, each building the TLS and
//! SASL context — against a fake broker on loopback that speaks SASL and refuses the
//! credentials, or answers TLS with a plaintext hang-up.
//!
//! Every output is searched: `Display`, `Debug` and `{:#?}` of every value and error (and of
//! every error's sources), every log line at every level (a subscriber of our own records every
//! event and span field at TRACE), and every panic message. A secret is found as text, as its
//! bytes in decimal (`80, 82, 73` or `[80,82`), as hex (either case, with or without
//! separators, `0x` prefixes), and as base64 (standard or URL-safe, any alignment): each
//! output is decoded every one of those ways and searched for any 8-byte window of a secret.

#[path = "support/fake_broker.rs"]
mod fake_broker;

use std::error::Error as StdError;
use std::fmt::{Debug, Write as _};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use fake_broker::{FakeBroker, Reply};
use kafka_protocol::messages::{ApiKey, SaslAuthenticateResponse, SaslHandshakeResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_share_sink::producer::{KafkaProducer, KafkaProducerConfig, ProducerError};
use kafka_share_sink::{
    AdminError, ConnectorConfig, KafkaAdmin, KafkaShareConsumer, KafkaShareConsumerConfig,
    Properties, Security,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// How many generated cases (`SECRETS_CASES` sets another number, when trying things out).
fn cases() -> u32 {
    std::env::var("SECRETS_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000)
}
/// The length of the windows of a secret searched for.
const WINDOW: usize = 8;

// ---------------------------------------------------------------------------------------
// Capturing log lines and panic messages
// ---------------------------------------------------------------------------------------

/// Every log line and panic message since the last [`take_logs`].
static LOGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn push_log(line: String) {
    LOGS.lock().unwrap_or_else(|e| e.into_inner()).push(line);
}

fn take_logs() -> Vec<String> {
    std::mem::take(&mut *LOGS.lock().unwrap_or_else(|e| e.into_inner()))
}

/// A subscriber that formats every event and span, at every level, into [`LOGS`].
struct Capture {
    next_span: AtomicU64,
}

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn Debug) {
        let _ = write!(
            self.0,
            " {}={value:?} {}={value:#?}",
            field.name(),
            field.name()
        );
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        let _ = write!(
            self.0,
            " {}={value} {}={value:?}",
            field.name(),
            field.name()
        );
    }

    fn record_error(&mut self, field: &tracing::field::Field, value: &(dyn StdError + 'static)) {
        let _ = write!(self.0, " {}={value} {value:?}", field.name());
        let mut source = value.source();
        while let Some(error) = source {
            let _ = write!(self.0, " caused by {error} {error:?}");
            source = error.source();
        }
    }
}

impl tracing::Subscriber for Capture {
    fn register_callsite(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::always()
    }

    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }

    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut line = format!("span {}", span.metadata().name());
        span.record(&mut Fields(&mut line));
        push_log(line);
        tracing::span::Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut line = "span record".to_owned();
        values.record(&mut Fields(&mut line));
        push_log(line);
    }

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let meta = event.metadata();
        let mut line = format!("{} {}", meta.level(), meta.target());
        event.record(&mut Fields(&mut line));
        push_log(line);
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// Installs the subscriber and a panic hook that records panic messages too.
fn capture() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        tracing::subscriber::set_global_default(Capture {
            next_span: AtomicU64::new(0),
        })
        .expect("no other subscriber in this test binary");
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            push_log(format!("panic: {info}"));
            previous(info);
        }));
    });
}

// ---------------------------------------------------------------------------------------
// Finding a secret in every form
// ---------------------------------------------------------------------------------------

/// The windows of every secret of a case, as `u64`s (`WINDOW` is 8), sorted, with a bitmap of
/// their hashes to skip most lookups.
struct Needles {
    words: Vec<u64>,
    filter: Vec<u64>,
}

impl Default for Needles {
    fn default() -> Self {
        Self {
            words: Vec::new(),
            filter: vec![0; FILTER_BITS / 64],
        }
    }
}

const FILTER_BITS: usize = 1 << 16;

/// The `u64` of an 8-byte window.
fn word(window: &[u8]) -> u64 {
    let mut bytes = [0u8; WINDOW];
    bytes.copy_from_slice(window);
    u64::from_le_bytes(bytes)
}

/// The filter bit of a word.
fn bit(word: u64) -> usize {
    usize::try_from(word.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 48).unwrap_or(0)
}

impl Needles {
    fn add(&mut self, secret: &[u8]) {
        assert!(secret.len() >= WINDOW, "a secret of {} bytes", secret.len());
        for w in secret.windows(WINDOW) {
            let w = word(w);
            self.words.push(w);
            self.filter[bit(w) / 64] |= 1 << (bit(w) % 64);
        }
        self.words.sort_unstable();
        self.words.dedup();
    }

    fn contains(&self, bytes: &[u8]) -> bool {
        // The last eight bytes, the newest in the top byte: a window as `word` reads it.
        let mut window = 0u64;
        for (i, byte) in bytes.iter().enumerate() {
            window = window >> 8 | u64::from(*byte) << 56;
            if i + 1 >= WINDOW {
                let bit = bit(window);
                if self.filter[bit / 64] & (1 << (bit % 64)) != 0
                    && self.words.binary_search(&window).is_ok()
                {
                    return true;
                }
            }
        }
        false
    }

    /// The form in which a secret appears in `output`, if it does.
    fn found_in(&self, output: &str) -> Option<&'static str> {
        if self.contains(output.as_bytes()) {
            return Some("text");
        }
        views(output)
            .into_iter()
            .find(|(_, bytes)| self.contains(bytes))
            .map(|(form, _)| form)
    }
}

/// `output` read back every way but as text that a secret could have been written into it.
fn views(output: &str) -> Vec<(&'static str, Vec<u8>)> {
    let mut views = vec![("decimal bytes", decimal_bytes(output))];
    for (offset, bytes) in hex_bytes(output).into_iter().enumerate() {
        views.push((if offset == 0 { "hex" } else { "hex, odd" }, bytes));
    }
    for url_safe in [false, true] {
        for offset in 0..4 {
            views.push((
                if url_safe {
                    "base64 (URL-safe)"
                } else {
                    "base64"
                },
                base64_bytes(output, url_safe, offset),
            ));
        }
    }
    views
}

/// Every number of 1 to 3 digits up to 255, in order, as a byte: `[80, 82, 73]`,
/// `80,82,73`, `80 82 73` all give the bytes.
fn decimal_bytes(output: &str) -> Vec<u8> {
    output
        .split(|c: char| !c.is_ascii_digit())
        .filter(|run| !run.is_empty() && run.len() <= 3)
        .filter_map(|run| run.parse::<u8>().ok())
        .collect()
}

/// Hex digits decoded in pairs from each offset (0 and 1), runs broken by anything but hex
/// digits, the separators ` :,-_` and `0x`/`\\x` prefixes. Runs too short to hold a window
/// are skipped.
fn hex_bytes(output: &str) -> [Vec<u8>; 2] {
    let mut out = [Vec::new(), Vec::new()];
    let mut digits: Vec<u8> = Vec::new();
    let mut flush = |digits: &mut Vec<u8>| {
        if digits.len() >= 2 * WINDOW {
            for (offset, bytes) in out.iter_mut().enumerate() {
                for pair in digits[offset..].chunks_exact(2) {
                    bytes.push(pair[0] << 4 | pair[1]);
                }
                bytes.push(0);
            }
        }
        digits.clear();
    };
    let text = output.as_bytes();
    let mut i = 0;
    while i < text.len() {
        let c = text[i];
        let prefix = matches!(text.get(i..i + 2), Some([b'0' | b'\\', b'x' | b'X']));
        if prefix {
            i += 2;
            continue;
        }
        match (c as char).to_digit(16) {
            Some(d) => digits.push(u8::try_from(d).unwrap_or(0)),
            None if b" :,-_".contains(&c) => {}
            None => flush(&mut digits),
        }
        i += 1;
    }
    flush(&mut digits);
    out
}

/// The value of each base64 character (64 for others), standard or URL-safe.
fn base64_table(url_safe: bool) -> [u8; 256] {
    let alphabet: &[u8; 64] = if url_safe {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    } else {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    };
    let mut table = [64u8; 256];
    for (value, c) in (0u8..).zip(alphabet) {
        table[usize::from(*c)] = value;
    }
    table
}

/// Runs of base64 characters decoded from `offset` characters in; runs too short to hold a
/// window are skipped.
fn base64_bytes(output: &str, url_safe: bool, offset: usize) -> Vec<u8> {
    static TABLES: OnceLock<[[u8; 256]; 2]> = OnceLock::new();
    let table =
        &TABLES.get_or_init(|| [base64_table(false), base64_table(true)])[usize::from(url_safe)];
    let text = output.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let len = text[start..]
            .iter()
            .position(|c| table[usize::from(*c)] == 64)
            .unwrap_or(text.len() - start);
        if len >= offset + WINDOW * 4 / 3 {
            for quad in text[start + offset..start + len].chunks_exact(4) {
                let n = quad
                    .iter()
                    .fold(0u32, |n, c| n << 6 | u32::from(table[usize::from(*c)]));
                out.extend_from_slice(&n.to_be_bytes()[1..]);
            }
            out.push(0);
        }
        start += len + 1;
    }
    out
}

// ---------------------------------------------------------------------------------------
// Secret-bearing settings
// ---------------------------------------------------------------------------------------

/// A test key and its self-signed certificate (SAN `localhost`).
const TEST_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgrqVbTcCOwHTvCrg3
m5i+xBxIYFjwOlbYyrgsK9IerQ+hRANCAARHMe8JnoOkCQQngt8Fp5fP2lb1o5/h
Y/wkl1uuP1W+boujEM0JDdqiiz5Prbjq52hgmILQrTwoS5ifqa6jiBs+
-----END PRIVATE KEY-----
";

const TEST_CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBmTCCAT+gAwIBAgIUO+AHyxvdjXi2Jt9lh82cjstXVf4wCgYIKoZIzj0EAwIw
FjEUMBIGA1UEAwwLdGVzdC1jbGllbnQwIBcNMjYxMjA0MTQzMzIxWhgPMjEyNjEx
MTAxNDMzMjFaMBYxFDASBgNVBAMMC3Rlc3QtY2xpZW50MFkwEwYHKoZIzj0CAQYI
KoZIzj0DAQcDQgAERzHvCZ6DpAkEJ4LfBaeXz9pW9aOf4WP8JJdbrj9Vvm6LoxDN
CQ3aoos+T6246udoYJiC0K08KEuYn6muo4gbPqNpMGcwHQYDVR0OBBYEFBVArX5s
rHPz+gQ0F5eAcpG2ZjuWMB8GA1UdIwQYMBaAFBVArX5srHPz+gQ0F5eAcpG2ZjuW
MA8GA1UdEwEB/wQFMAMBAf8wFAYDVR0RBA0wC4IJbG9jYWxob3N0MAoGCCqGSM49
BAMCA0gAMEUCIEGS9/uhm72qXrJkbBxDzEidB5UtAe2aCtTJ/5TvEBuBAiEA2Iaj
Rmt5JgWKe8JgbbIfFZfv+dStxDNrbLrdQVnfHPs=
-----END CERTIFICATE-----
";

const STD: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The PKCS#8 DER of [`TEST_KEY`].
fn test_key_der() -> Vec<u8> {
    use base64::Engine as _;
    let body: String = TEST_KEY
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    STD.decode(body).expect("test key")
}

/// A P-256 PKCS#8 key with `scalar` as its private key (the public key then does not match
/// it: the key is refused when the TLS configuration is built), as PEM.
fn random_key_pem(scalar: &[u8; 32]) -> (String, Vec<u8>) {
    use base64::Engine as _;
    let mut der = test_key_der();
    // 30 81 87 | 02 01 00 | 30 13 <algorithm> | 04 6d 30 6b 02 01 01 04 20 <scalar>
    der[36..68].copy_from_slice(scalar);
    let body = STD.encode(&der);
    let mut pem = "-----BEGIN PRIVATE KEY-----\n".to_owned();
    for line in body.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END PRIVATE KEY-----\n");
    (pem, der)
}

/// The ways PEM gets mangled on its way to a setting.
fn mangle_pem(pem: &str, how: u8) -> String {
    let body_start = pem.find('\n').map_or(0, |i| i + 1);
    match how {
        // As written.
        0 => pem.to_owned(),
        // `echo $VAR`: line breaks became spaces.
        1 => pem.trim_end().replace('\n', " "),
        // Line breaks lost altogether.
        2 => pem.replace('\n', ""),
        3 => pem.replace('\n', "\r\n"),
        // Truncated in the middle of the body.
        4 => pem[..body_start + 40].to_owned(),
        // Without its END marker, and one line broken.
        5 => pem
            .replace("-----END PRIVATE KEY-----", "")
            .replace("-----END CERTIFICATE-----", ""),
        // Base64 damaged, on one line.
        6 => pem.replace('\n', " ").replacen('A', "*", 3),
        // Its label damaged.
        7 => pem.replace("BEGIN PRIVATE KEY", "BEGIN PRIVATE\u{1}KEY"),
        // Encrypted, as far as its label says.
        8 => pem.replace("PRIVATE KEY", "ENCRYPTED PRIVATE KEY"),
        // Bag attributes and text around it, as `openssl pkcs12` writes.
        9 => format!("Bag Attributes\n    localKeyID: 01 02\n{pem}trailing text"),
        // The line breaks written as `\n` text (JSON, YAML).
        _ => pem.replace('\n', "\\n"),
    }
}

/// A password around the random `core`, with the characters that need quoting or escaping.
fn password(core: &str, style: u8) -> String {
    match style {
        0 => core.to_owned(),
        1 => format!("p\"{core}\"q"),
        2 => format!("it's-{core}"),
        3 => format!("{core}\\back\\slash"),
        4 => format!("a b;c={core} d"),
        5 => format!("é{core}😀\u{a0}"),
        _ => format!("{core}\n\ttab"),
    }
}

/// A JAAS string quoted for Java's JaasConfig, written every way, and badly. The password goes
/// in `password` (PLAIN, SCRAM) or `clientSecret` (OAUTHBEARER, whose login module ignores
/// it), after the user name (`unsecuredLoginStringClaim_sub` for OAUTHBEARER).
fn jaas(module: &str, password: &str, form: u8) -> String {
    let (user_option, secret_option) = if module.ends_with("OAuthBearerLoginModule") {
        ("unsecuredLoginStringClaim_sub", "clientSecret")
    } else {
        ("username", "password")
    };
    let escaped = password.replace('\\', "\\\\").replace('"', "\\\"");
    let single = password.replace('\\', "\\\\").replace('\'', "\\'");
    let user = format!("{user_option}=\"alice\"");
    match form {
        0 => format!("{module} required {user} {secret_option}=\"{escaped}\";"),
        1 => format!("{module} required {user_option}='alice' {secret_option}='{single}';"),
        2 => format!(
            "// a comment\n{module}\n  REQUIRED /* x */ {user}\n  {secret_option}=\"{escaped}\" ;"
        ),
        // Unquoted: breaks on the password's spaces and quotes.
        3 => format!("{module} required {user_option}=alice {secret_option}={password};"),
        // No `;`.
        4 => format!("{module} required {user} {secret_option}=\"{escaped}\""),
        // An unclosed quote.
        5 => format!("{module} required {user} {secret_option}=\"{escaped};"),
        // The password in an unclosed comment.
        6 => format!("{module} required {user} /* {secret_option}=\"{escaped}\";"),
        // The password in place of the module.
        7 => format!("{escaped} required;"),
        8 => password.to_owned(),
        // Two modules.
        9 => format!(
            "{module} required {secret_option}=\"{escaped}\"; {module} required {secret_option}=\"{escaped}\";"
        ),
        // Missing `=`.
        10 => format!("{module} required {user} {secret_option} \"{escaped}\";"),
        // Another module.
        _ => format!(
            "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" password=\"{escaped}\" tokenauth=true;"
        ),
    }
}

const MODULES: [&str; 4] = [
    "org.apache.kafka.common.security.plain.PlainLoginModule",
    "org.apache.kafka.common.security.scram.ScramLoginModule",
    "org.apache.kafka.common.security.scram.ScramLoginModule",
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
];
const MECHANISMS: [&str; 4] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"];
const PROTOCOLS: [&str; 4] = ["SASL_PLAINTEXT", "SASL_SSL", "SSL", "PLAINTEXT"];

/// One generated case.
#[derive(Debug, Clone)]
struct Case {
    /// The random part of the password (and client secret).
    core: String,
    /// The random private key of a PEM key.
    scalar: [u8; 32],
    style: u8,
    jaas_form: u8,
    mechanism: usize,
    protocol: usize,
    /// Which PEM key: the test key (which goes with the certificate), or a random one.
    valid_key: bool,
    key_mangling: u8,
    chain_mangling: u8,
    truststore_mangling: u8,
    /// Extra secret keys set: bit 0 `ssl.key.password`, bit 1 the JKS truststore and its
    /// password, bit 2 the OAuth client secret, bit 3 the keystore file and inline key both.
    extras: u8,
    /// How the `.properties` text is written: 0 escaped, 1 PEM over continuation lines,
    /// 2 non-ASCII as `\uXXXX`, 3 a malformed `\uXXXX` inside the password, 4 line breaks
    /// written as they are, without the `\` that makes a value go on (a PEM key pasted
    /// into the file: Java reads each next line as a key of its own).
    text_form: u8,
    /// Where the settings go: 0 alone, 1 the worker's `consumer.*`, 2 the connector's
    /// `consumer.override.*`, 3 the connector's `producer.override.*` with a DLQ.
    placement: u8,
    connect: bool,
}

/// A way of mangling PEM ([`mangle_pem`]): mostly one that Java and this client read.
fn pem_mangling() -> impl Strategy<Value = u8> {
    prop_oneof![
        7 => prop::sample::select(vec![0u8, 1, 2, 3, 9]),
        3 => prop::sample::select(vec![4u8, 5, 6, 7, 8, 10]),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        (
            "[A-Za-z0-9]{24}",
            any::<[u8; 32]>(),
            0u8..7,
            // Mostly JAAS strings that read, so the connection paths see the password.
            prop_oneof![3 => 0u8..3, 2 => 3u8..12],
            0usize..4,
            // Mostly SASL_PLAINTEXT, which reaches the SASL exchange with the password.
            prop_oneof![2 => Just(0usize), 3 => 1usize..4],
        ),
        (
            prop::bool::weighted(0.6),
            pem_mangling(),
            pem_mangling(),
            pem_mangling(),
            // The JKS truststore (bit 1) and the keystore file beside the inline key (bit 3)
            // refuse TLS settings: less often.
            (
                any::<bool>(),
                prop::bool::weighted(0.2),
                any::<bool>(),
                prop::bool::weighted(0.2),
            )
                .prop_map(|(a, b, c, d)| {
                    u8::from(a) | u8::from(b) << 1 | u8::from(c) << 2 | u8::from(d) << 3
                }),
            0u8..5,
            0u8..4,
            prop::bool::weighted(0.4),
        ),
    )
        .prop_map(
            |(
                (core, scalar, style, jaas_form, mechanism, protocol),
                (
                    valid_key,
                    key_mangling,
                    chain_mangling,
                    truststore_mangling,
                    extras,
                    text_form,
                    placement,
                    connect,
                ),
            )| Case {
                core,
                scalar,
                style,
                jaas_form,
                mechanism,
                protocol,
                valid_key,
                key_mangling,
                chain_mangling,
                truststore_mangling,
                extras,
                text_form,
                placement,
                connect,
            },
        )
}

/// How [`properties_value`] writes a line break.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Breaks {
    /// `\n`, as Java's `store` does.
    Escaped,
    /// As continuation lines (the break is then lost: Java joins the lines without one).
    Continued,
    /// As it is: the value ends there, and the next line is read as an entry of its own.
    Bare,
}

/// A value as `.properties` text: escaped as Java's `store` does, non-ASCII as `\uXXXX` when
/// `unicode`, line breaks as `breaks` says.
fn properties_value(value: &str, unicode: bool, breaks: Breaks) -> String {
    let mut out = String::new();
    for (i, c) in value.chars().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' if breaks == Breaks::Continued => out.push_str("\\\n    "),
            '\n' if breaks == Breaks::Bare => out.push('\n'),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{c}' => out.push_str("\\f"),
            ' ' if i == 0 => out.push_str("\\ "),
            '#' | '!' | '=' | ':' => {
                out.push('\\');
                out.push(c);
            }
            c if unicode && !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// The settings of one client, its secrets, and the password as set.
struct Settings {
    pairs: Vec<(&'static str, String)>,
    needles: Needles,
}

fn settings(case: &Case) -> Settings {
    let mut needles = Needles::default();
    let password = password(&case.core, case.style);
    needles.add(case.core.as_bytes());
    let (key, der) = if case.valid_key {
        (TEST_KEY.to_owned(), test_key_der())
    } else {
        random_key_pem(&case.scalar)
    };
    // The key's base64 body and its DER: any window of either is a leak.
    let body: String = key.lines().filter(|l| !l.starts_with("-----")).collect();
    needles.add(body.as_bytes());
    needles.add(&der);
    let mut pairs = vec![
        ("security.protocol", PROTOCOLS[case.protocol].to_owned()),
        ("sasl.mechanism", MECHANISMS[case.mechanism].to_owned()),
        (
            "sasl.jaas.config",
            jaas(MODULES[case.mechanism], &password, case.jaas_form),
        ),
        ("ssl.keystore.key", mangle_pem(&key, case.key_mangling)),
        (
            "ssl.keystore.certificate.chain",
            mangle_pem(TEST_CERT, case.chain_mangling),
        ),
        (
            "ssl.truststore.certificates",
            mangle_pem(TEST_CERT, case.truststore_mangling),
        ),
    ];
    if case.extras & 1 != 0 {
        pairs.push(("ssl.key.password", password.clone()));
    }
    if case.extras & 2 != 0 {
        pairs.push(("ssl.truststore.type", "JKS".to_owned()));
        pairs.push(("ssl.truststore.password", password.clone()));
    }
    if case.extras & 4 != 0 {
        pairs.push((
            "sasl.oauthbearer.client.credentials.client.secret",
            password.clone(),
        ));
    }
    if case.extras & 8 != 0 {
        pairs.push((
            "ssl.keystore.location",
            "/nonexistent/client.pem".to_owned(),
        ));
    }
    Settings { pairs, needles }
}

/// The `.properties` text of `pairs` under `prefix`.
fn properties_text(pairs: &[(&str, String)], prefix: &str, case: &Case) -> String {
    let mut text = String::new();
    for (key, value) in pairs {
        let breaks = match case.text_form {
            1 => Breaks::Continued,
            4 => Breaks::Bare,
            _ => Breaks::Escaped,
        };
        let mut written = properties_value(value, case.text_form == 2, breaks);
        if case.text_form == 3 && *key == "sasl.jaas.config" {
            // A malformed escape in the middle of the secret.
            let middle = written.len() / 2;
            let middle = (middle..written.len())
                .find(|i| written.is_char_boundary(*i))
                .unwrap_or(written.len());
            written.insert_str(middle, "\\u12G4");
        }
        let _ = writeln!(text, "{prefix}{key}={written}");
    }
    text
}

// ---------------------------------------------------------------------------------------
// The paths
// ---------------------------------------------------------------------------------------

/// What the paths showed.
#[derive(Default)]
struct Outputs(Vec<(String, String)>);

impl Outputs {
    fn value(&mut self, what: &str, value: &dyn Debug) {
        self.0
            .push((format!("{what} {{:?}}"), format!("{value:?}")));
        self.0
            .push((format!("{what} {{:#?}}"), format!("{value:#?}")));
    }

    fn error(&mut self, what: &str, error: &(dyn StdError + 'static)) {
        self.0.push((format!("{what} Display"), error.to_string()));
        self.value(what, &error);
        let mut source = error.source();
        let mut depth = 0;
        while let Some(inner) = source {
            depth += 1;
            self.0
                .push((format!("{what} source {depth}"), inner.to_string()));
            self.value(&format!("{what} source {depth}"), &inner);
            source = inner.source();
        }
    }

    fn result<T: Debug, E: StdError + 'static>(&mut self, what: &str, result: &Result<T, E>) {
        match result {
            Ok(value) => self.value(what, value),
            Err(error) => self.error(what, error),
        }
    }
}

/// How often each path was reached with the secrets, so the test proves what it says.
#[derive(Default)]
struct Reached {
    parsed: AtomicUsize,
    security_read: AtomicUsize,
    connector_resolved: AtomicUsize,
    connected: AtomicUsize,
    consumer_connects: AtomicUsize,
    producer_connects: AtomicUsize,
    admin_connects: AtomicUsize,
    sasl_exchanges: AtomicUsize,
    tls_handshakes: AtomicUsize,
}

static REACHED: OnceLock<Reached> = OnceLock::new();

fn reached() -> &'static Reached {
    REACHED.get_or_init(Reached::default)
}

struct World {
    runtime: tokio::runtime::Runtime,
    broker: FakeBroker,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let broker = runtime.block_on(async {
            let broker = FakeBroker::start().await;
            broker.advertise(ApiKey::SaslHandshake, 0, 1);
            broker.advertise(ApiKey::SaslAuthenticate, 0, 2);
            broker.on(ApiKey::SaslHandshake, |request| {
                let response = SaslHandshakeResponse::default().with_mechanisms(
                    MECHANISMS
                        .iter()
                        .map(|m| StrBytes::from_static_str(m))
                        .collect(),
                );
                Reply::message(&response, request.version())
            });
            broker.on(ApiKey::SaslAuthenticate, |request| {
                reached().sasl_exchanges.fetch_add(1, Ordering::Relaxed);
                let response = SaslAuthenticateResponse::default()
                    .with_error_code(58)
                    .with_error_message(Some(StrBytes::from_static_str(
                        "Authentication failed: Invalid username or password",
                    )));
                Reply::message(&response, request.version())
            });
            broker
        });
        World { runtime, broker }
    })
}

/// Runs every path of `case`; what they showed, and the secrets to look for.
fn run(case: &Case) -> (Outputs, Needles) {
    let world = world();
    let Settings { pairs, needles } = settings(case);
    let mut out = Outputs::default();
    let addr = world.broker.addr();

    // The client's own settings, read as a Java client reads its file.
    let text = properties_text(&pairs, "", case);
    let parsed = Properties::parse(&text);
    out.result("Properties::parse", &parsed);
    if let Ok(props) = &parsed {
        reached().parsed.fetch_add(1, Ordering::Relaxed);
        let security = Security::from_properties(props);
        out.result("Security::from_properties", &security);
        let mut producer = props.clone();
        producer.insert("bootstrap.servers", addr.clone());
        out.result(
            "KafkaProducerConfig::from_properties",
            &KafkaProducerConfig::from_properties(&producer),
        );
        if let Ok(security) = security {
            reached().security_read.fetch_add(1, Ordering::Relaxed);
            if case.connect && security.protocol().uses_tls() | security.protocol().uses_sasl() {
                let tls = security.protocol().uses_tls();
                // One client per case, each over the same connection code with its own
                // error mapping: the share consumer, the producer, the admin client.
                let (client, error) = match case.scalar[0] % 3 {
                    0 => {
                        let config = KafkaShareConsumerConfig::new(addr.clone(), "secrets")
                            .connect_timeout(Duration::from_secs(5))
                            .request_timeout(Duration::from_secs(5))
                            .security(security);
                        out.value("KafkaShareConsumerConfig", &config);
                        let connected = world.runtime.block_on(KafkaShareConsumer::connect(config));
                        reached().consumer_connects.fetch_add(1, Ordering::Relaxed);
                        let settings = matches!(
                            &connected,
                            Err(kafka_share_sink::ConsumerError::Config { .. })
                        );
                        (
                            "KafkaShareConsumer::connect",
                            connected
                                .err()
                                .map(|e| (Box::new(e) as Box<dyn StdError>, settings)),
                        )
                    }
                    1 => {
                        let config = KafkaProducerConfig::new(addr.clone())
                            .request_timeout(Duration::from_secs(5))
                            .security(security);
                        out.value("KafkaProducerConfig", &config);
                        let connected = world.runtime.block_on(KafkaProducer::connect(config));
                        reached().producer_connects.fetch_add(1, Ordering::Relaxed);
                        let settings = matches!(&connected, Err(ProducerError::Config { .. }));
                        (
                            "KafkaProducer::connect",
                            connected
                                .err()
                                .map(|e| (Box::new(e) as Box<dyn StdError>, settings)),
                        )
                    }
                    _ => {
                        let builder = KafkaAdmin::builder(addr.clone())
                            .connect_timeout(Duration::from_secs(5))
                            .request_timeout(Duration::from_secs(5))
                            .security(security);
                        out.value("KafkaAdminBuilder", &builder);
                        let connected = world.runtime.block_on(builder.connect());
                        reached().admin_connects.fetch_add(1, Ordering::Relaxed);
                        let settings =
                            matches!(&connected, Err(AdminError::InvalidArgument { .. }));
                        (
                            "KafkaAdmin::connect",
                            connected
                                .err()
                                .map(|e| (Box::new(e) as Box<dyn StdError>, settings)),
                        )
                    }
                };
                reached().connected.fetch_add(1, Ordering::Relaxed);
                match error {
                    None => out.0.push(("connect".into(), "connected".into())),
                    Some((error, settings)) => {
                        // Past the settings checks, TLS was set up and a handshake tried.
                        if tls && !settings {
                            reached().tls_handshakes.fetch_add(1, Ordering::Relaxed);
                        }
                        out.error(client, &*error);
                    }
                }
            }
        }
    }

    // The same settings in a Connect worker or connector config.
    if case.placement > 0 {
        let mut worker = format!("bootstrap.servers={addr}\n");
        let mut connector = "name=sink\ntopics=orders\n".to_owned();
        match case.placement {
            1 => worker.push_str(&properties_text(&pairs, "consumer.", case)),
            2 => connector.push_str(&properties_text(&pairs, "consumer.override.", case)),
            _ => {
                connector.push_str("errors.tolerance=all\nerrors.deadletterqueue.topic.name=dlq\n");
                connector.push_str(&properties_text(&pairs, "producer.override.", case));
            }
        }
        // A secret of the sink's own.
        let _ = writeln!(
            connector,
            "connection.password={}",
            properties_value(&password(&case.core, case.style), false, Breaks::Escaped)
        );
        let worker = Properties::parse(&worker);
        let connector = Properties::parse(&connector);
        out.result("worker Properties::parse", &worker);
        out.result("connector Properties::parse", &connector);
        if let (Ok(worker), Ok(connector)) = (worker, connector) {
            let resolved = ConnectorConfig::resolve(&worker, &connector);
            out.result("ConnectorConfig::resolve", &resolved);
            if let Ok(config) = resolved {
                reached().connector_resolved.fetch_add(1, Ordering::Relaxed);
                out.result("kafka_consumer_config", &config.kafka_consumer_config());
                out.result(
                    "dead_letter_queue_config",
                    &config.dead_letter_queue_config(),
                );
                out.value("consumer_properties", config.consumer_properties());
                out.value("connector_properties", config.connector_properties());
            }
        }
    }
    for (i, line) in take_logs().into_iter().enumerate() {
        out.0.push((format!("log line {i}"), line));
    }
    (out, needles)
}

fn check(case: &Case) -> Result<(), TestCaseError> {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(case)));
    let (outputs, needles) = match outcome {
        Ok(done) => done,
        Err(_) => {
            let logs = take_logs();
            let leaked = logs.iter().any(|line| {
                let mut needles = Needles::default();
                needles.add(case.core.as_bytes());
                needles.found_in(line).is_some()
            });
            return Err(TestCaseError::fail(format!(
                "a path panicked on user input (the panic message {} the secret): {logs:?}",
                if leaked { "shows" } else { "does not show" }
            )));
        }
    };
    for (what, shown) in &outputs.0 {
        if let Some(form) = needles.found_in(shown) {
            return Err(TestCaseError::fail(format!(
                "a secret appears as {form} in {what}:\n{shown}"
            )));
        }
    }
    Ok(())
}

/// The property: no secret in any output, over 10,000 generated cases; and the cases
/// reached every path with their secrets, often (or the property proves little).
#[test]
fn no_secret_in_any_output() {
    capture();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 200,
        ..ProptestConfig::default()
    });
    let result = runner.run(&case(), |case| check(&case));
    if let Err(failure) = result {
        panic!("{failure}");
    }
    let r = reached();
    // 1.5 % of the cases: each client's connect path is reached in about 2.3 % (230 ± 15 of
    // 10,000), so 2 % failed one run in fifteen or so by chance alone; 1.5 % is five standard
    // deviations below, and still fails a generator that reaches a path half as often.
    let minimum = usize::try_from(cases() * 3 / 200).unwrap_or(usize::MAX);
    for (what, count) in [
        ("parsed", &r.parsed),
        ("security read", &r.security_read),
        ("connector resolved", &r.connector_resolved),
        ("connected", &r.connected),
        ("consumer connects", &r.consumer_connects),
        ("producer connects", &r.producer_connects),
        ("admin connects", &r.admin_connects),
        ("SASL exchanges", &r.sasl_exchanges),
        ("TLS handshakes", &r.tls_handshakes),
    ] {
        let count = count.load(Ordering::Relaxed);
        eprintln!("secrets: {what}: {count} of {} cases", cases());
        // A TLS handshake needs every PEM setting to read: rarer.
        let minimum = if what.starts_with("TLS") {
            minimum / 4
        } else {
            minimum
        };
        assert!(count >= minimum, "{what}: only {count} times");
    }
}

/// The detector finds a secret in every form it claims to.
#[test]
fn the_detector_finds_every_form() {
    use base64::Engine as _;
    let secret = "Zq8WmT3kRv7NpXa2LcY9";
    let mut needles = Needles::default();
    needles.add(secret.as_bytes());
    let bytes = &secret.as_bytes()[3..15];
    let decimal: Vec<String> = bytes.iter().map(u8::to_string).collect();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let upper_hex: Vec<String> = bytes.iter().map(|b| format!("0x{b:02X}")).collect();
    let colon_hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let cases = [
        ("text", format!("password is {}!", &secret[2..12])),
        ("decimal", format!("line: [{}]", decimal.join(", "))),
        ("decimal", format!("bytes {}", decimal.join(","))),
        ("hex", format!("hex {hex} end")),
        ("hex", format!("odd a{hex}")),
        ("hex", format!("dump {}", upper_hex.join(", "))),
        ("hex", format!("mac {}", colon_hex.join(":"))),
        ("base64", format!("b64 {}", STD.encode(bytes))),
        (
            "base64",
            format!("b64 {}", STD.encode(format!("x{}", &secret[1..14]))),
        ),
        (
            "base64",
            format!("b64 {}", STD.encode(format!("xy{}", &secret[1..14]))),
        ),
        (
            "base64",
            format!(
                "url {}",
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .encode([&[0xfb, 0xff][..], bytes].concat())
            ),
        ),
        ("debug", format!("{:?}", secret.as_bytes())),
    ];
    for (form, shown) in cases {
        assert!(needles.found_in(&shown).is_some(), "{form}: {shown}");
    }
    for clean in [
        "`sasl.jaas.config` = `[redacted]` is invalid: expected a JAAS entry",
        "line 3: malformed \\uXXXX escape (write four hex digits after \\u)",
        "[48, 49, 50, 51] deadbeefcafe 0x00 MTIzNDU2Nzg5MA==",
        TEST_CERT,
    ] {
        assert_eq!(needles.found_in(clean), None, "{clean}");
    }
}
