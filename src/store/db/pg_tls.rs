//! TLS to PostgreSQL with rustls, configured as libpq reads a URL: `sslmode` (`disable`,
//! `prefer` (the default), `require`, `verify-ca`, `verify-full`) and `sslrootcert` (a PEM file
//! of the CAs to trust).
//!
//! - `disable`: plain TCP. `prefer`: TLS when the server offers it, unverified (libpq's
//!   default); plain otherwise. `require`: TLS or no connection, unverified, unless
//!   `sslrootcert` is given, when it is checked as `verify-ca` (libpq does the same).
//! - `verify-ca`: the server's chain must lead to a CA of `sslrootcert`; its host name is not
//!   checked. `verify-full`: the chain, and the host name (or address) the URL names.
//!
//! The `postgres` client parses only `disable|prefer|require`, so the two parameters are taken
//! out of the URL here and the client is handed the matching mode and a [`PgTls`] connector.
//! The connector is hand-written over `tokio-rustls` (already our server's TLS): the adapter
//! crates for the client do not offer `verify-ca`'s chain-without-name check, which needs a
//! verifier of our own anyway, and the adapter itself is a few lines.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use postgres::Socket;
use postgres::config::SslMode;
use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{CryptoProvider, aws_lc_rs};
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, Error as TlsError, RootCertStore,
    SignatureScheme,
};

use crate::store::StoreError;

/// How the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verify {
    /// Not at all (`prefer`, `require` without `sslrootcert`): encryption only.
    Nothing,
    /// The chain, not the name (`verify-ca`).
    Chain,
    /// The chain and the name (`verify-full`).
    Full,
}

/// The TLS settings of a URL.
#[derive(Debug, Clone)]
pub(crate) struct TlsSettings {
    /// The client's mode.
    pub(crate) mode: SslMode,
    /// The connector (`None`: plain TCP).
    pub(crate) tls: Option<PgTls>,
}

/// Takes `sslmode` and `sslrootcert` out of `url`: the URL left for the client, and the TLS
/// settings. Errors name the parameter.
pub(crate) fn split_url(url: &str) -> Result<(String, TlsSettings), StoreError> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let (mut mode, mut root) = (None, None);
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        match pair.split_once('=') {
            Some(("sslmode", value)) => mode = Some(value.to_string()),
            Some(("sslrootcert", value)) => root = Some(value.to_string()),
            _ => kept.push(pair),
        }
    }
    let bad = |why: String| StoreError::Postgres(format!("store URL: {why}"));
    let verify = match (mode.as_deref().unwrap_or("prefer"), root.is_some()) {
        ("disable", _) => None,
        ("allow" | "prefer", _) => Some((SslMode::Prefer, Verify::Nothing)),
        ("require", false) => Some((SslMode::Require, Verify::Nothing)),
        ("require" | "verify-ca", true) => Some((SslMode::Require, Verify::Chain)),
        ("verify-full", true) => Some((SslMode::Require, Verify::Full)),
        ("verify-ca" | "verify-full", false) => {
            return Err(bad(format!(
                "sslmode={} needs sslrootcert=FILE (the CA certificates to trust, PEM)",
                mode.unwrap_or_default()
            )));
        }
        (other, _) => {
            return Err(bad(format!(
                "sslmode={other:?}: expected disable, allow, prefer, require, verify-ca or verify-full"
            )));
        }
    };
    let client_url =
        if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) };
    let settings = match verify {
        None => TlsSettings { mode: SslMode::Disable, tls: None },
        Some((mode, verify)) => {
            let roots = match (&root, verify) {
                (Some(file), Verify::Chain | Verify::Full) => Some(read_roots(file)?),
                _ => None,
            };
            TlsSettings { mode, tls: Some(PgTls::new(verify, roots)?) }
        }
    };
    Ok((client_url, settings))
}

fn read_roots(file: &str) -> Result<RootCertStore, StoreError> {
    let bad = |why: String| StoreError::Postgres(format!("sslrootcert {file}: {why}"));
    if file == "system" {
        return Err(bad("the system's store is not supported; give a PEM file".into()));
    }
    let mut roots = RootCertStore::empty();
    let certificates = CertificateDer::pem_file_iter(file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|error| bad(error.to_string()))?;
    for certificate in certificates {
        roots.add(certificate).map_err(|error| bad(error.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad("no certificate".into()));
    }
    Ok(roots)
}

/// The connector the client is given.
#[derive(Clone)]
pub(crate) struct PgTls {
    config: Arc<ClientConfig>,
}

impl std::fmt::Debug for PgTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PgTls")
    }
}

impl PgTls {
    fn new(verify: Verify, roots: Option<RootCertStore>) -> Result<Self, StoreError> {
        let provider = Arc::new(aws_lc_rs::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match (verify, roots) {
            (Verify::Nothing, _) | (_, None) => {
                Arc::new(Unverified { provider: Arc::clone(&provider) })
            }
            (verify, Some(roots)) => {
                let webpki = WebPkiServerVerifier::builder_with_provider(
                    Arc::new(roots),
                    Arc::clone(&provider),
                )
                .build()
                .map_err(|error| StoreError::Postgres(format!("sslrootcert: {error}")))?;
                Arc::new(CaVerifier { webpki, names: verify == Verify::Full })
            }
        };
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| StoreError::Postgres(format!("TLS: {error}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(Self { config: Arc::new(config) })
    }
}

/// `verify-ca` and `verify-full`: webpki's checks, the name's left out for `verify-ca`.
#[derive(Debug)]
struct CaVerifier {
    webpki: Arc<WebPkiServerVerifier>,
    names: bool,
}

impl ServerCertVerifier for CaVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(TlsError::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.names => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// `prefer` and `require` without a CA: any certificate (encryption without authentication,
/// as libpq), but the handshake's signatures are still checked.
#[derive(Debug)]
struct Unverified {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        tokio_rustls::rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        tokio_rustls::rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

impl MakeTlsConnect<Socket> for PgTls {
    type Stream = PgTlsStream;
    type TlsConnect = PgTlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<PgTlsConnect, io::Error> {
        let name = ServerName::try_from(domain.to_string())
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error))?;
        Ok(PgTlsConnect { config: Arc::clone(&self.config), name })
    }
}

/// One connection's handshake.
pub(crate) struct PgTlsConnect {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl TlsConnect<Socket> for PgTlsConnect {
    type Stream = PgTlsStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<PgTlsStream>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            let connector = tokio_rustls::TlsConnector::from(self.config);
            let stream = connector.connect(self.name, stream).await.map_err(|error| {
                io::Error::new(error.kind(), format!("TLS to PostgreSQL refused: {error}"))
            })?;
            Ok(PgTlsStream(Box::new(stream)))
        })
    }
}

/// A TLS connection to the server.
pub(crate) struct PgTlsStream(Box<tokio_rustls::client::TlsStream<Socket>>);

impl TlsStream for PgTlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl AsyncRead for PgTlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for PgTlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}
