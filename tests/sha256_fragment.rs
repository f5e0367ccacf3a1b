//! The `#sha256=` fragment has one definition in two languages: the
//! admission rule `restore-url-format` (Rust) and etcd-init (POSIX sh). This
//! test runs the script's own block (between its `sha256-fragment` markers,
//! extracted from `src/mutate/etcd-init.sh`) under dash, bash and busybox sh, and the
//! Rust function, on the same URLs (edge cases and 300 seeded ones), and
//! asserts the same verdict and message: a URL admitted is one etcd-init
//! accepts, and `#sha256=abc` is refused at admission, not at restore time.

use std::{io::Write, process::Command};

use hcp_etcd_admission::rules::restore_url_sha256_fragment as sha256_fragment;

fn block() -> String {
    let script =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/mutate/etcd-init.sh")).expect("etcd-init.sh");
    let start = script.find("# BEGIN sha256-fragment").expect("BEGIN marker");
    let end = script.find("# END sha256-fragment").expect("END marker");
    script[start..end].to_string()
}

/// Fragments: the edge cases and a seeded generator over the alphabet that matters.
fn urls() -> Vec<String> {
    let digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    let mut out: Vec<String> = [
        "".to_string(),
        "#".to_string(),
        "#sha256=".to_string(),
        format!("#sha256={digest}"),
        format!("#sha256={}", digest.to_uppercase()),
        format!("#sha256={}", &digest[..63]),
        format!("#sha256={digest}0"),
        format!("#sha256={}G", &digest[..63]),
        format!("#SHA256={digest}"),
        format!("#sha256={digest}#x"),
        "#sha256=abc".to_string(),
        "#part-2".to_string(),
        "#sha256=é".to_string(),
    ]
    .into_iter()
    .map(|f| format!("https://h.example/snap.db?X-Amz-Expires=60{f}"))
    .collect();
    let alphabet: Vec<char> = "0123456789abcdefABCDEFgG#=xé".chars().collect();
    let mut seed: u64 = 0x5eed_5a25;
    for _ in 0..300 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let len = [0, 1, 3, 63, 64, 65][(seed % 6) as usize];
        let mut digest = String::new();
        for k in 0..len {
            let r = seed.rotate_left(k as u32 * 5);
            // Mostly hex, so that 64-digit cases are common.
            let c = if r.is_multiple_of(16) {
                alphabet[(r as usize / 16) % alphabet.len()]
            } else {
                alphabet[(r as usize / 16) % 22]
            };
            digest.push(c);
        }
        out.push(format!("https://h.example/snap.db#sha256={digest}"));
    }
    out
}

/// The script block's verdict for each URL: `ok <digest>`, `none` or `fail <message>`.
fn script_verdicts(shell: &str, urls: &[String]) -> Vec<String> {
    let program = format!(
        r#"fail() {{ printf 'fail %s\n' "$1"; exit 0; }}
log() {{ :; }}
while IFS= read -r URL; do
  ( {block}
    if [ -n "$EXPECTED_SHA" ]; then printf 'ok %s\n' "$EXPECTED_SHA"; else printf 'none\n'; fi )
done"#,
        block = block()
    );
    // busybox runs its sh applet (`busybox sh -c`), the others themselves.
    let args: &[&str] = if shell == "busybox" { &["sh", "-c", &program] } else { &["-c", &program] };
    let mut child = Command::new(shell)
        .args(args)
        .env("LC_ALL", "C.UTF-8")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{shell}: {e}"));
    let mut stdin = child.stdin.take().expect("stdin");
    for u in urls {
        writeln!(stdin, "{u}").expect("write");
    }
    drop(stdin);
    let out = child.wait_with_output().expect("shell");
    assert!(out.status.success(), "{shell}");
    String::from_utf8(out.stdout).expect("utf-8").lines().map(str::to_string).collect()
}

#[test]
fn admission_and_etcd_init_judge_every_fragment_alike() {
    let urls = urls();
    for shell in ["dash", "bash", "busybox"] {
        let verdicts = script_verdicts(shell, &urls);
        assert_eq!(verdicts.len(), urls.len(), "{shell}: one verdict per URL");
        let (mut accepted, mut refused) = (0, 0);
        for (url, script) in urls.iter().zip(&verdicts) {
            let rust = match sha256_fragment(url) {
                Ok(Some(d)) => format!("ok {d}"),
                Ok(None) => "none".to_string(),
                Err(m) => format!("fail {m}"),
            };
            assert_eq!(&rust, script, "{shell}: {url}");
            if script.starts_with("fail") {
                refused += 1;
            } else {
                accepted += 1;
            }
        }
        assert!(
            accepted > 20 && refused > 20,
            "{shell}: both verdicts covered ({accepted} accepted, {refused} refused)"
        );
    }
}
