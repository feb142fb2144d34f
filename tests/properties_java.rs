//! `Properties::from_file` against `java.util.Properties.load(Reader)`: every file Java reads is
//! read the same.
//!
//! A seeded generator writes a few thousand `.properties` files from the pieces the syntax is
//! made of (separators, blanks, line ends of every kind, comments, continuation backslashes,
//! escapes well and badly formed, characters outside ASCII), plus the hand-written edge cases
//! below. One run of `tests/fixtures/properties/PropertiesDump.java` (JDK 11+'s single-file
//! source launcher) loads them all with Java and prints what it read; each file must give
//! the same keys and values here, or be refused by both.
//!
//! Java is needed: without it the test is skipped, except under `KAFKA_REQUIRE_BROKER=1`
//! (`./scripts/test.sh`, which runs the broker, and so Java), where it fails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use kafka_share_sink::{ConfigError, Properties};

/// Generated files, on top of the hand-written ones.
const GENERATED: usize = 5_000;
/// The most pieces a generated file has.
const MAX_PIECES: usize = 40;

/// What the syntax is made of, with plain text to put between.
const PIECES: &[&str] = &[
    " ",
    "\t",
    "\u{c}",
    "\u{b}",
    "=",
    ":",
    "\\",
    "\\\\",
    "#",
    "!",
    "\n",
    "\r",
    "\r\n",
    "a",
    "b",
    "key",
    "v",
    "é",
    "😀",
    "\u{feff}",
    "\u{a0}",
    "\u{2028}",
    "\\u0041",
    "\\u00e9",
    "\\u00E9",
    "\\uD83D\\uDE00",
    "\\ud83d\\ude00",
    "\\n",
    "\\t",
    "\\r",
    "\\f",
    "\\b",
    "\\ ",
    "\\=",
    "\\:",
    "\\#",
    "\\!",
    "\\\n",
    "\\\r\n",
    "\\\r",
    "\\\\\n",
    "\\\\\\\n",
    "  \\\n   ",
    "x=y\n",
    "# c\\\n",
    "! c\n",
    "\n#",
    "\n!",
    "\n \t",
];

/// Escapes Java refuses (a malformed `\\uXXXX`) or that give a lone surrogate: in a quarter of
/// the files only, so that most files are read.
const BAD_PIECES: &[&str] = &["\\uD83D", "\\uDE00", "\\u00", "\\uzzzz", "\\u12G4", "\\u"];

/// The cases the issue lists, written out.
const HAND_WRITTEN: &[&str] = &[
    "",
    "a=1\nb: 2\nc 3\n  d  =  4  \ne\nf=\ng :=5\nh\t\t6\ni\u{c}7",
    "a=one,\\\n    two,\\\r\n\tthree\n",
    // An even number of backslashes at the end: no continuation.
    "a=x\\\\\nb=y",
    "a=x\\\\\\\nb=y",
    // A continuation at the end of the text.
    "a=1\\",
    "a=1\\\n",
    "\\",
    // Blank continuation lines.
    "a=1\\\n\nb=2",
    "a=1\\\n   \nb=2",
    "\\\n\nb=2",
    // A comment line ending with a backslash does not continue.
    "# comment \\\nb=2",
    "! comment \\\nb=2",
    "\\\n#b=2\nc=3",
    "a=1\\\n#2",
    // Escaped separators in keys.
    "k\\ e\\:y\\=x = v",
    "k\\\\=v",
    // \r and \r\n line ends.
    "a=1\rb=2\r\nc=3\n\rd=4",
    "a\\\r\r\nb",
    // Form feed as a blank.
    "\u{c}a\u{c}=\u{c}b\u{c}",
    // \uXXXX: good, malformed, surrogate pairs.
    "a=\\u0041\\u00e9\\uD83D\\uDE00",
    "a=\\u00",
    "a=\\u004",
    "a=\\uXYZW",
    "\\u00=1",
    "a=b\\",
    // The PEM of `ssl.truststore.certificates` over continuation lines.
    "ssl.truststore.certificates=-----BEGIN CERTIFICATE-----\\\n  MIIBfjCCASWgAwIBAgIU\\\n  ce0=\\\n  -----END CERTIFICATE-----\n",
];

/// A small deterministic generator (SplitMix64), so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n as u64).unwrap_or(0)
    }
}

fn generate(rng: &mut Rng) -> String {
    let bad = if rng.below(4) == 0 {
        BAD_PIECES.len()
    } else {
        0
    };
    let mut text = String::new();
    for _ in 0..rng.below(MAX_PIECES + 1) {
        let i = rng.below(PIECES.len() + bad);
        text.push_str(
            PIECES
                .get(i)
                .unwrap_or_else(|| &BAD_PIECES[i - PIECES.len()]),
        );
    }
    text
}

/// Java's escaping of PropertiesDump.java: `!`..`~` but `\` as is, any other UTF-16 unit as
/// `\uXXXX`.
fn escape(s: &str) -> String {
    let mut out = String::new();
    for unit in s.encode_utf16() {
        match char::from_u32(u32::from(unit)) {
            Some(c) if ('!'..='~').contains(&c) && c != '\\' => out.push(c),
            _ => out.push_str(&format!("\\u{unit:04X}")),
        }
    }
    out
}

/// What one side made of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// The entries, escaped, by key.
    Read(BTreeMap<String, String>),
    /// Java read a key or value with an unpaired surrogate.
    LoneSurrogate,
    /// Refused (Java: IllegalArgumentException).
    Refused(String),
}

fn java_outcomes(dir: &Path) -> Option<BTreeMap<String, Outcome>> {
    let java = std::env::var_os("JAVA_HOME")
        .map(|home| PathBuf::from(home).join("bin").join("java"))
        .filter(|java| java.exists())
        .unwrap_or_else(|| PathBuf::from("java"));
    let program =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/properties/PropertiesDump.java");
    let output = match Command::new(&java).arg(&program).arg(dir).output() {
        Ok(output) => output,
        Err(e) if std::env::var("KAFKA_REQUIRE_BROKER").as_deref() == Ok("1") => panic!(
            "properties_java: KAFKA_REQUIRE_BROKER=1 but `{}` cannot run ({e}): install a JDK 17",
            java.display()
        ),
        Err(e) => {
            eprintln!(
                "SKIPPED properties_java: `{}` cannot run ({e}); install a JDK to compare with \
                 java.util.Properties",
                java.display()
            );
            return None;
        }
    };
    assert!(
        output.status.success(),
        "PropertiesDump failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).expect("ASCII output");
    let mut outcomes = BTreeMap::new();
    let mut file = None;
    let mut entries = BTreeMap::new();
    let mut outcome = None;
    for line in stdout.lines() {
        if let Some(name) = line.strip_prefix("FILE ") {
            file = Some(name.to_owned());
            entries = BTreeMap::new();
            outcome = None;
        } else if let Some(class) = line.strip_prefix("REJECTED ") {
            outcome = Some(Outcome::Refused(class.to_owned()));
        } else if line == "LONE_SURROGATE" {
            outcome = Some(Outcome::LoneSurrogate);
        } else if let Some(entry) = line.strip_prefix("ENTRY ") {
            let (key, value) = entry.split_once(' ').expect("ENTRY key value");
            entries.insert(key.to_owned(), value.to_owned());
        } else if line == "END" {
            let name = file.take().expect("FILE before END");
            let read = std::mem::take(&mut entries);
            outcomes.insert(name, outcome.take().unwrap_or(Outcome::Read(read)));
        } else {
            panic!("unexpected PropertiesDump line {line:?}");
        }
    }
    Some(outcomes)
}

fn rust_outcome(path: &Path) -> Outcome {
    match Properties::from_file(path) {
        Ok(props) => Outcome::Read(props.iter().map(|(k, v)| (escape(k), escape(v))).collect()),
        // A Rust string cannot hold an unpaired surrogate: `\uD800` alone is refused here,
        // while Java reads it. Such files are only checked to be refused for that reason.
        Err(ConfigError::Syntax { problem, .. }) if problem.contains("lone UTF-16 surrogate") => {
            Outcome::LoneSurrogate
        }
        Err(e) => Outcome::Refused(e.to_string()),
    }
}

#[test]
fn every_file_java_reads_is_read_the_same() {
    let dir = std::env::temp_dir().join(format!("kss-properties-java-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut texts = BTreeMap::new();
    let mut rng = Rng(0x5EED_0F1A_7A00);
    let cases = HAND_WRITTEN
        .iter()
        .map(|s| (*s).to_owned())
        .chain((0..GENERATED).map(|_| generate(&mut rng)));
    for (i, text) in cases.enumerate() {
        let name = format!("{i:05}.properties");
        std::fs::write(dir.join(&name), &text).expect("write");
        texts.insert(name, text);
    }
    let java = java_outcomes(&dir);
    let Some(java) = java else {
        std::fs::remove_dir_all(&dir).ok();
        return;
    };
    assert_eq!(java.len(), texts.len(), "Java read every file");

    let mut mismatches = Vec::new();
    let (mut read, mut lone, mut refused) = (0, 0, 0);
    for (name, text) in &texts {
        let ours = rust_outcome(&dir.join(name));
        let theirs = &java[name];
        let same = match (theirs, &ours) {
            (Outcome::Read(a), Outcome::Read(b)) => a == b,
            (Outcome::LoneSurrogate, Outcome::LoneSurrogate) => true,
            // Java's IllegalArgumentException for a malformed \uXXXX: ours refuses too (with
            // the lone-surrogate reason when that came first in the text).
            (Outcome::Refused(_), Outcome::Refused(_) | Outcome::LoneSurrogate) => true,
            _ => false,
        };
        match theirs {
            Outcome::Read(_) => read += 1,
            Outcome::LoneSurrogate => lone += 1,
            Outcome::Refused(_) => refused += 1,
        }
        if !same {
            mismatches.push((text.clone(), theirs.clone(), ours));
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    mismatches.sort_by_key(|(text, _, _)| text.len());
    let shown: Vec<String> = mismatches
        .iter()
        .take(5)
        .map(|(text, java, ours)| {
            format!(
                "text \"{}\"\n  java: {java:?}\n  ours: {ours:?}",
                text.escape_debug()
            )
        })
        .collect();
    assert!(
        mismatches.is_empty(),
        "{} of {} files read differently (shortest first):\n{}",
        mismatches.len(),
        texts.len(),
        shown.join("\n")
    );
    // The corpus reaches every outcome, or the comparison proves little.
    assert!(read > GENERATED / 4, "{read} files read");
    assert!(lone > 20, "{lone} files with lone surrogates");
    assert!(refused > 50, "{refused} files refused");
    eprintln!(
        "properties_java: {} files, {read} read alike, {refused} refused by both, {lone} with \
         lone surrogates (refused here only)",
        texts.len()
    );
}
