//! Model checking of the lease protocol. The models drive the protocol's own state machines
//! (`lease::protocol`), not a re-implementation: `lease_model` here (shared by the checks in
//! `tests/lease_model.rs` and the negative controls in `tests/negative_controls.rs`),
//! `tests/fence_model.rs` for fenced writes. See docs/model.md and docs/verification.md.

#![allow(clippy::disallowed_methods)] // models, not the library: they build their own instants

pub mod lease_model;
