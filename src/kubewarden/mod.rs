//! The Kubewarden protocol around the decision core: ValidationRequest in,
//! ValidationResponse out (snake_case keys, as the policy SDK serialises
//! them), settings validation. The Kubewarden shell (feature `wasm`): this
//! adapter is pure, so it is tested natively; the waPC exports in `guest.rs`
//! (wasm32 only) only move bytes and make host calls.
//!
//! The adapter reads the core's typed decision: no wire round trip.
//!
//! The mapping adds no decision: `accepted` is the decision's verdict,
//! `message`/`code` its denial, `warnings` its warnings, and for a
//! mutation `mutated_object` is the request object with the core's JSON patch
//! applied (Kubewarden computes the patch back from it).

/// The decision's patch applied by moving its values in.
pub mod apply;
/// The allocator after the snapshot (fresh pages; the image stays read-only).
pub mod arena;
/// Live reads where the core asks for them (policy-server lists from a cache).
pub mod fresh;
/// The mutated object's JSON, with the restore script escaped once per process.
pub mod mutated_json;
/// The ValidationRequest in one pass where that is exact.
pub mod one_pass;
/// Build-time pre-initialisation of the policy module (wizer).
pub mod preinit;

/// The waPC exports (the module built by scripts/build-wasm.sh).
#[cfg(target_arch = "wasm32")]
pub mod guest;

use crate::json_at::At;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::{
    admission::{self, DecisionInput},
    lookup::Lookup,
    settings::Settings,
};

/// Kubewarden's `ValidationResponse`. Serialise it with `serde_json` only:
/// `mutated_object` writes the restore script from a `serde_json` `RawValue`
/// (mutated_json.rs), which other serialisers would write as a struct.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ValidationResponse {
    pub accepted: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "mutated_json::serialize")]
    pub mutated_object: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnings: Option<Vec<String>>,
    /// Audit-mode and exempt findings (the policy server passes them on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_annotations: Option<std::collections::BTreeMap<String, String>>,
}

/// Kubewarden's `SettingsValidationResponse`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingsValidationResponse {
    pub valid: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The `ValidationRequest` envelope: settings plus the AdmissionRequest.
#[derive(Debug, Deserialize)]
struct ValidationRequest {
    #[serde(default)]
    settings: Value,
    request: Value,
}

/// The settings and request of a ValidationRequest, or the 400 answer: in
/// one pass where that is exact ([`one_pass`]), else the two-step way, with
/// the settings checked before the request as they always were.
fn envelope(payload: &[u8]) -> Result<(Settings, admission::AdmissionRequest), ValidationResponse> {
    // UTF-8 checked once for the whole payload, not string by string (a
    // request has ~50); a payload that is not UTF-8 gets serde_json's own
    // answer, with its position, as before.
    let text = std::str::from_utf8(payload);
    if let Some((settings, request)) = text.ok().and_then(one_pass::parse) {
        return Ok((settings_of(&settings).map_err(|e| reject(e, 400))?, request));
    }
    two_step(payload, text.ok())
}

/// The envelope parsed into a tree, the settings checked, then the request
/// taken into its typed fields: the parse whose answers and messages the
/// policy gives.
fn two_step(payload: &[u8], text: Option<&str>) -> Result<(Settings, admission::AdmissionRequest), ValidationResponse> {
    let parsed = match text {
        Some(text) => serde_json::from_str(text),
        None => serde_json::from_slice(payload),
    };
    let envelope: ValidationRequest = match parsed {
        Ok(e) => e,
        Err(e) => return Err(reject(format!("the ValidationRequest does not parse: {e}"), 400)),
    };
    let settings = settings_of(&envelope.settings).map_err(|e| reject(e, 400))?;
    let request = admission::parse_request_owned(envelope.request).map_err(|problem| reject(problem, 400))?;
    Ok((settings, request))
}

fn reject(message: String, code: u16) -> ValidationResponse {
    ValidationResponse { accepted: false, message: Some(message), code: Some(code), ..Default::default() }
}

fn settings_of(v: &Value) -> Result<Settings, String> {
    if v.is_null() {
        return Ok(Settings::default());
    }
    Settings::from_json(v)
}

/// `validate_settings`: the same checks as the server's and the CLI's `--config`.
pub fn validate_settings(payload: &[u8]) -> SettingsValidationResponse {
    let parsed: Result<Value, String> =
        serde_json::from_slice(payload).map_err(|e| format!("settings are not JSON: {e}"));
    // Policy load time: a schema or rule that does not compile fails the load.
    let ready = admission::warm_up().map_err(|e| format!("the decision core cannot start: {e}"));
    match ready.and(parsed).and_then(|v| settings_of(&v)) {
        Ok(_) => SettingsValidationResponse { valid: true, message: None },
        Err(message) => SettingsValidationResponse { valid: false, message: Some(message) },
    }
}

/// The answer's JSON, written once into a buffer of its size (an answer to
/// a `payload_len`-byte request: [`mutated_json::answer_capacity`]).
pub fn encode(response: &ValidationResponse, payload_len: usize) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(mutated_json::answer_capacity(response.mutated_object.is_some(), payload_len));
    serde_json::to_writer(&mut out, response)?;
    Ok(out)
}

/// `validate`: one ValidationRequest, decided by the same core as the webhook.
pub fn validate(payload: &[u8], lookup: Option<&dyn Lookup>, now: crate::time::Now) -> ValidationResponse {
    let (settings, mut request) = match envelope(payload) {
        Ok(parsed) => parsed,
        Err(answer) => return answer,
    };
    // The host calls the decision needs, made before it (the decision does no I/O).
    let answers = lookup.map(|source| admission::plan(&request, &settings, None).read_from(source));
    let lookup = answers.as_ref().map(|a| a as &dyn Lookup);
    let input = DecisionInput { settings: &settings, lookup, now, expect: None };
    let mut decision = admission::decide(&request, &input);
    // The request is done with: its object becomes the mutated one (no copy).
    let mutated_object = match (decision.patch.take(), request.object.take()) {
        (Some(patch), Some(mut mutated)) => {
            if let Err(e) = apply::apply_moving(&mut mutated, patch) {
                return reject(format!("internal error applying the mutation: {e}"), 500);
            }
            Some(mutated)
        }
        _ => None,
    };
    let denial = decision.denial();
    ValidationResponse {
        accepted: decision.allowed(),
        message: denial.map(|d| d.message.clone()),
        code: denial.map(|d| d.reason.code()),
        mutated_object,
        warnings: (!decision.warnings.is_empty()).then(|| crate::finding::texts(&decision.warnings)),
        audit_annotations: (!decision.audit_annotations.is_empty()).then(|| decision.audit_annotations.clone()),
    }
}

/// The body of Kubewarden's `list_resources_by_namespace` host call for HostedControlPlanes.
pub fn list_hcps_request(namespace: &str) -> Value {
    json!({
        "api_version": crate::api::API_VERSION,
        "kind": "HostedControlPlane",
        "namespace": namespace,
        "label_selector": null,
        "field_selector": null,
        "field_masks": null,
    })
}

/// The items of a host-call List answer.
pub fn list_items(answer: &[u8]) -> Result<Vec<Value>, String> {
    let v: Value = serde_json::from_slice(answer).map_err(|e| format!("the host's answer is not JSON: {e}"))?;
    // The items move out of the answer (no copy of the objects).
    Ok(match v {
        Value::Object(mut list) => match list.remove("items") {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        },
        _ => Vec::new(),
    })
}

/// The body of a `list_resources_by_namespace` host call for the HCPEtcdBackup
/// preflight; `name` narrows it to one object with a field selector, so a
/// missing object is an empty list rather than an error (`get_resource`
/// cannot tell "not found" from "not allowed").
pub fn list_request(api_version: &str, kind: &str, namespace: &str, name: Option<&str>) -> Value {
    json!({
        "api_version": api_version,
        "kind": kind,
        "namespace": namespace,
        "label_selector": null,
        "field_selector": name.map(|n| format!("metadata.name={n}")),
        "field_masks": null,
    })
}

/// The label every credentials Secret the OADP plugin and the runbooks
/// write carries (and the Secret webhook's `objectSelector`).
pub const CREDENTIALS_LABEL: &str = "hypershift.openshift.io/etcd-backup=true";

/// The body of the `list_resources_by_namespace` host call for credentials
/// Secrets: a fixed label selector, never the request's name. policy-server
/// keeps one reflector per distinct (kind, namespace, selectors) for its
/// life, so a name chosen by the request would add a watch per name; this
/// is one watch for the operator namespace, and the name is matched here.
pub fn credentials_list_request(namespace: &str) -> Value {
    json!({
        "api_version": "v1",
        "kind": "Secret",
        "namespace": namespace,
        "label_selector": CREDENTIALS_LABEL,
        "field_selector": null,
        "field_masks": null,
    })
}

/// The body of a `get_resource` host call for one Secret, read live
/// (`disable_cache`: policy-server GETs it, no reflector is made for it).
pub fn live_secret_request(namespace: &str, name: &str) -> Value {
    json!({
        "api_version": "v1",
        "kind": "Secret",
        "name": name,
        "namespace": namespace,
        "disable_cache": true,
        "field_masks": null,
    })
}

/// What a failed `get_resource` means: the object is absent only when the
/// apiserver said NotFound (policy-server passes kube-rs's error on, which
/// names the reason and the code); anything else (Forbidden: the
/// policy-server's RBAC, a timeout) is a failed read, so nothing is called
/// missing that was merely not readable. Object names are lower-case
/// DNS-1123, so no name can spell the reason.
pub fn absent_or_failed<T>(host_error: &str) -> Result<Option<T>, crate::lookup::LookupError> {
    if host_error.contains("NotFound") || host_error.contains("code: 404") {
        return Ok(None);
    }
    let shown: String = host_error.chars().take(512).collect();
    Err(crate::lookup::LookupError::Failed(format!(
        "the live read (get_resource) failed: {shown} (does policy-server's service account have get on secrets in this namespace?)"
    )))
}

/// The one object of a host-call List answer narrowed by name.
pub fn single_item(answer: &[u8], name: &str) -> Result<Option<Value>, String> {
    Ok(list_items(answer)?.into_iter().find(|o| o.at("/metadata/name").and_then(Value::as_str) == Some(name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_that_is_not_utf8_gets_serde_jsons_answer() {
        let now = Ok(1_795_965_000);
        // A string with a byte that is not UTF-8: the position serde_json gives, and a 400.
        let bad = b"{\"settings\": {}, \"request\": {\"uid\": \"a\xffb\"}}";
        let answer = validate(bad, None, now);
        let expected = serde_json::from_slice::<Value>(bad).expect_err("not UTF-8").to_string();
        assert_eq!((answer.accepted, answer.code), (false, Some(400)));
        assert_eq!(answer.message, Some(format!("the ValidationRequest does not parse: {expected}")));
        // Valid UTF-8 that is not JSON: the same answer either way in.
        let broken = "{\"settings\": {}, \"request\": {\"uid\": \"é\"".as_bytes();
        let expected = serde_json::from_slice::<Value>(broken).expect_err("not JSON").to_string();
        assert_eq!(
            validate(broken, None, now).message,
            Some(format!("the ValidationRequest does not parse: {expected}"))
        );
        // And an envelope with text beyond ASCII parses (it reaches the AdmissionRequest's checks).
        let ok = "{\"settings\": {}, \"request\": {\"uid\": \"é\"}}".as_bytes();
        let message = validate(ok, None, now).message.unwrap_or_default();
        assert!(message.starts_with("the AdmissionReview request does not parse: missing field"), "{message}");
    }

    /// An object's fields as JSON text, in order: each value is JSON text,
    /// a key with no value is left out, a key with two values is written twice.
    fn object_text(fields: &[(String, Vec<String>)]) -> String {
        let entries: Vec<String> = fields
            .iter()
            .flat_map(|(k, vs)| vs.iter().map(move |v| format!("{}: {v}", Value::from(k.as_str()))))
            .collect();
        format!("{{{}}}", entries.join(", "))
    }

    /// Values a tree parse reads otherwise than a typed one, or refuses:
    /// lone surrogates, numbers out of range, nesting past serde_json's
    /// limit, serde_json's raw-value key; and plain ones of every type.
    fn odd_values() -> Vec<String> {
        let mut v: Vec<String> = [
            "null",
            "true",
            "7",
            "-1.5",
            "1e400",
            "-0",
            "18446744073709551616",
            "\"CREATE\"",
            "\"UPDATE\"",
            "\"\"",
            r#""\ud800""#,
            r#""a\udc00b""#,
            r#""\u0041""#,
            "[]",
            r#"["a"]"#,
            "{}",
            r#"{"\ud800": 1}"#,
            r#"{"group": "apps", "version": "v1", "kind": "StatefulSet", "resource": "statefulsets"}"#,
            r#"{"username": "u", "groups": ["g"], "extra": {"x": ["y"]}, "uid": "1"}"#,
            r#"{"username": "u", "extra": {"x": [1e400]}}"#,
            r#"{"$serde_json::private::RawValue": "{\"username\":\"system:admin\",\"groups\":[\"system:masters\"]}"}"#,
            r#"{"$serde_json::private::RawValue": "\"CREATE\""}"#,
            r#"{"$serde_json::private::RawValue": "null"}"#,
            r#"{"metadata": {"name": "n", "namespace": "ns"}, "spec": {"replicas": 1}}"#,
            r#"{"metadata": {"name": "n"}, "$serde_json::private::RawValue": "5"}"#,
            r#"{"spec": {"x": [{"b": 1, "$serde_json::private::RawValue": "null"}]}}"#,
            r#"["alice", ["system:masters"], "x"]"#,
            r#"["alice", ["system:masters"]]"#,
            r#"["g", "v1", "K"]"#,
        ]
        .into_iter()
        .map(String::from)
        .collect();
        v.push(format!("{}{}", "[".repeat(130), "]".repeat(130)));
        v.push(format!("{{\"x\": {}1{}}}", "[".repeat(126), "]".repeat(126)));
        v
    }

    /// The one-pass parse gives what the two-step parse gives, on every
    /// payload: the samples the module is pre-initialised with, and 31,000
    /// of them with fields of the request, of its nested objects and of the
    /// envelope changed at random (left out, nulled, retyped, given twice,
    /// unknown ones added, values a tree parse refuses or reads otherwise).
    #[test]
    fn the_one_pass_parse_is_the_two_step_parse() {
        let odd = odd_values();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let (mut compared, mut one_pass) = (0, 0);
        for base in crate::kubewarden::preinit::sample_requests() {
            let Value::Object(fields) = base else { panic!("a sample request is an object") };
            let fields: Vec<(String, Value)> = fields.into_iter().collect();
            for round in 0..1000 {
                let pick = |v: &Value, next: &mut dyn FnMut(usize) -> usize| -> Vec<String> {
                    // Each field changed one time in eight; an object's own fields sometimes instead.
                    match if round == 0 { 0 } else { next(40) } {
                        0..=33 => vec![v.to_string()],
                        34 => match v {
                            Value::Object(inner) if !inner.is_empty() => {
                                let mut f: Vec<(String, Vec<String>)> =
                                    inner.iter().map(|(k, v)| (k.clone(), vec![v.to_string()])).collect();
                                let at = next(f.len());
                                f[at].1 = vec![odd[next(odd.len())].clone()];
                                if next(2) == 0 {
                                    f.push(("unknown".into(), vec![odd[next(odd.len())].clone()]));
                                }
                                vec![object_text(&f)]
                            }
                            _ => vec![v.to_string()],
                        },
                        35 => vec![],
                        36 => vec![odd[next(odd.len())].clone()],
                        37 => vec![v.to_string(), odd[next(odd.len())].clone()],
                        38 => vec![v.to_string(), v.to_string()],
                        _ => vec![v.to_string(), "null".into()],
                    }
                };
                let mut changed: Vec<(String, Vec<String>)> =
                    fields.iter().map(|(k, v)| (k.clone(), pick(v, &mut next))).collect();
                if next(8) == 0 {
                    changed.push(("unknownField".into(), vec![odd[next(odd.len())].clone()]));
                }
                let request = object_text(&changed);
                let payload = match if round == 0 { 0 } else { next(10) } {
                    0..=5 => format!(r#"{{"settings": {{}}, "request": {request}}}"#),
                    6 => format!(r#"{{"request": {request}}}"#),
                    7 => format!(r#"{{"settings": {}, "request": {request}}}"#, odd[next(odd.len())]),
                    8 => format!(r#"{{"settings": {{}}, "request": {request}, "request": {request}}}"#),
                    _ => format!(r#"{{"settings": {{}}, "other": {}, "request": {request}}}"#, odd[next(odd.len())]),
                };
                let one = envelope(payload.as_bytes());
                let two = two_step(payload.as_bytes(), Some(&payload));
                assert_eq!(one, two, "{payload}");
                compared += 1;
                one_pass += usize::from(one_pass::parse(&payload).is_some());
            }
        }
        // Both ways were taken, often: the comparison is not of the fallback with itself.
        assert!(one_pass > compared / 10 && one_pass < compared, "{one_pass} of {compared} in one pass");
    }

    /// The review's cases, one by one: each refused by the one pass (the
    /// two steps answer), and a bad settings' error still comes first.
    #[test]
    fn what_a_tree_parse_reads_otherwise_is_left_to_it() {
        let base = r#""uid": "u", "kind": {"group": "g", "version": "v1", "kind": "K"}, "resource": {}, "operation": "CREATE""#;
        for extra in [
            r#""options": "\ud800""#,
            r#""options": {"x": 1e400}"#,
            r#""userInfo": {"username": "a", "extra": {"\udc00": []}}"#,
            r#""userInfo": {"$serde_json::private::RawValue": "{\"username\":\"system:admin\"}"}"#,
            r#""kind": {"$serde_json::private::RawValue": "{\"kind\":\"K\"}"}"#,
            r#""somethingNew": 1"#,
        ] {
            let payload = format!(r#"{{"settings": {{}}, "request": {{{base}, {extra}}}}}"#);
            assert!(one_pass::parse(&payload).is_none(), "{payload}");
            assert_eq!(envelope(payload.as_bytes()), two_step(payload.as_bytes(), Some(&payload)));
        }
        // A raw-value key after another key of an object (the two steps
        // read the object twice, the second time in key order), and structs
        // given as arrays longer than the request's own fields.
        for extra in [
            r#""object": {"metadata": {"name": "n"}, "$serde_json::private::RawValue": "5"}"#,
            r#""oldObject": {"a": [{"b": 1, "$serde_json::private::RawValue": "null"}]}"#,
            r#""userInfo": ["alice", ["system:masters"], "x"]"#,
        ] {
            let payload = format!(r#"{{"settings": {{}}, "request": {{{base}, {extra}}}}}"#);
            assert!(one_pass::parse(&payload).is_none(), "{payload}");
            assert_eq!(envelope(payload.as_bytes()), two_step(payload.as_bytes(), Some(&payload)));
            assert_eq!(envelope(payload.as_bytes()).map(|_| ()).map_err(|a| a.code), Err(Some(400)), "{payload}");
        }
        let as_array = r#"{"settings": {}, "request": ["u", {"group": "g", "version": "v1", "kind": "K"}, {}, null, null, null, "CREATE", null, null, null, null, null]}"#;
        assert!(one_pass::parse(as_array).is_none());
        assert_eq!(envelope(as_array.as_bytes()), two_step(as_array.as_bytes(), Some(as_array)));
        let deep = format!(
            r#"{{"settings": {{}}, "request": {{{base}, "options": {}{}}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert!(one_pass::parse(&deep).is_none());
        let answer = validate(deep.as_bytes(), None, Ok(1_795_965_000));
        assert!(answer.message.unwrap_or_default().contains("recursion limit exceeded"));
        // The raw-value trick reads as the tree reads it (both ways, the same user).
        let raw = format!(
            r#"{{"settings": {{}}, "request": {{{base}, "userInfo": {{"$serde_json::private::RawValue": "{{\"username\":\"system:admin\"}}"}}}}}}"#
        );
        let (_, request) = envelope(raw.as_bytes()).expect("parses");
        assert_eq!(request.user_info.map(|u| u.username).as_deref(), Some("system:admin"));
        // Settings before the request, as always.
        let both_bad = br#"{"settings": 7, "request": {"uid": "u"}}"#;
        let message = validate(both_bad, None, Ok(1_795_965_000)).message.unwrap_or_default();
        assert!(message.starts_with("invalid settings") || message.contains("settings"), "{message}");
        assert!(!message.contains("AdmissionReview request does not parse"), "{message}");
        // And a plain request takes the one pass.
        let plain = format!(
            r#"{{"settings": {{}}, "request": {{{base}, "options": {{"kind": "CreateOptions"}}, "requestKind": {{}}}}}}"#
        );
        assert!(one_pass::parse(&plain).is_some());
    }

    #[test]
    fn a_list_answers_items_are_its_items_array_or_none() {
        let items = |answer: &str| list_items(answer.as_bytes());
        assert_eq!(
            items(r#"{"kind": "List", "items": [{"metadata": {"name": "a"}}, 2]}"#),
            Ok(vec![json!({"metadata": {"name": "a"}}), json!(2)])
        );
        for none in [r#"{"kind": "List"}"#, r#"{"items": {"a": 1}}"#, r#"{"items": null}"#, "[1, 2]", "7"] {
            assert_eq!(items(none), Ok(Vec::new()), "{none}");
        }
        let e = items("{\"items\": [").expect_err("not JSON");
        assert!(e.starts_with("the host's answer is not JSON: "), "{e}");
    }

    #[test]
    fn only_the_apiservers_not_found_means_absent() {
        let not_found = r#"ApiError: secrets "creds" not found: NotFound (ErrorResponse { status: "Failure", message: "secrets \"creds\" not found", reason: "NotFound", code: 404 })"#;
        assert_eq!(absent_or_failed::<Value>(not_found), Ok(None));
        for other in [
            r#"ApiError: secrets "creds" is forbidden: User "system:serviceaccount:kubewarden:policy-server" cannot get resource "secrets": Forbidden (ErrorResponse { reason: "Forbidden", code: 403 })"#,
            "error sending request for url (https://10.0.0.1/api/v1/namespaces/hypershift/secrets/creds): operation timed out",
            "",
        ] {
            let e = absent_or_failed::<Value>(other).expect_err("a failed read");
            assert!(e.to_string().contains("get_resource") && e.to_string().contains("get on secrets"), "{e}");
        }
    }
}
