//! Model checking of queued locks: the checks (the model is `lease_verify::queue_model`, shared
//! with the negative controls in `negative_controls.rs`). The model drives the protocol's own
//! machines: `Waiter`, `GrantHold`, `ChangeOp`.

#![allow(clippy::disallowed_methods)] // times the checker with the wall clock

use stateright::{Checker, Model};

use lease_verify::queue_model::*;

/// The bound of `./scripts/test` (`ci`), or of `LEASE_MODEL=deep` (docs/verification.md has
/// the figures of both). The CI bounds keep every fault exercised somewhere within about 90 s
/// and 6 GB for the whole file: the three-participant scenarios (FIFO, permits, scopes) on a
/// reliable network, and the faults, deaths and deletions on two participants; the deep run
/// puts the faults on three.
fn bound<T>(ci: T, deep_run: T) -> T {
    if deep() {
        deep_run
    } else {
        ci
    }
}

/// `faults` network faults and `deaths` sessions that lapse or crash, on top of `scenario`.
fn faulty(scenario: QueueModel, faults: u8, deaths: u8) -> QueueModel {
    QueueModel {
        max_faults: faults,
        max_deaths: deaths,
        lapses: deaths > 0,
        crashes: deaths > 0,
        ..scenario
    }
}

/// A reliable network; holders release, and sessions lapse or crash (`deaths` in all).
fn dying(scenario: QueueModel, deaths: u8) -> QueueLiveness {
    QueueLiveness(QueueModel {
        max_deaths: deaths,
        lapses: true,
        crashes: true,
        ..scenario
    })
}

/// Check `scenario` on a reliable network, and under the deep run with one fault, then with one
/// death (each of those is several million states on three participants; the faults are
/// checked on two participants in every run: `a_reader_and_a_writer_stay_apart_…`).
fn check_scenario(scenario: QueueModel, name: &str) -> usize {
    let states = check(scenario.clone(), &format!("{name}, reliable network"));
    if deep() {
        check(faulty(scenario.clone(), 1, 0), &format!("{name}, a fault"));
        check(faulty(scenario, 0, 1), &format!("{name}, a death"));
    }
    states
}

#[test]
fn conserve_backups_share_and_gc_runs_alone_in_arrival_order() {
    // 2 backups (shared) and GC (exclusive) on the whole lock, arriving in every order.
    let states = check_scenario(conserve(), "conserve");
    assert!(
        states > 40_000,
        "the model explored too little: {states} states"
    );
}

#[test]
fn a_semaphore_grants_at_most_its_permits_in_arrival_order() {
    check_scenario(semaphore(), "semaphore of 2");
}

#[test]
fn overlapping_byte_ranges_exclude_each_other_and_disjoint_ones_do_not() {
    check_scenario(byte_ranges(), "byte ranges");
}

/// Priorities (docs/protocol.md §10, "Priorities"), at a bypass bound of 1: higher first among
/// competing waiters unless the lower one is due, FIFO within a priority, nobody passed over
/// more than the bound; two high-priority writers (one coming back) around a low one, and (in
/// the deep run) scopes where a due writer makes the earlier reader of its priority due.
#[test]
fn priorities_go_first_in_order_within_each_and_nobody_is_passed_over_past_the_bound() {
    let states = check_scenario(priorities(), "priorities");
    assert!(
        states > 100_000,
        "the model explored too little: {states} states"
    );
    // Four participants: 1.5 million states, about 45 s; the negative control
    // `a_due_waiter_that_does_not_make_…` runs it in every run until its violation.
    if deep() {
        check(priorities_scoped(), "priorities over scopes");
    }
}

/// Network faults (held up, lost, failed, late-landing requests and answers) and a session
/// that lapses or crashes, on two participants: a reader and a writer, and two readers with one
/// permit.
#[test]
fn a_reader_and_a_writer_stay_apart_under_faults_and_deaths() {
    let (faults, deaths) = bound((1, 1), (2, 1));
    check(
        faulty(pair(), faults, deaths),
        "a reader and a writer, faults and a death",
    );
    check(
        faulty(pair_semaphore(), faults, deaths),
        "two readers, one permit, faults and a death",
    );
}

/// Wake hints (docs/protocol.md §10, "Wake hints") are arbitrary extra wake-ups: each waiter
/// may be hinted at any moment, with no time passing, real or forged, before or after the write
/// it announces (issue 23). Grants stay apart, tokens unique, FIFO kept; and every live waiter
/// is still served (a hint can only move a read earlier, never make a waiter skip its poll).
#[test]
fn wake_hints_at_any_moment_change_no_grant() {
    let m = QueueModel {
        hints: 2,
        ..faulty(pair(), 1, bound(0, 1))
    };
    check(m, "a reader and a writer, two hints each, a fault");
    let m = QueueModel {
        hints: bound(1, 2),
        ..conserve()
    };
    check(m.clone(), "conserve, hints");
    // Liveness with hints: on two participants in the test run (on Conserve it is 28 million
    // states, 465 s: under `LEASE_MODEL=deep` only).
    let live = QueueModel { hints: 2, ..pair() };
    check(
        dying(live, 1),
        "a reader and a writer, hints, liveness, a death",
    );
    if deep() {
        check(dying(m, 1), "conserve, hints, liveness, a death");
    }
}

#[test]
fn tokens_increase_over_joining_again() {
    let m = QueueModel {
        acquisitions: 2,
        max_faults: 1,
        ..bound(pair(), conserve())
    };
    check(m, "two acquisitions each, a fault");
}

#[test]
fn every_live_participant_is_served_when_a_holder_or_waiter_crashes_or_lapses() {
    // The test run: the semaphore (a death of either kind; `…_after_any_deaths` adds two
    // crashes on Conserve). Conserve and the ranges (Conserve's conflict graph, hence its state
    // space: 1.3 million states) under the deep run.
    let mut scenarios = vec![("semaphore", semaphore())];
    if deep() {
        scenarios.push(("conserve", conserve()));
        scenarios.push(("ranges", byte_ranges()));
    }
    for (name, scenario) in scenarios {
        let m = QueueModel {
            acquisitions: bound(1, 2),
            ..scenario
        };
        check(dying(m, 1), &format!("{name}, liveness, a death"));
    }
}

/// What the model found (docs/verification.md): when only the head of a line checked the
/// grants keeping it waiting, a dead head waiter behind a dead holder stranded everyone behind
/// it. Now a waiter behind another checks that one (`QueueRecord::position`), and every live
/// participant is served whoever dies — two deaths here, three under `LEASE_MODEL=deep`
/// (the old rule is a negative control: `negative_controls.rs`).
#[test]
fn every_live_participant_is_served_after_any_deaths() {
    // Two crashes in the test run (the finding's own deaths; with lapses too, 9 million states
    // each); under the deep run two deaths of either kind, and three crashes.
    for (name, scenario) in [
        ("conserve", conserve()),
        ("semaphore", semaphore()),
        ("ranges", byte_ranges()),
    ] {
        if name == "ranges" && !deep() {
            continue;
        }
        let crashes = |deaths| {
            let mut m = dying(scenario.clone(), deaths);
            m.0.lapses = false;
            m
        };
        check(crashes(2), &format!("{name}, liveness, two crashes"));
        if deep() {
            check(
                dying(scenario.clone(), 2),
                &format!("{name}, liveness, two deaths"),
            );
            check(crashes(3), &format!("{name}, liveness, three crashes"));
        }
    }
}

/// Issue 22 item 1: the lock's record deleted (by hand, or a lifecycle rule) at any moment,
/// and a session deleted: holders confirm the record at each renewal and make it again as they
/// saw it, waiters carry forward what they saw; tokens stay above every token handed out, and
/// two conflicting grants are believed at once only while one of them has not yet confirmed
/// the record since the deletion (until its next renewal: the stated bound).
#[test]
fn deleting_the_record_or_a_session_keeps_grants_apart_and_tokens_unique() {
    let m = QueueModel {
        record_deletions: 1,
        session_deletions: 1,
        max_faults: u8::from(deep()),
        ..pair()
    };
    check(m, "a reader and a writer, the record and a session deleted");
    let m = QueueModel {
        session_deletions: 1,
        max_faults: 1,
        ..pair()
    };
    check(m, "a reader and a writer, a session deleted, a fault");
    if deep() {
        let m = QueueModel {
            session_deletions: 1,
            ..conserve()
        };
        check(m, "conserve, a session deleted");
        let m = QueueModel {
            record_deletions: 1,
            ..byte_ranges()
        };
        check(m, "ranges, the record deleted");
    }
}

/// Issue 22 item 1, tokens: the record deleted at any moment, also while a write that makes it
/// where none is (`Create`) is in flight. Before the fix the model deleted the record only while
/// no `Create` was in flight (an assumption): a `Create` sent before another participant made
/// the record, landing after that record's whole life and deletion, handed out its tokens again.
/// Now a `Create` grants nobody; tokens come only from conditional writes, whose clock reading
/// follows the read that showed the record (docs/model.md, queued locks, assumption 2).
/// Also with clocks that disagree: tokens stay unique while wall clocks agree within what the
/// clock moved past a deleted record's tokens (assumption 2; one clock 500 ms behind of the
/// model's 1,000 per deletion). `negative_controls.rs::a_wall_clock_behind_by_the_whole_gap_…`
/// shows that bound is what it rests on.
#[test]
fn a_create_landing_after_a_deletion_repeats_no_token() {
    let m = QueueModel {
        record_deletions: bound(1, 2),
        max_faults: 1,
        wall_lag_ms: 500,
        ..pair()
    };
    check(
        m,
        "a reader and a writer, the record deleted, a fault, a clock 500 ms behind",
    );
    if deep() {
        let m = QueueModel {
            record_deletions: 1,
            wall_lag_ms: 500,
            ..conserve()
        };
        check(
            m,
            "conserve, the record deleted with a create in flight, a clock 500 ms behind",
        );
    }
}

/// Issue 22 item 2: a record at its capacity (small here): the join that could make a later
/// write overflow is refused up front, and the leave that grants every reader in one write
/// fits.
#[test]
fn a_record_at_its_capacity_refuses_joins_and_every_leave_fits() {
    let m = QueueModel {
        max_deaths: u8::from(deep()),
        crashes: true,
        ..capacity()
    };
    check(m, "capacity: a writer and three readers");
}

/// Issue 22 item 3: a record of a newer format written over the lock's at any moment: no
/// participant ever writes over it (nor takes it over as corrupt), holders stop at their next
/// renewal, waiters refuse it.
#[test]
fn a_record_of_a_newer_format_is_never_written_over() {
    let m = QueueModel {
        newer_writes: 1,
        max_faults: u8::from(deep()),
        ..conserve()
    };
    check(m, "conserve, a record of a newer format");
    let m = QueueModel {
        newer_writes: 1,
        max_faults: 1,
        ..pair()
    };
    check(
        m,
        "a reader and a writer, a record of a newer format, a fault",
    );
}

/// Sizes of the state space under each feature, for tuning the bounds: `cargo test --release
/// -p lease-verify --test queue_model sizes -- --ignored --nocapture` (`LEASE_SIZES_CAP`: the
/// most states explored per variant, 1,500,000 unless set; a count at the cap means "more").
#[test]
#[ignore]
fn sizes() {
    let cap: usize = std::env::var("LEASE_SIZES_CAP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_500_000);
    let only = std::env::var("LEASE_SIZES_ONLY").unwrap_or_default();
    let scenarios = [
        ("conserve", conserve()),
        ("semaphore", semaphore()),
        ("ranges", byte_ranges()),
        ("pair", pair()),
    ];
    for (name, base) in scenarios {
        let death = |deaths| QueueModel {
            max_deaths: deaths,
            lapses: true,
            crashes: true,
            ..base.clone()
        };
        let variants: Vec<(&str, QueueModel)> = vec![
            ("base", base.clone()),
            (
                "+1 fault",
                QueueModel {
                    max_faults: 1,
                    ..base.clone()
                },
            ),
            ("+1 death", death(1)),
            ("+2 deaths", death(2)),
            (
                "+1 fault +1 death",
                QueueModel {
                    max_faults: 1,
                    ..death(1)
                },
            ),
            (
                "2 acquisitions",
                QueueModel {
                    acquisitions: 2,
                    ..base.clone()
                },
            ),
            (
                "+1 deletion",
                QueueModel {
                    record_deletions: 1,
                    ..base.clone()
                },
            ),
            (
                "+1 session deletion",
                QueueModel {
                    session_deletions: 1,
                    ..base.clone()
                },
            ),
            (
                "+1 newer",
                QueueModel {
                    newer_writes: 1,
                    ..base.clone()
                },
            ),
        ];
        for (variant, m) in variants {
            let what = format!("{name} {variant}");
            if !only.is_empty() && !only.split(',').any(|o| what == o) {
                continue;
            }
            let started = std::time::Instant::now();
            let c = m
                .checker()
                .threads(2)
                .target_state_count(cap)
                .spawn_bfs()
                .join();
            eprintln!(
                "{what}: {} unique in {:.1?}",
                c.unique_state_count(),
                started.elapsed()
            );
        }
    }
}

/// Issue 23, "Yield on request": an operator asks the holder to step aside (to nobody, or to
/// the later waiter) at any moment, the write landing at once, late or never; holders release
/// on learning it. No two holders, a request reaches only a tenure it names, and its `to` goes
/// next. The deep run adds a network fault and a second request.
#[test]
fn a_yield_request_reaches_only_the_tenure_it_names_and_hands_over_to_its_to() {
    check_scenario(yielding(), "yield");
    if deep() {
        check(faulty(yielding(), 1, 1), "yield, a fault and a death");
    }
}

/// The same with two requests, the second for a later tenure: a waiter that asks again when a
/// later holder gets in its way (`OwnAsk`) is this. `LEASE_MODEL=deep` only (a test of its own
/// so that it can be run alone: `cargo test --release -p lease-verify --test queue_model
/// two_yield_requests`).
#[test]
fn two_yield_requests_each_reach_only_the_tenures_they_name() {
    if deep() {
        check(
            QueueModel {
                yields: 2,
                ..yielding()
            },
            "yield, two requests",
        );
    }
}

/// Issue 23, "Preemption": a writer that preempts, beside a reader and a writer. A holder it
/// removes believes until its next confirmation and conflicts only with the higher token; a
/// confirmation that saw the preemption never confirms; a preemption removes only the grants
/// in its way when its acquisition first decided; everyone else as always. The deep run adds a
/// network fault, then a death.
#[test]
fn a_preemption_removes_only_the_grants_in_its_way_and_their_holders_stop_at_their_next_confirmation(
) {
    check_scenario(preempting(), "preemption");
    check(
        faulty(pair_preempting(), 1, 1),
        "preemption of a pair, a fault and a death",
    );
    if deep() {
        check(
            QueueModel {
                record_deletions: 1,
                ..faulty(pair_preempting(), 1, 0)
            },
            "preemption of a pair, a fault and a deletion of the record",
        );
    }
}
