//! The core crate's tests that run in this process, without a server (the memory store on
//! simulated time, the file store on real files): one test binary instead of sixteen.
//!
//! Why one binary: every change to the library relinks every test binary that depends on it.
//! A mutation run (issue 30, `scripts/mutants.sh`) rebuilds the crate's tests once per mutant,
//! and sixteen links cost more than the tests they ran; a test run builds and links them once
//! more. Kept apart: `registry.rs` (it forks, which a binary whose other tests run threads must
//! not do) and the cloud stores' suites (`store_s3.rs`, `store_gcs.rs`, `store_azure.rs`, each
//! built only with its store's feature).
//!
//! Run one file's tests by its module: `cargo test -p bucket-lease --test in_process queue::`.

#[path = "../conformance/mod.rs"]
mod conformance;
#[path = "../remote/mod.rs"]
mod remote;
#[path = "../sim/mod.rs"]
mod sim;

mod fencing;
mod health;
mod properties;
mod protocol;
mod queue;
mod queue_holes;
mod safety;
mod same_owner;
mod scope_fencing;
mod shared_session;
mod simulation;
mod store_clock;
mod store_file;
mod store_memory;
mod ttl_change;
mod unavailable;
mod where_objects_go;
