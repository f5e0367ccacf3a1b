//! What deciding a review body will allocate, known from its bytes before
//! they are parsed.
//!
//! The parsed form of JSON is many times its size, and how many depends on
//! the shape, not the length: `[{"a":0},…]` is 8 bytes of body and ~700 bytes
//! of heap an item (a map node for every one-key object), while a long string
//! is about its own length. Charging a decision by body bytes let one 3 MiB
//! review of small objects take a 384 MiB pod down. So the body is first
//! scanned — one pass, no allocation, linear — for what drives the parse and
//! the decision (containers, members, elements, strings, escapes, nulls), and
//! the decision is charged by [`Shape::decision_bytes`], an upper bound of
//! the heap the parse and the decision hold at their peak. `tests/
//! decision_cost.rs` measures that peak with a counting allocator over
//! generated hostile shapes and holds the bound to it.

/// The counts of a JSON text that its parsed form grows with.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Length of the text.
    pub bytes: u64,
    /// `{` outside strings.
    pub objects: u64,
    /// Objects with at least one member (each allocates a map node).
    pub filled_objects: u64,
    /// `[` outside strings.
    pub arrays: u64,
    /// `:` outside strings: object members.
    pub members: u64,
    /// `,` outside strings: one per value after the first of a container.
    pub commas: u64,
    /// String tokens (keys and values).
    pub strings: u64,
    /// Bytes inside strings (escapes counted as written).
    pub string_bytes: u64,
    /// `null` tokens (the decision copies a value holding one: null pruning).
    pub nulls: u64,
    /// Escapes, DEL bytes and C1 control characters (U+0080–U+009F, raw as
    /// two bytes) inside strings: a value quoted in an answer (Go's `%q`,
    /// then JSON) grows most where it holds these.
    pub escapes: u64,
    /// Deepest nesting of containers.
    pub max_depth: u32,
}

/// Scans `text` (JSON or not: a text that is not JSON is refused by the
/// parse that follows, and the scan only bounds what that parse could
/// allocate). O(n), no allocation.
pub fn shape(text: &[u8]) -> Shape {
    let mut s = Shape { bytes: text.len() as u64, ..Shape::default() };
    let (mut in_string, mut escaped, mut depth) = (false, false, 0u32);
    // Just after a `{`: the next token says whether the object is empty.
    let mut opened = false;
    // The previous byte in a string was 0xC2, the lead of U+0080–U+00BF.
    let mut c2 = false;
    for &b in text {
        if opened && !in_string && !b.is_ascii_whitespace() {
            opened = false;
            if b != b'}' {
                s.filled_objects += 1;
            }
        }
        if in_string {
            if c2 && (0x80..=0x9f).contains(&b) {
                s.escapes += 1;
            }
            c2 = b == 0xc2;
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
                s.escapes += 1;
            } else if b == 0x7f {
                s.escapes += 1;
            } else if b == b'"' {
                in_string = false;
                c2 = false;
                continue;
            }
            s.string_bytes += 1;
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                s.strings += 1;
            }
            b'{' | b'[' => {
                if b == b'{' {
                    s.objects += 1;
                    opened = true;
                } else {
                    s.arrays += 1;
                }
                depth = depth.saturating_add(1);
                s.max_depth = s.max_depth.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b':' => s.members += 1,
            b',' => s.commas += 1,
            // Outside strings an `n` only begins `null`.
            b'n' => s.nulls += 1,
            _ => {}
        }
    }
    s
}

// What each count costs at the decision's peak, measured with a counting
// allocator over generated shapes (`tests/decision_cost.rs` prints the
// measured peak against the charge) and rounded up by half or more.

/// Heap per object, empty or not.
const PER_OBJECT: u64 = 150;
/// Heap per object with members: the first node of its map (serde_json's
/// `Map` is a B-tree: one leaf holds up to 11 members whatever it uses) and
/// of each tree the decision derives from it.
const PER_FILLED_OBJECT: u64 = 1_700;
/// Heap per further member: its key and value in each tree.
const PER_MEMBER: u64 = 60;
/// Heap per array: its `Vec`'s first allocation.
const PER_ARRAY: u64 = 100;
/// Heap per value after a comma: a `Vec` slot (with growth slack) or a map
/// entry, in each tree, and the walk's path for it.
const PER_ELEMENT: u64 = 130;
/// Heap per string: the allocation and its overhead, in each tree.
const PER_STRING: u64 = 40;
/// Copies of each string byte the decision may hold at once (the parse, a
/// pruned or defaulted copy, the CEL view, the value quoted in a message
/// and in its cause).
const PER_STRING_BYTE: u64 = 26;
/// An escape or a DEL byte quoted (`\x7f`, then JSON-escaped) in each copy.
const PER_ESCAPE: u64 = 160;
/// Everything else a decision allocates whatever the body (the answer's
/// envelope, the rules' scratch space).
const BASE: u64 = 4 * 1024 * 1024;

impl Shape {
    /// An upper bound of the heap that parsing this text and deciding it
    /// hold at their peak, in bytes (the body's own bytes not included).
    /// Linear in every count; a text holding a `null` counts twice (the
    /// decision prunes nulls into a copy).
    pub fn decision_bytes(&self) -> u64 {
        let tree = self
            .objects
            .saturating_mul(PER_OBJECT)
            .saturating_add(self.filled_objects.saturating_mul(PER_FILLED_OBJECT))
            .saturating_add(self.members.saturating_mul(PER_MEMBER))
            .saturating_add(self.arrays.saturating_mul(PER_ARRAY))
            .saturating_add(self.commas.saturating_mul(PER_ELEMENT))
            .saturating_add(self.strings.saturating_mul(PER_STRING))
            .saturating_add(self.string_bytes.saturating_mul(PER_STRING_BYTE))
            .saturating_add(self.escapes.saturating_mul(PER_ESCAPE));
        let copies = if self.nulls > 0 { 2 } else { 1 };
        BASE.saturating_add(tree.saturating_mul(copies))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_outside_strings() {
        let s = shape(br#"{"a":[1,null,"x,:{[n\"]"],"b":{}}"#);
        assert_eq!(
            s,
            Shape {
                bytes: 33,
                objects: 2,
                filled_objects: 1,
                arrays: 1,
                members: 2,
                commas: 3,
                strings: 3,
                string_bytes: 11,
                nulls: 1,
                escapes: 1,
                max_depth: 2,
            }
        );
    }

    #[test]
    fn small_objects_cost_more_than_their_bytes_and_strings_about_theirs() {
        let objects = format!("[{}]", vec![r#"{"a":0}"#; 1000].join(","));
        let string = format!("[\"{}\"]", "x".repeat(objects.len()));
        let per_byte = |t: &str| shape(t.as_bytes()).decision_bytes().saturating_sub(BASE) / t.len() as u64;
        assert!(per_byte(&objects) > 100, "{}", per_byte(&objects));
        assert!(per_byte(&string) <= PER_STRING_BYTE, "{}", per_byte(&string));
    }
}
