//! Every decision of a held lease, each comparison at its boundary and each condition both ways.

use super::*;
use crate::protocol::testing::*;
use crate::record::Displaced;

const URL: &str = "memory://t/job";

/// Our lease: `me` at epoch 7, written at generation 1, sent at `at(0)` (deadline `at(10)`).
pub(super) fn held() -> Hold {
    Hold::new(
        URL,
        record("me", 7, RecordState::Held),
        version(1),
        at(0.0),
        timing(),
    )
}

fn in_phase(phase: Phase) -> Hold {
    Hold { phase, ..held() }
}

fn lost() -> Hold {
    in_phase(Phase::Lost(LostReason::Expired))
}

#[test]
fn the_deadline_is_ttl_after_the_last_send_and_renewals_are_due_renew_after_it() {
    let mut h = held();
    assert_eq!(h.deadline(), at(10.0));
    assert_eq!(h.renew_at(), at(0.0) + timing().renew);
    let mut next = h.record.successor();
    next.write = Some("n9".into());
    h.renewed(next.clone(), version(2), at(3.0));
    assert_eq!(h.deadline(), at(13.0));
    assert_eq!(h.renew_at(), at(3.0) + timing().renew);
    assert_eq!((h.record.clone(), h.version.clone()), (next, version(2)));
}

#[test]
fn a_holder_believes_only_while_held_and_before_its_deadline() {
    let h = held();
    assert!(h.believes(at(0.0)));
    assert!(h.believes(at(9.999)));
    assert!(!h.believes(at(10.0)), "the deadline itself is past belief");
    assert!(!h.believes(at(11.0)));
    for phase in [
        Phase::Releasing,
        Phase::Released,
        Phase::Lost(LostReason::Expired),
    ] {
        assert!(!in_phase(phase.clone()).believes(at(1.0)), "{phase:?}");
    }
}

#[test]
fn remaining_counts_down_to_the_deadline_and_is_zero_without_belief() {
    let h = held();
    assert_eq!(h.remaining(at(0.0)), secs(10.0));
    assert_eq!(h.remaining(at(7.5)), secs(2.5));
    assert_eq!(h.remaining(at(10.0)), Duration::ZERO);
    assert_eq!(h.remaining(at(12.0)), Duration::ZERO);
    // A release in flight may land at any moment: nothing is left to rely on.
    for phase in [
        Phase::Releasing,
        Phase::Released,
        Phase::Lost(LostReason::Vanished),
    ] {
        assert_eq!(in_phase(phase.clone()).remaining(at(1.0)), Duration::ZERO);
    }
}

#[test]
fn ensure_held_passes_with_exactly_the_minimum_left_and_fails_below_it() {
    let h = held();
    assert_eq!(h.ensure_held(at(4.0), secs(6.0)).unwrap(), secs(6.0));
    assert_eq!(h.ensure_held(at(4.0), secs(1.0)).unwrap(), secs(6.0));
    let e = h.ensure_held(at(4.0), secs(6.5)).unwrap_err();
    assert_eq!(
        (e.kind(), e.epoch(), e.lease()),
        (ErrorKind::Lost, Some(7), Some(URL))
    );
    assert!(e.message().contains("less than the"), "{e}");
}

#[test]
fn ensure_held_says_why_the_holder_does_not_believe() {
    let expired = held().ensure_held(at(10.0), Duration::ZERO).unwrap_err();
    assert_eq!(expired.kind(), ErrorKind::Lost);
    assert!(expired.message().contains("deadline passed"), "{expired}");
    for phase in [Phase::Releasing, Phase::Released] {
        let e = in_phase(phase)
            .ensure_held(at(1.0), Duration::ZERO)
            .unwrap_err();
        assert_eq!((e.kind(), e.epoch()), (ErrorKind::Lost, Some(7)));
        assert!(e.message().contains("was released"), "{e}");
    }
    let taken = LostReason::TakenOver {
        holder: holder("other"),
        epoch: 8,
    };
    let e = in_phase(Phase::Lost(taken))
        .ensure_held(at(1.0), Duration::ZERO)
        .unwrap_err();
    assert!(e.message().contains("taken over"), "{e}");
    assert_eq!(e.holder().map(|h| h.id.as_str()), Some("other"));
}

#[test]
fn messages_name_a_grants_token_instead_of_the_sessions_epoch() {
    let mut h = held();
    assert_eq!(h.epoch(), 7);
    assert_eq!(h.holder().id, "me");
    h.token = Some(42);
    assert_eq!(h.epoch(), 7, "the session's own epoch is unchanged");
    let e = h.ensure_held(at(10.0), Duration::ZERO).unwrap_err();
    assert_eq!(e.epoch(), Some(42));
    assert!(e.message().contains("(epoch 42)"), "{e}");
    let e = h.ensure_held(at(1.0), secs(20.0)).unwrap_err();
    assert_eq!(e.epoch(), Some(42));
    h.phase = Phase::Released;
    assert_eq!(
        h.ensure_held(at(1.0), Duration::ZERO).unwrap_err().epoch(),
        Some(42)
    );
}

#[test]
fn lost_reasons_read_what_the_store_shows_instead_of_our_record() {
    let taken = record("other", 8, RecordState::Held);
    assert_eq!(
        LostReason::from_current(&found(&taken, 2), "me"),
        LostReason::TakenOver {
            holder: holder("other"),
            epoch: 8
        }
    );
    // Only a break of *our* holder id is a break; a break of someone else is a takeover.
    assert_eq!(
        LostReason::from_current(&found(&breaking("op", 8, "me", 7), 2), "me"),
        LostReason::Broken {
            by: holder("op"),
            epoch: 8
        }
    );
    assert_eq!(
        LostReason::from_current(&found(&breaking("op", 9, "third", 8), 2), "me"),
        LostReason::TakenOver {
            holder: holder("op"),
            epoch: 9
        }
    );
    // Only a preemption of *our* holder id is a preemption (issue 23); one of someone else is
    // a takeover.
    assert_eq!(
        LostReason::from_current(&found(&preempting("new", 8, "me", 7), 2), "me"),
        LostReason::Preempted {
            by: holder("new"),
            epoch: 8
        }
    );
    assert_eq!(
        LostReason::from_current(&found(&preempting("new", 9, "third", 8), 2), "me"),
        LostReason::TakenOver {
            holder: holder("new"),
            epoch: 9
        }
    );
    assert_eq!(
        LostReason::from_current(&not_found(), "me"),
        LostReason::Vanished
    );
    assert_eq!(
        LostReason::from_current(&found_corrupt(2), "me"),
        LostReason::Overwritten
    );
    assert_eq!(
        LostReason::from_current(&Get::NotModified { server_now: None }, "me"),
        LostReason::Overwritten
    );
}

#[test]
fn lost_errors_name_the_lease_the_epoch_and_who_took_it() {
    let broken = LostReason::Broken {
        by: holder("op"),
        epoch: 8,
    };
    let e = broken.error(URL, 7);
    assert_eq!(
        (e.kind(), e.lease(), e.epoch()),
        (ErrorKind::Lost, Some(URL), Some(7))
    );
    assert_eq!(e.holder().map(|h| h.id.as_str()), Some("op"));
    assert!(
        e.message()
            .starts_with(&format!("{URL} (epoch 7) was lost: broken by")),
        "{e}"
    );
    assert_eq!(LostReason::Vanished.error(URL, 7).holder(), None);
    assert_eq!(held().lost_error(&LostReason::Vanished).epoch(), Some(7));
    let said = |r: LostReason| r.to_string();
    assert_eq!(
        said(LostReason::Expired),
        "its deadline passed without a successful renewal"
    );
    assert!(said(LostReason::TakenOver {
        holder: holder("other"),
        epoch: 8
    })
    .ends_with("at epoch 8"));
    assert!(said(broken).ends_with("(epoch now 8)"));
    assert_eq!(said(LostReason::Vanished), "its record was deleted");
    assert!(said(LostReason::Overwritten).contains("unreadable"));
}

#[test]
fn a_renewal_is_written_only_while_held_a_release_also_while_releasing() {
    let e = Counter::default();
    let (r, cond) = held().next_write(RecordState::Held, wall(5.0), &e).unwrap();
    assert_eq!(cond, Cond::Match(version(1)));
    assert_eq!((r.epoch, r.rev, r.state), (7, 2, RecordState::Held));
    assert_eq!(r.renewed_at, Some(timestamp(wall(5.0))));
    assert_eq!(r.write.as_deref(), Some("n1"));
    assert_eq!(r.prev, held().record.prev_for_successor());
    let (r, _) = held()
        .next_write(RecordState::Released, wall(5.0), &e)
        .unwrap();
    assert_eq!(
        (r.state, r.write.as_deref()),
        (RecordState::Released, Some("n2"))
    );
    let releasing = in_phase(Phase::Releasing);
    assert!(releasing
        .next_write(RecordState::Held, wall(5.0), &e)
        .is_none());
    assert!(releasing
        .next_write(RecordState::Released, wall(5.0), &e)
        .is_some());
    for phase in [Phase::Released, Phase::Lost(LostReason::Expired)] {
        for state in [RecordState::Held, RecordState::Released] {
            assert!(in_phase(phase.clone())
                .next_write(state, wall(5.0), &e)
                .is_none());
        }
    }
}

#[test]
fn a_release_starts_only_from_held_and_a_loss_is_news_only_while_believed() {
    let mut h = held();
    h.start_release();
    assert_eq!(h.phase, Phase::Releasing);
    let mut l = lost();
    l.start_release();
    assert_eq!(
        l.phase,
        Phase::Lost(LostReason::Expired),
        "a lost lease stays lost"
    );
    let mut r = in_phase(Phase::Released);
    r.start_release();
    assert_eq!(r.phase, Phase::Released);

    for phase in [Phase::Held, Phase::Releasing] {
        let mut h = in_phase(phase);
        assert!(h.lose(LostReason::Vanished));
        assert_eq!(h.phase, Phase::Lost(LostReason::Vanished));
    }
    for phase in [Phase::Released, Phase::Lost(LostReason::Expired)] {
        let mut h = in_phase(phase.clone());
        assert!(!h.lose(LostReason::Vanished));
        assert_eq!(h.phase, phase, "not news: the phase stays");
    }
    let mut h = held();
    h.released();
    assert_eq!(h.phase, Phase::Released);
}

#[test]
fn only_our_own_landed_release_is_taken_for_our_release() {
    let h = held();
    let ours = Record {
        rev: 2,
        ..record("me", 7, RecordState::Released)
    };
    assert!(h.is_our_release(&found(&ours, 2)));
    let not_ours = [
        found(&record("other", 7, RecordState::Released), 2),
        found(&record("me", 8, RecordState::Released), 2),
        found(&record("me", 7, RecordState::Held), 2),
        found_corrupt(2),
        not_found(),
    ];
    for current in not_ours {
        assert!(!h.is_our_release(&current), "{current:?}");
    }
}

#[test]
fn after_a_loss_tidy_releases_our_own_record_still_held() {
    let e = Counter::default();
    let ours = Record {
        rev: 4,
        ..record("me", 7, RecordState::Held)
    };
    let (next, cond) = lost().tidy(&found(&ours, 5), wall(3.0), &e).unwrap();
    assert_eq!(cond, Cond::Match(version(5)));
    assert_eq!(next.state, RecordState::Released);
    assert_eq!((next.epoch, next.rev, &next.holder.id[..]), (7, 5, "me"));
    assert_eq!(next.renewed_at, Some(timestamp(wall(3.0))));
    assert_eq!(next.write.as_deref(), Some("n1"));
    assert_eq!(next.prev, ours.prev_for_successor());
}

#[test]
fn after_a_loss_tidy_acknowledges_a_break_of_our_lease() {
    let e = Counter::default();
    let (next, cond) = lost()
        .tidy(&found(&breaking("op", 8, "me", 7), 3), wall(3.0), &e)
        .unwrap();
    assert_eq!(cond, Cond::Match(version(3)));
    assert_eq!(
        (next.state, next.epoch, &next.holder.id[..]),
        (RecordState::Released, 8, "op")
    );
    assert_eq!(
        next.broken,
        Some(Displaced {
            id: "me".into(),
            epoch: 7
        })
    );
}

/// The same holder id at another epoch is a later lease of the same acquisition (one that let
/// a late adoption go and took the lease again): it may still believe it holds the lease, and
/// tidying must leave it alone. So must a break of that lease, or of someone else's.
#[test]
fn tidy_leaves_alone_our_holder_id_at_another_epoch_and_every_other_record() {
    let e = Counter::default();
    let leave_alone = [
        found(&record("me", 8, RecordState::Held), 2),
        found(&record("me", 6, RecordState::Held), 2),
        found(&breaking("op", 9, "me", 8), 2),
        found(&breaking("op", 8, "other", 7), 2),
        found(&record("other", 7, RecordState::Held), 2),
        found(&record("other", 8, RecordState::Held), 2),
        // Released already: nobody waits it out.
        found(&record("me", 7, RecordState::Released), 2),
        found_corrupt(2),
        not_found(),
    ];
    for current in &leave_alone {
        assert_eq!(lost().tidy(current, wall(3.0), &e), None, "{current:?}");
    }
}

#[test]
fn tidy_writes_nothing_unless_the_lease_was_lost() {
    let e = Counter::default();
    let ours = found(&record("me", 7, RecordState::Held), 2);
    for phase in [Phase::Held, Phase::Releasing, Phase::Released] {
        assert_eq!(
            in_phase(phase.clone()).tidy(&ours, wall(3.0), &e),
            None,
            "{phase:?}"
        );
    }
}

// Health (docs/protocol.md §4, "Health"): with the 10 s ttl a renewal is `late` 5 s after the
// last send (renew 10/3 s + request timeout 5/3 s), `unknown` once `kill_after + margin`
// (10/3 s + 1 s) is left, at 5.667 s, and `lost` at the deadline, 10 s.

/// The instant at which `late` begins for `held()`.
fn late_at() -> Instant {
    at(0.0) + timing().late_after()
}

/// The instant at which `unknown` begins for `held()`.
fn unknown_at() -> Instant {
    at(10.0) - timing().unknown_within
}

#[test]
fn health_thresholds_follow_the_timing_of_lease_run() {
    let t = timing();
    assert_eq!(t.late_after(), t.renew + t.request_timeout);
    // 10/3 s + 5/3 s: 5 s, less a nanosecond of rounding.
    assert!(secs(5.0) - t.late_after() < secs(0.000_001));
    let margin = crate::options::stop_margin(t.ttl);
    let kill_after = crate::options::default_kill_after(t.ttl, t.renew, t.request_timeout);
    assert_eq!(t.unknown_within, kill_after + margin);
    // The windows are in order: healthy, late, unknown, lost.
    assert!(at(0.0) + t.late_after() < unknown_at());
}

#[test]
fn health_is_healthy_until_the_renewal_due_has_had_a_request_timeout() {
    let h = held();
    assert_eq!(h.health(at(0.0)), Health::Healthy);
    assert_eq!(h.health(late_at() - secs(0.001)), Health::Healthy);
    assert_eq!(
        h.health(late_at()),
        Health::Late,
        "late at the threshold itself"
    );
    assert_eq!(h.health(unknown_at() - secs(0.001)), Health::Late);
}

#[test]
fn health_is_unknown_with_kill_after_and_margin_left_and_lost_at_the_deadline() {
    let h = held();
    assert_eq!(
        h.health(unknown_at()),
        Health::Unknown,
        "unknown at the threshold itself"
    );
    assert_eq!(h.health(at(10.0) - secs(0.001)), Health::Unknown);
    assert_eq!(h.health(at(10.0)), Health::Lost);
    assert_eq!(h.health(at(11.0)), Health::Lost);
}

#[test]
fn a_failed_renewal_makes_a_lease_late_at_once_and_a_landed_one_healthy_again() {
    let mut h = held();
    h.renewal_failed();
    assert_eq!(h.failed_renewals, 1);
    assert_eq!(h.health(at(0.1)), Health::Late);
    h.renewal_failed();
    assert_eq!(h.failed_renewals, 2);
    // Failures do not make it unknown early: only the time left does.
    assert_eq!(h.health(unknown_at() - secs(0.001)), Health::Late);
    assert_eq!(h.health(unknown_at()), Health::Unknown);
    let mut next = h.record.successor();
    next.write = Some("n9".into());
    h.renewed(next, version(2), at(3.0));
    assert_eq!(h.failed_renewals, 0);
    assert_eq!(h.health(at(3.1)), Health::Healthy);
    // The thresholds move with the landed renewal's send.
    assert_eq!(h.health(at(8.0)), Health::Late);
    assert_eq!(h.health(at(13.0)), Health::Lost);
}

#[test]
fn health_is_lost_in_every_phase_but_held() {
    for phase in [
        Phase::Releasing,
        Phase::Released,
        Phase::Lost(LostReason::Vanished),
    ] {
        assert_eq!(
            in_phase(phase.clone()).health(at(0.0)),
            Health::Lost,
            "{phase:?}"
        );
    }
}

#[test]
fn a_health_event_carries_the_time_left_and_why_it_was_lost() {
    let h = held();
    let e = h.health_event(at(1.0));
    assert_eq!(
        e,
        HealthEvent {
            health: Health::Healthy,
            remaining: secs(9.0),
            reason: None
        }
    );
    assert_eq!(h.health_event(unknown_at()).reason, None);
    let e = h.health_event(at(10.0));
    assert_eq!((e.health, e.remaining), (Health::Lost, Duration::ZERO));
    assert_eq!(
        e.reason,
        Some(LostReason::Expired),
        "a held lease past its deadline expired"
    );
    let e = in_phase(Phase::Lost(LostReason::Vanished)).health_event(at(1.0));
    assert_eq!(e.reason, Some(LostReason::Vanished));
    // Released: lost to the holder, for no fault.
    let e = in_phase(Phase::Released).health_event(at(1.0));
    assert_eq!((e.health, e.reason), (Health::Lost, None));
    let e = in_phase(Phase::Releasing).health_event(at(11.0));
    assert_eq!((e.health, e.reason), (Health::Lost, None));
}

#[test]
fn the_next_health_change_is_the_next_threshold_strictly_after_now() {
    let h = held();
    assert_eq!(h.next_health_change(at(0.0)), Some(late_at()));
    assert_eq!(
        h.next_health_change(late_at()),
        Some(unknown_at()),
        "not now itself"
    );
    assert_eq!(h.next_health_change(unknown_at()), Some(at(10.0)));
    assert_eq!(h.next_health_change(at(10.0)), None);
    for phase in [Phase::Releasing, Phase::Released, lost().phase] {
        assert_eq!(
            in_phase(phase.clone()).next_health_change(at(0.0)),
            None,
            "{phase:?}"
        );
    }
}

#[test]
fn health_and_loss_names_are_stable() {
    let names: Vec<String> = [Health::Healthy, Health::Late, Health::Unknown, Health::Lost]
        .iter()
        .map(|h| format!("{h}/{}", h.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            "healthy/healthy",
            "late/late",
            "unknown/unknown",
            "lost/lost"
        ]
    );
    let kinds: Vec<&str> = [
        LostReason::Expired,
        LostReason::TakenOver {
            holder: holder("you"),
            epoch: 8,
        },
        LostReason::Broken {
            by: holder("op"),
            epoch: 8,
        },
        LostReason::Vanished,
        LostReason::Overwritten,
        LostReason::SessionDeleted,
        LostReason::Removed { by: holder("gc") },
        LostReason::LockReplaced("made again".into()),
    ]
    .iter()
    .map(LostReason::kind)
    .collect();
    assert_eq!(
        kinds,
        [
            "expired",
            "taken_over",
            "broken",
            "vanished",
            "overwritten",
            "session_deleted",
            "removed",
            "lock_replaced"
        ]
    );
}

#[test]
fn a_queued_grants_lost_reasons_say_what_happened_and_who_removed_it() {
    let removed = LostReason::Removed { by: holder("gc") };
    let e = removed.error(URL, 7);
    assert_eq!(e.holder().map(|h| h.id.as_str()), Some("gc"));
    assert!(
        removed.to_string().starts_with("its session lapsed")
            && removed.to_string().ends_with("removed it from the lock"),
        "{removed}"
    );
    assert_eq!(LostReason::SessionDeleted.error(URL, 7).holder(), None);
    assert!(LostReason::SessionDeleted
        .to_string()
        .starts_with("its session's record was deleted"));
    let replaced = LostReason::LockReplaced("replaced by a lease record (format 1)".into());
    assert_eq!(
        replaced.to_string(),
        "the lock's record was replaced by a lease record (format 1)"
    );
    assert_eq!(replaced.error(URL, 7).holder(), None);
}

/// A holder that asked for a ttl and data (`Lease::set_ttl`, `set_data`).
fn changing() -> Hold {
    let mut h = held();
    h.record.data = Some("old".into());
    h.want_ttl(secs(4.0));
    h.want_data(Some("new".into()));
    h
}

#[test]
fn a_wanted_ttl_and_data_ride_on_renewals_not_on_a_release() {
    let e = Counter::default();
    let mut h = changing();
    let (r, _) = h.next_write(RecordState::Held, wall(5.0), &e).unwrap();
    assert_eq!((r.ttl(), r.data.as_deref()), (secs(4.0), Some("new")));
    // A release keeps what the record says: waiters need no new ttl for a free lease.
    let (r, _) = h.next_write(RecordState::Released, wall(5.0), &e).unwrap();
    assert_eq!((r.ttl(), r.data.as_deref()), (secs(10.0), Some("old")));
    // Wanting no data clears it.
    h.want_data(None);
    let (r, _) = h.next_write(RecordState::Held, wall(5.0), &e).unwrap();
    assert_eq!(r.data, None);
    // Nothing wanted: the record's own.
    let (r, _) = in_phase(Phase::Held)
        .next_write(RecordState::Held, wall(5.0), &e)
        .unwrap();
    assert_eq!((r.ttl(), r.data), (secs(10.0), None));
}

#[test]
fn a_shorter_ttl_in_flight_caps_belief_at_its_send_plus_its_ttl() {
    let e = Counter::default();
    let mut h = changing();
    let (shorter, _) = h.next_write(RecordState::Held, wall(3.0), &e).unwrap();
    h.sending(&shorter, at(3.0));
    assert_eq!(h.deadline(), at(7.0));
    assert!(h.believes(at(6.999)));
    assert!(!h.believes(at(7.0)));
    // A later send of it moves no cap later; an earlier one's is the earlier.
    h.sending(&shorter, at(5.0));
    assert_eq!(h.deadline(), at(7.0));
    h.sending(&shorter, at(1.0));
    assert_eq!(h.deadline(), at(5.0));
    // It lands, sent at 3: the deadline follows its ttl from its send, with no cap left, and
    // the timings follow the new ttl; what it carried is no longer wanted.
    h.renewed(shorter, version(2), at(3.0));
    assert_eq!((h.deadline(), h.cap), (at(7.0), None));
    assert_eq!(h.timing, timing().with_ttl(secs(4.0)).unwrap());
    assert_eq!(h.wanted, Wanted::default());
}

#[test]
fn only_a_shorter_ttl_caps_belief() {
    let e = Counter::default();
    // Renewed at 3 (deadline 13); a write of the same ttl, or a longer one, caps nothing even
    // when taken as sent before that renewal.
    let mut h = held();
    let mut next = h.record.successor();
    next.write = Some("n9".into());
    h.renewed(next, version(2), at(3.0));
    let (same, _) = h.next_write(RecordState::Held, wall(3.0), &e).unwrap();
    h.sending(&same, at(1.0));
    assert_eq!((h.deadline(), h.cap), (at(13.0), None));
    h.want_ttl(secs(20.0));
    let (longer, _) = h.next_write(RecordState::Held, wall(3.0), &e).unwrap();
    h.sending(&longer, at(1.0));
    assert_eq!((h.deadline(), h.cap), (at(13.0), None));
}

#[test]
fn a_landed_renewal_clears_only_the_changes_it_carried() {
    let e = Counter::default();
    let mut h = changing();
    // A renewal sent before the change was asked for lands: still wanted, timings unchanged.
    let mut before = h.record.successor();
    before.write = Some("n9".into());
    h.renewed(before, version(2), at(3.0));
    assert_eq!(h.wanted.ttl, Some(secs(4.0)));
    assert_eq!(h.wanted.data, Some(Some("new".into())));
    assert_eq!((h.timing.ttl, h.deadline()), (secs(10.0), at(13.0)));
    // The next one carries both.
    let (r, _) = h.next_write(RecordState::Held, wall(4.0), &e).unwrap();
    h.renewed(r, version(3), at(4.0));
    assert_eq!(h.wanted, Wanted::default());
    assert_eq!(h.deadline(), at(8.0));
}

#[test]
fn a_preemption_names_who_preempted_and_says_what_the_mode_asserts() {
    let preempted = LostReason::Preempted {
        by: holder("new"),
        epoch: 8,
    };
    assert_eq!(preempted.kind(), "preempted");
    let e = preempted.error(URL, 7);
    assert_eq!(
        (e.kind(), e.lease(), e.epoch()),
        (ErrorKind::Lost, Some(URL), Some(7))
    );
    assert_eq!(e.holder().map(|h| h.id.as_str()), Some("new"));
    assert!(e.message().contains("preempted by"), "{e}");
    assert!(e.message().contains("at epoch 8"), "{e}");
}
