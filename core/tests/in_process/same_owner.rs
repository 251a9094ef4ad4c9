//! An acquisition that would wait for a lease its own owner already holds fails at once with
//! `Held` (issue 28), instead of waiting for itself; other owners of the same process wait as
//! usual. In Rust the owner is the tokio task (or, outside one, the thread), unless
//! `LeaseOptions::owner` names one.

#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use lease::{ErrorKind, LeaseOptions, Scope};

use crate::sim;
use sim::*;

/// Every acquisition here is bounded (a minute of simulated time): one that waits for itself,
/// the bug this file pins, ends with `Timeout` and fails its assertion instead of hanging the
/// test run (an unbounded one once did, for 35 minutes). Shadows `sim::opts`.
fn opts() -> LeaseOptions {
    sim::opts().wait(secs(60.0))
}

#[tokio::test(start_paused = true)]
async fn the_same_task_fails_at_once_and_another_task_waits() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let held = a.acquire("job", &opts()).await.unwrap();
    let started = tokio::time::Instant::now();
    let e = a.acquire("job", &opts()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Held, "{e}");
    assert_eq!(started.elapsed(), Duration::ZERO, "it waited");
    assert!(e.message().contains("would wait for itself"), "{e}");
    // The test's body runs on its thread (block_on), not in a task: the thread is the owner.
    assert!(e.message().contains("held by this thread"), "{e}");
    assert_eq!(
        e.holder().map(|h| h.id.as_str()),
        Some(held.holder().id.as_str())
    );
    assert!(a.try_acquire("job", &opts()).await.unwrap().is_none());

    // A task holding it: the same task fails too.
    let c = a.clone();
    let in_task = tokio::spawn(async move {
        let held = c.acquire("task-job", &opts()).await.unwrap();
        let e = c.acquire("task-job", &opts()).await.unwrap_err();
        held.release().await.unwrap();
        e
    });
    let e = in_task.await.unwrap();
    assert_eq!(e.kind(), ErrorKind::Held);
    assert!(e.message().contains("held by this tokio task"), "{e}");

    // Another task of this process waits for it, and gets it once it is released.
    let other = a.clone();
    let waiter = tokio::spawn(async move { other.acquire("job", &opts()).await });
    sleep(secs(3.0)).await;
    assert!(!waiter.is_finished(), "another task must wait, not fail");
    held.release().await.unwrap();
    let got = waiter.await.unwrap().unwrap();
    assert_eq!(got.epoch(), held.epoch() + 1);
    got.release().await.unwrap();

    // Released: the first task acquires again.
    a.acquire("job", &opts())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn shared_grants_of_one_owner_do_not_wait_for_each_other() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let reader = a.acquire("lock", &opts().shared()).await.unwrap();
    let second = a.acquire("lock", &opts().shared()).await.unwrap();
    let tables = a
        .acquire("lock", &opts().scope(Scope::path("tables").unwrap()))
        .await
        .unwrap_err();
    assert_eq!(
        tables.kind(),
        ErrorKind::Held,
        "a writer under its own readers: {tables}"
    );
    second.release().await.unwrap();
    reader.release().await.unwrap();
    // Scopes that do not overlap do not wait for each other either.
    let a1 = a
        .acquire("lock", &opts().scope(Scope::path("a").unwrap()))
        .await
        .unwrap();
    let b1 = a
        .acquire("lock", &opts().scope(Scope::path("b").unwrap()))
        .await
        .unwrap();
    b1.release().await.unwrap();
    a1.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_owner_can_be_named_or_none() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let named = || opts().owner("worker 7");
    let held = a.acquire("job", &named()).await.unwrap();
    // The same named owner from another task: it would wait for itself too.
    let other = a.clone();
    let e = tokio::spawn(async move { other.acquire("job", &named()).await })
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Held);
    assert!(e.message().contains("this worker 7 already"), "{e}");
    // Nobody in particular: no check, it waits (here until its wait runs out).
    let nobody = LeaseOptions::new(TTL)
        .poll_interval(POLL)
        .owner("")
        .wait(secs(2.0));
    assert_eq!(
        a.acquire("job", &nobody).await.unwrap_err().kind(),
        ErrorKind::Timeout
    );
    held.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_broken_lease_whose_holder_has_not_noticed_is_waited_out_not_refused() {
    // The holder (a zombie: it still believes) is this very task, but an operator broke its
    // lease: the store no longer shows it held by this owner, so acquiring waits out the broken
    // holder as any waiter would (it can no longer renew) instead of failing with Held. Python's
    // test_a_zombie_write_after_break_and_takeover_raises_fenced plays this in one thread.
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let zombie = a.acquire("job", &opts()).await.unwrap();
    a.break_lease("job", None, lease::BreakMode::default())
        .await
        .unwrap();
    assert!(zombie.is_held(), "the zombie has not noticed yet");
    let newer = a.acquire("job", &opts()).await.unwrap();
    assert!(newer.epoch() > zombie.epoch());
    // The zombie, still believing, does not hide the lease this task now holds.
    let e = a.acquire("job", &opts()).await.unwrap_err();
    assert_eq!(
        (e.kind(), e.epoch()),
        (ErrorKind::Held, Some(newer.epoch()))
    );
    newer.release().await.unwrap();
}
