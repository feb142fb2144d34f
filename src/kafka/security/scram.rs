//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them: the gs2 header
//! `n,,` only (no channel binding, no authorization id), passwords as plain UTF-8 (Kafka's
//! `ScramFormatter` applies no SASLprep), `=` and `,` escaped in the user name, and the one
//! extension Kafka knows, `tokenauth=true`, for delegation tokens.
//!
//! The crypto is ring's (already built for rustls): PBKDF2, HMAC, digests, and the random
//! client nonce.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::{digest, hmac, pbkdf2, rand::SecureRandom};

/// Kafka's lowest iteration count (`ScramMechanism.minIterations`): a server asking for fewer
/// is refused, as the Java client refuses it.
const MIN_ITERATIONS: u32 = 4096;

/// Kafka's highest iteration count for a stored credential (`ScramMechanism.maxIterations`):
/// a genuine broker never asks for more, and a hostile one cannot make the client hash for
/// minutes.
const MAX_ITERATIONS: u32 = 16_384;

/// The longest server message accepted; Kafka's are under 200 bytes.
const MAX_SERVER_MESSAGE: usize = 4096;

/// The hash of a SCRAM mechanism.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScramHash {
    /// SCRAM-SHA-256.
    Sha256,
    /// SCRAM-SHA-512.
    Sha512,
}

impl ScramHash {
    /// The SASL mechanism name.
    pub(crate) fn mechanism(self) -> &'static str {
        match self {
            Self::Sha256 => "SCRAM-SHA-256",
            Self::Sha512 => "SCRAM-SHA-512",
        }
    }

    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            Self::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            Self::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            Self::Sha256 => hmac::HMAC_SHA256,
            Self::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn digest(self) -> &'static digest::Algorithm {
        match self {
            Self::Sha256 => &digest::SHA256,
            Self::Sha512 => &digest::SHA512,
        }
    }

    fn output_len(self) -> usize {
        self.digest().output_len()
    }
}

/// A client exchange in progress: after the client-first message, then after the
/// client-final one. `Debug` leaves out the expected server signature, which is derived from
/// the password.
pub(crate) struct ScramClient {
    hash: ScramHash,
    /// `n=<user>,r=<nonce>[,tokenauth=true]`, part of the signed message.
    client_first_bare: String,
    /// The client nonce.
    nonce: String,
    /// The server signature to expect, once the client-final message was made.
    expected_signature: Option<Vec<u8>>,
}

impl fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramClient")
            .field("hash", &self.hash)
            .field("client_first_bare", &self.client_first_bare)
            .field("signature_expected", &self.expected_signature.is_some())
            .finish_non_exhaustive()
    }
}

/// The server's `e=` refusal, escaped: a broker's text cannot forge log lines.
fn refused(value: &str) -> ScramError {
    format!("the server refused: {}", value.escape_debug())
}

/// Why a SCRAM exchange failed on the client side.
pub(crate) type ScramError = String;

impl ScramClient {
    /// Starts an exchange for `user`; the client-first message to send.
    pub(crate) fn start(
        hash: ScramHash,
        user: &str,
        token_auth: bool,
    ) -> Result<(Self, Vec<u8>), ScramError> {
        // 24 random bytes in standard base64: printable ASCII without ','.
        let mut raw = [0u8; 24];
        ring::rand::SystemRandom::new()
            .fill(&mut raw)
            .map_err(|_| "the system random number generator failed".to_owned())?;
        let nonce = STANDARD.encode(raw);
        Ok(Self::with_nonce(hash, user, token_auth, nonce))
    }

    /// [`start`](Self::start) with a given nonce (the RFC test vectors fix it).
    fn with_nonce(hash: ScramHash, user: &str, token_auth: bool, nonce: String) -> (Self, Vec<u8>) {
        let name = user.replace('=', "=3D").replace(',', "=2C");
        let extension = if token_auth { ",tokenauth=true" } else { "" };
        let client_first_bare = format!("n={name},r={nonce}{extension}");
        let message = format!("n,,{client_first_bare}").into_bytes();
        (
            Self {
                hash,
                client_first_bare,
                nonce,
                expected_signature: None,
            },
            message,
        )
    }

    /// The client-final message answering the server-first one, proving `password`.
    pub(crate) fn answer(
        &mut self,
        server_first: &[u8],
        password: &str,
    ) -> Result<Vec<u8>, ScramError> {
        let server_first = server_text(server_first, "server-first")?;
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for attribute in server_first.split(',') {
            match attribute.split_once('=') {
                Some(("r", value)) => nonce = Some(value),
                Some(("s", value)) => salt = Some(value),
                Some(("i", value)) => iterations = Some(value),
                Some(("e", value)) => return Err(refused(value)),
                _ => {}
            }
        }
        let nonce = nonce.ok_or("the server-first message has no nonce")?;
        let salt = salt.ok_or("the server-first message has no salt")?;
        let iterations = iterations.ok_or("the server-first message has no iteration count")?;
        if nonce.len() <= self.nonce.len() || !nonce.starts_with(&self.nonce) {
            return Err("the server nonce does not extend the client nonce".to_owned());
        }
        if nonce
            .bytes()
            .any(|b| !(0x21..=0x7e).contains(&b) || b == b',')
        {
            return Err("the server nonce has characters outside printable ASCII".to_owned());
        }
        let iterations: u32 = iterations
            .parse()
            .map_err(|_| "the iteration count is not a number".to_owned())?;
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(format!(
                "the server asks for {iterations} iterations, outside Kafka's {MIN_ITERATIONS} to {MAX_ITERATIONS}"
            ));
        }
        let salt = STANDARD
            .decode(salt)
            .map_err(|_| "the salt is not base64".to_owned())?;
        let Some(iterations) = std::num::NonZeroU32::new(iterations) else {
            return Err("the iteration count is zero".to_owned());
        };

        let hash = self.hash;
        let mut salted = vec![0u8; hash.output_len()];
        pbkdf2::derive(
            hash.pbkdf2(),
            iterations,
            &salt,
            password.as_bytes(),
            &mut salted,
        );
        let salted_key = hmac::Key::new(hash.hmac(), &salted);
        salted.fill(0);
        let client_key = hmac::sign(&salted_key, b"Client Key");
        let stored_key = digest::digest(hash.digest(), client_key.as_ref());
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let client_signature = hmac::sign(
            &hmac::Key::new(hash.hmac(), stored_key.as_ref()),
            auth_message.as_bytes(),
        );
        let proof: Vec<u8> = client_key
            .as_ref()
            .iter()
            .zip(client_signature.as_ref())
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = hmac::sign(&salted_key, b"Server Key");
        let server_signature = hmac::sign(
            &hmac::Key::new(hash.hmac(), server_key.as_ref()),
            auth_message.as_bytes(),
        );
        self.expected_signature = Some(server_signature.as_ref().to_vec());
        Ok(format!("{without_proof},p={}", STANDARD.encode(proof)).into_bytes())
    }

    /// Checks the server-final message: the server proves it knows the credential too.
    pub(crate) fn finish(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let server_final = server_text(server_final, "server-final")?;
        let Some(expected) = &self.expected_signature else {
            return Err("the server-final message came before the client-final one".to_owned());
        };
        let mut signature = None;
        for attribute in server_final.split(',') {
            match attribute.split_once('=') {
                Some(("e", value)) => return Err(refused(value)),
                Some(("v", value)) => signature = Some(value),
                _ => {}
            }
        }
        let signature = signature.ok_or("the server-final message has no signature")?;
        let signature = STANDARD
            .decode(signature)
            .map_err(|_| "the server signature is not base64".to_owned())?;
        // Compared without an early exit, so the time taken tells nothing.
        let differences = signature
            .iter()
            .zip(expected)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if signature.len() != expected.len() || differences != 0 {
            return Err(
                "the server signature does not match: the broker does not know this \
                        credential (or something between us altered the exchange)"
                    .to_owned(),
            );
        }
        Ok(())
    }
}

/// A server message as text, refused when it is not UTF-8 or too long.
fn server_text<'a>(message: &'a [u8], which: &str) -> Result<&'a str, ScramError> {
    if message.len() > MAX_SERVER_MESSAGE {
        return Err(format!(
            "the {which} message has {} bytes, more than {MAX_SERVER_MESSAGE}",
            message.len()
        ));
    }
    std::str::from_utf8(message).map_err(|_| format!("the {which} message is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 section 3: user "user", password "pencil".
    #[test]
    fn rfc7677_sha256_vector() {
        let (mut client, first) = ScramClient::with_nonce(
            ScramHash::Sha256,
            "user",
            false,
            "rOprNGfwEbeRWgbNEkqO".to_owned(),
        );
        assert_eq!(first, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let last = client
            .answer(
                b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
                "pencil",
            )
            .expect("client-final");
        assert_eq!(
            String::from_utf8(last).expect("text"),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        client
            .finish(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .expect("server signature");
        let error = client
            .finish(b"v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .expect_err("wrong signature");
        assert!(error.contains("does not match"), "{error}");
    }

    /// RFC 5802 section 5 computes with SHA-1, which Kafka does not offer; the SHA-512
    /// derivation is checked against an independent computation of the same formulas
    /// (Python's hashlib.pbkdf2_hmac and hmac) for user "user", password "pencil".
    #[test]
    fn sha512_derivation() {
        let (mut client, _) = ScramClient::with_nonce(
            ScramHash::Sha512,
            "user",
            false,
            "rOprNGfwEbeRWgbNEkqO".to_owned(),
        );
        let last = client
            .answer(
                b"r=rOprNGfwEbeRWgbNEkqOserver,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
                "pencil",
            )
            .expect("client-final");
        let last = String::from_utf8(last).expect("text");
        assert_eq!(
            last,
            format!("c=biws,r=rOprNGfwEbeRWgbNEkqOserver,p={SHA512_PROOF}")
        );
        client
            .finish(format!("v={SHA512_SIGNATURE}").as_bytes())
            .expect("server signature");
    }

    const SHA512_PROOF: &str =
        "CZ7JApHTPokc4WrCBHou42smHcLHmUe0MLyYkfqiJYzxHYfusVjcCfh4GwP/bcmRFItExPjW8zjmBnq4FmVPZg==";
    const SHA512_SIGNATURE: &str =
        "N3oCzpEcItTOw34BuFx7ZxcZouHjy+jqFtSWPqVKQDPJnQ+v+loHtxwhn3s31CT2qK34Vluv22R21LxJTH2/kQ==";

    #[test]
    fn user_names_are_escaped_and_token_auth_is_an_extension() {
        let (_, first) = ScramClient::start(ScramHash::Sha512, "a=b,c", true).expect("start");
        let first = String::from_utf8(first).expect("text");
        assert!(first.starts_with("n,,n=a=3Db=2Cc,r="), "{first}");
        assert!(first.ends_with(",tokenauth=true"), "{first}");
        let nonce = first
            .trim_start_matches("n,,n=a=3Db=2Cc,r=")
            .trim_end_matches(",tokenauth=true");
        assert!(nonce.len() >= 24 && !nonce.contains(','), "nonce {nonce}");
    }

    fn client() -> ScramClient {
        ScramClient::with_nonce(ScramHash::Sha256, "u", false, "abc".to_owned()).0
    }

    #[test]
    fn hostile_server_first_messages_are_refused() {
        for (message, expected) in [
            ("r=xyz,s=AAAA,i=4096", "does not extend"),
            ("r=abc,s=AAAA,i=4096", "does not extend"),
            ("r=abcdef,s=AAAA,i=4095", "outside Kafka's"),
            ("r=abcdef,s=AAAA,i=1", "outside Kafka's"),
            ("r=abcdef,s=AAAA,i=4294967295", "outside Kafka's"),
            ("r=abcdef,s=AAAA,i=x", "not a number"),
            ("r=abcdef,s=!!,i=4096", "not base64"),
            ("r=abcdef,i=4096", "no salt"),
            ("s=AAAA,i=4096", "no nonce"),
            ("r=abcdef,s=AAAA", "no iteration count"),
            ("e=invalid-proof", "the server refused: invalid-proof"),
        ] {
            let error = client()
                .answer(message.as_bytes(), "pw")
                .expect_err(message);
            assert!(error.contains(expected), "{message}: {error}");
        }
        let error = client().answer(&[0xff, 0xfe], "pw").expect_err("not UTF-8");
        assert!(error.contains("UTF-8"), "{error}");
        let long = vec![b'a'; MAX_SERVER_MESSAGE + 1];
        assert!(client().answer(&long, "pw").is_err());
        let error = client().finish(b"v=AAAA").expect_err("too early");
        assert!(error.contains("before"), "{error}");
    }

    #[test]
    fn server_final_errors_are_reported() {
        let mut c = client();
        c.answer(b"r=abcdef,s=AAAA,i=4096", "pw").expect("answer");
        let error = c.finish(b"e=other-error").expect_err("e=");
        assert!(error.contains("other-error"), "{error}");
        assert!(c.finish(b"x=1").expect_err("no v").contains("no signature"));
        assert!(c.finish(b"v=***").expect_err("bad b64").contains("base64"));
    }
}
