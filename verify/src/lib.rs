//! Model checking of the lease protocol. The models are in `tests/`; they drive the protocol's
//! own state machines (`lease::protocol`), not a re-implementation. See docs/model.md and
//! docs/verification.md.
