//! What the kubelet does to a container before it runs, reproduced for the
//! tests that run pods' containers as processes (there is no kubelet here):
//! `$(VAR)` expansion of env, command and args, and a private mount
//! namespace for the volume mounts.
#![allow(dead_code)]

use std::{path::Path, process::Command};

/// kubelet's `$(VAR)` expansion (k8s.io/kubernetes third_party/forked/golang/expansion):
/// `$(NAME)` of a defined variable is its value, of an undefined one stays
/// `$(NAME)`; `$$` is `$`; `$` before any other character, a `$(` without
/// `)` and a trailing `$` stay as written.
pub fn expand(input: &str, defined: &[(String, String)]) -> String {
    let chars: Vec<char> = input.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '$' || i + 1 >= chars.len() {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        match chars[i + 1] {
            '$' => {
                out.push('$');
                i += 2;
            }
            '(' => match chars[i + 2..].iter().position(|&c| c == ')') {
                Some(len) => {
                    let name: String = chars[i + 2..i + 2 + len].iter().collect();
                    match defined.iter().rev().find(|(n, _)| *n == name) {
                        Some((_, v)) => out.push_str(v),
                        None => out.push_str(&format!("$({name})")),
                    }
                    i += 3 + len;
                }
                None => {
                    out.push_str("$(");
                    i += 2;
                }
            },
            other => {
                out.push('$');
                out.push(other);
                i += 2;
            }
        }
    }
    out
}

/// A command in a private mount namespace after `setup` (mounts) ran.
pub fn in_namespace(setup: &[String], program: &[&str]) -> Command {
    use std::os::unix::process::CommandExt as _;
    let mut cmd = Command::new("/usr/bin/unshare");
    // A process group of its own: a container's kill takes everything it
    // started (tests/restore_etcd/faults.rs kills the group).
    cmd.process_group(0);
    cmd.args(["-m", "--propagation", "private", "/bin/sh", "-c"]);
    let steps: String = setup.iter().map(|s| format!("{s} && ")).collect();
    cmd.arg(format!("{steps}exec \"$@\"")).arg("sh");
    cmd.args(program);
    cmd
}

/// A private /dev in the mount namespace (null, zero, random, urandom from
/// the host) whose termination-log is `file` on the host: the script writes
/// its result where the kubelet reads it, and the host's /dev stays untouched.
pub fn private_dev(file: &Path) -> Vec<String> {
    let _ = std::fs::write(file, b"");
    let d = "/run/hcp-etcd-init-dev";
    let mut setup = vec![format!("mkdir -p {d}"), format!("mount -t tmpfs -o size=64k tmpfs {d}")];
    for n in ["null", "zero", "random", "urandom"] {
        setup.push(format!("touch {d}/{n}"));
        setup.push(format!("mount --bind /dev/{n} {d}/{n}"));
    }
    setup.push(format!("ln -s /proc/self/fd {d}/fd"));
    setup.push(format!("touch {d}/termination-log"));
    setup.push(format!("mount --bind '{}' {d}/termination-log", file.display()));
    setup.push(format!("mount --move {d} /dev"));
    setup
}
