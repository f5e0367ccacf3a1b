//! The load benchmark (run it with scripts/bench-load.sh).
//!
//! Starts the release `serve` and the floor (`examples/floor.rs`: same TLS and
//! HTTP stack, canned answer) on loopback, each with a generated certificate,
//! and drives both with the same recorded AdmissionReviews:
//! 1. capacity: `wrk` (keep-alive HTTPS, fixed connections, fixed time), the
//!    four reviews in rotation (backup CREATE, backup UPDATE, HostedCluster
//!    with a presigned URL, etcd StatefulSet mutation);
//! 2. latency at 50 % of the floor's capacity: `hey` rate-limited, the backup CREATE.
//!
//! It also reports the server's time from exec to a 200 on /readyz and its
//! peak RSS (VmHWM). Output: a Markdown table on stdout.
//!
//! `bench_load [--quick] [--seconds N] [--connections N]`

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

#[path = "support/mix.rs"]
mod mix;
use mix::{decision_cost, fixture, recorded};

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[derive(Debug, Default, Clone)]
struct Run {
    rps: f64,
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
    errors: u64,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(18443)
}

fn tls_config(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()).flatten() {
        let _ = roots.add(c);
    }
    Arc::new(rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth())
}

/// One GET over a fresh TLS connection; true on a 200.
fn get_ok(addr: SocketAddr, cfg: &Arc<rustls::ClientConfig>, path: &str) -> bool {
    let Ok(mut tcp) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else { return false };
    let Ok(name) = rustls::pki_types::ServerName::try_from("localhost") else { return false };
    let Ok(mut conn) = rustls::ClientConnection::new(cfg.clone(), name) else { return false };
    let mut tls = rustls::Stream::new(&mut conn, &mut tcp);
    let req = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
    if tls.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 12];
    tls.read_exact(&mut buf).is_ok() && buf.starts_with(b"HTTP/1.1 200")
}

fn wait_ready(addr: SocketAddr, cfg: &Arc<rustls::ClientConfig>, path: &str, started: Instant) -> Duration {
    while !get_ok(addr, cfg, path) {
        assert!(started.elapsed() < Duration::from_secs(30), "{addr}{path} never became ready");
        std::thread::sleep(Duration::from_micros(500));
    }
    started.elapsed()
}

fn seconds(v: &str) -> f64 {
    let v = v.trim();
    let (num, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len()));
    let n: f64 = num.parse().unwrap_or(f64::NAN);
    match unit {
        "us" => n / 1e6,
        "ms" => n / 1e3,
        "s" => n,
        "m" => n * 60.0,
        _ => n,
    }
}

fn lua_script(dir: &Path, reqs: &[(String, String)]) -> PathBuf {
    let mut s = String::from("local reqs = {}\n");
    for (path, body) in reqs {
        s.push_str(&format!("table.insert(reqs, wrk.format(\"POST\", \"{path}\", {{[\"Content-Type\"] = \"application/json\"}}, [==[{body}]==]))\n"));
    }
    s.push_str("local i = 0\nrequest = function()\n  i = i % #reqs + 1\n  return reqs[i]\nend\n");
    s.push_str("response = function(status, headers, body)\n  if status ~= 200 then wrk.thread:stop() end\nend\n");
    let p = dir.join("mix.lua");
    std::fs::write(&p, s).expect("lua");
    p
}

fn wrk(addr: SocketAddr, script: &Path, secs: u64, conns: u32) -> Run {
    let out = Command::new("wrk")
        .args(["-t", "2", "-c", &conns.to_string(), "-d", &format!("{secs}s"), "--latency", "-s"])
        .arg(script)
        .arg(format!("https://127.0.0.1:{}", addr.port()))
        .output()
        .expect("wrk (apt-get install wrk)");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut r = Run::default();
    for line in text.lines().map(str::trim) {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["Latency", _avg, _stdev, max, ..] => r.max = seconds(max),
            ["50%", v] => r.p50 = seconds(v),
            ["90%", v] => r.p90 = seconds(v),
            ["99%", v] => r.p99 = seconds(v),
            ["Requests/sec:", v] => r.rps = v.parse().unwrap_or(0.0),
            ["Non-2xx", "or", "3xx", "responses:", n] => r.errors += n.parse::<u64>().unwrap_or(0),
            ["Socket", "errors:", rest @ ..] => {
                r.errors += rest.iter().filter_map(|t| t.trim_end_matches(',').parse::<u64>().ok()).sum::<u64>()
            }
            _ => {}
        }
    }
    assert!(r.rps > 0.0, "wrk printed no rate:\n{text}\n{}", String::from_utf8_lossy(&out.stderr));
    r
}

fn hey(addr: SocketAddr, body: &Path, rate: f64, secs: u64) -> Run {
    let workers = 16.0;
    let out = Command::new("hey")
        // -host: hey otherwise sends "127.0.0.1:PORT" as the TLS SNI, which rustls rightly refuses.
        .args([
            "-host",
            "localhost",
            "-z",
            &format!("{secs}s"),
            "-c",
            "16",
            "-q",
            &format!("{:.0}", (rate / workers).max(1.0)),
            "-m",
            "POST",
            "-T",
            "application/json",
            "-D",
        ])
        .arg(body)
        .arg(format!("https://127.0.0.1:{}/validate/hcpetcdbackups", addr.port()))
        .output()
        .expect("hey (apt-get install hey)");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut r = Run::default();
    let mut ok = 0u64;
    for line in text.lines().map(str::trim) {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["Requests/sec:", v] => r.rps = v.parse().unwrap_or(0.0),
            ["Slowest:", v, "secs"] => r.max = v.parse().unwrap_or(0.0),
            ["50%", "in", v, "secs"] => r.p50 = v.parse().unwrap_or(0.0),
            ["90%", "in", v, "secs"] => r.p90 = v.parse().unwrap_or(0.0),
            ["99%", "in", v, "secs"] => r.p99 = v.parse().unwrap_or(0.0),
            ["[200]", n, "responses"] => ok = n.parse().unwrap_or(0),
            [code, n, "responses"] if code.starts_with('[') => r.errors += n.parse::<u64>().unwrap_or(0),
            _ => {}
        }
    }
    assert!(ok > 0, "hey got no 200s:\n{text}");
    r
}

fn vm_hwm_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn ms(s: f64) -> String {
    format!("{:.2}", s * 1e3)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let flag = |name: &str, default: u64| -> u64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let secs = if quick { 1 } else { flag("--seconds", 10) };
    let conns = flag("--connections", 32) as u32;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().and_then(|d| d.parent()).map(Path::to_path_buf))
        .expect("exe dir");
    let server_bin = exe_dir.join("hcp-etcd-admission");
    let floor_bin = exe_dir.join("examples/floor");
    let dir = std::env::temp_dir().join(format!("hcp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let set = hcp_etcd_admission::server::certs::generate("bench CA", &["localhost".into(), "127.0.0.1".into()], 2)
        .expect("certs");
    hcp_etcd_admission::server::certs::write(&dir, &set).expect("write certs");
    let cfg = tls_config(&set.ca_pem);
    std::fs::write(dir.join("hcp.json"), fixture("statefulset.yaml", "hcp").to_string()).expect("hcp");
    let reqs = recorded();
    let script = lua_script(&dir, &reqs);
    std::fs::write(dir.join("backup.json"), &reqs[0].1).expect("body");

    // --- the server
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let started = Instant::now();
    // BENCH_SERVE_PRELOAD: an allocator to LD_PRELOAD into `serve` only (comparisons).
    let mut serve_cmd = Command::new(&server_bin);
    if let Some(preload) = std::env::var_os("BENCH_SERVE_PRELOAD") {
        serve_cmd.env("LD_PRELOAD", preload);
    }
    let server = Proc(
        serve_cmd
            .args(["serve", "--listen", &addr.to_string(), "--watch-hostedcontrolplanes", "never", "--tls-cert"])
            .arg(dir.join("tls.crt"))
            .arg("--tls-key")
            .arg(dir.join("tls.key"))
            .arg("--context")
            .arg(dir.join("hcp.json"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("serve.log")).expect("log"))
            .spawn()
            .expect("serve (cargo build --release)"),
    );
    let ready = wait_ready(addr, &cfg, "/readyz", started);
    let server_cap = wrk(addr, &script, secs, conns);

    // --- the floor
    let fport = free_port();
    let faddr: SocketAddr = format!("127.0.0.1:{fport}").parse().expect("addr");
    let floor = Proc(
        Command::new(&floor_bin)
            .arg(faddr.to_string())
            .arg(dir.join("tls.crt"))
            .arg(dir.join("tls.key"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("floor example"),
    );
    let mut waited = 0;
    while TcpStream::connect(faddr).is_err() && waited < 3000 {
        std::thread::sleep(Duration::from_millis(1));
        waited += 1;
    }
    let floor_cap = wrk(faddr, &script, secs, conns);
    let half = floor_cap.rps / 2.0;
    let floor_half = hey(faddr, &dir.join("backup.json"), half, secs);
    drop(floor);
    let server_half = hey(addr, &dir.join("backup.json"), half, secs);
    let server_own_half = hey(addr, &dir.join("backup.json"), server_cap.rps / 2.0, secs);
    let rss_mib = vm_hwm_kib(server.0.id()) as f64 / 1024.0;
    drop(server);

    println!("| run | requests/s | p50 ms | p90 ms | p99 ms | max ms | errors |");
    println!("|---|---|---|---|---|---|---|");
    for (name, r) in [
        ("serve, capacity (wrk, 4-review mix)", &server_cap),
        ("floor, capacity (wrk, 4-review mix)", &floor_cap),
        ("serve at 50% of floor capacity (hey, backup CREATE)", &server_half),
        ("floor at 50% of its capacity (hey, backup CREATE)", &floor_half),
        ("serve at 50% of its own capacity (hey, backup CREATE)", &server_own_half),
    ] {
        println!(
            "| {name} | {:.0} | {} | {} | {} | {} | {} |",
            r.rps,
            ms(r.p50),
            ms(r.p90),
            ms(r.p99),
            ms(r.max),
            r.errors
        );
    }
    let decision = decision_cost(&reqs, &fixture("statefulset.yaml", "hcp"), 200, 2000);
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
    // The floor's machine time per request plus the decision's CPU spread over the cores.
    let limit = 1.0 / (1.0 / floor_cap.rps + decision.as_secs_f64() / cores);
    println!();
    println!("serve / floor requests/s: {:.1} %", 100.0 * server_cap.rps / floor_cap.rps);
    println!(
        "decision cost (parse + plan + review + serialise, 4-review mix, one thread): {:.1} µs per request",
        decision.as_secs_f64() * 1e6
    );
    println!(
        "floor + decision (1 / (1/floor + decision/{cores:.0} cores)): {limit:.0} requests/s; serve reaches {:.1} % of it",
        100.0 * server_cap.rps / limit
    );
    println!("target rate for the 50% runs: {half:.0} requests/s");
    println!("serve peak RSS (VmHWM): {rss_mib:.1} MiB");
    println!("serve exec -> /readyz 200: {:.1} ms", ready.as_secs_f64() * 1e3);
    println!("duration per run: {secs} s, wrk: 2 threads, {conns} connections; hey: 16 workers");
    let _ = std::fs::remove_dir_all(&dir);
}
