//! Which Kubernetes minor version's apiserver the messages imitate. The
//! apiserver's own messages change between minor versions (from 1.35 a failed
//! CEL rule names the value of a scalar, `Invalid value: "MyBucket": …`, and
//! omits it for an object or a list, `spec: Invalid value: … is immutable`;
//! 1.31–1.34 print the schema type, `Invalid value: "string": …`). Users
//! search for the text their cluster prints, so the version is a setting.

use std::fmt;

/// A Kubernetes minor version (`1.N`) whose message shapes are produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubernetesVersion {
    minor: u32,
}

impl KubernetesVersion {
    /// The oldest minor whose shapes are produced (OpenShift 4.18).
    pub const OLDEST_MINOR: u32 = 31;
    /// The newest minor CI runs the real apiserver of; the default. A newer
    /// one is refused, never mapped onto this one's messages: 1.36 showed that
    /// a minor can change them.
    pub const NEWEST_TESTED_MINOR: u32 = 37;
    /// 1.37: the default.
    pub const NEWEST_TESTED: Self = Self { minor: Self::NEWEST_TESTED_MINOR };

    /// `1.N` for [`Self::OLDEST_MINOR`] ≤ `N` ≤ [`Self::NEWEST_TESTED_MINOR`].
    pub fn new(minor: u32) -> Result<Self, String> {
        if minor < Self::OLDEST_MINOR {
            return Err(format!("Kubernetes 1.{minor} is not supported: the oldest is 1.{}", Self::OLDEST_MINOR));
        }
        if minor > Self::NEWEST_TESTED_MINOR {
            return Err(format!(
                "Kubernetes 1.{minor} is newer than the newest whose messages are tested (1.{n}): its apiserver's \
                 messages are not known; set \"1.{n}\" for the closest known ones",
                n = Self::NEWEST_TESTED_MINOR
            ));
        }
        Ok(Self { minor })
    }

    /// Parses `1.35`, `v1.35`, `1.35.4` or a `/version` `gitVersion` such as
    /// `v1.35.4+k3s1` or `v1.34.2-rc.0`; only major 1 and the minor count.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || format!("{text:?} is not a Kubernetes version (expected 1.N, e.g. \"1.35\")");
        let t = text.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let mut parts = t.splitn(3, '.');
        let (Some(major), Some(minor)) = (parts.next(), parts.next()) else { return Err(bad()) };
        // A minor may carry a suffix when there is no patch (`1.35+`, as some
        // distributions report `/version` `minor`).
        let digits: String = minor.chars().take_while(char::is_ascii_digit).collect();
        if major != "1" || digits.is_empty() || (digits.len() != minor.len() && minor[digits.len()..] != *"+") {
            return Err(bad());
        }
        Self::new(digits.parse().map_err(|_| bad())?)
    }

    /// The minor number (35 for 1.35).
    pub fn minor(self) -> u32 {
        self.minor
    }

    /// Whether a failed CEL rule shows the value of a scalar and omits it for
    /// an object or a list (1.35+: apiextensions-apiserver passes the value
    /// and `field.OmitValueType{}`); before, it shows the schema type.
    pub fn cel_rule_shows_value(self) -> bool {
        self.minor >= 35
    }

    /// Whether a CRD schema keeps an integer's `int32`/`int64` and a number's
    /// `float`/`double` format (1.36+: apiextensions-apiserver stops
    /// stripping them), so a value of another type is named by its Go format:
    /// `must be of type int64: "float64"`.
    pub fn keeps_numeric_formats(self) -> bool {
        self.minor >= 36
    }

    /// Whether comparing a set list keys every item, so a wrong-typed object
    /// or list item makes `self == oldSelf` false (1.37+: k8s.io/apiserver's
    /// `setElementKey`) instead of failing the rule with Go's `hash of
    /// unhashable type` panic.
    pub fn set_equality_keys_any_item(self) -> bool {
        self.minor >= 37
    }

    /// Whether a number is checked against its schema type's range (1.36+:
    /// kube-openapi's numberValidator adds `Checked value must be of type
    /// integer with format int64 in <path>`).
    pub fn checks_number_range(self) -> bool {
        self.minor >= 36
    }
}

impl Default for KubernetesVersion {
    fn default() -> Self {
        Self::NEWEST_TESTED
    }
}

impl fmt::Display for KubernetesVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}", self.minor)
    }
}

impl TryFrom<String> for KubernetesVersion {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Self::parse(&s)
    }
}

impl From<KubernetesVersion> for String {
    fn from(v: KubernetesVersion) -> String {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_settings_and_server_versions() {
        for (text, minor) in
            [("1.35", 35), ("v1.34", 34), ("1.31.0", 31), ("v1.35.4+k3s1", 35), ("1.36", 36), ("v1.37.2", 37)]
        {
            assert_eq!(KubernetesVersion::parse(text).map(KubernetesVersion::minor), Ok(minor), "{text}");
        }
        for text in ["", "1", "2.35", "1.x", "1.30", "1.35a", "v1.29.3", "35", "1.38", "v1.40.0"] {
            assert!(KubernetesVersion::parse(text).is_err(), "{text}");
        }
        assert_eq!(KubernetesVersion::parse("1.35+").map(KubernetesVersion::minor), Ok(35));
        assert_eq!(KubernetesVersion::default().to_string(), "1.37");
        let newer = KubernetesVersion::parse("1.38").expect_err("newer than tested");
        assert!(newer.contains("newest whose messages are tested (1.37)") && newer.contains("\"1.37\""), "{newer}");
        assert!(KubernetesVersion::default().keeps_numeric_formats());
        assert!(!KubernetesVersion::parse("1.35").is_ok_and(KubernetesVersion::keeps_numeric_formats));
        assert!(KubernetesVersion::default().cel_rule_shows_value());
        assert!(!KubernetesVersion::parse("1.34").is_ok_and(KubernetesVersion::cel_rule_shows_value));
    }
}
