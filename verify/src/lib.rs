//! Model checking of the lease protocol. The models drive the protocol's own state machines
//! (`lease::protocol`), not a re-implementation: `lease_model` here (shared by the checks in
//! `tests/lease_model.rs` and the negative controls in `tests/negative_controls.rs`),
//! `fence_model` for fenced writes (checks in `tests/fence_model.rs`), `queue_model` for queued
//! locks (checks in `tests/queue_model.rs`). See docs/model.md and
//! docs/verification.md.

#![allow(clippy::disallowed_methods)] // models, not the library: they build their own instants

pub mod fence_model;
pub mod lease_model;
mod network;
pub mod queue_model;
pub mod session_model;
