//! Helpers shared by the system tests and their binaries: the S3 fault-injection proxy.

pub mod proxy;
