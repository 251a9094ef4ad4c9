//! Model checking of fenced writes: the checks (the model is `lease_verify::fence_model`,
//! shared with the negative controls in `negative_controls.rs`).

#![allow(clippy::disallowed_methods)] // times the checker with the wall clock

use stateright::Checker;

use lease_verify::fence_model::*;

#[test]
fn version_conditional_fenced_writes_keep_their_history() {
    for content_versions in [false, true] {
        let m = FenceModel {
            content_versions,
            writers_see_unique_versions: !content_versions,
            ..model()
        };
        let started = std::time::Instant::now();
        let c = run(m, "fence model").threads(2).spawn_bfs().join();
        eprintln!(
            "fence model (versions hash the bytes: {content_versions}): {} unique states in {:.1?}",
            c.unique_state_count(),
            started.elapsed()
        );
        c.assert_properties();
    }
}

#[test]
fn identical_bytes_keep_the_fence_where_versions_hash_the_bytes() {
    // The same writes as the negative control below, with the trailer: no zombie lands.
    let m = FenceModel {
        content_versions: true,
        writers_see_unique_versions: false,
        conditional: false,
        append: false,
        updates: 2,
        ..model()
    };
    let c = run(m, "identical bytes with the trailer")
        .threads(2)
        .spawn_bfs()
        .join();
    eprintln!("identical bytes: {} unique states", c.unique_state_count());
    c.assert_properties();
}

#[test]
fn plain_fenced_writes_lose_updates() {
    // Negative control: without the version condition, a read-modify-write loses updates.
    let m = FenceModel {
        conditional: false,
        ..model()
    };
    let c = run(m, "plain writes").threads(2).spawn_bfs().join();
    let found = c.discovery("fenced writes keep their history");
    assert!(found.is_some(), "the checker did not find the lost update");
}

#[test]
fn without_unique_bytes_a_zombie_lands_on_a_store_whose_versions_hash_the_bytes() {
    // Negative control: a store whose versions hash the bytes (S3), written as if every write
    // made a new version (no trailer): the zombie's write lands over the newer holder's.
    let m = FenceModel {
        content_versions: true,
        writers_see_unique_versions: true,
        conditional: false,
        append: false,
        updates: 2,
        ..model()
    };
    let c = run(m, "no trailer").threads(2).spawn_bfs().join();
    assert!(
        c.discovery("fenced writes keep their history").is_some(),
        "the checker did not find the zombie write"
    );
}

#[test]
fn fencing_per_scope_and_for_readers_keeps_its_history() {
    for content_versions in [false, true] {
        let m = FenceModel {
            content_versions,
            writers_see_unique_versions: !content_versions,
            ..scoped_model()
        };
        let started = std::time::Instant::now();
        let c = run(m, "scoped fence model").threads(2).spawn_bfs().join();
        eprintln!(
            "scoped fence model (versions hash the bytes: {content_versions}): {} unique states in \
             {:.1?}",
            c.unique_state_count(),
            started.elapsed()
        );
        c.assert_properties();
    }
}
