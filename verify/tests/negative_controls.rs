//! Negative controls: with one of the safety issue's fixes reverted, the model checker finds the
//! bug it fixed. Each fix is reverted in the protocol's own code by a [`Mutant`] (the
//! `negative-controls` feature, on only for this crate), in this test process only; the same
//! model without the mutant passes (`tests/lease_model.rs`). Together with the controls kept
//! beside their checks (`the_model_finds_drift_beyond_the_grace`, and in `fence_model.rs` plain
//! fenced writes losing updates and a zombie landing where versions hash the bytes), every bug
//! of the safety issue that the model covers is shown found:
//!
//! | Safety issue bug                                   | Control                                   |
//! |----------------------------------------------------|-------------------------------------------|
//! | a deleted record re-issued an epoch                | `a_record_made_again_at_the_known_epoch_…`|
//! | `lease break` admitted a second holder at once     | `a_break_that_admits_at_once_…`           |
//! | a holder believed while its release was in flight  | `a_holder_believing_while_releasing_…`    |
//! | fenced read-modify-write lost updates              | `fence_model.rs::plain_fenced_writes_lose_updates` |
//!
//! A late-landing retry (an earlier copy of a resent write landing late, the holder's deadline
//! taken from the later send) needs five faults in this model (two sends held up, the copy
//! landing between a read-back and the resend, the holder's renewals failing until its
//! deadline), beyond what the checker explores in reasonable time; its control is the
//! deterministic simulation `core/tests/safety.rs::a_write_that_lands_late_is_not_taken_for_a_later_attempt`,
//! which failed on the old code.

#![allow(clippy::disallowed_methods)] // times the checker with the wall clock

use std::sync::Mutex;

use stateright::{Checker, Model};

use lease::protocol::mutants::{self, Mutant};
use lease::BreakMode;
use lease_verify::lease_model::*;

/// The mutant switch is process-wide: one control at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Run `model` with `mutant` on; the name of the property the checker found violated, if any.
fn violated(model: LeaseModel, mutant: Option<Mutant>, what: &str) -> Option<&'static str> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    mutants::set(mutant);
    let started = std::time::Instant::now();
    let checker = model.checker().threads(2).spawn_bfs().join();
    mutants::set(None);
    let found = ["at most one holder believes", "epochs strictly increase"]
        .into_iter()
        .find(|p| checker.discovery(p).is_some());
    eprintln!(
        "{what} ({mutant:?}): {} unique states in {:.1?}, violated: {found:?}",
        checker.unique_state_count(),
        started.elapsed()
    );
    if let Some(p) = found {
        eprintln!("{p}: {:?}", checker.discovery(p).unwrap().into_actions());
    }
    found
}

#[test]
fn a_break_that_admits_at_once_gives_two_holders() {
    let m = LeaseModel {
        breaks: 1,
        break_mode: BreakMode::AllowTwoHolders,
        ..base()
    };
    assert_eq!(
        violated(m, None, "break, two holders allowed"),
        Some("at most one holder believes")
    );
}

#[test]
fn a_record_made_again_at_the_known_epoch_reissues_an_epoch() {
    let m = LeaseModel {
        deletes: 1,
        max_time: 5,
        ..base()
    };
    assert_eq!(
        violated(m, Some(Mutant::RecreateAtKnownEpoch), "deletion"),
        Some("epochs strictly increase")
    );
}

#[test]
fn a_holder_believing_while_releasing_gives_two_holders() {
    // The release's answer held up (one fault) while a waiter takes over.
    let m = LeaseModel {
        max_faults: 1,
        max_time: 6,
        ..base()
    };
    assert_eq!(
        violated(m, Some(Mutant::BelieveWhileReleasing), "release in flight"),
        Some("at most one holder believes")
    );
}
