//! `serve --tls-cert --tls-key`: HTTPS with rustls, for a server clients reach without a
//! TLS-terminating proxy (plain HTTP stays the default behind one).
//!
//! [`TlsListener`] is an axum listener: it accepts TCP connections and runs each TLS handshake
//! in a task of its own (a slow or silent client never holds up the others), at most
//! [`MAX_HANDSHAKES`] at once and each for at most [`HANDSHAKE_TIMEOUT`]; axum serves the
//! connections whose handshake succeeded. Failed handshakes are logged at debug level only.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::server::TlsStream;

/// Handshakes in progress at once (more connections wait in the kernel's backlog).
pub(crate) const MAX_HANDSHAKES: usize = 256;

/// The longest a handshake may take before its connection is dropped.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The certificate chain and private key files (PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Why the TLS files cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("TLS: {0}")]
pub struct TlsError(String);

/// The rustls server configuration of `files` (HTTP/1.1; TLS 1.2 and 1.3).
pub(crate) fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, TlsError> {
    let cert = |path: &Path| path.display().to_string();
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|error| TlsError(format!("{}: {error}", cert(&files.cert))))?;
    if chain.is_empty() {
        return Err(TlsError(format!("{}: no certificate", cert(&files.cert))));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|error| TlsError(format!("{}: {error}", cert(&files.key))))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| TlsError(error.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|error| {
            TlsError(format!("the certificate and key do not go together: {error}"))
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A TCP listener that hands axum TLS connections.
pub(crate) struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    slots: Arc<Semaphore>,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    sender: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    pub(crate) fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> Self {
        let (sender, ready) = mpsc::channel(MAX_HANDSHAKES);
        Self {
            tcp,
            acceptor: TlsAcceptor::from(config),
            slots: Arc::new(Semaphore::new(MAX_HANDSHAKES)),
            ready,
            sender,
        }
    }

    /// Starts the handshake of one accepted connection.
    fn handshake(&self, stream: TcpStream, peer: SocketAddr) {
        let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() else {
            tracing::debug!(%peer, "too many TLS handshakes at once: connection dropped");
            return;
        };
        let (acceptor, sender) = (self.acceptor.clone(), self.sender.clone());
        tokio::spawn(async move {
            let _slot = slot;
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = sender.send((tls, peer)).await;
                }
                Ok(Err(error)) => tracing::debug!(%peer, %error, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            tokio::select! {
                Some(ready) = self.ready.recv() => return ready,
                accepted = self.tcp.accept() => match accepted {
                    Ok((stream, peer)) => self.handshake(stream, peer),
                    // Out of file descriptors and the like: wait, as axum's own listener does.
                    Err(error) => {
                        tracing::warn!(%error, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
