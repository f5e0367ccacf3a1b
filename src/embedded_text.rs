//! Whole files the crate embeds (the committed schemas, the shell scripts),
//! kept in one static apart from the string literals: in the policy module,
//! before all of them, padded to whole 64 KiB windows.
//!
//! *Why:* Kubewarden's policy-server runs every request on a fresh instance
//! of the policy module, whose memory image is mapped copy-on-write; the
//! first read of a page maps the 64 KiB window around it (the kernel's
//! fault-around), and each window a request reads costs about 5 µs of
//! mapping and unmapping (BENCHMARKS.md, issue #35). `include_str!` places a
//! file among the crate's string literals (`.rodata`), which every request
//! reads; kept in `.data` instead (the last pass), the five files (115 KB)
//! still lay between the end of `.rodata` (serde's escape table, std's
//! vtables, libc's clock ids: read by every request) and the statics and the
//! start of the heap (read by every request too), two windows apart. The
//! validations never read the files (pre-initialisation compiles the
//! schemas and copies the restore script; only the backup Job mutation
//! copies `backup-verify.sh` into the Job), so in the module they go first:
//! the end of the literals, the statics and the heap's start then share one
//! window, and the start of the literals still begins one (the padding keeps
//! every literal's place within its window as it was).
//!
//! *How:* rustc emits a codegen unit's items in the order of their symbol
//! names (`CodegenUnit::items_in_deterministic_order`), and LLVM and
//! wasm-ld keep that order for the string literals and constants they
//! hold; the stack comes first (1 MiB), so the first of them starts a
//! window. The policy module is built with one codegen unit and fat LTO
//! (`[profile.wasm]`), the crate's unit first, so its items compete for
//! that place (the dependencies' come after). In the policy module the
//! files' static is named `_0hcp_embedded_files`, which sorts before every
//! mangled name (`_R…`, `_ZN…`): it is the lowest data, padded to whole
//! windows, and every literal after it keeps its place within its window.
//! (An unmangled item whose name sorts before it, a `#[no_mangle] static
//! VERSION` say, would take that place: the build fails then, below.) The
//! name makes the static an export of the linked module; the build's
//! pre-initialisation (`examples/preinit.rs`) checks the layout with
//! [`check_first_data`] (so does `tests/wasm_policy.rs`) and drops that
//! export, so the module ships with its waPC exports only. Native builds
//! keep the usual mangled name. LLVM could fold reads of a constant it can
//! see into literals of their own; [`text`] hands the bytes out through
//! [`std::hint::black_box`], which keeps their address opaque to it (a best
//! effort by its documentation; the layout check would see a file among the
//! literals).

use std::sync::OnceLock;

/// The name of the files' static in the policy module, which sorts first
/// (module docs); `examples/preinit.rs` drops the export it makes.
pub const EXPORT_NAME: &str = "_0hcp_embedded_files";

/// A 64 KiB WebAssembly page: the window a read fault maps.
const WINDOW: usize = 65536;

/// A file embedded whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Embedded {
    /// `crds/schemas/hcpetcdbackup.json`
    HcpEtcdBackupSchema,
    /// `crds/schemas/hostedcluster.json`
    HostedClusterSchema,
    /// `crds/schemas/hostedcontrolplane.json`
    HostedControlPlaneSchema,
    /// `src/mutate/etcd-init.sh`
    RestoreScript,
    /// `src/mutate/backup-verify.sh`
    VerifyScript,
}

const BACKUP_SCHEMA: &[u8] = include_bytes!("../crds/schemas/hcpetcdbackup.json");
const HOSTED_CLUSTER_SCHEMA: &[u8] = include_bytes!("../crds/schemas/hostedcluster.json");
const HOSTED_CONTROL_PLANE_SCHEMA: &[u8] = include_bytes!("../crds/schemas/hostedcontrolplane.json");
const RESTORE_SCRIPT: &[u8] = include_bytes!("mutate/etcd-init.sh");
const VERIFY_SCRIPT: &[u8] = include_bytes!("mutate/backup-verify.sh");

/// Every file's bytes, in [`Embedded`]'s order.
const ALL: [&[u8]; 5] =
    [BACKUP_SCHEMA, HOSTED_CLUSTER_SCHEMA, HOSTED_CONTROL_PLANE_SCHEMA, RESTORE_SCRIPT, VERIFY_SCRIPT];

const TOTAL: usize = BACKUP_SCHEMA.len()
    + HOSTED_CLUSTER_SCHEMA.len()
    + HOSTED_CONTROL_PLANE_SCHEMA.len()
    + RESTORE_SCRIPT.len()
    + VERIFY_SCRIPT.len();
/// Zeros after the files, so that what follows starts a window.
const PAD: usize = TOTAL.next_multiple_of(WINDOW) - TOTAL;

/// The files one after the other, then the padding to whole windows (no
/// other layout: in the policy module, the first bytes of `.rodata`).
#[repr(C)]
struct Files {
    backup_schema: [u8; BACKUP_SCHEMA.len()],
    hosted_cluster_schema: [u8; HOSTED_CLUSTER_SCHEMA.len()],
    hosted_control_plane_schema: [u8; HOSTED_CONTROL_PLANE_SCHEMA.len()],
    restore_script: [u8; RESTORE_SCRIPT.len()],
    verify_script: [u8; VERIFY_SCRIPT.len()],
    pad: [u8; PAD],
}

const _: () = {
    assert!(Embedded::VerifyScript as usize + 1 == ALL.len(), "one entry of ALL per file");
    assert!(std::mem::size_of::<Files>().is_multiple_of(WINDOW), "whole windows");
    assert!(PAD < WINDOW, "less than a window of padding");
    let mut i = 0;
    while i < ALL.len() {
        assert!(std::str::from_utf8(ALL[i]).is_ok(), "an embedded text is UTF-8");
        i += 1;
    }
};

/// First in the policy module's memory (module docs: the name sorts first).
#[cfg_attr(target_arch = "wasm32", unsafe(export_name = "_0hcp_embedded_files"))]
static FILES: Files = Files {
    backup_schema: array(BACKUP_SCHEMA),
    hosted_cluster_schema: array(HOSTED_CLUSTER_SCHEMA),
    hosted_control_plane_schema: array(HOSTED_CONTROL_PLANE_SCHEMA),
    restore_script: array(RESTORE_SCRIPT),
    verify_script: array(VERIFY_SCRIPT),
    pad: [0; PAD],
};

/// A file's bytes as the array its field holds (evaluated at compile time).
const fn array<const N: usize>(file: &[u8]) -> [u8; N] {
    match file.first_chunk::<N>() {
        Some(bytes) if file.len() == N => *bytes,
        _ => panic!("a field not the length of its file"),
    }
}

/// Checks the policy module's lowest data as linked (`at`: its address,
/// `data`: its bytes): the files one after the other from a window's start,
/// zeros to the end of a window, then more (the literals). `Err` says what
/// is not so; the build (`examples/preinit.rs`) and `tests/wasm_policy.rs`
/// call it.
pub fn check_first_data(at: u64, data: &[u8]) -> Result<(), String> {
    if !at.is_multiple_of(WINDOW as u64) {
        return Err(format!("the lowest data starts at {at:#x}, not at a 64 KiB window"));
    }
    let mut rest = data;
    for (i, file) in ALL.iter().enumerate() {
        match rest.strip_prefix(*file) {
            Some(after) => rest = after,
            None => {
                return Err(format!("the lowest data does not hold the embedded files in order (file {i} differs)"))
            }
        }
    }
    match rest.split_at_checked(PAD) {
        Some((pad, literals)) if pad.iter().all(|b| *b == 0) && !literals.is_empty() => Ok(()),
        Some((pad, _)) if pad.iter().all(|b| *b == 0) => Err("nothing follows the embedded files".into()),
        _ => Err(format!("the {PAD} bytes after the embedded files are not the padding (zeros)")),
    }
}

/// The file's text.
pub fn text(file: Embedded) -> &'static str {
    // Checked once per process, not at every use (a backup Job's mutation reads one).
    static CHECKED: [OnceLock<&'static str>; ALL.len()] = [const { OnceLock::new() }; ALL.len()];
    let index = file as usize;
    // In range: one cell per file (the assertion on `Embedded` above).
    let Some(cell) = CHECKED.get(index) else { return "" };
    cell.get_or_init(|| {
        // The address escapes: no read is folded into a literal (module docs).
        let files: &'static Files = std::hint::black_box(&FILES);
        let bytes: &'static [u8] = match file {
            Embedded::HcpEtcdBackupSchema => &files.backup_schema,
            Embedded::HostedClusterSchema => &files.hosted_cluster_schema,
            Embedded::HostedControlPlaneSchema => &files.hosted_control_plane_schema,
            Embedded::RestoreScript => &files.restore_script,
            Embedded::VerifyScript => &files.verify_script,
        };
        // UTF-8 is asserted at compile time: the empty text is unreachable.
        std::str::from_utf8(bytes).unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_embedded_text_is_its_file_and_the_padding_is_zeros() {
        let cases = [
            (Embedded::HcpEtcdBackupSchema, include_str!("../crds/schemas/hcpetcdbackup.json")),
            (Embedded::HostedClusterSchema, include_str!("../crds/schemas/hostedcluster.json")),
            (Embedded::HostedControlPlaneSchema, include_str!("../crds/schemas/hostedcontrolplane.json")),
            (Embedded::RestoreScript, include_str!("mutate/etcd-init.sh")),
            (Embedded::VerifyScript, include_str!("mutate/backup-verify.sh")),
        ];
        for (file, expected) in cases {
            assert_eq!(text(file), expected, "{file:?}");
            assert!(!expected.is_empty());
        }
        assert!(text(Embedded::RestoreScript).starts_with("#!/bin/sh\n"));
        assert!(FILES.pad.iter().all(|b| *b == 0));
    }

    #[test]
    fn the_layout_check_accepts_the_files_padded_then_more_and_nothing_else() {
        let mut data: Vec<u8> = ALL.concat();
        data.extend(std::iter::repeat_n(0, PAD));
        data.extend(b"hypershift.openshift.io");
        assert_eq!(check_first_data(0x100000, &data), Ok(()));
        // Not at a window's start.
        assert!(check_first_data(0x100010, &data).is_err_and(|e| e.contains("not at a 64 KiB window")));
        // A literal before the files.
        let mut before = b"x".to_vec();
        before.extend(&data);
        assert!(check_first_data(0x100000, &before).is_err_and(|e| e.contains("file 0 differs")));
        // A literal in the padding.
        if PAD > 0 {
            let mut in_pad = data.clone();
            in_pad[TOTAL + PAD / 2] = b'x';
            assert!(check_first_data(0x100000, &in_pad).is_err_and(|e| e.contains("not the padding")));
        }
        // The files only, unpadded, or nothing after them.
        assert!(check_first_data(0x100000, &ALL.concat()).is_err());
        assert!(check_first_data(0x100000, &data[..TOTAL + PAD]).is_err_and(|e| e.contains("nothing follows")));
        assert!(check_first_data(0x100000, &[]).is_err());
    }
}
