//! A real HTTPS client for the server tests: tokio-rustls + hyper 1, trusting
//! only the CA it is given (and presenting a client certificate when asked).
#![allow(dead_code)]

use std::{net::SocketAddr, sync::Arc, time::Duration};

use http_body_util::{BodyExt, Full};
use hyper::{body::Bytes, Request};
use hyper_util::rt::TokioIo;
use rustls::{
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer, ServerName},
    ClientConfig, RootCertStore,
};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

pub fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A plain TCP connection from the loopback source address `src`.
pub async fn connect_from(addr: SocketAddr, src: std::net::IpAddr) -> Result<TcpStream, String> {
    let sock = tokio::net::TcpSocket::new_v4().map_err(|e| format!("socket: {e}"))?;
    sock.bind(SocketAddr::new(src, 0)).map_err(|e| format!("bind {src}: {e}"))?;
    sock.connect(addr).await.map_err(|e| format!("connect: {e}"))
}

pub struct Client {
    config: Arc<ClientConfig>,
    /// The same, offering only `h2` in ALPN.
    h2_config: Arc<ClientConfig>,
}

pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
    /// The leaf certificate the server presented (DER).
    pub server_cert: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl Client {
    /// Trusts every CA in `ca_pems`; presents `client` (cert, key) if given.
    pub fn new(ca_pems: &[&str], client: Option<(&str, &str)>) -> Self {
        install_provider();
        let mut roots = RootCertStore::empty();
        for pem in ca_pems {
            for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                roots.add(c.expect("CA PEM")).expect("add CA");
            }
        }
        let builder = ClientConfig::builder().with_root_certificates(roots);
        let config = match client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain: Vec<CertificateDer<'static>> =
                    CertificateDer::pem_slice_iter(cert.as_bytes()).collect::<Result<_, _>>().expect("client cert");
                let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("client key");
                builder.with_client_auth_cert(chain, key).expect("client auth")
            }
        };
        let mut config = config;
        // Fresh handshakes only: a resumed session would hide a rotated certificate.
        config.resumption = rustls::client::Resumption::disabled();
        let mut h2 = config.clone();
        h2.alpn_protocols = vec![b"h2".to_vec()];
        Self { config: Arc::new(config), h2_config: Arc::new(h2) }
    }

    /// A TLS connection that has finished its handshake (HTTP/1.1 ALPN-less).
    pub async fn connect(&self, addr: SocketAddr) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
        let tcp = TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
        TlsConnector::from(self.config.clone())
            .connect(ServerName::try_from("localhost").map_err(|e| e.to_string())?, tcp)
            .await
            .map_err(|e| format!("tls: {e}"))
    }

    /// [`Client::connect`] from the loopback source address `src` (to tell
    /// one caller from another by address on one machine).
    pub async fn connect_from(
        &self,
        addr: SocketAddr,
        src: std::net::IpAddr,
    ) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
        let tcp = connect_from(addr, src).await?;
        self.tls(tcp).await
    }

    /// [`Self::connect_from`] with a 4 KiB receive buffer: a client that
    /// does not read lets the server send little before its writes stall.
    pub async fn connect_from_small_window(
        &self,
        addr: SocketAddr,
        src: std::net::IpAddr,
    ) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
        let sock = tokio::net::TcpSocket::new_v4().map_err(|e| format!("socket: {e}"))?;
        sock.set_recv_buffer_size(4096).map_err(|e| format!("SO_RCVBUF: {e}"))?;
        sock.bind(SocketAddr::new(src, 0)).map_err(|e| format!("bind {src}: {e}"))?;
        let tcp = sock.connect(addr).await.map_err(|e| format!("connect: {e}"))?;
        self.tls(tcp).await
    }

    async fn tls(&self, tcp: TcpStream) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
        TlsConnector::from(self.config.clone())
            .connect(ServerName::try_from("localhost").map_err(|e| e.to_string())?, tcp)
            .await
            .map_err(|e| format!("tls: {e}"))
    }

    /// An HTTP/2 connection (ALPN h2): a request sender.
    pub async fn h2(&self, addr: SocketAddr) -> Result<hyper::client::conn::http2::SendRequest<H2Body>, String> {
        let tcp = TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
        let tls = TlsConnector::from(self.h2_config.clone())
            .connect(ServerName::try_from("localhost").map_err(|e| e.to_string())?, tcp)
            .await
            .map_err(|e| format!("tls: {e}"))?;
        if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            return Err("the server did not negotiate h2".into());
        }
        let (sender, conn) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), TokioIo::new(tls))
                .await
                .map_err(|e| format!("h2 handshake: {e}"))?;
        tokio::spawn(conn);
        Ok(sender)
    }

    /// [`Client::h2`] from the loopback source address `src`.
    pub async fn h2_from(
        &self,
        addr: SocketAddr,
        src: std::net::IpAddr,
    ) -> Result<hyper::client::conn::http2::SendRequest<H2Body>, String> {
        let tcp = connect_from(addr, src).await?;
        let tls = TlsConnector::from(self.h2_config.clone())
            .connect(ServerName::try_from("localhost").map_err(|e| e.to_string())?, tcp)
            .await
            .map_err(|e| format!("tls: {e}"))?;
        let (sender, conn) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), TokioIo::new(tls))
                .await
                .map_err(|e| format!("h2 handshake: {e}"))?;
        tokio::spawn(conn);
        Ok(sender)
    }

    /// One request over HTTP/2 on a fresh connection.
    pub async fn request_h2(&self, addr: SocketAddr, method: &str, path: &str, body: H2Body) -> Result<Reply, String> {
        let mut sender = self.h2(addr).await?;
        send_h2(&mut sender, method, path, body).await
    }

    /// Writes a POST by hand (ignoring write errors, as Go's client does when
    /// the server answers early) and reads the status code and body.
    pub async fn raw_post(&self, addr: SocketAddr, path: &str, body: &[u8]) -> Result<(u16, String), String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let tcp = TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
        let mut tls = TlsConnector::from(self.config.clone())
            .connect(ServerName::try_from("localhost").map_err(|e| e.to_string())?, tcp)
            .await
            .map_err(|e| format!("tls: {e}"))?;
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        let _ = tls.write_all(head.as_bytes()).await;
        let _ = tls.write_all(body).await;
        let _ = tls.flush().await;
        let mut out = Vec::new();
        let _ = tls.read_to_end(&mut out).await;
        let text = String::from_utf8_lossy(&out).into_owned();
        let status =
            text.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| format!("no status line in {text:?}"))?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        Ok((status, body))
    }

    /// A JSON POST on a fresh connection from the loopback source address `src`.
    pub async fn post_json_from(
        &self,
        addr: SocketAddr,
        src: std::net::IpAddr,
        path: &str,
        v: &serde_json::Value,
    ) -> Result<Reply, String> {
        let tcp = connect_from(addr, src).await?;
        self.request_on(tcp, "POST", path, serde_json::to_vec(v).unwrap_or_default()).await
    }

    /// One request on a fresh connection.
    pub async fn request(&self, addr: SocketAddr, method: &str, path: &str, body: Vec<u8>) -> Result<Reply, String> {
        let tcp = TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
        self.request_on(tcp, method, path, body).await
    }

    /// One request over TLS on `tcp`.
    async fn request_on(&self, tcp: TcpStream, method: &str, path: &str, body: Vec<u8>) -> Result<Reply, String> {
        let tls = TlsConnector::from(self.config.clone())
            .connect(ServerName::try_from("localhost").map_err(|e| e.to_string())?, tcp)
            .await
            .map_err(|e| format!("tls: {e}"))?;
        let server_cert = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.as_ref().to_vec())
            .unwrap_or_default();
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.map_err(|e| format!("handshake: {e}"))?;
        tokio::spawn(conn);
        sender.ready().await.map_err(|e| format!("ready: {e}"))?;
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let resp = sender.send_request(req).await.map_err(|e| format!("send: {e}"))?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.map_err(|e| format!("body: {e}"))?.to_bytes().to_vec();
        Ok(Reply { status, body, server_cert })
    }

    pub async fn post_json_h2(&self, addr: SocketAddr, path: &str, v: &serde_json::Value) -> Result<Reply, String> {
        self.request_h2(addr, "POST", path, full(serde_json::to_vec(v).unwrap_or_default())).await
    }

    pub async fn post_json(&self, addr: SocketAddr, path: &str, v: &serde_json::Value) -> Result<Reply, String> {
        self.request(addr, "POST", path, serde_json::to_vec(v).unwrap_or_default()).await
    }
}

/// Request bodies of the HTTP/2 client: whole or streamed.
pub type H2Body = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

pub fn full(body: Vec<u8>) -> H2Body {
    Full::new(Bytes::from(body)).boxed()
}

/// A body sent in `chunk`-byte frames with no declared length.
pub fn streamed(body: Vec<u8>, chunk: usize) -> H2Body {
    let frames: Vec<Result<hyper::body::Frame<Bytes>, std::convert::Infallible>> =
        body.chunks(chunk.max(1)).map(|c| Ok(hyper::body::Frame::data(Bytes::copy_from_slice(c)))).collect();
    http_body_util::StreamBody::new(futures::stream::iter(frames)).boxed()
}

/// `body` sent in `pieces` frames spread over `over` (a caller that keeps a
/// request in flight, finishing its body within the body deadline).
pub fn trickled(body: Vec<u8>, pieces: usize, over: Duration) -> H2Body {
    let pieces = pieces.max(1);
    let step = over / pieces as u32;
    let size = body.len().div_ceil(pieces).max(1);
    let chunks: Vec<Bytes> = body.chunks(size).map(Bytes::copy_from_slice).collect();
    let stream = futures::stream::unfold(chunks.into_iter(), move |mut it| async move {
        let next = it.next()?;
        tokio::time::sleep(step).await;
        Some((Ok(hyper::body::Frame::data(next)), it))
    });
    http_body_util::StreamBody::new(stream).boxed()
}

pub async fn send_h2(
    sender: &mut hyper::client::conn::http2::SendRequest<H2Body>,
    method: &str,
    path: &str,
    body: H2Body,
) -> Result<Reply, String> {
    sender.ready().await.map_err(|e| format!("ready: {e}"))?;
    let req = Request::builder()
        .method(method)
        .uri(format!("https://localhost{path}"))
        .header("content-type", "application/json")
        .body(body)
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| format!("send: {e}"))?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.map_err(|e| format!("body: {e}"))?.to_bytes().to_vec();
    Ok(Reply { status, body, server_cert: Vec::new() })
}
