//! A holder on this machine whose processes are provably gone: its lease may be taken over at
//! once, as flock(1) frees a lock when its holder dies, instead of after `ttl + grace`
//! (docs/protocol.md §4).
//!
//! Provably gone means, from the facts the driver gathers after a read (a [`Probe`]):
//! - the holder runs on this very boot of this machine: its record's boot id is ours (random
//!   per boot: another machine sharing a directory over a network file system, or an earlier
//!   boot, never matches);
//! - in our pid namespace: its pids mean to us what they meant to it (a container sharing the
//!   directory has another namespace, where our pid N is some other process or none);
//! - each of its processes (its own pid and the others its record names) is either absent from
//!   our pid namespace, or is now another process: a start time other than the one recorded,
//!   read in the same time namespace (`/proc` shifts start times by the reader's offsets).
//!
//! Anything unknown (no record of its processes, a probe that could not read `/proc`, a
//! zombie not yet reaped) proves nothing, and the usual rules apply. A dead process believes
//! nothing and does nothing, so taking over its lease cannot give two holders.

use super::mutants::{self, Mutant};
use crate::record::Holder;

/// What this machine says of itself and of the processes a holder record names: gathered by the
/// driver (from `/proc` and `kill(pid, 0)`) when the acquisition asks (`Step::Probe`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Probe {
    /// Our boot id, pid namespace and time namespace (`None`: unknown).
    pub boot: Option<String>,
    pub pid_ns: Option<String>,
    pub time_ns: Option<String>,
    /// What each pid asked about is here.
    pub procs: Vec<(u32, Proc)>,
}

/// What a pid is in our pid namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proc {
    /// No process has it (`kill(pid, 0)` fails with `ESRCH`).
    Absent,
    /// A live process has it, started this many clock ticks after boot (read in our time
    /// namespace).
    Started(u64),
    /// Cannot be told (`/proc` of another namespace or hidden, a zombie, an error).
    Unknown,
}

/// The pids whose state would prove `holder` gone: its own and the others its record names;
/// empty when its record names no processes (written by an older version, or by a process that
/// could not describe itself).
pub fn pids(holder: &Holder) -> Vec<u32> {
    match (&holder.process, holder.pid) {
        (Some(p), Some(pid)) => std::iter::once(pid)
            .chain(p.also.iter().map(|(pid, _)| *pid))
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether `probe` proves every process of `holder` gone (see the module's documentation).
pub fn proven_gone(holder: &Holder, probe: &Probe) -> bool {
    let (Some(p), Some(pid)) = (&holder.process, holder.pid) else {
        return false;
    };
    let ours = |fact: &Option<String>, theirs: &str| fact.as_deref() == Some(theirs);
    if !ours(&probe.boot, &p.boot) && !mutants::on(Mutant::DeadHolderAnyBoot) {
        return false;
    }
    if !ours(&probe.pid_ns, &p.pid_ns) && !mutants::on(Mutant::DeadHolderAnyPidNamespace) {
        return false;
    }
    let same_clock = ours(&probe.time_ns, &p.time_ns);
    std::iter::once((pid, p.start))
        .chain(p.also.iter().copied())
        .all(|(pid, start)| {
            let seen = probe.procs.iter().find(|(q, _)| *q == pid).map(|(_, s)| *s);
            match seen {
                Some(Proc::Absent) => true,
                Some(Proc::Started(now)) => same_clock && now != start,
                Some(Proc::Unknown) | None => false,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::HolderProcess;

    fn holder() -> Holder {
        Holder {
            id: "h".into(),
            pid: Some(100),
            process: Some(Box::new(HolderProcess {
                boot: "boot-1".into(),
                pid_ns: "pid:[1]".into(),
                time_ns: "time:[1]".into(),
                start: 5000,
                also: vec![(101, 5001)],
            })),
            ..Holder::default()
        }
    }

    fn probe(procs: &[(u32, Proc)]) -> Probe {
        Probe {
            boot: Some("boot-1".into()),
            pid_ns: Some("pid:[1]".into()),
            time_ns: Some("time:[1]".into()),
            procs: procs.to_vec(),
        }
    }

    #[test]
    fn gone_only_when_every_process_is_absent_or_another() {
        let h = holder();
        assert_eq!(pids(&h), [100, 101]);
        // Both gone: absent, or the pid now another process (reused).
        assert!(proven_gone(
            &h,
            &probe(&[(100, Proc::Absent), (101, Proc::Absent)])
        ));
        assert!(proven_gone(
            &h,
            &probe(&[(100, Proc::Started(9000)), (101, Proc::Absent)])
        ));
        // One still there (the holder, or its watchdog), or unknown, or not asked: not proven.
        for procs in [
            vec![(100, Proc::Started(5000)), (101, Proc::Absent)],
            vec![(100, Proc::Absent), (101, Proc::Started(5001))],
            vec![(100, Proc::Absent), (101, Proc::Unknown)],
            vec![(100, Proc::Absent)],
        ] {
            assert!(!proven_gone(&h, &probe(&procs)), "{procs:?}");
        }
    }

    #[test]
    fn another_boot_namespace_or_clock_proves_nothing() {
        let h = holder();
        let absent = [(100, Proc::Absent), (101, Proc::Absent)];
        let reused = [(100, Proc::Started(9000)), (101, Proc::Started(9001))];
        let other_boot = Probe {
            boot: Some("boot-2".into()),
            ..probe(&absent)
        };
        assert!(!proven_gone(&h, &other_boot));
        let other_pid_ns = Probe {
            pid_ns: Some("pid:[2]".into()),
            ..probe(&absent)
        };
        assert!(!proven_gone(&h, &other_pid_ns));
        // Start times read in another time namespace are shifted: no proof of reuse. Absence
        // does not depend on the clock.
        let other_clock = |procs: &[(u32, Proc)]| Probe {
            time_ns: Some("time:[2]".into()),
            ..probe(procs)
        };
        assert!(!proven_gone(&h, &other_clock(&reused)));
        assert!(proven_gone(&h, &other_clock(&absent)));
        let unknown = Probe {
            boot: None,
            ..probe(&absent)
        };
        assert!(!proven_gone(&h, &unknown));
        // A record that names no processes (an older writer) proves nothing.
        let old = Holder {
            process: None,
            ..holder()
        };
        assert!(pids(&old).is_empty());
        assert!(!proven_gone(&old, &probe(&absent)));
    }
}
