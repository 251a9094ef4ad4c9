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
//! | a late-landing retry could give two holders       | `a_resend_that_resets_its_send_time_…`    |
//! | a deleted record re-issued an epoch                | `a_record_made_again_at_the_known_epoch_…`|
//! | a `Create` held up across a deletion re-issued an epoch (issue 22; `LeaseCreateGrants`) | `a_create_that_grants_hands_an_epoch_…` |
//! | `lease break` admitted a second holder at once     | `a_break_that_admits_at_once_…`           |
//! | a holder believed while its release was in flight  | `a_holder_believing_while_releasing_…`    |
//! | `Fenced` reported for writes that landed           | `an_unknown_outcome_taken_as_not_landed_…` |
//! | fenced read-modify-write lost updates              | `fence_model.rs::plain_fenced_writes_lose_updates` |
//!
//! And for fencing per scope and for readers (issue 22, items 4 and 5):
//!
//! | Rule broken                                        | Control                                   |
//! |----------------------------------------------------|-------------------------------------------|
//! | one token per object (`FenceIgnoresScopes`)        | `one_token_per_object_refuses_a_live_…`   |
//! | readers that do not fence (`ReadersDoNotPin`)      | `readers_that_do_not_fence_see_a_stale_…` |
//!
//! And for queued locks (issue 13), each rule the design relies on, broken:
//!
//! | Queued-lock rule broken                            | Control                                   |
//! |----------------------------------------------------|-------------------------------------------|
//! | readers overtake a waiting writer (`QueueOvertakes`) | `a_queue_that_lets_readers_overtake_…`  |
//! | a grant to a later, higher priority does not advance the passed-over count (`QueueBypassNotCounted`) | `a_bypass_count_not_advanced_…` |
//! | a due waiter does not make the earlier competing waiters of its priority due (`QueueDueNotInherited`) | `a_due_waiter_that_does_not_make_…` |
//! | modes ignored when granting (`QueueIgnoresModes`)  | `a_queue_that_ignores_modes_…`            |
//! | a waiter removes a blocker whose session is alive  | `a_waiter_that_evicts_a_live_holder_…`    |
//! | a holder believes while its leave is in flight     | `a_holder_believing_while_leaving_…`      |
//! | a lapsed participant joins again (`QueueRejoinWhenLapsed`) | `a_lapsed_participant_that_joins_again_…` |
//! | only heads check sessions (`QueueOnlyHeadsCheck`)  | `a_queue_where_only_heads_check_strands_…` |
//!
//! And for the holes of issue 22, each fix reverted:
//!
//! | Issue 22 fix reverted                              | Control                                   |
//! |----------------------------------------------------|-------------------------------------------|
//! | holders confirm the record at each renewal (`QueueHolderSkipsConfirmation`) | `a_holder_that_never_confirms_…` |
//! | a record made again starts above the clock (`QueueRecreateAtKnownEpoch`) | `a_queue_record_made_again_at_…` |
//! | a `Create` grants nobody (`QueueCreateGrants`)     | `a_create_that_grants_hands_a_token_…`    |
//! | joins reserve room for every later settle (`QueueJoinIgnoresReserve`) | `joins_that_reserve_no_room_…` |
//! | a newer record is never taken over (`QueueNewerTakenAsCorrupt`) | `a_newer_record_taken_for_corrupt_…` |
//! | session checks paced to the rule (`QueueSessionCheckLate`) | `core/tests/in_process/queue_holes.rs` … (simulated time; see below) |
//! | wall clocks agree within the gap a deletion leaves (an assumption, no mutant) | `a_wall_clock_behind_by_the_whole_gap_…` |
//! | a hint only starts a read (`HintTakenAsGrant`, issue 23) | `a_hint_taken_as_a_grant_makes_two_holders` |
//! | a yield request belongs to the tenures it names (`YieldOutlivesTenure`, issue 23) | `a_yield_request_that_outlives_its_tenure_reaches_a_later_holder` |
//! | a preemption lost to a renewal is sent again (`PreemptOncePerCall`, CI stop 38) | `a_preemption_spent_on_a_renewal_race_waits_…` |
//! | a plain lease's yield request names its tenure (`LeaseYieldAnyTenure`, issue 23) | `a_yield_request_for_any_tenure_reaches_a_later_holder` |
//! | a queued preemption removes the grants in its way (`QueuePreemptKeepsGrants`, issue 23) | `a_preemption_that_keeps_the_grants_in_its_way_leaves_two_writers` |
//! | a queued preemption takes one set of tenures per acquisition (`QueuePreemptAnyTenure`, issue 23) | `a_preemption_of_whatever_is_in_the_way_takes_a_later_tenure` |
//!
//! And for what a new user trips over (issue 28):
//!
//! | Rule broken                                        | Control                                   |
//! |----------------------------------------------------|-------------------------------------------|
//! | a dead holder's pids read in any pid namespace (`DeadHolderAnyPidNamespace`) | `a_dead_holder_rule_without_…` |
//! | a file-store lock not rechecked after its file was removed (`LockFileNotRechecked`) | `a_lock_file_not_rechecked_…` |
//!
//! And for shared sessions (issue 24), each rule of the owner's machine broken
//! (`session_model`, which drives `Owner`):
//!
//! | Shared-session rule broken                         | Control                                   |
//! |----------------------------------------------------|-------------------------------------------|
//! | attach before joining (`SessionJoinBeforeAttach`)  | `a_join_sent_before_its_attachment_landed_…` |
//! | detach only after the belief ends (`SessionDetachWhileBelieved`) | `a_detach_while_the_grant_is_believed_…` |
//! | the session's loss ends every grant (`SessionBeliefOutlivesLoss`) | `a_belief_that_outlives_its_session_…` |
//! | an idle release and an attach exclude each other (`SessionAttachWhileReleasing`) | `an_attach_after_the_idle_release_was_decided_…` |
//!
//! And for a holder that changes its ttl (issue 28 item 7):
//!
//! | Rule broken                                        | Control                                   |
//! |----------------------------------------------------|-------------------------------------------|
//! | believing by the longer ttl while a shorter one's write may land (`NoCapOnShorterTtl`) | `a_holder_that_shortens_its_ttl_without_a_cap_…` |
//!

#![allow(clippy::disallowed_methods)] // times the checker with the wall clock

use std::sync::Mutex;
use std::time::Duration;

use stateright::{Checker, HasDiscoveries, Model};

use lease::protocol::mutants::{self, Mutant};
use lease::BreakMode;
use lease_verify::fence_model::{self, FenceModel};
use lease_verify::lease_model::*;
use lease_verify::queue_model::{self, QueueModel};
use lease_verify::session_model;

/// The mutant switch is process-wide: one control at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Run `model` with `mutant` on; the first of `properties` the checker found violated, if any.
fn violated<M>(
    model: M,
    properties: &[&'static str],
    mutant: Option<Mutant>,
    what: &str,
) -> Option<&'static str>
where
    M: Model + Send + Sync + 'static,
    M::State: std::fmt::Debug + std::hash::Hash + Send + Sync + Clone + PartialEq,
    M::Action: std::fmt::Debug + Send + Sync + Clone + PartialEq,
{
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    mutants::set(mutant);
    let started = std::time::Instant::now();
    // Stop once the first of `properties` is found: the answer cannot change after that, and
    // a mutant's state space may be far larger than the fixed model's (the lapsed rejoin's
    // outgrew this machine's 23 GB when explored whole).
    let first = properties.iter().copied().take(1).collect();
    let checker = model
        .checker()
        .threads(2)
        .finish_when(HasDiscoveries::AnyOf(first))
        .spawn_bfs()
        .join();
    // The path to a discovery is rebuilt by replaying the model: with the mutant still on.
    let found = properties
        .iter()
        .copied()
        .find(|p| checker.discovery(p).is_some());
    eprintln!(
        "{what} ({mutant:?}): {} unique states in {:.1?}, violated: {found:?}",
        checker.unique_state_count(),
        started.elapsed()
    );
    if let Some(p) = found {
        eprintln!("{p}: {:?}", checker.discovery(p).unwrap().into_actions());
    }
    mutants::set(None);
    found
}

/// The lease model's safety properties.
const LEASE: &[&str] = &["at most one holder believes", "epochs strictly increase"];

#[test]
fn a_break_that_admits_at_once_gives_two_holders() {
    let m = LeaseModel {
        breaks: 1,
        break_mode: BreakMode::AllowTwoHolders,
        ..base()
    };
    assert_eq!(
        violated(m, LEASE, None, "break, two holders allowed"),
        Some("at most one holder believes")
    );
}

/// Issue 23: a preemption written at the same epoch as the holder it preempts (instead of the
/// next) hands that epoch out twice, so the preempted holder's fenced writes would not be
/// refused; the fixed model is the check
/// `a_preemption_keeps_epochs_increasing_and_the_preempted_holder_learns_of_it`.
#[test]
fn a_preemption_at_the_same_epoch_hands_an_epoch_out_twice() {
    let m = LeaseModel {
        preempting: Some(1),
        max_time: 4,
        ..base()
    };
    let properties = &[
        "epochs strictly increase",
        "at most one holder believes, besides holders preempted by a later epoch",
    ];
    assert_eq!(
        violated(m, properties, Some(Mutant::PreemptSameEpoch), "preemption"),
        Some("epochs strictly increase")
    );
}

/// CI stop 38: one preemption per acquire call, whatever became of it — a preemption that
/// lost the race with its holder's renewal is spent, and the acquirer waits for the live
/// tenure it set out to displace (a holder that never lets go: a wait without end). The fixed
/// model is the check `a_preemption_keeps_epochs_increasing_and_the_preempted_holder_learns_of_it`.
#[test]
fn a_preemption_spent_on_a_renewal_race_waits_for_the_holder_it_set_out_to_displace() {
    let m = LeaseModel {
        preempting: Some(1),
        max_time: 4,
        ..base()
    };
    let properties = &["a preempting acquisition never waits for the tenure it set out to preempt"];
    assert_eq!(
        violated(
            m,
            properties,
            Some(Mutant::PreemptOncePerCall),
            "preemption spent"
        ),
        Some(properties[0])
    );
}

/// Issue 23: a plain lease's holder that takes any yield request for its own, whatever epoch
/// it names, is told of a request made of an earlier tenure (the asker read the record, the
/// holder released, the next holder renewed, then read the request); the fixed model is the
/// check `a_plain_leases_yield_request_reaches_only_the_tenure_it_asked`.
#[test]
fn a_yield_request_for_any_tenure_reaches_a_later_holder() {
    let m = LeaseModel {
        yield_asks: 1,
        max_time: 5,
        ..base()
    };
    let properties = &["a holder is told only of a yield request made of its own tenure"];
    assert_eq!(
        violated(
            m,
            properties,
            Some(Mutant::LeaseYieldAnyTenure),
            "plain lease yield"
        ),
        Some(properties[0])
    );
}

/// Issue 29: the store-clock rule that trusts an answer's `Date` gives two holders when a
/// gateway's `Date` runs ahead of the store; with the fix the same model is safe (the check
/// `mutual_exclusion_with_a_date_ahead_of_the_store` in lease_model.rs).
#[test]
fn a_store_clock_rule_that_trusts_date_gives_two_holders_behind_a_gateway_ahead() {
    let m = LeaseModel {
        date_ahead: 7,
        ..base()
    };
    assert_eq!(
        violated(
            m,
            LEASE,
            Some(Mutant::TrustDate),
            "a Date ahead of the store"
        ),
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
        violated(m, LEASE, Some(Mutant::RecreateAtKnownEpoch), "deletion"),
        Some("epochs strictly increase")
    );
}

/// Issue 22's finding on the exclusive lease: a `Create` that grants at once, held up in the
/// network (or sent by a client that gave up) across another holder's lease and the record's
/// deletion, lands with the epoch of the clock it was sent with — one that holder had. With the
/// fix (a `Create` grants nobody) the same model is safe
/// (`lease_model.rs::epochs_increase_when_a_create_is_held_up_across_a_deletion`).
#[test]
fn a_create_that_grants_hands_an_epoch_out_again_after_a_deletion() {
    let m = LeaseModel {
        deletes: 1,
        max_faults: 1,
        max_time: 3,
        ..base()
    };
    assert_eq!(
        violated(
            m,
            &["epochs strictly increase"],
            Some(Mutant::LeaseCreateGrants),
            "a Create held up across a deletion"
        ),
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
        violated(
            m,
            LEASE,
            Some(Mutant::BelieveWhileReleasing),
            "release in flight"
        ),
        Some("at most one holder believes")
    );
}

/// A write resent after a timeout, with the deadline taken from the resend: the copy sent
/// first is held up, the read-back finds the record unchanged, the first copy lands, the resend
/// is refused and the read-back finds our write: the holder counts from the resend, a waiter
/// from when the record changed. (The checker finds it through a renewal: the first renewal's
/// copy lands late, the next renewal is held up.) Zero grace and no drift, so any overlap is the
/// protocol's, not the clock's; two requests held up, only client 0's; the same model without
/// the mutant is safe.
#[test]
fn a_resend_that_resets_its_send_time_gives_two_holders() {
    let m = LeaseModel {
        grace: std::time::Duration::ZERO,
        max_faults: 2,
        faulty: Some(0),
        only_delays: true,
        // The two holders come at 5 s (the path is 26 steps); at 6 s the model without the
        // mutant walked 3.9 million states (68 s), at 5 s 1.8 million (25 s), 2026-11-27.
        max_time: 5,
        ..base()
    };
    assert_eq!(
        violated(m.clone(), LEASE, None, "late landing, fixed"),
        None,
        "the model fails without the mutant"
    );
    assert_eq!(
        violated(m, LEASE, Some(Mutant::ResendResetsSendTime), "late landing"),
        Some("at most one holder believes")
    );
}

/// The fenced-write model's safety property: no lower epoch landing after a higher one, no
/// lost update, no write reported `Fenced` or `Conflict` that landed, no acknowledged write
/// that did not.
const FENCE: &[&str] = &["fenced writes keep their history"];

#[test]
fn an_unknown_outcome_taken_as_not_landed_reports_fenced_for_a_write_that_landed() {
    // The write lands with its answer lost, and the newer holder writes twice over it before
    // the read-back: the object no longer names the write as the one it replaced.
    let m = FenceModel {
        updates: 2,
        max_faults: 2,
        ..fence_model::model()
    };
    assert_eq!(
        violated(m.clone(), FENCE, None, "fenced writes, fixed"),
        None,
        "the model fails without the mutant"
    );
    assert_eq!(
        violated(
            m,
            FENCE,
            Some(Mutant::UnknownOutcomeTakenAsNotLanded),
            "fenced writes"
        ),
        Some(FENCE[0])
    );
}

/// Fencing per scope (issue 22 item 4) reverted to one token per object: a live writer of a
/// disjoint range is refused once a later grant wrote or a reader fenced the object.
#[test]
fn one_token_per_object_refuses_a_live_holder_of_a_disjoint_scope() {
    let m = fence_model::scoped_model();
    let all = &[fence_model::ORDER, fence_model::READER, fence_model::LIVE];
    assert_eq!(
        violated(m.clone(), all, None, "scoped fencing, fixed"),
        None
    );
    assert_eq!(
        violated(
            m,
            all,
            Some(Mutant::FenceIgnoresScopes),
            "scoped fencing, one token"
        ),
        Some(fence_model::LIVE)
    );
}

/// Readers that do not fence what they read (issue 22 item 5): the zombie writer's write lands
/// under the reader, whose data changes while it holds.
#[test]
fn readers_that_do_not_fence_see_a_stale_write_land_under_them() {
    let m = fence_model::scoped_model();
    assert_eq!(
        violated(
            m,
            &[fence_model::READER, fence_model::ORDER, fence_model::LIVE],
            Some(Mutant::ReadersDoNotPin),
            "readers not fencing"
        ),
        Some(fence_model::READER)
    );
}

/// The queued-lock model's safety properties, mutual exclusion first.
const QUEUE: &[&str] = queue_model::SAFETY;

#[test]
fn a_queue_that_lets_readers_overtake_a_waiting_writer_breaks_arrival_order() {
    // Conserve: a backup holds, GC waits, the second backup goes ahead of GC.
    let m = queue_model::conserve();
    assert_eq!(violated(m.clone(), QUEUE, None, "conserve"), None);
    assert_eq!(
        violated(m, QUEUE, Some(Mutant::QueueOvertakes), "conserve"),
        Some(queue_model::FIFO)
    );
}

#[test]
fn a_bypass_count_not_advanced_lets_higher_priorities_pass_a_waiter_past_the_bound() {
    // A low-priority writer waits while two high-priority ones take turns: with the count
    // never advanced, it is passed over a second time at a bound of 1.
    // (The fixed model is checked whole by `queue_model.rs`.)
    let m = queue_model::priorities();
    assert_eq!(
        violated(m, QUEUE, Some(Mutant::QueueBypassNotCounted), "priorities"),
        Some(queue_model::BYPASS)
    );
}

#[test]
fn a_due_waiter_that_does_not_make_earlier_ones_of_its_priority_due_breaks_fifo() {
    // A reader of `a` and a whole-lock writer (priority 0) wait behind a writer of `a`; a
    // reader of `b` (priority 1) passes the writer, which is due: without passing that on to
    // the earlier reader, the writer goes first.
    // Four participants: breadth first explores 2.2 million states (about 55-90 s) before the
    // violation, so this control runs with the deep run (`LEASE_MODEL=deep`), as does the
    // fixed scenario; the default run has `order`'s unit tests
    // (`a_due_waiter_makes_earlier_competing_ones_of_its_priority_due_too` and the property
    // test of FIFO within a priority).
    if !lease_verify::lease_model::deep() {
        eprintln!("deep run only (LEASE_MODEL=deep)");
        return;
    }
    let m = queue_model::priorities_scoped();
    assert_eq!(
        violated(
            m,
            QUEUE,
            Some(Mutant::QueueDueNotInherited),
            "priorities over scopes"
        ),
        Some(queue_model::FIFO)
    );
}

#[test]
fn a_yield_request_that_outlives_its_tenure_reaches_a_later_holder() {
    // The holder is asked; it releases, the next one is granted; with the request kept past
    // the tenure it named, the next holder's confirmation tells it to yield too.
    assert_eq!(
        violated(
            queue_model::yielding(),
            QUEUE,
            Some(Mutant::YieldOutlivesTenure),
            "yield"
        ),
        Some(queue_model::YIELD_TOLD)
    );
}

#[test]
fn a_queue_that_ignores_modes_grants_a_writer_beside_readers() {
    assert_eq!(
        violated(
            queue_model::conserve(),
            QUEUE,
            Some(Mutant::QueueIgnoresModes),
            "conserve"
        ),
        Some(queue_model::MUTUAL_EXCLUSION)
    );
}

#[test]
fn a_waiter_that_evicts_a_live_holder_gives_two_conflicting_believers() {
    let m = QueueModel {
        evict_live: true,
        ..queue_model::byte_ranges()
    };
    assert_eq!(
        violated(m, QUEUE, None, "ranges, live holders evicted"),
        Some(queue_model::MUTUAL_EXCLUSION)
    );
}

#[test]
fn a_holder_believing_while_leaving_gives_two_conflicting_believers() {
    // The leave lands with its answer held up (one fault); the next waiter reads its grant.
    let m = QueueModel {
        max_faults: 1,
        ..queue_model::pair()
    };
    assert_eq!(violated(m.clone(), QUEUE, None, "pair, a fault"), None);
    let m = QueueModel {
        believe_while_leaving: true,
        ..m
    };
    assert_eq!(
        violated(m, QUEUE, None, "pair, believing while leaving"),
        Some(queue_model::MUTUAL_EXCLUSION)
    );
}

#[test]
fn a_queue_where_only_heads_check_strands_the_waiters_behind_a_dead_head() {
    // A backup holds and dies, GC waits behind it and dies, the live backup behind GC waits:
    // only if someone checks GC (and then the backup) is it served.
    // Two crashes (the finding's deaths); the same model without the mutant is checked in
    // `queue_model.rs` (`every_live_participant_is_served_after_any_deaths`, 1.2 million states).
    let m = queue_model::QueueLiveness(QueueModel {
        max_deaths: 2,
        lapses: false,
        crashes: true,
        ..queue_model::conserve()
    });
    let served = &[queue_model::SERVED];
    assert_eq!(
        violated(
            m,
            served,
            Some(Mutant::QueueOnlyHeadsCheck),
            "conserve, two crashes"
        ),
        Some(queue_model::SERVED)
    );
}

/// The driver rule found by the model: a participant whose session lapsed gives up rather than
/// join again (its join's outcome was unknown, and meanwhile it was granted, proven gone and
/// removed). With the rule broken it joins a second time, as a new arrival.
#[test]
fn a_lapsed_participant_that_joins_again_is_listed_twice() {
    let m = QueueModel {
        max_faults: 1,
        max_deaths: 1,
        lapses: true,
        crashes: true,
        ..queue_model::conserve()
    };
    assert_eq!(
        violated(
            m,
            &[queue_model::JOINS_ONCE],
            Some(Mutant::QueueRejoinWhenLapsed),
            "conserve, a fault and a death"
        ),
        Some(queue_model::JOINS_ONCE)
    );
}

/// Issue 22 item 1: a holder that never reads the lock's record again after its grant goes on
/// believing, past its renewals, beside a newcomer granted in a record made again after a
/// deletion.
#[test]
fn a_holder_that_never_confirms_the_record_overlaps_after_a_deletion() {
    // (The same model without the mutant: `queue_model.rs`'s deletion checks.)
    let m = QueueModel {
        record_deletions: 1,
        ..queue_model::pair()
    };
    assert_eq!(violated(m.clone(), QUEUE, None, "pair, a deletion"), None);
    assert_eq!(
        violated(
            m,
            QUEUE,
            Some(Mutant::QueueHolderSkipsConfirmation),
            "pair, a deletion"
        ),
        Some(queue_model::MUTUAL_EXCLUSION)
    );
}

/// Issue 22 item 1: tokens counted from the participant's known token + 1 (a record made again
/// starting there, and the writes that grant going by the record's epoch alone, not above the
/// clock) hand a token out twice.
#[test]
fn a_queue_record_made_again_at_the_known_token_repeats_a_token() {
    let m = QueueModel {
        record_deletions: 1,
        ..queue_model::pair()
    };
    assert_eq!(
        violated(
            m,
            QUEUE,
            Some(Mutant::QueueRecreateAtKnownEpoch),
            "pair, a deletion"
        ),
        Some(queue_model::TOKENS)
    );
}

/// Issue 23: a wake hint carries no authority. Taken as the news of a grant (the waiter goes
/// ahead with the record it last read), the model's hints — forged, duplicated, or come
/// before the write they follow — make a second holder: the hint action reaches the granting
/// path, and only the read it starts keeps the grant with the record.
#[test]
fn a_hint_taken_as_a_grant_makes_two_holders() {
    let m = QueueModel {
        hints: 1,
        ..queue_model::pair()
    };
    assert_eq!(
        violated(
            m,
            QUEUE,
            Some(Mutant::HintTakenAsGrant),
            "pair, a hint each"
        ),
        Some(queue_model::MUTUAL_EXCLUSION)
    );
}

/// Issue 22 item 1: a record made where none is (`Create`) that grants at once, with tokens
/// above the clock it was sent with, lands after a record made meanwhile handed out tokens and
/// was deleted, and hands one out again (the trace that the deletion assumption hid).
#[test]
fn a_create_that_grants_hands_a_token_out_again_after_a_deletion() {
    let m = QueueModel {
        record_deletions: 1,
        ..queue_model::conserve()
    };
    assert_eq!(
        violated(
            m,
            &[queue_model::TOKENS],
            Some(Mutant::QueueCreateGrants),
            "conserve, a deletion"
        ),
        Some(queue_model::TOKENS)
    );
}

/// Issue 22: tokens rest on wall clocks agreeing within what the clock moved past a deleted
/// record's tokens (docs/model.md, queued locks, assumption 2). A participant whose clock is
/// behind by the whole gap (the model's 1,000 ms per deletion) makes the record again and hands
/// out a token the deleted record had handed out: the checker must find it, with no mutant.
#[test]
fn a_wall_clock_behind_by_the_whole_gap_repeats_a_token() {
    let m = QueueModel {
        record_deletions: 1,
        wall_lag_ms: 1_000,
        ..queue_model::pair()
    };
    assert_eq!(
        violated(
            m,
            &[queue_model::TOKENS],
            None,
            "pair, a deletion, a clock 1 s behind"
        ),
        Some(queue_model::TOKENS)
    );
}

/// Issue 22 item 2: joins checked only against their own size let a release that grants the
/// readers overflow the record (the stranded lock).
#[test]
fn joins_that_reserve_no_room_let_a_release_overflow_the_record() {
    let m = queue_model::capacity();
    assert_eq!(violated(m.clone(), QUEUE, None, "capacity"), None);
    // Only the overflow is looked for: the checker stops at it (the whole mutated space is 4.2
    // million states, 160 s).
    assert_eq!(
        violated(
            m,
            &[queue_model::FITS],
            Some(Mutant::QueueJoinIgnoresReserve),
            "capacity"
        ),
        Some(queue_model::FITS)
    );
}

/// Issue 22 item 3: a record of a newer format taken over like a corrupt one is written over.
#[test]
fn a_newer_record_taken_for_corrupt_is_written_over() {
    let m = QueueModel {
        newer_writes: 1,
        ..queue_model::conserve()
    };
    assert_eq!(
        violated(m.clone(), QUEUE, None, "conserve, a newer record"),
        None
    );
    assert_eq!(
        violated(
            m,
            QUEUE,
            Some(Mutant::QueueNewerTakenAsCorrupt),
            "conserve, a newer record"
        ),
        Some(queue_model::NEWER_KEPT)
    );
}

/// Issue 22 item 6, in simulated time (the model has no clock): with the session checks paced by
/// the takeover rule's own estimate (which adds a whole resolution), a crashed holder on a store
/// of whole-second dates is replaced later than `ttl + grace + resolution + poll` after its last
/// renewal; paced a resolution early, then every poll, never. The same scenario as
/// `core/tests/in_process/queue_holes.rs` `the_takeover_bound_holds_with_a_whole_second_store_clock_at_every_phase`.
#[test]
fn session_checks_paced_by_the_estimate_miss_the_takeover_bound() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let bound = Duration::from_secs_f64(2.0 + 1.0 + 1.0 + 0.2);
    let worst = |mutant| {
        mutants::set(mutant);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let worst = rt.block_on(worst_takeover());
        mutants::set(None);
        eprintln!(
            "{mutant:?}: replaced at worst {worst:?} after the last renewal (bound {bound:?})"
        );
        worst
    };
    assert!(worst(None) <= bound);
    assert!(worst(Some(Mutant::QueueSessionCheckLate)) > bound);
}

/// The latest a waiter is granted after a crashed shared holder's last renewal, over 125 phases
/// of the store's second, the waiter's arrival and the holder's death.
async fn worst_takeover() -> Duration {
    use lease::clock::{Clock, Rng, SimClock};
    use lease::store::memory::MemoryStore;
    use lease::{Client, LeaseOptions};
    let secs = Duration::from_secs_f64;
    let ttl = secs(2.0);
    let o = LeaseOptions::new(ttl).poll_interval(secs(0.2));
    let mut worst = Duration::ZERO;
    for phase in 0..125u32 {
        let (second, join, death) = (phase % 5, (phase / 5) % 5, phase / 25);
        let clock = std::sync::Arc::new(SimClock::at_2026());
        let store = MemoryStore::with_clock(clock.clone());
        store.set_clock_resolution(secs(1.0));
        let client = |seed: u64| {
            let conn = store.connection();
            conn.faults().set_latency(secs(0.004));
            let c = Client::builder(std::sync::Arc::new(conn.clone()))
                .clock(clock.clone())
                .rng(Rng::seeded(seed))
                .identity("h", seed as u32)
                .build();
            (c, conn)
        };
        let (a, a_conn) = client(1);
        let (b, _) = client(2);
        tokio::time::sleep(secs(0.2 * f64::from(second))).await;
        let held = a.acquire("job", &o.clone().shared()).await.unwrap();
        tokio::time::sleep(secs(0.13 * f64::from(join))).await;
        let waiter = {
            let (b, o) = (b.clone(), o.clone());
            tokio::spawn(async move { b.acquire("job", &o).await })
        };
        tokio::time::sleep(secs(2.0 + 0.13 * f64::from(death))).await;
        a_conn.faults().set_unavailable(true);
        let last_write = clock.now() + held.remaining() - ttl;
        let got = waiter.await.unwrap().unwrap();
        worst = worst.max(clock.now() - last_write);
        got.release().await.unwrap();
    }
    worst
}

/// A holder on this machine is taken over at once when its processes are provably gone; the
/// proof needs its pid namespace to be ours. Without that check, a waiter reads the pid of a
/// live holder in another namespace (a container sharing the directory) in its own, finds no
/// such process, and takes the lease over: two holders.
#[test]
fn a_dead_holder_rule_without_the_pid_namespace_check_takes_over_a_live_holder() {
    let m = LeaseModel {
        pid_namespaces: Some(vec![0, 1]),
        ..base()
    };
    assert_eq!(
        violated(
            m,
            LEASE,
            Some(Mutant::DeadHolderAnyPidNamespace),
            "a holder in another pid namespace"
        ),
        Some("at most one holder believes")
    );
}

/// Successful increments of one counter that the counter does not show, when `tasks` tasks of
/// this process each make `rounds` increments by read + conditional write on the file store.
fn lost_increments(tasks: u32, rounds: u32) -> u32 {
    use lease::store::file::FileStore;
    use lease::store::{Cond, Get, GetOptions, Meta, Put, Store};
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let workers: Vec<_> = (0..tasks)
            .map(|_| {
                // A store each, as separate processes would have.
                let s = FileStore::open(dir.path()).unwrap();
                tokio::spawn(async move {
                    let mut won = 0;
                    while won < rounds {
                        let (n, cond) = match s.get("counter", GetOptions::default()).await {
                            Ok(Get::Found(o)) => {
                                let text = String::from_utf8(o.bytes.unwrap().to_vec()).unwrap();
                                (text.parse::<u32>().unwrap(), Cond::Match(o.version))
                            }
                            _ => (0, Cond::Create),
                        };
                        let next = (n + 1).to_string().into();
                        if let Ok(Put::Written { .. }) =
                            s.put("counter", next, cond, &Meta::new()).await
                        {
                            won += 1;
                        }
                    }
                    won
                })
            })
            .collect();
        let mut won = 0;
        for w in workers {
            won += w.await.unwrap();
        }
        let counter: u32 = std::fs::read_to_string(dir.path().join("counter"))
            .unwrap()
            .parse()
            .unwrap();
        won - counter
    })
}

/// The file store removes its sidecar lock files once done (issue 28), and a lock counts only
/// once its file is still the one under its name. Without that check (the store's own switch,
/// `store::file::negative_control::set_lock_file_not_rechecked`, `LockFileNotRechecked`)
/// a writer that locked a removed file and one that locked the new file write at once: the
/// conditional writes of concurrent increments lose some. With it, none is lost (and
/// `core/tests/in_process/store_file.rs` hammers it with real processes).
#[test]
fn a_lock_file_not_rechecked_after_removal_loses_updates() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    mutants::set(None);
    assert_eq!(
        lost_increments(8, 150),
        0,
        "the store's own scheme lost updates"
    );
    lease::store::file::negative_control::set_lock_file_not_rechecked(true);
    let lost = lost_increments(8, 150);
    lease::store::file::negative_control::set_lock_file_not_rechecked(false);
    eprintln!("lock files not rechecked: {lost} of 1200 increments lost");
    assert!(lost > 0, "the hammer did not show the race");
}

/// The proof also needs the holder's boot to be ours. Two machines sharing a directory over a
/// network file system both name their init pid namespace `pid:[4026531836]`; without the boot
/// check, a waiter finds no process with the other machine's live holder's pid here and takes
/// the lease over: two holders.
#[test]
fn a_dead_holder_rule_without_the_boot_check_takes_over_another_machines_holder() {
    let m = LeaseModel {
        pid_namespaces: Some(vec![0, 0]),
        boots: vec![0, 1],
        ..base()
    };
    assert_eq!(
        violated(
            m,
            LEASE,
            Some(Mutant::DeadHolderAnyBoot),
            "a holder on another machine"
        ),
        Some("at most one holder believes")
    );
}

/// A holder that changes its ttl (issue 28 item 7): while a write with a shorter ttl may land,
/// it believes no longer than that write's send + the shorter ttl.
#[test]
fn a_holder_that_shortens_its_ttl_without_a_cap_is_found_with_a_second_holder() {
    // 4 s to 1 s: the shorter record lands and its answer is held up; a waiter that sees it
    // takes over after 1 s + grace, while the holder, uncapped, believes by the 4 s.
    // The model of `mutual_exclusion_when_a_holder_changes_its_ttl`'s "ttl shortened" (the
    // same function, not deep), which checks it safe without the mutant: not checked again here.
    let m = ttl_change(std::time::Duration::from_secs(1), false);
    assert_eq!(
        violated(
            m,
            LEASE,
            Some(Mutant::NoCapOnShorterTtl),
            "ttl shortened, no cap"
        ),
        Some("at most one holder believes")
    );
}

/// The shared-session model's safety properties.
const SESSION: &[&str] = session_model::SAFETY;

/// Shared sessions (issue 24): a join sent before a session write holding its number landed
/// lets a checker read the record, then a session without the number, and remove a grant its
/// owner believes once the attachment lands.
#[test]
fn a_join_sent_before_its_attachment_landed_is_found_removed_while_believed() {
    let m = session_model::base();
    assert_eq!(violated(m.clone(), SESSION, None, "shared session"), None);
    assert_eq!(
        violated(
            m,
            SESSION,
            Some(Mutant::SessionJoinBeforeAttach),
            "shared session, join before attach"
        ),
        Some("a grant a checker removed is not believed")
    );
}

/// Shared sessions: a released grant's number detached while its owner still believes it.
#[test]
fn a_detach_while_the_grant_is_believed_is_found_removed_while_believed() {
    assert_eq!(
        violated(
            session_model::base(),
            SESSION,
            Some(Mutant::SessionDetachWhileBelieved),
            "shared session, detach while believed"
        ),
        Some("a grant a checker removed is not believed")
    );
}

/// Shared sessions: grants believed after their session was lost (lapsed, taken over).
#[test]
fn a_belief_that_outlives_its_session_is_found() {
    let found = violated(
        session_model::base(),
        SESSION,
        Some(Mutant::SessionBeliefOutlivesLoss),
        "shared session, belief outlives the session",
    );
    assert!(
        matches!(
            found,
            Some("a grant a checker removed is not believed" | "a lost session ends every belief")
        ),
        "{found:?}"
    );
}

#[test]
fn a_preemption_that_keeps_the_grants_in_its_way_leaves_two_writers() {
    // Issue 23, queued preemption: the preemptor is granted, but the writer it should have
    // removed stays listed, goes on confirming, and believes beside it.
    assert_eq!(
        violated(
            queue_model::preempting(),
            QUEUE,
            Some(Mutant::QueuePreemptKeepsGrants),
            "preemption"
        ),
        Some(queue_model::MUTUAL_EXCLUSION)
    );
}

#[test]
fn a_preemption_of_whatever_is_in_the_way_takes_a_later_tenure() {
    // Issue 23, queued preemption: the preemptor's write fails its condition because the
    // holder's release granted the writer; preempting whatever is in its way at each write, it
    // takes that later grant too (two preemptors would take the lock from each other in a loop).
    assert_eq!(
        violated(
            queue_model::preempting(),
            QUEUE,
            Some(Mutant::QueuePreemptAnyTenure),
            "preemption"
        ),
        Some(queue_model::PREEMPTS_OWN)
    );
}

/// Shared sessions, the per-process default (issue 24): an attach accepted after the idle
/// release was decided takes a number in a session whose next write is its release.
#[test]
fn an_attach_after_the_idle_release_was_decided_is_found_attached_to_a_released_session() {
    let m = session_model::idle();
    assert_eq!(
        violated(
            m,
            SESSION,
            Some(Mutant::SessionAttachWhileReleasing),
            "shared session, attach after the idle release was decided"
        ),
        Some("no grant is attached to a session whose release was decided")
    );
}
