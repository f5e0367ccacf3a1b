//! The ValidationRequest parsed in one pass, its request straight into the
//! typed [`AdmissionRequest`], for the payloads where that gives exactly what
//! the two-step parse gives (a `Value` tree first, then
//! [`crate::admission::parse_request_owned`]); `None` for every other payload,
//! which then goes the two-step way and gets the answer and message it always
//! got.
//!
//! *Why:* the tree was built for `kind`, `userInfo`, `options` and the
//! request's own fields only to be taken apart again: a tenth of a fresh
//! Kubewarden instance's `validate` (issue #35).
//!
//! *How it stays exact:* every type here refuses unknown fields (the derive
//! would skip them unparsed, where the tree parse rejects a lone surrogate, a
//! number out of range or nesting past serde_json's limit in them, and turns
//! an object keyed `$serde_json::private::RawValue` into the value it spells);
//! a duplicate field is refused by the derive; the fields the decision does
//! not read (`requestKind`, `options`, `userInfo.extra`, …) are parsed in full
//! by [`Checked`], as a tree would parse them, and dropped; the request and
//! its `userInfo` are read from objects only ([`ObjectOnly`]); an `object` or
//! `oldObject` holding the raw-value key anywhere is left to the two steps,
//! which read it twice. Anything refused falls back.
//! `the_one_pass_parse_is_the_two_step_parse` holds the two equal.

use serde::{
    de::{self, MapAccess, SeqAccess, Visitor},
    Deserialize, Deserializer,
};
use serde_json::Value;

use crate::admission::{AdmissionRequest, GroupVersionKind, GroupVersionResource, Operation, UserInfo};

/// The envelope and its request, or `None`: take the two-step way.
pub fn parse(text: &str) -> Option<(Value, AdmissionRequest)> {
    let envelope: Envelope = serde_json::from_str(text).ok()?;
    let request = envelope.request.0;
    // The two steps read `object` and `oldObject` twice (text to tree, tree
    // to request), and the second read takes a map whose smallest key is
    // serde_json's raw-value key for the value it spells: the two steps
    // decide any object holding that key anywhere. And `null` is `None`
    // either way, but an object that is null only as a raw value is
    // `Some(Null)` here.
    let differs = |v: &Option<Value>| matches!(v, Some(Value::Null)) || v.as_ref().is_some_and(holds_raw_value_key);
    if differs(&request.object) || differs(&request.old_object) {
        return None;
    }
    Some((envelope.settings, request.into()))
}

/// Whether any map in `value` has serde_json's raw-value key (iterative:
/// the tree is at most serde_json's 128 levels deep, but no recursion is needed).
fn holds_raw_value_key(value: &Value) -> bool {
    let mut pending = vec![value];
    while let Some(v) = pending.pop() {
        match v {
            Value::Object(map) => {
                if map.contains_key(RAW_VALUE_KEY) {
                    return true;
                }
                pending.extend(map.values());
            }
            Value::Array(items) => pending.extend(items),
            _ => {}
        }
    }
    false
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    #[serde(default)]
    settings: Value,
    request: ObjectOnly<Request>,
}

/// `admission.k8s.io/v1` AdmissionRequest: every field it has (those the
/// decision does not read are parsed to be checked, never read).
#[derive(Deserialize)]
#[allow(dead_code)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Request {
    uid: String,
    kind: Gvk,
    resource: Gvr,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    operation: Operation,
    #[serde(default)]
    object: Option<Value>,
    #[serde(default)]
    old_object: Option<Value>,
    #[serde(default)]
    dry_run: Option<bool>,
    #[serde(default)]
    user_info: Option<ObjectOnly<User>>,
    #[serde(default)]
    request_kind: Checked,
    #[serde(default)]
    request_resource: Checked,
    #[serde(default)]
    request_sub_resource: Checked,
    #[serde(default)]
    options: Checked,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Gvk {
    #[serde(default)]
    group: String,
    #[serde(default)]
    version: String,
    #[serde(default)]
    kind: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Gvr {
    #[serde(default)]
    group: String,
    #[serde(default)]
    version: String,
    #[serde(default)]
    resource: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct User {
    #[serde(default)]
    username: String,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    uid: Checked,
    #[serde(default)]
    extra: Checked,
}

impl From<Request> for AdmissionRequest {
    fn from(r: Request) -> Self {
        AdmissionRequest {
            uid: r.uid,
            kind: GroupVersionKind { group: r.kind.group, version: r.kind.version, kind: r.kind.kind },
            resource: GroupVersionResource {
                group: r.resource.group,
                version: r.resource.version,
                resource: r.resource.resource,
            },
            sub_resource: r.sub_resource,
            name: r.name,
            namespace: r.namespace,
            operation: r.operation,
            object: r.object,
            old_object: r.old_object,
            dry_run: r.dry_run,
            user_info: r.user_info.map(|ObjectOnly(u)| UserInfo { username: u.username, groups: u.groups }),
        }
    }
}

/// A struct read from a JSON object only. serde's derive also reads a
/// struct from an array, by position, and from text it takes any array up
/// to its field count, where the two steps refuse one longer than the
/// request's own fields: a mirror with more fields (the unread ones) would
/// take what they refuse.
struct ObjectOnly<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ObjectOnly<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Only<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Only<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer.deserialize_map(Only(std::marker::PhantomData)).map(ObjectOnly)
    }
}

/// Any JSON value, parsed as a `Value` tree would parse it (every string,
/// number and level checked the same way) and kept as nothing; an object
/// keyed `$serde_json::private::RawValue` is refused (the tree would turn
/// it into another value).
#[derive(Default)]
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

/// The key serde_json's `Value` reads as a raw value (feature `raw_value`).
const RAW_VALUE_KEY: &str = "$serde_json::private::RawValue";

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = Checked;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_none<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Checked, D::Error> {
        Checked::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == RAW_VALUE_KEY {
                return Err(de::Error::custom("a raw value: the tree parse decides"));
            }
            map.next_value::<Checked>()?;
        }
        Ok(Checked)
    }
}
