//! The load benchmark's floor: the same TLS and HTTP stack as `serve`
//! (tokio-rustls, hyper-util auto, axum), answering every POST with a canned
//! AdmissionReview and deciding nothing. `serve` divided by this is what the
//! decision core, routing, metrics and logging cost.
//!
//! `floor <listen-addr> <tls.crt> <tls.key>`; prints `listening on https://ADDR`.

use std::{net::SocketAddr, sync::Arc};

use axum::{routing::post, Router};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto::Builder,
    service::TowerToHyperService,
};
use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};

const CANNED: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"00000000-0000-0000-0000-000000000000","allowed":true}}"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, listen, cert, key] = args.as_slice() else {
        return Err("usage: floor <listen-addr> <tls.crt> <tls.key>".into());
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)?.collect::<Result<_, _>>()?;
    let key = PrivateKeyDer::from_pem_file(key)?;
    let mut config = rustls::ServerConfig::builder().with_no_client_auth().with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let router = Router::new().fallback(post(|| async { ([("content-type", "application/json")], CANNED) }));
    let listener = tokio::net::TcpListener::bind(listen.parse::<SocketAddr>()?).await?;
    eprintln!("listening on https://{}", listener.local_addr()?);
    loop {
        let (tcp, _) = listener.accept().await?;
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            if let Ok(tls) = acceptor.accept(tcp).await {
                let _ = Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(tls), service).await;
            }
        });
    }
}
