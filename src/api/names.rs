//! Kubernetes object names (`apimachinery/pkg/util/validation`): what the
//! server may put in an apiserver URL. A name that is not one never reaches
//! a path: no `/`, `?`, `%`, `..` or empty segment.

/// A DNS-1123 label (namespaces): at most 63 characters, lower-case letters,
/// digits and `-`, starting and ending with a letter or digit.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let inner = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| inner(c) || *c == b'-')
        && b.first().is_some_and(inner)
        && b.last().is_some_and(inner)
}

/// A DNS-1123 subdomain (Secrets and most kinds): at most 253 bytes of
/// dot-separated DNS-1123 labels.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains_are_what_kubernetes_accepts() {
        for ok in ["a", "clusters-prod", "0abc", &"a".repeat(63)] {
            assert!(is_dns1123_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a/b", "a_b", &"a".repeat(64), "ä"] {
            assert!(!is_dns1123_label(bad), "{bad}");
        }
        let longest = format!("{0}.{0}.{0}.{1}", "a".repeat(63), "b".repeat(61));
        for ok in ["creds", "creds.v1", "etcd-backup-creds-nightly", "a.b-c.d", &longest] {
            assert!(is_dns1123_subdomain(ok), "{ok}");
        }
        let too_long = format!("{0}.{0}.{0}.{0}", "a".repeat(63));
        for bad in ["", "?", "x?labelSelector=a", "../../../apis/apps/v1/statefulsets", "a/b", "a..b", ".a", "a.", "A"]
        {
            assert!(!is_dns1123_subdomain(bad), "{bad}");
        }
        for bad in ["a%2Fb", &"a".repeat(64), &too_long, &format!("{}.b", "a".repeat(252))] {
            assert!(!is_dns1123_subdomain(bad), "{bad}");
        }
    }
}
