//! Model checking of a shared session's owner: the checks (the model is
//! `lease_verify::session_model`, shared with the negative controls in `negative_controls.rs`,
//! which show each of its rules broken and found). The model drives the owner's own machine
//! (`lease::protocol::session::owner::Owner`) and judges grants by rule 4's own verdict
//! (`lease::protocol::session::attachment`).

#![allow(clippy::disallowed_methods)] // times the checker with the wall clock

use lease_verify::session_model::*;

/// Two grants on two locks, each lock with a checker; the process may crash; a reliable
/// network. `LEASE_MODEL=deep`: a deleted session and a lost answer besides.
#[test]
fn one_session_two_grants_checked_on_both_locks() {
    let m = if deep() {
        SessionModel {
            max_faults: 1,
            deletions: 1,
            ..base()
        }
    } else {
        base()
    };
    check(m, "shared session, two grants, two checkers");
}

/// One lost answer to a session write (the write may land later, or never) or one failed
/// leave, with a checker on the first lock: the second grant is held, released or lost.
#[test]
fn one_session_two_grants_with_a_lost_answer_or_a_failed_leave() {
    check(
        SessionModel {
            checkers: 1,
            max_faults: 1,
            crashes: false,
            ..base()
        },
        "shared session, a fault",
    );
}

/// The per-process default session (issue 24): released after one ttl with nothing attached,
/// its release decided and then written; the second grant may attach at any moment around it
/// (before the decision, between the decision and the write, while the write is in flight,
/// after it landed). Every property of the explicit session's, and: no grant is attached to a
/// session whose release was decided. `LEASE_MODEL=deep`: a deleted session and a lost answer
/// besides.
#[test]
fn an_idle_release_racing_an_attach() {
    let m = if deep() {
        SessionModel {
            max_faults: 1,
            deletions: 1,
            ..idle()
        }
    } else {
        idle()
    };
    check(m, "shared session, idle release racing an attach");
}

/// The idle release with one fault: a lost answer (to a renewal or to the release write, which
/// may then land later or never) or a failed leave; one checker, no crash.
#[test]
fn an_idle_release_with_a_lost_answer_or_a_failed_leave() {
    check(
        SessionModel {
            checkers: 1,
            max_faults: 1,
            crashes: false,
            ..idle()
        },
        "shared session, idle release, a fault",
    );
}
