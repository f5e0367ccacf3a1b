//! A minimal kube-apiserver stand-in on loopback (there is none on these
//! machines) serving exactly the requests the server's cluster watch makes:
//! LIST and WATCH of hostedcontrolplanes, hcpetcdbackups and statefulsets
//! (honouring a `metadata.name=` field selector), the namespaced LISTs the
//! live reads make, and GET of one Secret or StatefulSet (403 in the
//! namespace `forbidden`).
//! Objects can be replaced while it runs ([`FakeApi::set_objects`]): its
//! WATCH streams never send events, so the server's caches keep what they
//! listed first — a watch lagging behind the cluster.
//! Every request is recorded, so tests can assert what was (not) asked for.
#![allow(dead_code)]

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{body::Body, http::Uri, response::IntoResponse, Router};
use serde_json::{json, Value};

pub struct FakeApi {
    pub addr: SocketAddr,
    /// `METHOD path?query` of every request, in order.
    pub requests: Arc<Mutex<Vec<String>>>,
    objects: Arc<Mutex<Arc<Vec<Value>>>>,
}

impl FakeApi {
    /// What LISTs and GETs answer from now on (watches stay silent).
    pub fn set_objects(&self, objects: Vec<Value>) {
        if let Ok(mut o) = self.objects.lock() {
            *o = Arc::new(objects);
        }
    }

    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// A kube client for it.
    pub fn client(&self) -> kube::Client {
        let config = kube::Config::new(format!("http://{}", self.addr).parse().expect("url"));
        kube::Client::try_from(config).expect("client")
    }

    /// A kubeconfig file pointing at it (for a `serve` process).
    pub fn kubeconfig(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{}\nusers:\n- name: fake\n  user: {{}}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\n",
            self.addr
        );
        std::fs::write(&path, text).expect("kubeconfig");
        path
    }
}

fn query_param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| v.replace("%3D", "=").replace("%3d", "="))
    })
}

/// Serves `objects` (by kind); LIST answers are delayed by `list_delay`.
pub async fn start(objects: Vec<Value>, list_delay: Duration) -> FakeApi {
    start_with_delays(objects, list_delay, Duration::ZERO).await
}

/// [`start`], with Secret GETs delayed by `get_delay` too (a slow apiserver).
pub async fn start_with_delays(objects: Vec<Value>, list_delay: Duration, get_delay: Duration) -> FakeApi {
    let requests = Arc::new(Mutex::new(Vec::new()));
    let shared = Arc::new(Mutex::new(Arc::new(objects)));
    let rec = requests.clone();
    let state = shared.clone();
    let app = Router::new().fallback(move |method: axum::http::Method, uri: Uri| {
        let objects = state.lock().map(|o| o.clone()).unwrap_or_default();
        let rec = rec.clone();
        async move {
            let path = uri.path().to_string();
            let query = uri.query().unwrap_or_default().to_string();
            if let Ok(mut r) = rec.lock() {
                r.push(format!("{method} {path}?{query}"));
            }
            let json_reply = |code: u16, v: Value| {
                (
                    axum::http::StatusCode::from_u16(code).unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR),
                    [("content-type", "application/json")],
                    v.to_string(),
                )
                    .into_response()
            };
            let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
            // GET of one object: /api/v1/namespaces/{ns}/secrets/{name}
            // and /apis/apps/v1/namespaces/{ns}/statefulsets/{name}.
            let one = match segments.as_slice() {
                ["api", "v1", "namespaces", ns, "secrets", name] => Some((*ns, "secrets", "Secret", *name)),
                ["apis", "apps", "v1", "namespaces", ns, "statefulsets", name] => {
                    Some((*ns, "statefulsets", "StatefulSet", *name))
                }
                _ => None,
            };
            if let Some((ns, plural, kind, name)) = one {
                // A namespace the webhook has no Role in.
                if ns == "forbidden" {
                    return json_reply(
                        403,
                        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": format!("{plural} \"{name}\" is forbidden"), "reason": "Forbidden", "code": 403}),
                    );
                }
                tokio::time::sleep(get_delay).await;
                let found = objects
                    .iter()
                    .find(|o| o["kind"] == kind && o["metadata"]["namespace"] == ns && o["metadata"]["name"] == name);
                return match found {
                    Some(s) => json_reply(200, s.clone()),
                    None => json_reply(
                        404,
                        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": format!("{plural} \"{name}\" not found"), "reason": "NotFound",
                            "details": {"name": name, "kind": plural}, "code": 404}),
                    ),
                };
            }
            // A namespaced LIST (the live reads): /apis/{group}/{version}/namespaces/{ns}/{plural}.
            let (path, in_ns) = match segments.as_slice() {
                ["apis", group, version, "namespaces", ns, plural] => {
                    (format!("/apis/{group}/{version}/{plural}"), Some(ns.to_string()))
                }
                _ => (path.clone(), None),
            };
            let (kind, api_version) = match path.as_str() {
                "/apis/hypershift.openshift.io/v1beta1/hostedcontrolplanes" => {
                    ("HostedControlPlane", "hypershift.openshift.io/v1beta1")
                }
                "/apis/hypershift.openshift.io/v1beta1/hcpetcdbackups" => {
                    ("HCPEtcdBackup", "hypershift.openshift.io/v1beta1")
                }
                "/apis/apps/v1/statefulsets" => ("StatefulSet", "apps/v1"),
                _ => {
                    return json_reply(
                        403,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden",
                            "message": format!("the fake apiserver does not serve {path}"), "code": 403}),
                    )
                }
            };
            if matches!(query_param(&query, "watch").as_deref(), Some("true" | "1")) {
                let stream = futures::stream::pending::<Result<axum::body::Bytes, Infallible>>();
                return ([("content-type", "application/json")], Body::from_stream(stream)).into_response();
            }
            tokio::time::sleep(list_delay).await;
            let name =
                query_param(&query, "fieldSelector").and_then(|f| f.strip_prefix("metadata.name=").map(str::to_string));
            let items: Vec<&Value> = objects
                .iter()
                .filter(|o| o["kind"] == kind && name.as_deref().is_none_or(|n| o["metadata"]["name"] == n))
                .filter(|o| in_ns.as_deref().is_none_or(|ns| o["metadata"]["namespace"] == ns))
                .collect();
            json_reply(
                200,
                json!({"apiVersion": api_version, "kind": format!("{kind}List"),
                    "metadata": {"resourceVersion": "100"}, "items": items}),
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    FakeApi { addr, requests, objects: shared }
}
