//! Leases, leader election and fencing on object storage.
//!
//! A lease is one small JSON record in a store (`s3://bucket/locks/gc`, `file:///…`,
//! `memory://…`), changed only by conditional writes, so the store is the consensus engine:
//! no lock server, no comparison of two machines' clocks, no human needed to break a stale
//! lock. The winner gets an epoch, a fencing token that strictly increases per lease.
//!
//! ```no_run
//! # async fn demo() -> lease::Result<()> {
//! use std::time::Duration;
//! let (client, key) = lease::Client::for_url("file:///tmp/locks/gc")?;
//! let opts = lease::LeaseOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(60));
//! let held = client.acquire(&key, &opts).await?;
//! println!("leader at epoch {}", held.epoch());
//! held.ensure_held(Duration::from_secs(5))?; // before each step that needs the lease
//! held.release().await?;
//! # Ok(()) }
//! ```
//!
//! See `docs/protocol.md` for the protocol and the reasoning behind it.

mod acquire;
mod acquirer;
mod breaking;
mod client;
pub mod clock;
mod duration;
mod election;
pub mod error;
mod fence;
mod fenced_holder;
mod gate;
mod io;
mod lease;
mod lock_change;
pub mod metrics;
pub mod options;
mod owner;
mod per_process;
mod process;
pub mod protocol;
mod queue;
pub mod record;
pub mod scope;
mod shared_session;
mod status;
pub mod store;
mod store_clock;
mod token;
mod wake_hint;
mod yielding;

pub use acquirer::WAITING_TARGET;
pub use client::{asker_name, current_user, set_client_name, Client, ClientBuilder};
pub use duration::{format_duration, parse_duration, parse_duration_in};
pub use election::{Election, Leader, LeaderWatch};
pub use error::{Error, ErrorKind, Result};
pub use fence::FencedObject;
pub use fenced_holder::{FencedHolder, FencedRef};
pub use gate::FencingGate;
pub use lease::{Grant, Health, HealthEvent, Lease, LostReason};
pub use options::{LeaseOptions, Preempt, WakeHints};
pub use protocol::breaking::BreakMode;
pub use protocol::queue::{YieldAsk, YieldRequest, YieldRequested};
pub use record::Holder;
pub use scope::{Mode, Scope};
pub use shared_session::{
    session_lock_key, session_store, Attachment, SessionOptions, SharedGrant, SharedSession,
};
pub use status::{
    unix_ms, HolderJson, LeaseState, Participant, QueueStatus, SessionState, Status, Watcher,
};
pub use store::doctor;
pub use store::url::{object_key, LeaseUrl, StoreUrl};
pub use token::FencingToken;

/// The version of this library (equal across the workspace and every binding).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The README's Rust example is compiled as a doctest, so it cannot rot.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
