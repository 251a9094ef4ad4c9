//! The doctor's report: each check, each race round, the store's clock, warnings, and its
//! JSON form (`lease doctor --json`).

use std::time::{Duration, SystemTime};

use serde_json::json;

use crate::record::timestamp;

/// One check and what it found.
#[derive(Debug, Clone)]
pub struct Check {
    /// `create`, `duplicate_create`, `update`, `stale_update`, `read`, `etag`,
    /// `not_modified`, `missing_key`, `create_race`, `match_race`, `store_clock`,
    /// `stale_delete` or `cleanup`.
    pub name: &'static str,
    pub ok: bool,
    /// What was seen, for people.
    pub detail: String,
    /// How long the check's requests took.
    pub elapsed: Duration,
}

/// How a race went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Race {
    pub contenders: usize,
    /// Contenders told their write landed.
    pub won: usize,
    /// Contenders told the condition failed.
    pub refused: usize,
    /// Contenders whose outcome is unknown (`Unavailable`).
    pub unknown: usize,
    /// Whose bytes the object held afterwards (a contender's index), if readable.
    pub holder: Option<usize>,
}

/// What the doctor found.
#[derive(Debug, Clone)]
pub struct Report {
    /// The store's URL.
    pub store: String,
    /// The key of the main probe object (the races use keys beside it).
    pub probe_key: String,
    pub checks: Vec<Check>,
    /// Whether the store claims conditional deletes (`Capabilities::conditional_delete`).
    pub conditional_delete_claimed: bool,
    /// Whether the server refused a stale conditional delete (`None`: not tested).
    pub conditional_delete_honoured: Option<bool>,
    /// The rounds of concurrent creates (empty: not run).
    pub create_race: Vec<Race>,
    /// The rounds of concurrent matches on one version (empty: not run).
    pub match_race: Vec<Race>,
    /// The store's clock (`Date`) at the read, and this machine's clock then.
    pub server_now: Option<SystemTime>,
    pub local_now: SystemTime,
    /// `Date - Last-Modified` of the probe right after it was written.
    pub last_modified_age: Option<(bool, Duration)>,
    pub clock_resolution: Duration,
    pub store_clock_rule: bool,
    /// Whether the store's clock is a wall clock; the file store's is this machine's boot clock,
    /// which cannot be compared with the wall clock.
    pub wall_clock: bool,
    /// The store's minimum interval between writes of one object (GCS: 1 s).
    pub min_write_interval: Duration,
    pub warnings: Vec<String>,
    /// Whether every probe object was removed.
    pub cleaned_up: bool,
}

impl Report {
    /// True when every check that leases depend on passed.
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    /// The checks that failed.
    pub fn failures(&self) -> Vec<&Check> {
        self.checks.iter().filter(|c| !c.ok).collect()
    }

    /// One line for people.
    pub fn verdict(&self) -> String {
        if self.ok() {
            format!(
                "{}: conditional writes work, also under concurrency; leases are safe here",
                self.store
            )
        } else {
            let failed: Vec<String> = self
                .failures()
                .iter()
                .map(|c| format!("{} ({})", c.name, c.detail))
                .collect();
            format!(
                "{} cannot be used for leases: {}",
                self.store,
                failed.join("; ")
            )
        }
    }

    /// The JSON shape of `lease doctor --json`:
    ///
    /// ```json
    /// { "ok": true, "verdict": "…", "store": "s3://bucket?…", "probe_key": "…",
    ///   "checks": [ { "name": "create", "ok": true, "detail": "…", "ms": 3 }, … ],
    ///   "races": { "create": [ { "contenders": 16, "won": 1, "refused": 15, "unknown": 0,
    ///                            "holder": 7 }, … one per round ],
    ///              "match": [ … ] },
    ///   "conditional_delete": { "claimed": true, "honoured": true },
    ///   "clock": { "server_now": "2026-…Z", "local_now": "2026-…Z", "skew_ms": -120,
    ///              "last_modified_age_ms": 0, "resolution_ms": 1000, "store_clock_rule": true },
    ///   "min_write_interval_ms": 0,
    ///   "warnings": [ "…" ], "cleaned_up": true }
    /// ```
    /// `skew_ms` is the store's clock minus this machine's; `honoured` is `null` when not
    /// tested; a race that did not run has no rounds.
    pub fn to_json(&self) -> serde_json::Value {
        let skew_ms = self
            .server_now
            .filter(|_| self.wall_clock)
            .map(|s| signed_ms(s, self.local_now));
        let race = |rounds: &[Race]| {
            rounds
                .iter()
                .map(|r| {
                    json!({
                        "contenders": r.contenders,
                        "won": r.won,
                        "refused": r.refused,
                        "unknown": r.unknown,
                        "holder": r.holder,
                    })
                })
                .collect::<Vec<_>>()
        };
        json!({
            "ok": self.ok(),
            "verdict": self.verdict(),
            "store": self.store,
            "probe_key": self.probe_key,
            "checks": self.checks.iter().map(|c| json!({
                "name": c.name,
                "ok": c.ok,
                "detail": c.detail,
                "ms": c.elapsed.as_millis() as u64,
            })).collect::<Vec<_>>(),
            "races": {
                "create": race(&self.create_race),
                "match": race(&self.match_race),
            },
            "conditional_delete": {
                "claimed": self.conditional_delete_claimed,
                "honoured": self.conditional_delete_honoured,
            },
            "clock": {
                "server_now": self.server_now.filter(|_| self.wall_clock).map(timestamp),
                "wall_clock": self.wall_clock,
                "local_now": timestamp(self.local_now),
                "skew_ms": skew_ms,
                "last_modified_age_ms": self.last_modified_age.map(|(neg, d)| {
                    let ms = d.as_millis() as i64;
                    if neg { -ms } else { ms }
                }),
                "resolution_ms": self.clock_resolution.as_millis() as u64,
                "store_clock_rule": self.store_clock_rule,
            },
            "min_write_interval_ms": self.min_write_interval.as_millis() as u64,
            "warnings": self.warnings,
            "cleaned_up": self.cleaned_up,
        })
    }
}

/// `a - b` in milliseconds, signed.
pub(super) fn signed_ms(a: SystemTime, b: SystemTime) -> i64 {
    match a.duration_since(b) {
        Ok(d) => d.as_millis() as i64,
        Err(e) => -(e.duration().as_millis() as i64),
    }
}
