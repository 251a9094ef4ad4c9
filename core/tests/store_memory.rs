//! The conformance suite on the in-memory store.

mod conformance;

use lease::store::memory::MemoryStore;

macro_rules! suite {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            conformance::$name(conformance::dyn_store(MemoryStore::new()), "t").await;
        }
    )*};
}

suite!(
    create_race_has_one_winner,
    match_race_has_one_winner,
    stale_versions_fail,
    not_modified_works,
    missing_keys,
    large_and_odd_keys_round_trip,
    max_len_bounds_reads,
    metadata_round_trips,
    store_clock_is_sane,
    conditional_delete,
);
