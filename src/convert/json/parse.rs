//! The JSON reader of the [`JsonConverter`](super::JsonConverter): by default it accepts what
//! Kafka Connect's `JsonConverter` accepts (Jackson's parser with its default features and
//! limits, plus leading zeros), and with `strict` it accepts RFC 8259 JSON only.
//!
//! Lenient (Connect's) rules, each checked against a real Connect worker in
//! `tests/fixtures/connect_dlq/`:
//!
//! - The text may be UTF-8 (a byte order mark is skipped), UTF-16 or UTF-32, told apart by a
//!   byte order mark or by where the zero bytes of the first four bytes are. UTF-16 that does
//!   not decode becomes U+FFFD, as Java's decoder makes it.
//! - Empty or whitespace-only input has no value (Connect makes it null).
//! - Reading stops after the first complete value: `{"a":1} x` is `{"a":1}`. Only two things
//!   are looked at after a value at the top: a number must be followed by whitespace or the end
//!   (`1x` and `1]` are refused, `1 x` is 1), and `true`, `false` and `null` must not run into a
//!   letter or digit (`truex` is refused, `true]` is `true`). The same check applies to those
//!   three words anywhere.
//! - Leading zeros are skipped (`007` is 7); `+1`, `.5`, `1.`, `NaN`, `Infinity`, hex numbers,
//!   comments, single quotes, unquoted names and trailing commas are refused.
//! - A number too large for a double is infinite and one too small is zero (`1e400` is
//!   infinity); an integer beyond `i64` is a rounded double.
//! - Inside strings: control characters must be escaped; an escaped lone surrogate (`"\ud800"`)
//!   and a four-byte sequence beyond U+10FFFF become U+FFFD (Java keeps the lone surrogate, which
//!   Rust strings cannot hold); UTF-8 is decoded as Jackson decodes it, so an overlong sequence
//!   is accepted (`C0 80` is U+0000) but a surrogate encoded in UTF-8 is refused.
//! - A repeated key keeps its first position and takes its last value.
//! - Limits: 1000 levels of nesting, 1000 characters per number (integer digits, or digits of
//!   integer part, fraction and exponent together), 20,000,000 UTF-16 units per string and
//!   50,000 per member name.
//!
//! Strict rules: the input is UTF-8 throughout (no byte order mark), holds exactly one value
//! with nothing but whitespace after it, has no leading zeros, no lone surrogates, no repeated
//! keys and no number beyond the range of a double. The limits are the same.
//!
//! Nothing recurses: nesting is kept on an explicit stack.

use std::collections::HashMap;

use super::tree::Json;

/// Deepest nesting of arrays and objects (Jackson's `maxNestingDepth`).
pub(crate) const MAX_NESTING: usize = 1000;
/// Longest number, in characters (Jackson's `maxNumberLength`).
const MAX_NUMBER_LENGTH: usize = 1000;
/// Longest string value, in UTF-16 units (Jackson's `maxStringLength`).
const MAX_STRING_LENGTH: usize = 20_000_000;
/// Longest member name, in UTF-16 units (Jackson's `maxNameLength`).
const MAX_NAME_LENGTH: usize = 50_000;
/// Objects with more members than this get an index for finding repeated keys.
const INDEX_ABOVE: usize = 16;

/// What kind of problem stopped the reader; each has the Java exception class Connect's
/// Jackson parser throws for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// Not JSON (Jackson's `JsonParseException`).
    Syntax,
    /// The input ends inside a value (Jackson's `JsonEOFException`).
    EndOfInput,
    /// Nesting, a number or a string beyond a limit (Jackson's `StreamConstraintsException`).
    Limit,
    /// UTF-32 that cannot be decoded, or an unsupported byte order (`CharConversionException`).
    Encoding,
    /// Strict only: no value at all (Jackson's `MismatchedInputException`, as `ObjectMapper`
    /// reports empty content when a value is required).
    NoContent,
}

impl ErrorKind {
    /// The Java exception Connect's parser throws for this kind of problem.
    pub(crate) fn java_class(self) -> &'static str {
        match self {
            Self::Syntax => "com.fasterxml.jackson.core.JsonParseException",
            Self::EndOfInput => "com.fasterxml.jackson.core.io.JsonEOFException",
            Self::Limit => "com.fasterxml.jackson.core.exc.StreamConstraintsException",
            Self::Encoding => "java.io.CharConversionException",
            Self::NoContent => "com.fasterxml.jackson.databind.exc.MismatchedInputException",
        }
    }
}

/// Why the input could not be read, and where: a byte offset into the text as read (after a
/// UTF-16 or UTF-32 input was turned into UTF-8), and its line and column (both from 1; the
/// column counts bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError {
    pub(crate) kind: ErrorKind,
    pub(crate) offset: usize,
    pub(crate) line: usize,
    pub(crate) column: usize,
    pub(crate) detail: String,
}

impl ParseError {
    fn new(kind: ErrorKind, input: &[u8], offset: usize, detail: String) -> Self {
        let before = &input[..offset.min(input.len())];
        let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        Self {
            kind,
            offset,
            line,
            column: offset - line_start + 1,
            detail,
        }
    }
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at line {}, column {}",
            self.detail, self.line, self.column
        )
    }
}

/// Reads one JSON value. `Ok(None)`: no value (empty or whitespace-only input; lenient only).
pub(crate) fn parse(input: &[u8], strict: bool) -> Result<Option<Json>, ParseError> {
    if strict {
        if let Err(e) = std::str::from_utf8(input) {
            return Err(ParseError::new(
                ErrorKind::Syntax,
                input,
                e.valid_up_to(),
                "invalid UTF-8 (strict JSON is UTF-8 throughout)".to_owned(),
            ));
        }
        return Parser::new(input, true).document();
    }
    match detect_encoding(input)? {
        Encoding::Utf8 { skip } => Parser::new(&input[skip..], false).document(),
        Encoding::Utf16 { big_endian, skip } => {
            let text = decode_utf16(&input[skip..], big_endian);
            Parser::new(text.as_bytes(), false).document()
        }
        Encoding::Utf32 { big_endian, skip } => {
            let text = decode_utf32(&input[skip..], big_endian)?;
            Parser::new(text.as_bytes(), false).document()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Utf8 { skip: usize },
    Utf16 { big_endian: bool, skip: usize },
    Utf32 { big_endian: bool, skip: usize },
}

/// Jackson's detection: a byte order mark, else the zero bytes among the first four (JSON
/// starts with an ASCII character, so its high bytes are zero in UTF-16 and UTF-32).
fn detect_encoding(input: &[u8]) -> Result<Encoding, ParseError> {
    let unsupported = |order: &str| {
        ParseError::new(
            ErrorKind::Encoding,
            input,
            0,
            format!("unsupported UCS-4 byte order ({order})"),
        )
    };
    let utf16 = |pair: u32| {
        if pair & 0xFF00 == 0 {
            Some(Encoding::Utf16 {
                big_endian: true,
                skip: 0,
            })
        } else if pair & 0x00FF == 0 {
            Some(Encoding::Utf16 {
                big_endian: false,
                skip: 0,
            })
        } else {
            None
        }
    };
    if let [a, b, c, d, ..] = *input {
        let quad = u32::from_be_bytes([a, b, c, d]);
        let found = match quad {
            0x0000_FEFF => Some(Encoding::Utf32 {
                big_endian: true,
                skip: 4,
            }),
            0xFFFE_0000 => Some(Encoding::Utf32 {
                big_endian: false,
                skip: 4,
            }),
            0x0000_FFFE => return Err(unsupported("2143")),
            0xFEFF_0000 => return Err(unsupported("3412")),
            _ if quad >> 16 == 0xFEFF => Some(Encoding::Utf16 {
                big_endian: true,
                skip: 2,
            }),
            _ if quad >> 16 == 0xFFFE => Some(Encoding::Utf16 {
                big_endian: false,
                skip: 2,
            }),
            _ if quad >> 8 == 0x00EF_BBBF => Some(Encoding::Utf8 { skip: 3 }),
            _ if quad >> 8 == 0 => Some(Encoding::Utf32 {
                big_endian: true,
                skip: 0,
            }),
            _ if quad & 0x00FF_FFFF == 0 => Some(Encoding::Utf32 {
                big_endian: false,
                skip: 0,
            }),
            _ if quad & !0x00FF_0000 == 0 => return Err(unsupported("3412")),
            _ if quad & !0x0000_FF00 == 0 => return Err(unsupported("2143")),
            _ => utf16(quad >> 16),
        };
        return Ok(found.unwrap_or(Encoding::Utf8 { skip: 0 }));
    }
    // Under four bytes there is no byte order mark to look for.
    if let [a, b, ..] = *input {
        if let Some(found) = utf16(u32::from(u16::from_be_bytes([a, b]))) {
            return Ok(found);
        }
    }
    Ok(Encoding::Utf8 { skip: 0 })
}

/// UTF-16 as Java's decoder reads it: what does not decode (a lone surrogate, an odd last
/// byte) becomes U+FFFD.
fn decode_utf16(bytes: &[u8], big_endian: bool) -> String {
    let units = bytes.chunks_exact(2).map(|pair| {
        let pair = [pair[0], pair[1]];
        if big_endian {
            u16::from_be_bytes(pair)
        } else {
            u16::from_le_bytes(pair)
        }
    });
    let mut text: String = char::decode_utf16(units)
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect();
    if bytes.len() % 2 == 1 {
        text.push(char::REPLACEMENT_CHARACTER);
    }
    text
}

/// UTF-32 as Jackson's reader reads it: a value above U+10FFFF or a partial last character is
/// an error; a surrogate (which Java would keep) becomes U+FFFD.
fn decode_utf32(bytes: &[u8], big_endian: bool) -> Result<String, ParseError> {
    let mut text = String::with_capacity(bytes.len() / 4);
    for (i, quad) in bytes.chunks(4).enumerate() {
        let [a, b, c, d] = *quad else {
            return Err(ParseError::new(
                ErrorKind::Encoding,
                bytes,
                i * 4,
                "the input ends in the middle of a 4-byte UTF-32 character".to_owned(),
            ));
        };
        let value = if big_endian {
            u32::from_be_bytes([a, b, c, d])
        } else {
            u32::from_le_bytes([a, b, c, d])
        };
        if value > 0x10_FFFF {
            return Err(ParseError::new(
                ErrorKind::Encoding,
                bytes,
                i * 4,
                format!("invalid UTF-32 character 0x{value:x} (above 0x10ffff)"),
            ));
        }
        text.push(char::from_u32(value).unwrap_or(char::REPLACEMENT_CHARACTER));
    }
    Ok(text)
}

/// An array or object being read.
enum Frame {
    Array(Vec<Json>),
    Object(ObjectBuilder),
}

/// An object's members so far, and the name of the member whose value is being read.
struct ObjectBuilder {
    members: Vec<(String, Json)>,
    index: Option<HashMap<String, usize>>,
    name: String,
}

impl ObjectBuilder {
    fn new(name: String) -> Self {
        Self {
            members: Vec::new(),
            index: None,
            name,
        }
    }

    fn position(&mut self, name: &str) -> Option<usize> {
        if self.index.is_none() && self.members.len() > INDEX_ABOVE {
            let index = self
                .members
                .iter()
                .enumerate()
                .map(|(i, (k, _))| (k.clone(), i))
                .collect();
            self.index = Some(index);
        }
        match &self.index {
            Some(index) => index.get(name).copied(),
            None => self.members.iter().position(|(k, _)| k == name),
        }
    }

    /// Adds the member being read; `Err(name)` when strict and the name was seen before.
    fn finish_member(&mut self, value: Json, strict: bool) -> Result<(), String> {
        let name = std::mem::take(&mut self.name);
        match self.position(&name) {
            Some(_) if strict => Err(name),
            Some(i) => {
                self.members[i].1 = value;
                Ok(())
            }
            None => {
                if let Some(index) = &mut self.index {
                    index.insert(name.clone(), self.members.len());
                }
                self.members.push((name, value));
                Ok(())
            }
        }
    }
}

struct Parser<'a> {
    input: &'a [u8],
    pos: usize,
    strict: bool,
}

impl<'a> Parser<'a> {
    fn new(input: &'a [u8], strict: bool) -> Self {
        Self {
            input,
            pos: 0,
            strict,
        }
    }

    fn error(&self, kind: ErrorKind, detail: impl Into<String>) -> ParseError {
        self.error_at(kind, self.pos, detail)
    }

    fn error_at(&self, kind: ErrorKind, offset: usize, detail: impl Into<String>) -> ParseError {
        ParseError::new(kind, self.input, offset, detail.into())
    }

    fn end_of_input(&self, within: &str) -> ParseError {
        self.error(
            ErrorKind::EndOfInput,
            format!("unexpected end of input {within}"),
        )
    }

    fn peek(&self) -> Option<u8> {
        self.input.get(self.pos).copied()
    }

    /// Skips JSON whitespace; the next byte, not consumed, or `None` at the end.
    fn skip_whitespace(&mut self) -> Result<Option<u8>, ParseError> {
        while let Some(b) = self.peek() {
            match b {
                b' ' | b'\t' | b'\n' | b'\r' => self.pos += 1,
                0x00..=0x1F => {
                    return Err(self.error(
                        ErrorKind::Syntax,
                        format!(
                            "control character 0x{b:02x} between tokens (only space, tab, CR and \
                             LF are whitespace)"
                        ),
                    ));
                }
                _ => return Ok(Some(b)),
            }
        }
        Ok(None)
    }

    /// Like [`skip_whitespace`](Self::skip_whitespace), but the end is an error.
    fn next_token(&mut self, within: &str) -> Result<u8, ParseError> {
        self.skip_whitespace()?
            .ok_or_else(|| self.end_of_input(within))
    }

    /// The character at `pos` for an error message: Jackson decodes it, and a broken UTF-8
    /// sequence there is the error instead.
    fn char_at(&self, pos: usize) -> Result<char, ParseError> {
        let b = self.input.get(pos).copied().unwrap_or(0);
        if b < 0x80 {
            return Ok(char::from(b));
        }
        decode_lenient(self.input, pos)
            .map(|(c, _)| c)
            .map_err(|(kind, detail, at)| self.error_at(kind, at, detail))
    }

    fn unexpected(&self, expecting: &str) -> ParseError {
        match self.char_at(self.pos) {
            Ok(c) => self.error(
                ErrorKind::Syntax,
                format!("unexpected character {c:?}: expected {expecting}"),
            ),
            Err(e) => e,
        }
    }

    fn document(mut self) -> Result<Option<Json>, ParseError> {
        if self.skip_whitespace()?.is_none() {
            if self.strict {
                return Err(self.error(ErrorKind::NoContent, "no JSON value: the input is empty"));
            }
            return Ok(None);
        }
        let value = self.value()?;
        if self.strict && self.skip_whitespace()?.is_some() {
            return Err(self.error(
                ErrorKind::Syntax,
                "content after the JSON value (strict JSON holds exactly one value)",
            ));
        }
        Ok(Some(value))
    }

    /// Reads the value at `pos` (whitespace skipped) with everything nested in it.
    fn value(&mut self) -> Result<Json, ParseError> {
        let mut stack: Vec<Frame> = Vec::new();
        'value: loop {
            let b = self.next_token("where a value was expected")?;
            let mut value = match b {
                b'{' | b'[' => {
                    if stack.len() >= MAX_NESTING {
                        return Err(self.error(
                            ErrorKind::Limit,
                            format!("nesting deeper than {MAX_NESTING} levels"),
                        ));
                    }
                    self.pos += 1;
                    let close = if b == b'{' { b'}' } else { b']' };
                    let within = if b == b'{' {
                        "within an object"
                    } else {
                        "within an array"
                    };
                    if self.next_token(within)? == close {
                        self.pos += 1;
                        if b == b'{' {
                            Json::Object(Vec::new())
                        } else {
                            Json::Array(Vec::new())
                        }
                    } else if b == b'{' {
                        let name = self.member_name()?;
                        stack.push(Frame::Object(ObjectBuilder::new(name)));
                        continue 'value;
                    } else {
                        stack.push(Frame::Array(Vec::new()));
                        continue 'value;
                    }
                }
                b'"' => Json::String(self.string(MAX_STRING_LENGTH, "string")?),
                b'-' | b'0'..=b'9' => self.number(stack.is_empty())?,
                b't' => self.word("true", Json::Bool(true))?,
                b'f' => self.word("false", Json::Bool(false))?,
                b'n' => self.word("null", Json::Null)?,
                _ => {
                    return Err(self.unexpected(
                        "a JSON value (string, number, array, object, true, false or null)",
                    ));
                }
            };
            // The value is complete: add it to the array or object it is in, closing those
            // that end here.
            loop {
                let Some(frame) = stack.last_mut() else {
                    return Ok(value);
                };
                match frame {
                    Frame::Array(items) => {
                        items.push(value);
                        match self.next_token("within an array")? {
                            b',' => {
                                self.pos += 1;
                                continue 'value;
                            }
                            b']' => self.pos += 1,
                            _ => return Err(self.unexpected("',' or ']' after an array element")),
                        }
                    }
                    Frame::Object(object) => {
                        if let Err(name) = object.finish_member(value, self.strict) {
                            return Err(self.error(
                                ErrorKind::Syntax,
                                format!(
                                    "member {name:?} appears twice (strict JSON has unique names)"
                                ),
                            ));
                        }
                        match self.next_token("within an object")? {
                            b',' => {
                                self.pos += 1;
                                self.next_token("within an object")?;
                                object.name = self.member_name()?;
                                continue 'value;
                            }
                            b'}' => self.pos += 1,
                            _ => return Err(self.unexpected("',' or '}' after an object member")),
                        }
                    }
                }
                value = match stack.pop() {
                    Some(Frame::Array(items)) => Json::Array(items),
                    Some(Frame::Object(object)) => Json::Object(object.members),
                    // The frame the value went into is still there.
                    None => {
                        return Err(self.error(ErrorKind::Syntax, "no open array or object"));
                    }
                };
            }
        }
    }

    /// A member name and its colon, at `pos` (whitespace skipped).
    fn member_name(&mut self) -> Result<String, ParseError> {
        if self.peek() != Some(b'"') {
            return Err(self.unexpected("'\"' to start a member name"));
        }
        let name = self.string(MAX_NAME_LENGTH, "member name")?;
        if self.next_token("within an object")? != b':' {
            return Err(self.unexpected("':' after a member name"));
        }
        self.pos += 1;
        Ok(name)
    }

    /// `true`, `false` or `null`, which must not run into a letter or digit.
    fn word(&mut self, word: &'static str, value: Json) -> Result<Json, ParseError> {
        let start = self.pos;
        let matched = word
            .bytes()
            .enumerate()
            .all(|(i, b)| self.input.get(start + i) == Some(&b));
        if !matched {
            return Err(self.unrecognized(start));
        }
        self.pos += word.len();
        if let Some(b) = self.peek() {
            if b >= b'0'
                && b != b']'
                && b != b'}'
                && is_java_identifier_part(self.char_at(self.pos)?)
            {
                return Err(self.unrecognized(start));
            }
        }
        Ok(value)
    }

    fn unrecognized(&self, start: usize) -> ParseError {
        let token: String = String::from_utf8_lossy(&self.input[start..])
            .chars()
            .take_while(|&c| c == '_' || c.is_alphanumeric())
            .take(32)
            .collect();
        let token = if token.is_empty() {
            String::from_utf8_lossy(&self.input[start..(start + 1).min(self.input.len())])
                .into_owned()
        } else {
            token
        };
        self.error_at(
            ErrorKind::Syntax,
            start,
            format!(
                "unrecognized token {token:?}: expected a JSON value (string, number, array, \
                 object, true, false or null)"
            ),
        )
    }

    /// A number at `pos`. A number at the top must be followed by whitespace or the end.
    fn number(&mut self, at_top: bool) -> Result<Json, ParseError> {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
            match self.peek() {
                None => return Err(self.end_of_input("after '-'")),
                Some(b'0'..=b'9') => {}
                Some(_) => return Err(self.unexpected("a digit after '-'")),
            }
        }
        if self.peek() == Some(b'0') && matches!(self.input.get(self.pos + 1), Some(b'0'..=b'9')) {
            if self.strict {
                return Err(self.error(
                    ErrorKind::Syntax,
                    "leading zeros (strict JSON numbers do not have them)",
                ));
            }
            // Connect enables Jackson's ALLOW_LEADING_ZEROS_FOR_NUMBERS: skip all but a last
            // zero that no digit follows.
            while self.peek() == Some(b'0')
                && matches!(self.input.get(self.pos + 1), Some(b'0'..=b'9'))
            {
                self.pos += 1;
            }
        }
        let digits_start = self.pos;
        let int_len = self.digits();
        let mut fraction_len = 0;
        let mut exponent_len = 0;
        let mut float = false;
        if self.peek() == Some(b'.') {
            float = true;
            self.pos += 1;
            fraction_len = self.digits();
            if fraction_len == 0 {
                return Err(self.error(ErrorKind::Syntax, "decimal point not followed by a digit"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            float = true;
            self.pos += 1;
            match self.peek() {
                None => return Err(self.end_of_input("in an exponent")),
                Some(b'+' | b'-') => {
                    self.pos += 1;
                    if self.peek().is_none() {
                        return Err(self.end_of_input("in an exponent"));
                    }
                }
                Some(_) => {}
            }
            exponent_len = self.digits();
            if exponent_len == 0 {
                return Err(self.error(
                    ErrorKind::Syntax,
                    "exponent indicator not followed by a digit",
                ));
            }
        }
        if at_top && !self.strict {
            if let Some(b) = self.peek() {
                if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                    return Err(self.unexpected(
                        "whitespace after a number at the top level (as Connect's parser \
                         requires)",
                    ));
                }
            }
        }
        let length = int_len + fraction_len + exponent_len;
        if length > MAX_NUMBER_LENGTH {
            return Err(self.error(
                ErrorKind::Limit,
                format!("number of {length} characters (at most {MAX_NUMBER_LENGTH})"),
            ));
        }
        let digits = &self.input[digits_start..self.pos];
        // Only ASCII digits, '.', 'e', 'E', '+' and '-' were taken.
        let text = String::from_utf8_lossy(digits);
        let text = if negative {
            format!("-{text}")
        } else {
            text.into_owned()
        };
        if !float {
            if let Ok(i) = text.parse::<i64>() {
                return Ok(Json::Int(i));
            }
            if let Ok(u) = text.parse::<u64>() {
                return Ok(Json::UInt(u));
            }
        }
        let mantissa_is_zero = digits
            .iter()
            .take_while(|&&b| b != b'e' && b != b'E')
            .all(|&b| b == b'0' || b == b'.');
        let f = if mantissa_is_zero {
            // Connect reads floats as BigDecimal, which has no negative zero.
            0.0
        } else {
            text.parse::<f64>().map_err(|e| {
                self.error(ErrorKind::Syntax, format!("number {text:?} not read: {e}"))
            })?
        };
        if self.strict && !f.is_finite() {
            return Err(self.error(
                ErrorKind::Syntax,
                "number beyond the range of a 64-bit float (strict JSON numbers are finite)",
            ));
        }
        Ok(Json::Float(f))
    }

    /// Skips ASCII digits; how many.
    fn digits(&mut self) -> usize {
        let start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        self.pos - start
    }

    /// A string at `pos` (its opening quote), at most `limit` UTF-16 units long.
    fn string(&mut self, limit: usize, what: &str) -> Result<String, ParseError> {
        self.pos += 1;
        let mut out = String::new();
        // The UTF-16 units of `out[..counted]`. Counted only once `out` has more bytes than
        // `limit` (UTF-8 never has fewer bytes than UTF-16 units), then as it grows: once per
        // byte, however many escapes break the string up.
        let (mut units, mut counted) = (0usize, 0usize);
        loop {
            // A run of characters that need no attention.
            let start = self.pos;
            while let Some(b) = self.peek() {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            self.push_text(&mut out, start)?;
            if out.len() > limit {
                units = units.saturating_add(utf16_len(&out[counted..]));
                counted = out.len();
            }
            if units > limit {
                return Err(self.error(
                    ErrorKind::Limit,
                    format!("{what} longer than {limit} UTF-16 units"),
                ));
            }
            match self.peek() {
                None => return Err(self.end_of_input(&format!("in a {what}"))),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => self.escape(&mut out)?,
                Some(b) => {
                    return Err(self.error(
                        ErrorKind::Syntax,
                        format!(
                            "control character 0x{b:02x} in a {what} (it must be escaped with a \
                             backslash)"
                        ),
                    ));
                }
            }
        }
    }

    /// Appends `input[start..pos]`, text without quotes, backslashes or control characters:
    /// UTF-8, decoded as Connect decodes it when not strict.
    fn push_text(&self, out: &mut String, start: usize) -> Result<(), ParseError> {
        let mut rest = &self.input[start..self.pos];
        let mut at = start;
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    out.push_str(text);
                    return Ok(());
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // The prefix up to `valid` is valid UTF-8.
                    out.push_str(&String::from_utf8_lossy(&rest[..valid]));
                    let (c, len) = decode_lenient(self.input, at + valid)
                        .map_err(|(kind, detail, offset)| self.error_at(kind, offset, detail))?;
                    // A lenient sequence may run past the run (its continuation bytes are
                    // never quotes, backslashes or control characters), but check anyway.
                    let used = (valid + len).min(rest.len());
                    out.push(c);
                    rest = &rest[used..];
                    at += used;
                }
            }
        }
    }

    /// A backslash escape at `pos`.
    fn escape(&mut self, out: &mut String) -> Result<(), ParseError> {
        self.pos += 1;
        let Some(b) = self.peek() else {
            return Err(self.end_of_input("in an escape sequence"));
        };
        self.pos += 1;
        let c = match b {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let unit = self.hex4()?;
                match unit {
                    0xD800..=0xDBFF => {
                        let low = self.input.get(self.pos..self.pos + 2) == Some(b"\\u")
                            && matches!(self.peek_hex4(self.pos + 2), Some(0xDC00..=0xDFFF));
                        if low {
                            self.pos += 2;
                            let low = self.hex4()?;
                            let c = 0x10000
                                + ((u32::from(unit) - 0xD800) << 10)
                                + (u32::from(low) - 0xDC00);
                            char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER)
                        } else {
                            self.lone_surrogate(unit)?
                        }
                    }
                    0xDC00..=0xDFFF => self.lone_surrogate(unit)?,
                    _ => char::from_u32(u32::from(unit)).unwrap_or(char::REPLACEMENT_CHARACTER),
                }
            }
            _ => {
                self.pos -= 1;
                return Err(match self.char_at(self.pos) {
                    Ok(c) => self.error(
                        ErrorKind::Syntax,
                        format!("unrecognized escape '\\{c}' in a string"),
                    ),
                    Err(e) => e,
                });
            }
        };
        out.push(c);
        Ok(())
    }

    fn lone_surrogate(&self, unit: u16) -> Result<char, ParseError> {
        if self.strict {
            return Err(self.error(
                ErrorKind::Syntax,
                format!("lone surrogate \\u{unit:04x} (strict JSON escapes only whole characters)"),
            ));
        }
        Ok(char::REPLACEMENT_CHARACTER)
    }

    /// Four hex digits at `pos`, consumed.
    fn hex4(&mut self) -> Result<u16, ParseError> {
        let mut value = 0u16;
        for _ in 0..4 {
            let Some(b) = self.peek() else {
                return Err(self.end_of_input("in a \\u escape"));
            };
            let Some(digit) = char::from(b).to_digit(16) else {
                return Err(self.unexpected("a hex digit in a \\u escape"));
            };
            // Four digits fit in 16 bits.
            value = (value << 4) | digit as u16;
            self.pos += 1;
        }
        Ok(value)
    }

    /// Four hex digits at `at`, not consumed.
    fn peek_hex4(&self, at: usize) -> Option<u16> {
        let digits = self.input.get(at..at + 4)?;
        let text = std::str::from_utf8(digits).ok()?;
        if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u16::from_str_radix(text, 16).ok()
    }
}

/// One character of UTF-8 at `at` (a byte of 0x80 or more) as Jackson decodes it: the lead
/// byte gives the length (C0–DF two bytes, overlong ones included; E0–EF three; F0–F7 four),
/// continuation bytes are checked, and a surrogate in three bytes is refused. A value beyond
/// U+10FFFF becomes U+FFFD. `Err((kind, detail, offset))`.
fn decode_lenient(input: &[u8], at: usize) -> Result<(char, usize), (ErrorKind, String, usize)> {
    let lead = input.get(at).copied().unwrap_or(0);
    let (extra, bits) = match lead {
        0xC0..=0xDF => (1, u32::from(lead & 0x1F)),
        0xE0..=0xEF => (2, u32::from(lead & 0x0F)),
        0xF0..=0xF7 => (3, u32::from(lead & 0x07)),
        _ => {
            return Err((
                ErrorKind::Syntax,
                format!("invalid UTF-8 start byte 0x{lead:02x}"),
                at,
            ));
        }
    };
    let mut c = bits;
    for i in 1..=extra {
        let Some(&b) = input.get(at + i) else {
            return Err((
                ErrorKind::EndOfInput,
                "unexpected end of input in a UTF-8 sequence".to_owned(),
                at + i,
            ));
        };
        if b & 0xC0 != 0x80 {
            return Err((
                ErrorKind::Syntax,
                format!("invalid UTF-8 continuation byte 0x{b:02x}"),
                at + i,
            ));
        }
        c = (c << 6) | u32::from(b & 0x3F);
    }
    if extra == 2 && (0xD800..=0xDFFF).contains(&c) {
        return Err((
            ErrorKind::Syntax,
            format!("invalid UTF-8: surrogate 0x{c:x} encoded as a character"),
            at,
        ));
    }
    Ok((
        char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER),
        extra + 1,
    ))
}

/// Length in UTF-16 units, as Java counts string length.
fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// Java's `Character.isJavaIdentifierPart`, which decides whether a word such as `true` runs
/// into the next character: exact for ASCII, approximated beyond it (letters, digits, C1
/// controls, currency signs, connectors, combining marks and format characters).
fn is_java_identifier_part(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphanumeric()
            || matches!(c, '_' | '$' | '\u{0}'..='\u{8}' | '\u{e}'..='\u{1b}' | '\u{7f}');
    }
    c.is_alphanumeric()
        || matches!(
            c,
            '\u{80}'..='\u{9f}'
                | '\u{a2}'..='\u{a5}'
                | '\u{ad}'
                | '\u{300}'..='\u{36f}'
                | '\u{1ab0}'..='\u{1aff}'
                | '\u{1dc0}'..='\u{1dff}'
                | '\u{200b}'..='\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{203f}'..='\u{2040}'
                | '\u{2054}'
                | '\u{2060}'..='\u{2064}'
                | '\u{20a0}'..='\u{20c0}'
                | '\u{20d0}'..='\u{20ff}'
                | '\u{fe20}'..='\u{fe2f}'
                | '\u{fe33}'..='\u{fe34}'
                | '\u{fe4d}'..='\u{fe4f}'
                | '\u{feff}'
                | '\u{ff3f}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lenient(input: &[u8]) -> Result<Option<Json>, ErrorKind> {
        parse(input, false).map_err(|e| e.kind)
    }

    fn strict(input: &[u8]) -> Result<Option<Json>, ErrorKind> {
        parse(input, true).map_err(|e| e.kind)
    }

    fn object(members: &[(&str, Json)]) -> Json {
        Json::Object(
            members
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        )
    }

    #[test]
    fn lenient_reads_the_first_value_and_stops() {
        let a1 = Some(object(&[("a", Json::Int(1))]));
        assert_eq!(lenient(br#"{"a":1} x"#), Ok(a1.clone()));
        assert_eq!(lenient(br#"{"a":1}{"b":2}"#), Ok(a1.clone()));
        assert_eq!(lenient(b"{\"a\":1}\xff"), Ok(a1));
        assert_eq!(lenient(b"1 2"), Ok(Some(Json::Int(1))));
        assert_eq!(lenient(b"true]"), Ok(Some(Json::Bool(true))));
        assert_eq!(lenient(b"\"s\"x"), Ok(Some(Json::String("s".into()))));
        assert_eq!(lenient(b"1x"), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"1]"), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"truex"), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"true\x7f"), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"[truex]"), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"true \x01"), Ok(Some(Json::Bool(true))));
    }

    #[test]
    fn strict_holds_exactly_one_value() {
        assert!(strict(br#" {"a":1} "#).unwrap().is_some());
        assert_eq!(strict(br#"{"a":1} x"#), Err(ErrorKind::Syntax));
        assert_eq!(strict(b"1 2"), Err(ErrorKind::Syntax));
        assert_eq!(strict(b""), Err(ErrorKind::NoContent));
        assert_eq!(strict(b" \n"), Err(ErrorKind::NoContent));
        assert_eq!(lenient(b" \n"), Ok(None));
        assert_eq!(lenient(b""), Ok(None));
    }

    #[test]
    fn numbers() {
        assert_eq!(lenient(b"007"), Ok(Some(Json::Int(7))));
        assert_eq!(lenient(b"-007"), Ok(Some(Json::Int(-7))));
        assert_eq!(lenient(b"00.5"), Ok(Some(Json::Float(0.5))));
        assert_eq!(lenient(b"000"), Ok(Some(Json::Int(0))));
        assert_eq!(strict(b"007"), Err(ErrorKind::Syntax));
        assert_eq!(strict(b"0.5"), Ok(Some(Json::Float(0.5))));
        assert_eq!(lenient(b"1e400"), Ok(Some(Json::Float(f64::INFINITY))));
        assert_eq!(lenient(b"-1e400"), Ok(Some(Json::Float(f64::NEG_INFINITY))));
        assert_eq!(strict(b"1e400"), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"1e-400"), Ok(Some(Json::Float(0.0))));
        let Ok(Some(Json::Float(z))) = lenient(b"-0.0") else {
            panic!("not a float")
        };
        assert!(z == 0.0 && z.is_sign_positive(), "BigDecimal has no -0");
        assert_eq!(lenient(b"-0"), Ok(Some(Json::Int(0))));
        assert_eq!(lenient(b"1e2"), Ok(Some(Json::Float(100.0))));
        assert_eq!(
            lenient(b"18446744073709551615"),
            Ok(Some(Json::UInt(u64::MAX)))
        );
        assert!(matches!(
            lenient(b"123456789012345678901234567890"),
            Ok(Some(Json::Float(_)))
        ));
        for bad in [
            &b"+1"[..],
            b".5",
            b"1.",
            b"0x10",
            b"NaN",
            b"Infinity",
            b"-Infinity",
            b"1e",
        ] {
            assert!(lenient(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(lenient(b"-"), Err(ErrorKind::EndOfInput));
        assert_eq!(lenient(b"1e"), Err(ErrorKind::EndOfInput));
        assert_eq!(lenient(b"1e+"), Err(ErrorKind::EndOfInput));
        assert_eq!(lenient(b"1."), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"1.e5"), Err(ErrorKind::Syntax));
    }

    #[test]
    fn string_length_is_counted_in_utf16_units_across_escapes() {
        let name = |body: &str| format!("{{\"{body}\":1}}");
        // 'é' is two bytes and one unit, "\n" one unit: more bytes than the limit, exactly
        // the limit in units.
        let at_limit = "é\\n".repeat(MAX_NAME_LENGTH / 2);
        assert!(lenient(name(&at_limit).as_bytes()).is_ok());
        assert_eq!(
            lenient(name(&format!("{at_limit}x")).as_bytes()),
            Err(ErrorKind::Limit)
        );
        assert_eq!(
            lenient(name(&format!("{at_limit}\\u00e9")).as_bytes()),
            Err(ErrorKind::Limit)
        );
        // Outside the BMP a character is two units (four bytes).
        let pairs = "\u{1F600}".repeat(MAX_NAME_LENGTH / 2);
        assert!(lenient(name(&pairs).as_bytes()).is_ok());
        assert_eq!(
            lenient(name(&format!("{pairs}\\t")).as_bytes()),
            Err(ErrorKind::Limit)
        );
    }

    #[test]
    fn number_length_is_limited() {
        let digits = |n| "1".repeat(n);
        assert!(lenient(digits(1000).as_bytes()).is_ok());
        assert_eq!(lenient(digits(1001).as_bytes()), Err(ErrorKind::Limit));
        // Skipped leading zeros do not count.
        assert!(lenient(format!("0{}", digits(1000)).as_bytes()).is_ok());
        // Integer part, fraction and exponent count together, without '.' and 'e'.
        assert!(lenient(format!("1.{}", digits(999)).as_bytes()).is_ok());
        assert_eq!(
            lenient(format!("1.{}", digits(1000)).as_bytes()),
            Err(ErrorKind::Limit)
        );
    }

    #[test]
    fn nesting_is_limited_and_does_not_recurse() {
        let nested = |n| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(lenient(nested(MAX_NESTING).as_bytes()).is_ok());
        assert_eq!(
            lenient(nested(MAX_NESTING + 1).as_bytes()),
            Err(ErrorKind::Limit)
        );
        let objects = format!(
            "{}1{}",
            r#"{"a":"#.repeat(MAX_NESTING + 1),
            "}".repeat(MAX_NESTING + 1)
        );
        assert_eq!(lenient(objects.as_bytes()), Err(ErrorKind::Limit));
        // An unclosed deep document is a clean error.
        assert_eq!(
            lenient("[".repeat(MAX_NESTING).as_bytes()),
            Err(ErrorKind::EndOfInput)
        );
    }

    #[test]
    fn repeated_keys() {
        let json = lenient(br#"{"b":1,"a":2,"b":3}"#).unwrap().unwrap();
        assert_eq!(json, object(&[("b", Json::Int(3)), ("a", Json::Int(2))]));
        assert_eq!(strict(br#"{"b":1,"b":3}"#), Err(ErrorKind::Syntax));
        // With the index of larger objects too.
        let many: Vec<String> = (0..40).map(|i| format!("\"k{i}\":{i}")).collect();
        let text = format!("{{{},\"k3\":99}}", many.join(","));
        let Some(Json::Object(members)) = lenient(text.as_bytes()).unwrap() else {
            panic!("not an object")
        };
        assert_eq!(members.len(), 40);
        assert_eq!(members[3], ("k3".to_owned(), Json::Int(99)));
    }

    #[test]
    fn strings() {
        let s = |t: &str| Ok(Some(Json::String(t.to_owned())));
        assert_eq!(lenient(br#""a\u0001b\/""#), s("a\u{1}b/"));
        assert_eq!(lenient(br#""\ud83d\ude00""#), s("\u{1f600}"));
        assert_eq!(lenient(br#""\ud800""#), s("\u{fffd}"));
        assert_eq!(lenient(br#""\ud800\u0041""#), s("\u{fffd}A"));
        assert_eq!(strict(br#""\ud800""#), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"\"a\x7fb\""), s("a\u{7f}b"));
        assert_eq!(lenient(b"\"a\tb\""), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"\"a\x00b\""), Err(ErrorKind::Syntax));
        assert_eq!(lenient(br#""\x""#), Err(ErrorKind::Syntax));
        assert_eq!(lenient(br#""\'""#), Err(ErrorKind::Syntax));
        assert_eq!(lenient(br#""\u12"#), Err(ErrorKind::EndOfInput));
        assert_eq!(lenient(br#""\u12g4""#), Err(ErrorKind::Syntax));
        assert_eq!(lenient(br#""abc"#), Err(ErrorKind::EndOfInput));
        assert_eq!(lenient("\"café 😀\"".as_bytes()), s("café 😀"));
    }

    #[test]
    fn utf8_as_connect_decodes_it() {
        let s = |t: &str| Ok(Some(Json::String(t.to_owned())));
        assert_eq!(lenient(b"\"\xc0\x80\""), s("\u{0}"), "overlong is accepted");
        assert_eq!(lenient(b"\"\xe0\x80\x80\""), s("\u{0}"));
        assert_eq!(strict(b"\"\xc0\x80\""), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"\"\xed\xa0\x80\""), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"\"\xff\""), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"\"\xc3\""), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"\"\xc3"), Err(ErrorKind::EndOfInput));
        assert_eq!(lenient(b"\"\xf4\x90\x80\x80\""), s("\u{fffd}"));
        assert_eq!(lenient(b"\xff\xfe"), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"\xc2\xa01"), Err(ErrorKind::Syntax));
    }

    #[test]
    fn encodings() {
        let a1 = Ok(Some(object(&[("a", Json::Int(1))])));
        assert_eq!(lenient(b"\xef\xbb\xbf{\"a\":1}"), a1);
        assert_eq!(strict(b"\xef\xbb\xbf{\"a\":1}"), Err(ErrorKind::Syntax));
        let utf16le: Vec<u8> = "{\"a\":1}"
            .encode_utf16()
            .flat_map(u16::to_le_bytes)
            .collect();
        assert_eq!(lenient(&utf16le), a1);
        let mut utf16be = vec![0xfe, 0xff];
        utf16be.extend("{\"a\":1}".encode_utf16().flat_map(u16::to_be_bytes));
        assert_eq!(lenient(&utf16be), a1);
        let utf32be: Vec<u8> = "{\"a\":1}"
            .chars()
            .flat_map(|c| u32::from(c).to_be_bytes())
            .collect();
        assert_eq!(lenient(&utf32be), a1);
        let utf32le: Vec<u8> = "[1]"
            .chars()
            .flat_map(|c| u32::from(c).to_le_bytes())
            .collect();
        assert_eq!(lenient(&utf32le), Ok(Some(Json::Array(vec![Json::Int(1)]))));
        assert_eq!(lenient(&utf32le[..11]), Err(ErrorKind::Encoding));
        assert_eq!(lenient(b"\x00\x00\xff\xfe"), Err(ErrorKind::Encoding));
        // Two bytes, the second zero: UTF-16LE for "1".
        assert_eq!(lenient(b"1\x00"), Ok(Some(Json::Int(1))));
        // A zero byte first makes it UTF-16BE, and then it is not JSON.
        assert_eq!(lenient(b"\x00{\"a\":1}"), Err(ErrorKind::Syntax));
    }

    #[test]
    fn structure_errors() {
        assert_eq!(lenient(b"[1,2,]"), Err(ErrorKind::Syntax));
        assert_eq!(lenient(br#"{"a":1,}"#), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"[1,,2]"), Err(ErrorKind::Syntax));
        assert_eq!(lenient(br#"{"a":"#), Err(ErrorKind::EndOfInput));
        assert_eq!(lenient(b"[1,2"), Err(ErrorKind::EndOfInput));
        assert_eq!(lenient(b"tru"), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"{'a':1}"), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"{a:1}"), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"/* c */ 1"), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"\x0b1"), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"[1 2]"), Err(ErrorKind::Syntax));
        assert_eq!(lenient(b"[ ]"), Ok(Some(Json::Array(Vec::new()))));
        assert_eq!(lenient(b"{ }"), Ok(Some(Json::Object(Vec::new()))));
    }

    #[test]
    fn errors_say_where() {
        let err = parse(b"[1, x]", false).unwrap_err();
        assert_eq!((err.offset, err.line, err.column), (4, 1, 5));
        assert!(
            err.to_string().starts_with("unexpected character 'x'"),
            "{err}"
        );
        assert!(err.to_string().ends_with("at line 1, column 5"), "{err}");
        let err = parse(b"{\n  \"a\": 1,\n  \"b\" 2\n}", false).unwrap_err();
        assert_eq!((err.offset, err.line, err.column), (18, 3, 7));
    }
}
