//! Helpers shared by the system tests and their binaries: the S3 fault-injection proxy, and
//! the history checker of the multi-process tests.

pub mod history;
pub mod proxy;
