//! The HyperShift Operator's credentials-mode detection for an HCPEtcdBackup
//! (hypershift `controllers/etcdbackup/credentials.go`),
//! re-implemented exactly, plus whether the Secret's content can work in the
//! mode the controller will pick.
//!
//! Everything this module returns is built from fixed text, key names and
//! mode names: **never a value or a fragment of one**. Secret values are
//! read, judged and dropped here; no caller ever needs them.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::api::StorageType;

/// What the controller can use for a storage type.
pub fn expected(storage: StorageType) -> &'static str {
    match storage {
            StorageType::S3 => {
                "key \"credentials\" holding a bare IAM role ARN (arn:<partition>:iam::<12-digit account>:role/<name>) or an AWS shared-credentials file whose [default] profile has aws_access_key_id and aws_secret_access_key"
            }
            StorageType::AzureBlob => {
                "key \"cloud\" with an AZURE_CLIENT_ID=<client id GUID> line (workload identity), or, without \"cloud\", key \"credentials\" holding JSON with tenantId, clientId and clientSecret (client secret) or a managed-identity credentials JSON file"
            }
        }
}

/// The mode the controller detects (the names it logs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthMode {
    AwsSts,
    AwsStatic,
    AzureWorkloadIdentity,
    AzureClientSecret,
    AzureManagedIdentity,
}

impl AuthMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMode::AwsSts => "aws-sts",
            AuthMode::AwsStatic => "aws-static",
            AuthMode::AzureWorkloadIdentity => "azure-workload-identity",
            AuthMode::AzureClientSecret => "azure-client-secret",
            AuthMode::AzureManagedIdentity => "azure-managed-identity",
        }
    }

    /// What the backup Job does in this mode, in a few words.
    pub fn describe(self) -> &'static str {
        match self {
            AuthMode::AwsSts => "AWS STS web identity with the role ARN (AWS_ROLE_ARN, projected token)",
            AuthMode::AwsStatic => "the Secret mounted as an AWS shared-credentials file, [default] profile",
            AuthMode::AzureWorkloadIdentity => "Azure workload identity with the client id from AZURE_CLIENT_ID",
            AuthMode::AzureClientSecret => "--azure-auth-type client-secret with the credentials JSON",
            AuthMode::AzureManagedIdentity => {
                "--azure-auth-type managed-identity with key \"credentials\" as the managed-identity credentials file"
            }
        }
    }
}

/// Whether the content works in the detected mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fit {
    /// It does.
    Fits,
    /// It works, but not the way the content suggests: the controller falls
    /// back silently (a warning). The text says why, with key names only.
    Fallback(String),
    /// It cannot work: the backup Job would fail (a denial). The text says
    /// why, with key names only.
    Unfit(String),
}

/// The outcome of the detection for one storage type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detection {
    pub storage: StorageType,
    pub mode: AuthMode,
    pub fit: Fit,
    /// The Secret's key names, sorted (never values).
    pub keys: Vec<String>,
}

impl Detection {
    /// Usable: fits, or works through a fallback.
    pub fn usable(&self) -> bool {
        !matches!(self.fit, Fit::Unfit(_))
    }

    pub fn expected(&self) -> &'static str {
        expected(self.storage)
    }

    /// `keys [a, b]`, or `no data keys`.
    pub fn key_list(&self) -> String {
        if self.keys.is_empty() {
            "no data keys".to_string()
        } else {
            format!("keys [{}]", self.keys.join(", "))
        }
    }
}

/// A Secret's data, decoded. Values stay in here: its `Debug` prints key
/// names only, so no `{:?}` anywhere can ever show a value.
#[derive(Clone, Default)]
pub struct SecretData {
    entries: BTreeMap<String, Vec<u8>>,
    /// Keys of `data` whose value is not valid base64 (the apiserver rejects those).
    pub undecodable: Vec<String>,
}

impl std::fmt::Debug for SecretData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretData")
            .field("keys", &self.entries.keys().collect::<Vec<_>>())
            .field("undecodable", &self.undecodable)
            .finish()
    }
}

impl SecretData {
    /// From a Secret object: `data` (base64) overlaid with `stringData`
    /// (plain; the apiserver merges it into `data` the same way).
    pub fn from_secret(secret: &Value) -> Self {
        use base64::Engine as _;
        let mut out = Self::default();
        if let Some(data) = secret.get("data").and_then(Value::as_object) {
            for (k, v) in data {
                let Some(s) = v.as_str() else {
                    out.undecodable.push(k.clone());
                    continue;
                };
                match base64::engine::general_purpose::STANDARD.decode(s) {
                    Ok(bytes) => {
                        out.entries.insert(k.clone(), bytes);
                    }
                    Err(_) => out.undecodable.push(k.clone()),
                }
            }
        }
        if let Some(data) = secret.get("stringData").and_then(Value::as_object) {
            for (k, v) in data {
                if let Some(s) = v.as_str() {
                    out.entries.insert(k.clone(), s.as_bytes().to_vec());
                }
            }
            // A key stringData sets is decodable whatever `data` held: one
            // pass over the undecodable keys, not one per stringData key
            // (that was quadratic: 10 s of CPU for a 1 MiB Secret).
            out.undecodable.retain(|u| !data.get(u).is_some_and(Value::is_string));
        }
        out
    }

    /// From plain key/value pairs (tests, examples).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let entries = pairs.into_iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect();
        Self { entries, undecodable: Vec::new() }
    }

    /// The key names, sorted.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.entries.keys().cloned().collect();
        keys.extend(self.undecodable.iter().cloned());
        keys.sort();
        keys.dedup();
        keys
    }

    fn get(&self, key: &str) -> Option<String> {
        self.entries.get(key).map(|b| String::from_utf8_lossy(b).into_owned())
    }
}

/// The controller's detection for `storage`, and whether the content fits it.
pub fn detect(storage: StorageType, data: &SecretData) -> Detection {
    let (mode, fit) = match storage {
        StorageType::S3 => detect_s3(data),
        StorageType::AzureBlob => detect_azure(data),
    };
    Detection { storage, mode, fit, keys: data.keys() }
}

/// `^arn:aws[a-z-]*:iam::\d{12}:role/\S+$`, by hand (no regex needed).
fn is_role_arn(s: &str) -> bool {
    let Some(rest) = s.strip_prefix("arn:aws") else { return false };
    let Some((partition_tail, rest)) = rest.split_once(":iam::") else { return false };
    if !partition_tail.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
        return false;
    }
    let Some((account, rest)) = rest.split_once(":role/") else { return false };
    account.len() == 12
        && account.chars().all(|c| c.is_ascii_digit())
        && !rest.is_empty()
        && !rest.chars().any(char::is_whitespace)
}

const CREDS_FILE_MISSING: &str =
    "the controller mounts the Secret and passes --credentials-file /etc/etcd-backup-creds/credentials, which will not exist";

fn detect_s3(data: &SecretData) -> (AuthMode, Fit) {
    let Some(raw) = data.get("credentials") else {
        return (AuthMode::AwsStatic, Fit::Unfit(format!("there is no key \"credentials\": {CREDS_FILE_MISSING}")));
    };
    let value = raw.trim();
    if value.starts_with("arn:") {
        let fit = if is_role_arn(value) {
            Fit::Fits
        } else {
            Fit::Unfit("key \"credentials\" starts with \"arn:\", so the controller passes it as AWS_ROLE_ARN, but it is not an IAM role ARN (arn:<partition>:iam::<12-digit account>:role/<name>, one line)".to_string())
        };
        return (AuthMode::AwsSts, fit);
    }
    if value.is_empty() {
        return (
            AuthMode::AwsStatic,
            Fit::Unfit("key \"credentials\" is empty: the uploader finds no credentials in it".to_string()),
        );
    }
    let fit = match ini_default_profile(value) {
        None => Fit::Unfit(
            "key \"credentials\" is neither a role ARN nor an AWS shared-credentials file with a [default] profile (the uploader reads the default profile)"
                .to_string(),
        ),
        Some(profile) => {
            let missing: Vec<&str> = ["aws_access_key_id", "aws_secret_access_key"]
                .into_iter()
                .filter(|k| !profile.iter().any(|(name, has_value)| name == k && *has_value))
                .collect();
            if missing.is_empty() {
                Fit::Fits
            } else {
                let role = if profile.iter().any(|(n, _)| n == "role_arn") {
                    "; a role_arn profile is not used by the controller: put the bare role ARN in key \"credentials\" instead"
                } else {
                    ""
                };
                Fit::Unfit(format!(
                    "the [default] profile in key \"credentials\" has no {}{role}",
                    missing.join(" and no ")
                ))
            }
        }
    };
    (AuthMode::AwsStatic, fit)
}

/// The `[default]` section of an INI text: (lower-cased key, has a non-empty value).
fn ini_default_profile(text: &str) -> Option<Vec<(String, bool)>> {
    let mut in_default = false;
    let mut found = false;
    let mut keys = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_default = section.trim() == "default";
            found |= in_default;
            continue;
        }
        if in_default {
            if let Some((k, v)) = line.split_once('=') {
                keys.push((k.trim().to_ascii_lowercase(), !v.trim().is_empty()));
            }
        }
    }
    found.then_some(keys)
}

/// A GUID: 8-4-4-4-12 hex digits.
fn is_guid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && parts.iter().zip([8, 4, 4, 4, 12]).all(|(p, n)| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// What key `credentials` holds, for Azure.
enum AzureJson {
    Absent,
    NotJson,
    /// JSON object: non-empty clientSecret, clientSecret key present (maybe empty), tenantId+clientId present.
    Json {
        client_secret: bool,
        secret_key_present: bool,
        ids: bool,
    },
}

fn azure_credentials(data: &SecretData) -> AzureJson {
    let Some(raw) = data.get("credentials") else { return AzureJson::Absent };
    match serde_json::from_str::<Value>(&raw) {
        Ok(Value::Object(m)) => {
            // Go's encoding/json matches struct fields ignoring case (an exact
            // match wins), and so does the controller's decode. (Two keys that
            // differ only in case: Go keeps the later one; the map here does
            // not keep document order, so one of them is taken.)
            let field = |k: &str| {
                m.get(k).or_else(|| m.iter().rev().find(|(key, _)| key.eq_ignore_ascii_case(k)).map(|(_, v)| v))
            };
            let non_empty = |k: &str| field(k).and_then(Value::as_str).is_some_and(|s| !s.is_empty());
            AzureJson::Json {
                client_secret: non_empty("clientSecret"),
                secret_key_present: field("clientSecret").is_some(),
                ids: non_empty("tenantId") && non_empty("clientId"),
            }
        }
        _ => AzureJson::NotJson,
    }
}

fn detect_azure(data: &SecretData) -> (AuthMode, Fit) {
    let creds = azure_credentials(data);
    if let Some(cloud) = data.get("cloud") {
        let client_id = cloud
            .lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix("AZURE_CLIENT_ID="))
            .map(str::trim)
            .unwrap_or_default();
        if !client_id.is_empty() {
            let fit = if !is_guid(client_id) {
                Fit::Unfit("the AZURE_CLIENT_ID line of key \"cloud\" is not a GUID: the workload-identity client-id annotation would not name an identity".to_string())
            } else if matches!(creds, AzureJson::Json { client_secret: true, .. }) {
                Fit::Fallback(
                    "key \"cloud\" wins over key \"credentials\": the clientSecret JSON in \"credentials\" is ignored"
                        .to_string(),
                )
            } else {
                Fit::Fits
            };
            return (AuthMode::AzureWorkloadIdentity, fit);
        }
        let fit = match creds {
            AzureJson::Absent => Fit::Unfit(format!(
                "key \"cloud\" has no AZURE_CLIENT_ID line, so the controller picks managed identity, and there is no key \"credentials\": {CREDS_FILE_MISSING}"
            )),
            AzureJson::NotJson => Fit::Unfit("key \"cloud\" has no AZURE_CLIENT_ID line, so the controller picks managed identity, but key \"credentials\" is not JSON: the managed-identity credentials file cannot be loaded".to_string()),
            AzureJson::Json { client_secret, .. } => Fit::Fallback(format!(
                "key \"cloud\" has no AZURE_CLIENT_ID line, so the controller picks managed identity with key \"credentials\"{}",
                if client_secret { " and ignores its clientSecret" } else { "" }
            )),
        };
        return (AuthMode::AzureManagedIdentity, fit);
    }
    match creds {
        AzureJson::Absent => (
            AuthMode::AzureManagedIdentity,
            Fit::Unfit(format!("there is neither key \"cloud\" nor key \"credentials\": {CREDS_FILE_MISSING}")),
        ),
        AzureJson::NotJson => (
            AuthMode::AzureManagedIdentity,
            Fit::Unfit("key \"credentials\" is not JSON: the controller silently falls back to managed identity, and the managed-identity credentials file cannot be loaded".to_string()),
        ),
        AzureJson::Json { client_secret: true, ids, .. } => {
            let fit = if ids {
                Fit::Fits
            } else {
                Fit::Unfit("the credentials JSON has a clientSecret but no tenantId or clientId: the uploader cannot authenticate".to_string())
            };
            (AuthMode::AzureClientSecret, fit)
        }
        AzureJson::Json { client_secret: false, secret_key_present, ids } => {
            let fit = if secret_key_present && ids {
                Fit::Fallback("the credentials JSON has tenantId and clientId but an empty clientSecret: the controller uses managed identity, not the client secret".to_string())
            } else {
                Fit::Fits
            };
            (AuthMode::AzureManagedIdentity, fit)
        }
    }
}

/// What the Secret webhook concludes for a labelled Secret whose storage
/// type is not known: the detection for both storage types.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretAssessment {
    pub s3: Detection,
    pub azure: Detection,
}

impl SecretAssessment {
    pub fn of(data: &SecretData) -> Self {
        Self { s3: detect(StorageType::S3, data), azure: detect(StorageType::AzureBlob, data) }
    }

    /// Usable for at least one storage type.
    pub fn usable(&self) -> bool {
        self.s3.usable() || self.azure.usable()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(pairs: &[(&str, &str)]) -> Detection {
        detect(StorageType::S3, &SecretData::from_pairs(pairs.iter().copied()))
    }
    fn az(pairs: &[(&str, &str)]) -> Detection {
        detect(StorageType::AzureBlob, &SecretData::from_pairs(pairs.iter().copied()))
    }
    const ARN: &str = "arn:aws:iam::123456789012:role/etcd-backup";
    const INI: &str = "[default]\naws_access_key_id = AKIAEXAMPLE\naws_secret_access_key = s3cr3t\n";
    const GUID: &str = "0f7a1d2c-3b4e-4f50-8a6b-7c8d9e0f1a2b";

    #[test]
    fn s3_follows_the_controller() {
        let d = s3(&[("credentials", ARN)]);
        assert_eq!((d.mode, d.fit), (AuthMode::AwsSts, Fit::Fits));
        // Whitespace around the ARN is trimmed, as the controller does.
        assert_eq!(s3(&[("credentials", format!("  {ARN}\n").as_str())]).fit, Fit::Fits);
        assert_eq!(s3(&[("credentials", "arn:aws-us-gov:iam::123456789012:role/a/b")]).fit, Fit::Fits);
        let d = s3(&[("credentials", "arn:aws:kms:us-east-1:123456789012:key/x")]);
        assert_eq!(d.mode, AuthMode::AwsSts);
        assert!(matches!(d.fit, Fit::Unfit(_)));
        assert!(matches!(s3(&[("credentials", format!("{ARN}\nsecond line").as_str())]).fit, Fit::Unfit(_)));
        assert_eq!(s3(&[("credentials", INI)]).fit, Fit::Fits);
        assert_eq!(s3(&[("credentials", INI)]).mode, AuthMode::AwsStatic);
        // Anything else, including empty or missing, is aws-static, and cannot work.
        for pairs in [vec![], vec![("credentials", "")], vec![("credentials", "  \n")], vec![("cloud", INI)]] {
            let d = s3(&pairs);
            assert_eq!(d.mode, AuthMode::AwsStatic, "{pairs:?}");
            assert!(matches!(d.fit, Fit::Unfit(_)), "{pairs:?}");
        }
        let d = s3(&[("credentials", "[prod]\naws_access_key_id=a\naws_secret_access_key=b")]);
        assert!(matches!(d.fit, Fit::Unfit(ref r) if r.contains("[default]")));
        let d = s3(&[("credentials", "[default]\nrole_arn=arn:aws:iam::123456789012:role/x\n")]);
        assert!(matches!(d.fit, Fit::Unfit(ref r) if r.contains("role_arn") && r.contains("aws_access_key_id")));
        let d = s3(&[("credentials", "[default]\naws_access_key_id=a\naws_secret_access_key=\n")]);
        assert!(
            matches!(d.fit, Fit::Unfit(ref r) if r.contains("aws_secret_access_key") && !r.contains("aws_access_key_id"))
        );
    }

    #[test]
    fn azure_follows_the_controller_order() {
        let cs = r#"{"subscriptionId":"s","tenantId":"t","clientId":"c","clientSecret":"x"}"#;
        // cloud with a client id: workload identity, whatever else is there.
        let d = az(&[("cloud", format!("AZURE_TENANT_ID=t\r\nAZURE_CLIENT_ID= {GUID} \r\n").as_str())]);
        assert_eq!((d.mode, d.fit), (AuthMode::AzureWorkloadIdentity, Fit::Fits));
        let d = az(&[("cloud", format!("AZURE_CLIENT_ID={GUID}").as_str()), ("credentials", cs)]);
        assert_eq!(d.mode, AuthMode::AzureWorkloadIdentity);
        assert!(matches!(d.fit, Fit::Fallback(_)));
        let d = az(&[("cloud", "AZURE_CLIENT_ID=\"quoted\"")]);
        assert_eq!(d.mode, AuthMode::AzureWorkloadIdentity);
        assert!(matches!(d.fit, Fit::Unfit(_)));
        // cloud without a client id: managed identity, even with a client-secret JSON.
        let d = az(&[("cloud", "AZURE_STORAGE_ACCOUNT_ACCESS_KEY=k"), ("credentials", cs)]);
        assert_eq!(d.mode, AuthMode::AzureManagedIdentity);
        assert!(matches!(d.fit, Fit::Fallback(ref r) if r.contains("ignores its clientSecret")));
        let d = az(&[("cloud", "AZURE_CLIENT_ID=")]);
        assert_eq!(d.mode, AuthMode::AzureManagedIdentity);
        assert!(matches!(d.fit, Fit::Unfit(ref r) if r.contains("no key \"credentials\"")));
        let d = az(&[
            ("cloud", "AZURE_STORAGE_ACCOUNT_ACCESS_KEY=k"),
            ("credentials", "AZURE_STORAGE_ACCOUNT_ACCESS_KEY=k"),
        ]);
        assert!(matches!(d.fit, Fit::Unfit(ref r) if r.contains("not JSON")));
        // No cloud: credentials JSON decides.
        assert_eq!(az(&[("credentials", cs)]).mode, AuthMode::AzureClientSecret);
        assert_eq!(az(&[("credentials", cs)]).fit, Fit::Fits);
        // Field names match in any case, as Go's encoding/json decodes them.
        let d = az(&[("credentials", r#"{"TenantId":"t","ClientID":"c","CLIENTSECRET":"x"}"#)]);
        assert_eq!((d.mode, d.fit), (AuthMode::AzureClientSecret, Fit::Fits));
        let d = az(&[("credentials", r#"{"clientSecret":"x"}"#)]);
        assert_eq!(d.mode, AuthMode::AzureClientSecret);
        assert!(matches!(d.fit, Fit::Unfit(_)));
        let d = az(&[("credentials", r#"{"tenantId":"t","clientId":"c","clientSecret":""}"#)]);
        assert_eq!(d.mode, AuthMode::AzureManagedIdentity);
        assert!(matches!(d.fit, Fit::Fallback(_)));
        let d =
            az(&[("credentials", r#"{"client_id":"c","tenant_id":"t","authentication_endpoint":"https://login"}"#)]);
        assert_eq!((d.mode, d.fit), (AuthMode::AzureManagedIdentity, Fit::Fits));
        for pairs in [vec![], vec![("credentials", "not json")], vec![("credentials", "[1,2]")]] {
            let d = az(&pairs);
            assert_eq!(d.mode, AuthMode::AzureManagedIdentity, "{pairs:?}");
            assert!(matches!(d.fit, Fit::Unfit(_)), "{pairs:?}");
        }
    }

    #[test]
    fn debug_shows_key_names_only() {
        let d = SecretData::from_secret(&serde_json::json!({"stringData": {"credentials": "MARKERdebugvalue"}}));
        let shown = format!("{d:?}");
        assert!(shown.contains("credentials") && !shown.contains("MARKER"), "{shown}");
    }

    #[test]
    fn nothing_returned_carries_a_value() {
        let marker = "MARKERd41d8cd98f00b204e980";
        let inputs: Vec<Vec<(&str, String)>> = vec![
            vec![("credentials", format!("arn:aws:iam::123456789012:role/{marker}"))],
            vec![("credentials", format!("arn:{marker}"))],
            vec![("credentials", format!("[default]\naws_access_key_id={marker}\n"))],
            vec![("credentials", format!("[{marker}]\n"))],
            vec![("credentials", marker.to_string())],
            vec![("cloud", format!("AZURE_CLIENT_ID={marker}"))],
            vec![("cloud", format!("X={marker}")), ("credentials", format!("{{\"clientSecret\":\"{marker}\"}}"))],
            vec![("credentials", format!("{{\"tenantId\":\"{marker}\",\"clientId\":\"c\",\"clientSecret\":\"\"}}"))],
        ];
        for pairs in inputs {
            let data = SecretData::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
            let a = SecretAssessment::of(&data);
            let text = format!("{a:?}");
            assert!(!text.contains("MARKER"), "{text}");
        }
    }

    #[test]
    fn secret_data_reads_data_and_string_data() {
        let secret = serde_json::json!({
            "data": {"credentials": "YXJuOmF3czppYW06OjEyMzQ1Njc4OTAxMjpyb2xlL3g=", "bad": "%%%"},
            "stringData": {"cloud": "AZURE_CLIENT_ID=x"}
        });
        let d = SecretData::from_secret(&secret);
        assert_eq!(d.keys(), vec!["bad", "cloud", "credentials"]);
        assert_eq!(d.undecodable, vec!["bad"]);
        assert_eq!(detect(StorageType::S3, &d).fit, Fit::Fits);
    }
}
