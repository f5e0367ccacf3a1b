//! Malformed input never panics: every conformance review is mangled many
//! ways (subtrees replaced by values of every JSON type, keys dropped, strings
//! made huge or full of control characters) and must still get an answer from
//! the library, and from the Kubewarden adapter.

mod common;

use hcp_etcd_admission::{
    admission::{review, DecisionInput},
    kubewarden,
    lookup::ContextObjects,
    settings::Settings,
};
use serde_json::{json, Value};

/// xorshift64*: deterministic, so a failure reproduces.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn junk(rng: &mut Rng) -> Value {
    match rng.below(9) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(-1),
        3 => json!(1.5e300),
        4 => json!("\u{0}\u{7}\n\"'$(x)`y`"),
        5 => json!("x".repeat(5000)),
        6 => json!([]),
        7 => json!({}),
        _ => json!([{"name": null}, 3, "s"]),
    }
}

/// Replaces or removes one random node of `v`.
fn mangle(v: &mut Value, rng: &mut Rng, depth: usize) {
    let go_deeper = depth < 12 && rng.below(4) != 0;
    match v {
        Value::Object(map) if !map.is_empty() && go_deeper => {
            let keys: Vec<String> = map.keys().cloned().collect();
            let k = &keys[rng.below(keys.len())];
            match rng.below(6) {
                0 => {
                    map.remove(k);
                }
                1 => {
                    map.insert(k.clone(), junk(rng));
                }
                _ => {
                    if let Some(child) = map.get_mut(k) {
                        mangle(child, rng, depth + 1);
                    }
                }
            }
        }
        Value::Array(items) if !items.is_empty() && go_deeper => {
            let i = rng.below(items.len());
            mangle(&mut items[i], rng, depth + 1);
        }
        other => *other = junk(rng),
    }
}

#[test]
fn mangled_reviews_always_get_an_answer() {
    let cases = common::load_cases();
    let settings = Settings::default();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut answered = 0;
    for case in &cases {
        let ctx = ContextObjects::from_values(case.context.clone());
        let input = DecisionInput { settings: &settings, lookup: Some(&ctx), now: Ok(1_795_000_000), expect: None };
        for _ in 0..25 {
            let mut r = case.review.clone();
            let n = 1 + rng.below(3);
            for _ in 0..n {
                mangle(&mut r, &mut rng, 0);
            }
            // Either an AdmissionReview response or a reason it is not one; never a panic.
            if let Ok(resp) = review(&r, &input) {
                assert!(resp["response"]["uid"].is_string(), "{resp}");
                assert!(resp["response"]["allowed"].is_boolean());
            }
            let payload = serde_json::to_vec(&json!({"settings": {}, "request": r["request"]})).unwrap_or_default();
            let kw = kubewarden::validate(&payload, Some(&ctx), Ok(1_795_000_000));
            if !kw.accepted {
                assert!(kw.message.is_some(), "a rejection without a message");
            }
            answered += 1;
        }
    }
    assert!(answered > 4000, "only {answered} mangled reviews");
}
