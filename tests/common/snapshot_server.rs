//! A test HTTPS object store for the restore tests (hyper over tokio-rustls,
//! certificate from a generated CA). It imitates what etcd-init meets:
//! `/snapshots/<file>` serves a file (ignoring the presign query),
//! `/forbidden/*` (and `/snapshots/*` once [`SnapshotServer::expire`]d) 403 with an S3 AccessDenied body, `/flaky/*` 503 twice then
//! the file, `/cut/*` announces the full length and sends half, `/xml200/*`
//! an error document with status 200, `/html200/*` an HTML page with 200,
//! `/json200/*` a JSON error with 200, `/slow/*` announces the file, sends
//! 1 KiB and stalls for a minute, `/delay/*` waits 8 s, then serves the file;
//! anything else 404. Every request's raw
//! path and query are recorded so a test can prove what the server received.
#![allow(dead_code)]

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
use tokio::io::AsyncWriteExt;

pub struct SnapshotServer {
    pub addr: SocketAddr,
    pub ca_file: PathBuf,
    pub seen: Arc<Mutex<Vec<String>>>,
    files: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    expired: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SnapshotServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SnapshotServer {
    /// Serves `files` (name → bytes) on 127.0.0.1 with a certificate for 127.0.0.1/localhost.
    pub async fn start(dir: &std::path::Path, files: HashMap<String, Vec<u8>>) -> Self {
        super::https::install_provider();
        let set = hcp_etcd_admission::server::certs::generate(
            "snapshot store CA",
            &["127.0.0.1".into(), "localhost".into()],
            2,
        )
        .expect("certs");
        let ca_file = dir.join("store-ca.crt");
        std::fs::write(&ca_file, &set.ca_pem).expect("ca");
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(set.cert_pem.as_bytes()).collect::<Result<_, _>>().expect("chain");
        let key = PrivateKeyDer::from_pem_slice(set.key_pem.as_bytes()).expect("key");
        let config =
            rustls::ServerConfig::builder().with_no_client_auth().with_single_cert(chain, key).expect("config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let files = Arc::new(Mutex::new(files));
        let served = files.clone();
        let flaky = Arc::new(Mutex::new(0u32));
        let expired = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let expired2 = expired.clone();
        let seen2 = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                let acceptor = acceptor.clone();
                let (files, seen, flaky) = (files.clone(), seen2.clone(), flaky.clone());
                let expired = expired2.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                    // /cut/* is answered by hand: full Content-Length, half the body, close.
                    let mut peek = [0u8; 2048];
                    let n = {
                        use tokio::io::AsyncReadExt;
                        tls.read(&mut peek).await.unwrap_or(0)
                    };
                    let head = String::from_utf8_lossy(&peek[..n]).to_string();
                    let target = head.split(' ').nth(1).unwrap_or("").to_string();
                    if let Ok(mut s) = seen.lock() {
                        s.push(target.clone());
                    }
                    let path = target.split('?').next().unwrap_or("").to_string();
                    let name = path.rsplit('/').next().unwrap_or("").to_string();
                    let file = files.lock().ok().and_then(|f| f.get(&name).cloned());
                    if let (Some("slow"), Some(f)) = (path.split('/').nth(1), file.as_ref()) {
                        let header = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", f.len());
                        let _ = tls.write_all(header.as_bytes()).await;
                        let _ = tls.write_all(&f[..f.len().min(1024)]).await;
                        let _ = tls.flush().await;
                        tokio::time::sleep(std::time::Duration::from_secs(60)).await;
                        return;
                    }
                    if path.split('/').nth(1) == Some("delay") {
                        tokio::time::sleep(std::time::Duration::from_secs(8)).await;
                    }
                    let gone = expired.load(std::sync::atomic::Ordering::SeqCst);
                    let (status, body, cut): (u16, Vec<u8>, bool) = match (path.split('/').nth(1), file) {
                        (Some("snapshots"), _) if gone => (403, b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>".to_vec(), false),
                        (Some("snapshots" | "delay"), Some(f)) => (200, f, false),
                        (Some("cut"), Some(f)) => (200, f, true),
                        (Some("flaky"), Some(f)) => {
                            let mut k = flaky.lock().map(|g| *g).unwrap_or(0);
                            k += 1;
                            if let Ok(mut g) = flaky.lock() {
                                *g = k;
                            }
                            if k <= 2 { (503, b"slow down".to_vec(), false) } else { (200, f, false) }
                        }
                        (Some("forbidden"), _) => (403, b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>".to_vec(), false),
                        (Some("html200"), _) => (200, b"\n  <!doctype html><html><body>Proxy error</body></html>".to_vec(), false),
                        (Some("json200"), _) => (200, b"{\"error\": \"AuthorizationFailure\"}".to_vec(), false),
                        (Some("xml200"), _) => (200, b"\xef\xbb\xbf<?xml version=\"1.0\"?><Error><Code>AuthenticationFailed</Code></Error>".to_vec(), false),
                        _ => (404, b"<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code></Error>".to_vec(), false),
                    };
                    let reason = match status {
                        200 => "OK",
                        403 => "Forbidden",
                        503 => "Service Unavailable",
                        _ => "Not Found",
                    };
                    let header = format!(
                        "HTTP/1.1 {status} {reason}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = tls.write_all(header.as_bytes()).await;
                    let end = if cut { body.len() / 2 } else { body.len() };
                    let _ = tls.write_all(&body[..end]).await;
                    let _ = tls.flush().await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        Self { addr, ca_file, seen, files: served, expired, task }
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.addr.port())
    }

    /// Serves other bytes under `name` from now on (an object overwritten
    /// in the bucket behind the same URL).
    pub fn replace(&self, name: &str, bytes: Vec<u8>) {
        if let Ok(mut f) = self.files.lock() {
            f.insert(name.to_string(), bytes);
        }
    }

    /// From now on (`true`) `/snapshots/*` answers 403 "Request has
    /// expired", as S3 does once a presigned URL's X-Amz-Expires has passed;
    /// `false` serves again.
    pub fn expire(&self, gone: bool) {
        self.expired.store(gone, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn requests(&self) -> Vec<String> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}
