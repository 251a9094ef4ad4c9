//! This machine's processes, read from `/proc`: how a holder record describes the process that
//! holds ([`HolderProcess`]), and what a waiter finds of the processes a record names
//! ([`Probe`]), for [`protocol::dead_holder`](crate::protocol::dead_holder) to decide whether
//! a holder on this machine is gone.
//!
//! Only facts that mean the same to the holder and to the waiter are used: the boot id, the
//! namespaces, the start time of a pid (which tells a process from a later one reusing its
//! pid). `/proc` is read only when it shows our own pid namespace (a process moved into a new
//! namespace without mounting its `/proc` sees its parent's, where our pids name others).

use std::fs;

use crate::clock::{Clock, SystemClock};
use crate::protocol::dead_holder::{Probe, Proc};
use crate::record::HolderProcess;

/// How this process (`pid`, ours) and `also` (other processes of ours that act under the lease)
/// are described in a holder record; `None` when anything cannot be read (then no waiter can
/// prove the holder gone, and the usual rules apply).
pub(crate) fn describe(pid: u32, also: &[u32]) -> Option<HolderProcess> {
    if !proc_is_ours() {
        return None;
    }
    let boot = SystemClock.boot_time()?;
    let start = |pid: u32| match stat(pid)? {
        (state, start) if !gone_state(state) => Some(start),
        _ => None,
    };
    Some(HolderProcess {
        boot: boot.boot_id.to_string(),
        pid_ns: pid_namespace()?,
        time_ns: boot.time_namespace.to_string(),
        start: start(pid)?,
        also: also
            .iter()
            .map(|&p| start(p).map(|s| (p, s)))
            .collect::<Option<_>>()?,
    })
}

/// What this machine says of `pids`, with its boot id and our namespaces.
pub(crate) fn probe(pids: &[u32]) -> Probe {
    let boot = SystemClock.boot_time();
    let proc_ours = proc_is_ours();
    Probe {
        boot: boot.as_ref().map(|b| b.boot_id.to_string()),
        pid_ns: pid_namespace(),
        time_ns: boot.map(|b| b.time_namespace.to_string()),
        procs: pids.iter().map(|&p| (p, state_of(p, proc_ours))).collect(),
    }
}

/// What `pid` is in our pid namespace.
fn state_of(pid: u32, proc_ours: bool) -> Proc {
    let Ok(raw) = i32::try_from(pid) else {
        return Proc::Unknown;
    };
    if raw <= 0 {
        return Proc::Unknown;
    }
    // SAFETY: kill(2) with signal 0 sends nothing; it only looks the pid up, in our pid
    // namespace, whatever /proc is mounted.
    if unsafe { libc::kill(raw, 0) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    {
        return Proc::Absent;
    }
    if !proc_ours {
        return Proc::Unknown;
    }
    match stat(pid) {
        // A zombie has exited, but its leader may be waiting for other threads: not proof.
        Some((state, start)) if !gone_state(state) => Proc::Started(start),
        _ => Proc::Unknown,
    }
}

/// A state of `/proc/PID/stat` in which a process may no longer run: zombie, dead.
fn gone_state(state: char) -> bool {
    matches!(state, 'Z' | 'X' | 'x')
}

/// The state and start time (clock ticks after boot) of `pid`, from `/proc/PID/stat`.
fn stat(pid: u32) -> Option<(char, u64)> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// `PID (COMM) STATE PPID …`: the command may hold spaces and parentheses, so fields are
/// counted after its last `)`; the start time is field 22, the 20th after the command.
fn parse_stat(text: &str) -> Option<(char, u64)> {
    let (_, rest) = text.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Our pid namespace, as `/proc/self/ns/pid` names it (`pid:[4026531836]`).
fn pid_namespace() -> Option<String> {
    fs::read_link("/proc/self/ns/pid")
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// Whether `/proc` shows our own pid namespace: `/proc/self` names our pid.
fn proc_is_ours() -> bool {
    fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str()?.parse::<u32>().ok())
        == Some(std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_whatever_the_command_name() {
        let fields = |comm: &str| {
            format!(
                "42 ({comm}) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10 \
                 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0"
            )
        };
        assert_eq!(parse_stat(&fields("sleep")), Some(('S', 123456)));
        assert_eq!(parse_stat(&fields("a) b (c")), Some(('S', 123456)));
        assert_eq!(parse_stat("42 (x) S 1"), None);
        assert_eq!(parse_stat(""), None);
    }

    #[test]
    fn this_process_is_described_and_found_alive() {
        let me = std::process::id();
        let Some(described) = describe(me, &[]) else {
            // No /proc of our own here (another namespace's is mounted): nothing to check.
            assert!(!proc_is_ours());
            return;
        };
        assert!(described.pid_ns.starts_with("pid:["), "{described:?}");
        let probe = probe(&[me]);
        assert_eq!(probe.procs, [(me, Proc::Started(described.start))]);
        assert_eq!(probe.boot.as_deref(), Some(described.boot.as_str()));
        // A pid no process has (above the kernel's largest).
        assert_eq!(state_of(i32::MAX as u32, true), Proc::Absent);
        assert_eq!(state_of(0, true), Proc::Unknown);
    }
}
