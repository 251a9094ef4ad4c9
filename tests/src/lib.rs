//! Helpers shared by the system tests and their binaries: the fault-injection proxy, and the
//! stand-ins for the clouds' token endpoints (`cloud_identity`).

pub mod cloud_identity;
pub mod proxy;
