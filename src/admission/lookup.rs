//! The lookup port and its in-memory sources, where the admission layer's
//! callers have always found them; they live in [`crate::lookup`], below the
//! rules.

pub use crate::lookup::{hosted_control_plane, ContextObjects, HcpLookup, Lookup, LookupError, Prefetched};
