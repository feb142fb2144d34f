//! The rustls client configuration a client builds once, and the messages of TLS failures.

use std::fmt;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    AlertDescription, CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore,
    SignatureScheme,
};

use super::{ClientIdentity, Pem, SettingError, TlsSettings};

/// How to turn a Java keystore or truststore into the PEM files this client reads.
pub(crate) const CONVERSION_HINT: &str = "this client reads PEM only; convert a JKS \
     truststore with `keytool -exportcert -rfc -alias CARoot -keystore truststore.jks -file \
     ca.pem`, a JKS keystore with `keytool -importkeystore -srckeystore client.jks \
     -srcstoretype JKS -destkeystore client.p12 -deststoretype PKCS12`, and a PKCS#12 file \
     with `openssl pkcs12 -in client.p12 -nokeys -out client-chain.pem` and `openssl pkcs12 \
     -in client.p12 -nocerts -nodes -out client-key.pem`";

/// A built TLS configuration.
#[derive(Clone)]
pub(crate) struct TlsContext {
    /// The rustls configuration every connection of the client shares.
    pub(crate) config: Arc<ClientConfig>,
    /// A client certificate is presented.
    pub(crate) client_cert: bool,
}

impl fmt::Debug for TlsContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsContext")
            .field("client_cert", &self.client_cert)
            .finish_non_exhaustive()
    }
}

impl TlsContext {
    /// Reads the PEM files (or text), loads the trust roots and builds the configuration.
    pub(crate) fn build(settings: &TlsSettings) -> Result<Self, SettingError> {
        // A provider the application installed wins (it may want FIPS, or the post-quantum key
        // exchange of aws-lc-rs); else ring, which builds without a C toolchain. rustls 0.23.48
        // deprecates ring's provider because it has no post-quantum key exchange; an
        // application that needs one installs aws-lc-rs's provider.
        #[allow(deprecated, reason = "ring's provider: see above")]
        let ring = || Arc::new(rustls::crypto::ring::default_provider());
        let provider = CryptoProvider::get_default().cloned().unwrap_or_else(ring);
        let roots = Arc::new(roots(settings.ca.as_ref())?);
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| SettingError::new("security.providers", format!("{e}")))?;
        let builder = if settings.verify_hostname {
            builder.with_root_certificates(roots)
        } else {
            tracing::warn!(
                "ssl.endpoint.identification.algorithm is empty: broker certificates are not \
                 checked against the broker's host name (anyone with a certificate from a \
                 trusted authority can pose as the broker)"
            );
            let inner = WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| {
                    SettingError::new(
                        "ssl.truststore.location",
                        format!("the trust roots cannot be used: {e}"),
                    )
                })?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyHostName(inner)))
        };
        let (config, client_cert) = match &settings.client {
            None => (builder.with_no_client_auth(), false),
            Some(identity) => {
                let (chain, key) = identity_parts(identity, settings.key_password.is_some())?;
                let key_name = match identity {
                    ClientIdentity::File(_) => "ssl.keystore.location",
                    ClientIdentity::Inline { .. } => "ssl.keystore.key",
                };
                let config = builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| SettingError::new(key_name, identity_refused(&e)))?;
                (config, true)
            }
        };
        Ok(Self {
            config: Arc::new(config),
            client_cert,
        })
    }
}

/// The PEM bytes of a source, as written, and the key that names it.
fn pem_bytes(
    pem: &Pem,
    file_key: &'static str,
    inline_key: &'static str,
) -> Result<(Vec<u8>, &'static str), SettingError> {
    match pem {
        Pem::File(path) => std::fs::read(path).map(|b| (b, file_key)).map_err(|e| {
            SettingError::new(file_key, format!("cannot read `{}`: {e}", path.display()))
        }),
        Pem::Inline(text) => Ok((text.expose().as_bytes().to_vec(), inline_key)),
    }
}

/// Certificates of PEM bytes as written (see [`normalize_pem`]); none is an error naming
/// `key`.
fn certificates(
    raw: &[u8],
    key: &'static str,
    what: &str,
) -> Result<Vec<CertificateDer<'static>>, SettingError> {
    let invalid = |problem: &str| {
        SettingError::new(
            key,
            format!("the {what} are not valid PEM: {problem}{}", lines_lost(raw)),
        )
    };
    let bytes = normalize_pem(raw).map_err(|shape| invalid(shape.problem()))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(pem_failure(&e)))?;
    if certs.is_empty() {
        return Err(SettingError::new(
            key,
            format!(
                "no PEM certificate (-----BEGIN CERTIFICATE-----) found for the {what}; {CONVERSION_HINT}"
            ),
        ));
    }
    Ok(certs)
}

/// The trust roots: the given certificates only, else the system's, else Mozilla's.
fn roots(ca: Option<&Pem>) -> Result<RootCertStore, SettingError> {
    let mut store = RootCertStore::empty();
    if let Some(ca) = ca {
        let (bytes, key) = pem_bytes(ca, "ssl.truststore.location", "ssl.truststore.certificates")?;
        let certs = certificates(&bytes, key, "trusted certificates")?;
        let (added, ignored) = store.add_parsable_certificates(certs);
        if added == 0 {
            return Err(SettingError::new(
                key,
                format!("none of the {ignored} certificates can be used as a trust anchor"),
            ));
        }
        return Ok(store);
    }
    let native = rustls_native_certs::load_native_certs();
    for error in &native.errors {
        tracing::debug!(%error, "a system trust store could not be read");
    }
    let (added, _) = store.add_parsable_certificates(native.certs);
    if added == 0 {
        tracing::debug!("the system trust store is empty: using the Mozilla roots compiled in");
        store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    Ok(store)
}

/// The client certificate chain and private key.
fn identity_parts(
    identity: &ClientIdentity,
    has_password: bool,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), SettingError> {
    let (key_bytes, key_name, chain_bytes, chain_name) = match identity {
        ClientIdentity::File(path) => {
            let (bytes, name) = pem_bytes(&Pem::File(path.clone()), "ssl.keystore.location", "")?;
            (bytes.clone(), name, bytes, name)
        }
        ClientIdentity::Inline { key, chain } => (
            key.expose().as_bytes().to_vec(),
            "ssl.keystore.key",
            chain.expose().as_bytes().to_vec(),
            "ssl.keystore.certificate.chain",
        ),
    };
    let chain = certificates(&chain_bytes, chain_name, "client certificate chain")?;
    let key_pem = normalize_pem(&key_bytes).map_err(|shape| {
        SettingError::new(
            key_name,
            format!(
                "the private key is not valid PEM: {}{}",
                shape.problem(),
                lines_lost(&key_bytes)
            ),
        )
    })?;
    // PKCS#8 (`ENCRYPTED PRIVATE KEY`) and OpenSSL's legacy encryption (`Proc-Type:
    // 4,ENCRYPTED` headers in an `RSA PRIVATE KEY` or `EC PRIVATE KEY` section).
    if contains(&key_pem, b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
        || contains(&key_bytes, b"4,ENCRYPTED")
    {
        let password = if has_password {
            "ssl.key.password is set, but "
        } else {
            ""
        };
        return Err(SettingError::new(
            key_name,
            format!(
                "the private key is encrypted; {password}this client reads unencrypted keys only: \
                 decrypt it with `openssl pkey -in key.pem -out key-plain.pem`, keep that file \
                 private, and remove ssl.key.password"
            ),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        let found = match e {
            rustls::pki_types::pem::Error::NoItemsFound => String::new(),
            other => format!(" ({}{})", pem_failure(&other), lines_lost(&key_bytes)),
        };
        SettingError::new(
            key_name,
            format!(
                "no PEM private key (PKCS#8, PKCS#1 or SEC1) found for the client \
                 certificate{found}; {CONVERSION_HINT}"
            ),
        )
    })?;
    Ok((chain, key))
}

/// What is wrong with PEM input, in words that carry none of its bytes.
///
/// The PEM parser's own `Display` prints the line it stopped at as a byte list: for a PEM file
/// whose line breaks were lost that is the whole file, private key included. Nothing of the
/// input may reach an error message, so each failure is named here instead.
fn pem_failure(error: &rustls::pki_types::pem::Error) -> &'static str {
    use rustls::pki_types::pem::Error as E;
    match error {
        E::MissingSectionEnd { .. } => {
            "a -----BEGIN ...----- section has no matching -----END ...----- line"
        }
        E::IllegalSectionStart { .. } => "a -----BEGIN ...----- line is malformed",
        E::Base64Decode(_) => "a section's body is not valid base64",
        E::Io(_) => "the PEM text could not be read",
        E::NoItemsFound => "no PEM section was found",
        E::SectionTooLarge => "a PEM section is larger than 256 MB",
        _ => "the PEM text cannot be parsed",
    }
}

/// Why the client key and certificate chain cannot be used together, and what to check.
fn identity_refused(e: &rustls::Error) -> String {
    match e {
        rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => {
            "the private key does not belong to the client certificate (the first one of the \
             chain): check that the key and certificate files are a pair, and that the chain \
             starts with the client's own certificate, not its issuer's"
                .to_owned()
        }
        e => format!("the client key and certificate cannot be used together: {e}"),
    }
}

/// A hint for PEM text without a single line break, or nothing.
fn lines_lost(raw: &[u8]) -> &'static str {
    if raw.iter().any(|b| *b == b'\n' || *b == b'\r') {
        ""
    } else {
        " (the text has no line breaks; markers and base64 on one line are read, so the \
         text itself is damaged: copy the file as `openssl` wrote it; in a .properties file, \
         end every line of the PEM text but the last with `\\`, or write its line breaks as \
         `\\n`)"
    }
}

/// Why PEM text cannot be put into standard form; never any of its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PemShape {
    /// `-----BEGIN` without the five dashes that close the marker.
    UnclosedBegin,
    /// A label that is not a PEM label (RFC 7468: printable ASCII and spaces, at most 64).
    BadLabel,
    /// A section without its `-----END ...-----` marker.
    MissingEnd,
    /// An `-----END ...-----` marker naming another label than its `-----BEGIN`.
    MismatchedEnd,
}

impl PemShape {
    fn problem(self) -> &'static str {
        match self {
            Self::UnclosedBegin => "a -----BEGIN marker is not closed by -----",
            Self::BadLabel => "a -----BEGIN ...----- or -----END ...----- marker is malformed",
            Self::MissingEnd => {
                "a -----BEGIN ...----- section has no matching -----END ...----- marker"
            }
            Self::MismatchedEnd => {
                "a section's -----END ...----- marker names another type than its -----BEGIN \
                 ...----- marker"
            }
        }
    }
}

/// PEM text as Java's Kafka client reads it, put into the standard form the PEM parser
/// takes: each `-----BEGIN/END <label>-----` marker on a line of its own and the base64 body
/// re-wrapped at 64 characters.
///
/// Java (`DefaultSslEngineFactory.PemParser`) finds the markers anywhere and drops every
/// whitespace character of the body, so it reads PEM whose line breaks became spaces
/// (`echo $VAR`), vanished (`.properties` continuation lines, which `java.util.Properties`
/// joins without a separator) or became `\r\n`. Whitespace inside a label is read as one
/// space. Text outside the sections is dropped. A body with characters other than base64
/// and whitespace (RFC 1421 headers) is kept as it was, for the parser to judge.
fn normalize_pem(raw: &[u8]) -> Result<Vec<u8>, PemShape> {
    const BEGIN: &[u8] = b"-----BEGIN";
    const END: &[u8] = b"-----END";
    const DASHES: &[u8] = b"-----";
    let mut out = Vec::with_capacity(raw.len() + raw.len() / 64 + 64);
    let mut rest = raw;
    while let Some(start) = find(rest, BEGIN) {
        let after_begin = &rest[start + BEGIN.len()..];
        let label_len = find(after_begin, DASHES).ok_or(PemShape::UnclosedBegin)?;
        let label = pem_label(&after_begin[..label_len])?;
        let body_and_rest = skip_dashes(&after_begin[label_len..]);
        let body_len = find(body_and_rest, END).ok_or(PemShape::MissingEnd)?;
        let body = &body_and_rest[..body_len];
        let after_end = &body_and_rest[body_len + END.len()..];
        let end_label_len = find(after_end, DASHES).ok_or(PemShape::MissingEnd)?;
        if pem_label(&after_end[..end_label_len])? != label {
            return Err(PemShape::MismatchedEnd);
        }
        // Exactly the five dashes: the next marker may follow without a separator.
        rest = &after_end[end_label_len + DASHES.len()..];

        out.extend_from_slice(b"-----BEGIN ");
        out.extend_from_slice(&label);
        out.extend_from_slice(b"-----\n");
        let compact: Vec<u8> = body.iter().copied().filter(|b| !is_pem_space(*b)).collect();
        if compact
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
        {
            for line in compact.chunks(64) {
                out.extend_from_slice(line);
                out.push(b'\n');
            }
        } else {
            out.extend_from_slice(body);
            out.push(b'\n');
        }
        out.extend_from_slice(b"-----END ");
        out.extend_from_slice(&label);
        out.extend_from_slice(b"-----\n");
    }
    Ok(out)
}

/// A marker's label with surrounding whitespace dropped and inner runs of it made one space.
fn pem_label(raw: &[u8]) -> Result<Vec<u8>, PemShape> {
    let mut label = Vec::with_capacity(raw.len());
    for word in raw.split(|b| is_pem_space(*b)).filter(|w| !w.is_empty()) {
        if !label.is_empty() {
            label.push(b' ');
        }
        label.extend_from_slice(word);
    }
    let printable = label.iter().all(|b| b.is_ascii_graphic() || *b == b' ');
    if label.is_empty() || label.len() > 64 || !printable {
        return Err(PemShape::BadLabel);
    }
    Ok(label)
}

/// Java's `\s`: space, tab, line feed, vertical tab, form feed, carriage return.
fn is_pem_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn skip_dashes(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|b| **b == b'-').count();
    &s[n..]
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The standard verifier without the host name check (Java's empty
/// `ssl.endpoint.identification.algorithm`): the chain, its validity and the signatures
/// are still checked.
#[derive(Debug)]
struct AnyHostName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            // webpki checks the name last, after the chain and the validity dates.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The host of `host:port` (`[v6]:port` too), as TLS names it: the name checked against the
/// broker's certificate and sent as SNI.
pub(crate) fn server_name(addr: &str) -> Result<ServerName<'static>, String> {
    let host = match addr.rsplit_once(':') {
        Some((host, _port)) => host,
        None => addr,
    };
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    ServerName::try_from(host.to_owned()).map_err(|_| {
        format!("`{host}` is neither a DNS name nor an IP address, so TLS cannot check it")
    })
}

/// A TLS failure worth telling the user as an authentication failure: the reason, or
/// `None` for errors a retry may fix (or that say nothing about certificates).
pub(crate) fn authentication_failure(error: &rustls::Error, client_cert: bool) -> Option<String> {
    use rustls::Error as E;
    let reason = match error {
        E::InvalidCertificate(cert) => match cert {
            CertificateError::UnknownIssuer => {
                "the broker's certificate is not issued by a trusted certificate authority \
                 (UnknownIssuer): set ssl.truststore.location to the PEM file of the authority \
                 that signed it"
                    .to_owned()
            }
            CertificateError::ExpiredContext { not_after, .. } => format!(
                "the broker's certificate expired: it is not valid after {} (UNIX time {}); the \
                 broker needs a new certificate",
                utc(not_after.as_secs()),
                not_after.as_secs()
            ),
            CertificateError::Expired => {
                "the broker's certificate expired; the broker needs a new certificate".to_owned()
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "the broker's certificate is not valid yet (check the clocks)".to_owned()
            }
            CertificateError::NotValidForNameContext {
                expected,
                presented,
            } => {
                let expected = match expected {
                    ServerName::DnsName(name) => name.as_ref().to_owned(),
                    ServerName::IpAddress(ip) => format!("{:?}", std::net::IpAddr::from(*ip)),
                    other => format!("{other:?}"),
                };
                if presented.is_empty() {
                    format!(
                        "the broker's certificate names no host in a subjectAltName (this client, \
                         unlike Java, does not accept a common name alone), so it is not valid for \
                         `{expected}`: reissue it with a subjectAltName, or set \
                         ssl.endpoint.identification.algorithm= (empty; insecure)"
                    )
                } else {
                    format!(
                        "the broker's certificate is not valid for `{expected}`, the host dialled \
                         (it names {}): connect by a name the certificate has, or set \
                         ssl.endpoint.identification.algorithm= (empty; insecure)",
                        presented.join(", ")
                    )
                }
            }
            CertificateError::NotValidForName => {
                "the broker's certificate is not valid for the host dialled: connect by a name \
                 the certificate has, or set ssl.endpoint.identification.algorithm= (empty; \
                 insecure)"
                    .to_owned()
            }
            CertificateError::Revoked => "the broker's certificate is revoked".to_owned(),
            other => format!("the broker's certificate was refused: {other:?}"),
        },
        E::AlertReceived(AlertDescription::HandshakeFailure) if !client_cert => {
            "the broker refused the TLS handshake (TLS alert HandshakeFailure): most often it \
             requires a client certificate and none was sent — set ssl.keystore.location (or \
             ssl.keystore.key and ssl.keystore.certificate.chain); otherwise the broker and this \
             client share no TLS version or cipher suite (this client speaks TLS 1.2 and 1.3: \
             check the broker's ssl.enabled.protocols and ssl.cipher.suites)"
                .to_owned()
        }
        E::AlertReceived(AlertDescription::HandshakeFailure) => {
            "the broker refused the TLS handshake (TLS alert HandshakeFailure): most often it \
             rejected the client certificate — it must be issued by an authority the broker \
             trusts (its ssl.truststore), and be valid now; otherwise the broker and this client \
             share no TLS version or cipher suite (this client speaks TLS 1.2 and 1.3: check the \
             broker's ssl.enabled.protocols and ssl.cipher.suites)"
                .to_owned()
        }
        E::AlertReceived(alert) => match alert {
            AlertDescription::BadCertificate | AlertDescription::CertificateRequired
                if !client_cert =>
            {
                format!(
                    "the broker requires a client certificate and none was sent (TLS alert \
                     {alert:?}): set ssl.keystore.location (or ssl.keystore.key and \
                     ssl.keystore.certificate.chain)"
                )
            }
            AlertDescription::BadCertificate
            | AlertDescription::CertificateRequired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA
            | AlertDescription::AccessDenied
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateRevoked
            | AlertDescription::UnsupportedCertificate => format!(
                "the broker rejected the client certificate (TLS alert {alert:?}): it must be \
                 issued by an authority the broker trusts (its ssl.truststore), and be valid now"
            ),
            _ => return None,
        },
        _ => return None,
    };
    Some(reason)
}

/// A UNIX time as `YYYY-MM-DD HH:MM:SS UTC`.
fn utc(secs: u64) -> String {
    let days = secs / 86_400;
    let rest = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = i64::try_from(days).unwrap_or(i64::MAX / 2) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_come_from_the_address() {
        assert_eq!(
            server_name("localhost:9093").expect("dns"),
            ServerName::try_from("localhost").expect("name")
        );
        assert!(matches!(
            server_name("127.0.0.1:9093").expect("ip"),
            ServerName::IpAddress(_)
        ));
        assert!(matches!(
            server_name("[::1]:9093").expect("ip6"),
            ServerName::IpAddress(_)
        ));
        assert!(server_name("bad name:1").is_err());
    }

    #[test]
    fn utc_times_read_as_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_577_923_200), "2020-01-02 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
    }

    #[test]
    fn files_without_pem_are_refused_with_the_conversion_commands() {
        let error = certificates(
            b"\xfe\xed\xfe\xed JKS",
            "ssl.truststore.location",
            "trusted certificates",
        )
        .expect_err("no PEM");
        assert_eq!(error.key, "ssl.truststore.location");
        assert!(
            error.reason.contains("keytool -exportcert"),
            "{}",
            error.reason
        );
        let settings = TlsSettings::ca_pem_file("/nonexistent/ca.pem");
        let error = TlsContext::build(&settings).expect_err("missing file");
        assert!(
            error.reason.contains("/nonexistent/ca.pem"),
            "{}",
            error.reason
        );
    }

    #[test]
    fn encrypted_keys_are_refused_with_the_decrypt_command() {
        let settings = TlsSettings::system_roots().client_pem(
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
            CHAIN,
        );
        let error = TlsContext::build(&settings.key_password("pw")).expect_err("encrypted");
        assert_eq!(error.key, "ssl.keystore.key");
        assert!(error.reason.contains("openssl pkey"), "{}", error.reason);
        assert!(!error.reason.contains("pw\""));
    }

    #[test]
    fn a_key_that_is_not_the_certificates_says_so() {
        // A P-256 key of its own (`openssl genpkey -algorithm EC`), not TEST_CERT's.
        let other_key = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQghzPtCG1OS3q9tSgj
Aj5g6jbK9bXUr68auJvOjxsqkXChRANCAAQn18dSgpTWNJ7Cq56FUi14xD5peYkP
9UfN1CWv2pKCL1RcZFQApzLzt87QS8aigPAMXC++zgy8Wse1Xj3n7jlz
-----END PRIVATE KEY-----
";
        let settings = TlsSettings::system_roots().client_pem(other_key, TEST_CERT);
        let error = TlsContext::build(&settings).expect_err("a key of another certificate");
        assert_eq!(error.key, "ssl.keystore.key");
        assert!(
            error
                .reason
                .contains("the private key does not belong to the client certificate"),
            "{}",
            error.reason
        );
        assert!(!error.reason.contains("MIGH"), "{}", error.reason);
        // The pair itself is accepted.
        TlsContext::build(&TlsSettings::system_roots().client_pem(TEST_KEY, TEST_CERT))
            .expect("the test key and its certificate");
    }

    /// The ways users flatten PEM text, each read as Java's Kafka client reads it.
    fn flattenings(pem: &str) -> Vec<(&'static str, String)> {
        vec![
            ("as written", pem.to_owned()),
            // `echo $VAR > file`: every line break became a space.
            ("echo", pem.trim_end().replace('\n', " ")),
            // `.properties` continuation lines: java.util.Properties joins without a separator.
            ("continuation lines", pem.replace('\n', "")),
            ("CRLF", pem.replace('\n', "\r\n")),
            ("tabs and indentation", pem.replace('\n', "\n\t  ")),
            ("spaces in the base64", pem.replace("AAAA", "AA AA")),
        ]
    }

    #[test]
    fn pem_without_its_line_breaks_reads_as_java_reads_it() {
        let canonical_chain = certificates(
            TEST_CERT.as_bytes(),
            "ssl.truststore.certificates",
            "trusted certificates",
        )
        .expect("canonical chain");
        let canonical_key = PrivateKeyDer::from_pem_slice(TEST_KEY.as_bytes()).expect("key");
        for (how, chain) in flattenings(TEST_CERT) {
            let parsed = certificates(
                chain.as_bytes(),
                "ssl.truststore.certificates",
                "trusted certificates",
            )
            .unwrap_or_else(|e| panic!("{how}: {e:?}"));
            assert_eq!(parsed, canonical_chain, "{how}");
            // Two certificates back to back, as a chain file holds them.
            let two = certificates(
                format!("{chain}{chain}").as_bytes(),
                "ssl.truststore.certificates",
                "trusted certificates",
            )
            .unwrap_or_else(|e| panic!("{how}: {e:?}"));
            assert_eq!(two.len(), 2, "{how}");
            for (key_how, key) in flattenings(TEST_KEY) {
                let normalized = normalize_pem(key.as_bytes()).expect("normalized");
                let parsed = PrivateKeyDer::from_pem_slice(&normalized)
                    .unwrap_or_else(|e| panic!("{key_how}: {}", pem_failure(&e)));
                assert_eq!(parsed.secret_der(), canonical_key.secret_der(), "{key_how}");
                let settings = TlsSettings::ca_pem(chain.clone()).client_pem(key, chain.clone());
                let context = TlsContext::build(&settings)
                    .unwrap_or_else(|e| panic!("{how} / {key_how}: {e:?}"));
                assert!(context.client_cert);
            }
        }
        // One file holding the key and the chain, flattened together.
        let dir = std::env::temp_dir().join(format!("kss-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("client.pem");
        std::fs::write(&file, format!("{TEST_KEY}{TEST_CERT}").replace('\n', " ")).expect("write");
        let settings = TlsSettings::ca_pem_file(&file).client_pem_file(&file);
        let context = TlsContext::build(&settings);
        std::fs::remove_dir_all(&dir).ok();
        assert!(context.expect("one flattened file").client_cert);
    }

    #[test]
    fn properties_continuation_lines_give_pem_that_reads() {
        let continued = |pem: &str| pem.trim_end().replace('\n', "\\\n    ");
        let text = format!(
            "security.protocol=SSL\n\
             ssl.truststore.certificates={}\n\
             ssl.keystore.key={}\n\
             ssl.keystore.certificate.chain={}\n",
            continued(TEST_CERT),
            continued(TEST_KEY),
            continued(TEST_CERT)
        );
        let props = crate::config::Properties::parse(&text).expect("properties");
        let value = props.get("ssl.keystore.key").expect("key");
        assert!(
            !value.contains('\n') && value.contains("KEY-----MIG"),
            "{value}"
        );
        let security = super::super::Security::from_properties(&props).expect("security");
        let context = super::super::SecurityContext::build(&security).expect("context");
        assert!(context.tls.expect("tls").client_cert);
    }

    /// Damaged PEM is refused without one byte of it in the error, in any form (text,
    /// decimal or hex bytes, base64 body).
    #[test]
    fn damaged_pem_never_appears_in_the_error() {
        let body = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgSECRETSECRETSECRET";
        let flat_chain = TEST_CERT.replace('\n', " ");
        let cases = [
            // Not base64: the length is wrong.
            format!("-----BEGIN PRIVATE KEY----- {body} -----END PRIVATE KEY----- {flat_chain}"),
            format!("-----BEGIN PRIVATE KEY----- {body} {flat_chain}"),
            format!("-----BEGIN PRIVATE KEY {body} -----END PRIVATE KEY-----"),
            format!("-----BEGIN PRIVATE KEY----- {body} -----END CERTIFICATE-----"),
            format!("-----BEGIN PRIV\u{1}ATE KEY----- {body} -----END PRIV\u{1}ATE KEY-----"),
            format!("-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n"),
            format!(
                "-----BEGIN RSA PRIVATE KEY----- Proc-Type: 4,ENCRYPTED {body} -----END RSA PRIVATE KEY-----"
            ),
        ];
        for (case, flat) in cases.iter().enumerate() {
            for (which, settings) in [
                TlsSettings::system_roots().client_pem(flat.clone(), TEST_CERT),
                TlsSettings::system_roots().client_pem(TEST_KEY, flat.clone()),
                TlsSettings::ca_pem(flat.clone()),
            ]
            .into_iter()
            .enumerate()
            {
                if case == 0 && which > 0 {
                    // Certificates may come with other sections: a stray key is not read.
                    continue;
                }
                let error = TlsContext::build(&settings)
                    .expect_err(&format!("damaged PEM: case {case}, settings {which}"));
                let consumer = error.clone().into_consumer();
                for shown in [
                    consumer.to_string(),
                    format!("{consumer:?}"),
                    format!("{error:?}"),
                ] {
                    assert!(!shown.contains("SECRET"), "{shown}");
                    assert!(!shown.contains("MIGH"), "{shown}");
                    assert!(!shown.contains("MIIB"), "{shown}");
                    assert!(!shown.contains("PRIVATE KEY-----"), "{shown}");
                    // `-----BEGIN PRI` as decimal and as hex bytes.
                    assert!(!shown.contains("80, 82, 73, 86"), "{shown}");
                    assert!(!shown.contains("[80,"), "{shown}");
                    assert!(
                        !shown.contains("52, 49, 56, 50") && !shown.contains("0x50"),
                        "{shown}"
                    );
                    assert!(!shown.contains("5052495641"), "{shown}");
                }
            }
        }
    }

    #[test]
    fn normalized_pem_names_what_is_wrong() {
        assert_eq!(normalize_pem(b"no pem at all"), Ok(Vec::new()));
        assert_eq!(normalize_pem(b"-----BEGIN X"), Err(PemShape::UnclosedBegin));
        assert_eq!(
            normalize_pem(b"-----BEGIN X----- AAAA"),
            Err(PemShape::MissingEnd)
        );
        assert_eq!(
            normalize_pem(b"-----BEGIN X----- AAAA -----END Y-----"),
            Err(PemShape::MismatchedEnd)
        );
        assert_eq!(
            normalize_pem(b"-----BEGIN ----- AAAA -----END -----"),
            Err(PemShape::BadLabel)
        );
        assert_eq!(
            normalize_pem(b"junk -----BEGIN  EC\r\n PARAMETERS-----BggqhkjOPQMBBw==-----END EC PARAMETERS----- junk").expect("ok"),
            b"-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n"
        );
        let long = "A".repeat(100);
        let normalized =
            normalize_pem(format!("-----BEGIN X-----{long}-----END X-----").as_bytes())
                .expect("ok");
        assert_eq!(
            String::from_utf8(normalized).expect("text"),
            format!(
                "-----BEGIN X-----\n{}\n{}\n-----END X-----\n",
                &long[..64],
                &long[64..]
            )
        );
    }

    /// A test key and its self-signed certificate (CN and SAN `localhost`), made with
    /// `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes`.
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

    /// A self-signed certificate, only to get past the chain parsing.
    const CHAIN: &str = "-----BEGIN CERTIFICATE-----
MIIBfjCCASWgAwIBAgIUEkL+Zcz2w2WqpKTT906P/Q/VxcAwCgYIKoZIzj0EAwIw
FTETMBEGA1UEAwwKdGVzdC1jaGFpbjAeFw0yNjEyMDMwNDI5MjhaFw0zNjExMzAw
NDI5MjhaMBUxEzARBgNVBAMMCnRlc3QtY2hhaW4wWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAAQxsWPzGI4Edvl7972MkNbW7MnM3cUzLRj8V4RJlYSF73IeW+Ww2uWJ
xEMzZHqvEi80HGS+toIgoA1E203cJowLo1MwUTAdBgNVHQ4EFgQU3tnIrJN6l0T9
T/CeHV8P0f5awNcwHwYDVR0jBBgwFoAU3tnIrJN6l0T9T/CeHV8P0f5awNcwDwYD
VR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNHADBEAiA3+03A1IMEZVVdr+czFv3N
sOSZ3cNsGiVJuoOvpWnEbAIgJmxeqZyIuUkMC8G0gEgrYvaVbYlRid1MWDow3sVV
ce0=
-----END CERTIFICATE-----
";
}
