//! `lease doctor`: does this store really do what leases rely on?
//!
//! Some S3-compatible servers accept `If-None-Match` and `If-Match` and then ignore them
//! (s3rver, older gateways); others honour them one request at a time but not under
//! concurrency (users have seen 2 to 32 winners of 32 concurrent creates; s3s-fs checks, then
//! writes). Leases on such a store would silently allow two holders. The doctor writes probe
//! objects under a prefix and checks, on the real store:
//!
//! 1. `create`: a `Create` of a new key succeeds;
//! 2. `duplicate_create`: a second `Create` of it is refused (S3 412, Azure 409 or 412, GCS
//!    412: the store maps each to a failed condition);
//! 3. `update`: a `Match` on the version the write reported succeeds;
//! 4. `stale_update`: a `Match` on the replaced version is refused;
//! 5. `read`: a read returns what was written, at the version the write reported;
//! 6. `etag`: a `Match` on the version *as read* succeeds (a waiter writes with the version it
//!    read: a server whose reads and writes quote ETags differently leaves it stuck), and the
//!    ETag is an RFC 9110 quoted string (a warning otherwise) or a GCS generation;
//! 7. `not_modified`: a read with `if_none_match` on the current version answers "not
//!    modified" (otherwise every poll of a waiter costs a full read: a warning, not a failure);
//! 8. `missing_key`: a read of a missing key finds nothing (S3, GCS and Azure answer 404), a
//!    `Match` on it is refused and does not create it (S3 answers 404, Azure 412 or 404, GCS
//!    412), a conditional delete of it deletes nothing;
//! 9. `create_race`: of [`RACE`] concurrent `Create`s of one new key, exactly one succeeds, and
//!    the object holds its bytes; [`ROUNDS`] rounds, each on a new key;
//! 10. `match_race`: of [`RACE`] concurrent `Match`es on one version, exactly one succeeds;
//!     [`ROUNDS`] rounds, each on the version the previous round left;
//! 11. `store_clock`: the store's clock (`Date`, `Last-Modified`) is present and consistent, as
//!     the store-clock takeover rule needs;
//! 12. `stale_delete`: a delete conditioned on a replaced version is refused, when the store
//!     claims conditional deletes (else what the server does is reported, and fenced deletes
//!     are refused by the library);
//! 13. `cleanup`: the probes are deleted.
//!
//! Contenders of a race start together (a barrier), each on its own connection. One round can
//! miss a non-atomic server (s3s-fs 0.14 let 2 to 16 of 16 racing updates win in most rounds
//! here, and none in some), so a race is run several times. A contender
//! whose answer is lost (`Unavailable`: a timeout, a 409 `ConditionalRequestConflict`) is
//! counted as unknown; the object read back afterwards must then belong to the one winner, or
//! to one of the unknown ones if nobody was told they won.
//!
//! Writes to one key are spaced by the store's minimum write interval
//! ([`Store::min_write_interval`](crate::store::Store::min_write_interval): 1 s on GCS).
//!
//! [`check`] refuses a store that fails any check but `cleanup` (and a `not_modified` or
//! `etag` quoting warning) with an [`ErrorKind::Store`] error;
//! [`inspect`] returns the same report without refusing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde_json::json;

use crate::clock::{Clock, Instant, Rng, SystemClock};
use crate::error::{Error, ErrorKind, Result};
use crate::record::timestamp;
use crate::store::{Cond, Delete, DynStore, Get, GetOptions, Meta, Put, Version};

/// Longest the doctor waits for one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How far `Last-Modified` of an object written a moment ago may be from `Date`.
const MAX_STORE_CLOCK_SPREAD: Duration = Duration::from_secs(60);
/// A difference between this machine's clock and the store's worth a warning (SigV4 itself
/// fails at 15 minutes).
const SKEW_WARNING: Duration = Duration::from_secs(300);
/// Contenders per race.
pub const RACE: usize = 16;
/// Rounds per race.
pub const ROUNDS: usize = 3;

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
fn signed_ms(a: SystemTime, b: SystemTime) -> i64 {
    match a.duration_since(b) {
        Ok(d) => d.as_millis() as i64,
        Err(e) => -(e.duration().as_millis() as i64),
    }
}

/// Check the store; refuse it with an [`ErrorKind::Store`] error if it
/// does not honour the conditions leases rely on. `prefix` is where the probes go (`""` for the
/// top).
///
/// Errors reaching the store (permissions, missing bucket, unavailable) are returned as they
/// are, after removing the probes that were written.
pub async fn check(store: &DynStore, prefix: &str) -> Result<Report> {
    let report = inspect(store, prefix).await?;
    if report.ok() {
        Ok(report)
    } else {
        Err(Error::store(report.verdict()))
    }
}

/// Check the store and report, without refusing it (`lease doctor` prints the report either
/// way). Errors reaching the store are returned as by [`check`].
pub async fn inspect(store: &DynStore, prefix: &str) -> Result<Report> {
    inspect_with_clock(store, prefix, Arc::new(SystemClock)).await
}

/// [`inspect`] on an injected clock.
pub async fn inspect_with_clock(
    store: &DynStore,
    prefix: &str,
    clock: Arc<dyn Clock>,
) -> Result<Report> {
    let prefix = prefix.trim_matches('/');
    let name = format!("lease-doctor-{}", Rng::from_entropy().hex_id());
    let key = if prefix.is_empty() {
        name
    } else {
        format!("{prefix}/{name}")
    };
    crate::store::validate_key(&format!("{key}-create-race-0"))
        .map_err(|e| e.context(format!("doctor probe under prefix {prefix:?}")))?;
    let caps = store.capabilities();
    let mut d = Doctor {
        store: store.clone(),
        key: key.clone(),
        clock: clock.clone(),
        written: HashMap::new(),
        last_write: HashMap::new(),
        min_write_interval: store.min_write_interval(),
        report: Report {
            store: store.url().to_string(),
            probe_key: key,
            checks: Vec::new(),
            conditional_delete_claimed: caps.conditional_delete,
            conditional_delete_honoured: None,
            create_race: Vec::new(),
            match_race: Vec::new(),
            server_now: None,
            local_now: clock.wall(),
            last_modified_age: None,
            clock_resolution: caps.clock_resolution,
            store_clock_rule: caps.store_clock_rule,
            wall_clock: caps.wall_clock,
            min_write_interval: store.min_write_interval(),
            warnings: Vec::new(),
            cleaned_up: false,
        },
    };
    let result = d.run().await;
    d.cleanup().await;
    match result {
        Ok(()) => Ok(d.report),
        Err(e) => {
            let mut e = e.context(format!("lease doctor on {}", store.url()));
            if !d.report.cleaned_up && !d.written.is_empty() {
                let left: Vec<&String> = d.written.keys().collect();
                e = e.context(format!("(probes {left:?} may be left behind)"));
            }
            Err(e)
        }
    }
}

struct Doctor {
    store: DynStore,
    /// The main probe's key; the races use `{key}-create-race` and `{key}-match-race`, the
    /// missing-key check `{key}-missing`.
    key: String,
    clock: Arc<dyn Clock>,
    /// Keys the doctor may have written, to remove at the end.
    written: HashMap<String, ()>,
    /// When each key was last written, to space writes by the store's minimum interval.
    last_write: HashMap<String, Instant>,
    min_write_interval: Duration,
    report: Report,
}

/// What one contender of a race was told.
enum Outcome {
    Won,
    Refused,
    Unknown,
}

impl Doctor {
    async fn timed<T>(
        clock: &Arc<dyn Clock>,
        what: &str,
        key: &str,
        f: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        tokio::select! {
            r = f => r,
            _ = clock.sleep(REQUEST_TIMEOUT) => Err(Error::unavailable(format!(
                "{what} of {key} did not answer within {}s", REQUEST_TIMEOUT.as_secs()
            ))),
        }
    }

    /// Wait until `key` may be written again (GCS: one write per second per object).
    async fn pace(&mut self, key: &str) {
        if self.min_write_interval.is_zero() {
            return;
        }
        if let Some(last) = self.last_write.get(key) {
            let next = *last + self.min_write_interval;
            if next > self.clock.now() {
                self.clock.sleep_until(next).await;
            }
        }
    }

    async fn put_key(&mut self, key: &str, body: &str, cond: Cond) -> Result<(Put, Duration)> {
        self.pace(key).await;
        self.written.insert(key.to_string(), ());
        let start = self.clock.now();
        let put = Self::timed(
            &self.clock,
            "a write",
            key,
            self.store
                .put(key, Bytes::from(body.to_string()), cond, &Meta::new()),
        )
        .await?;
        let now = self.clock.now();
        if matches!(put, Put::Written { .. }) {
            self.last_write.insert(key.to_string(), now);
        }
        Ok((put, now - start))
    }

    async fn put(&mut self, body: &str, cond: Cond) -> Result<(Put, Duration)> {
        let key = self.key.clone();
        self.put_key(&key, body, cond).await
    }

    async fn get_key(&self, key: &str, if_none_match: Option<&Version>) -> Result<(Get, Duration)> {
        let start = self.clock.now();
        let opts = GetOptions {
            if_none_match,
            max_len: Some(64 * 1024),
        };
        let get = Self::timed(&self.clock, "a read", key, self.store.get(key, opts)).await?;
        Ok((get, self.clock.now() - start))
    }

    async fn get(&self, if_none_match: Option<&Version>) -> Result<(Get, Duration)> {
        self.get_key(&self.key, if_none_match).await
    }

    fn record(&mut self, name: &'static str, ok: bool, detail: String, elapsed: Duration) {
        self.report.checks.push(Check {
            name,
            ok,
            detail,
            elapsed,
        });
    }

    async fn run(&mut self) -> Result<()> {
        // 1. create
        let (put, t) = self.put("lease doctor probe 1", Cond::Create).await?;
        let v1 = match put {
            Put::Written { version, .. } => version,
            Put::ConditionFailed => {
                self.record(
                    "create",
                    false,
                    "a create of a new, random key was refused".into(),
                    t,
                );
                return Ok(());
            }
        };
        let mut current = v1.clone();
        self.record("create", true, format!("created at version {v1}"), t);

        // 2. duplicate create
        let (put, t) = self.put("lease doctor probe 2", Cond::Create).await?;
        match put {
            Put::ConditionFailed => self.record(
                "duplicate_create",
                true,
                "a second create was refused".into(),
                t,
            ),
            Put::Written { version, .. } => {
                current = version;
                self.record(
                    "duplicate_create",
                    false,
                    "a second create of the same key succeeded: the store ignores \
                     create-if-absent (If-None-Match: *, ifGenerationMatch=0), so two clients \
                     could both acquire"
                        .into(),
                    t,
                );
            }
        }

        // 3. update on the current version
        let (put, t) = self
            .put("lease doctor probe 3", Cond::Match(current.clone()))
            .await?;
        let v3 = match put {
            Put::Written { version, .. } => {
                self.record("update", true, format!("updated to version {version}"), t);
                version
            }
            Put::ConditionFailed => {
                self.record(
                    "update",
                    false,
                    "a write conditioned on the version the store had just reported was refused: \
                     its versions (ETags) are not stable"
                        .into(),
                    t,
                );
                return Ok(());
            }
        };
        current = v3.clone();

        // 4. stale update
        let (put, t) = self
            .put("lease doctor probe 4", Cond::Match(v1.clone()))
            .await?;
        match put {
            Put::ConditionFailed => self.record(
                "stale_update",
                true,
                "a write conditioned on a replaced version was refused".into(),
                t,
            ),
            Put::Written { version, .. } => {
                current = version;
                self.record(
                    "stale_update",
                    false,
                    "a write conditioned on a replaced version succeeded: the store ignores \
                     If-Match (ifGenerationMatch), so a holder that lost its lease could \
                     overwrite the new holder"
                        .into(),
                    t,
                );
            }
        }
        let expected_body = if current == v3 {
            "lease doctor probe 3"
        } else {
            "lease doctor probe 4"
        };

        // 5. read
        let (get, t) = self.get(None).await?;
        self.report.local_now = self.clock.wall();
        let obj = match get {
            Get::Found(obj) => obj,
            other => {
                self.record(
                    "read",
                    false,
                    format!("the probe could not be read back: {other:?}"),
                    t,
                );
                return Ok(());
            }
        };
        let same_body = obj.bytes.as_deref() == Some(expected_body.as_bytes());
        let same_version = obj.version == current;
        self.record(
            "read",
            same_body && same_version,
            if same_body && same_version {
                "read back what was written, at the version the write reported".into()
            } else {
                format!(
                    "read back {:?} at version {}, expected {expected_body:?} at {current}",
                    obj.bytes.as_deref().map(String::from_utf8_lossy),
                    obj.version,
                )
            },
            t,
        );
        self.report.server_now = obj.server_now;
        let (server_now, last_modified) = (obj.server_now, obj.last_modified);

        // 6. etag: a write conditioned on the version as read
        let (put, t) = self
            .put("lease doctor probe 6", Cond::Match(obj.version.clone()))
            .await?;
        let quoted = obj.version.etag.len() >= 2
            && obj.version.etag.starts_with('"')
            && obj.version.etag.ends_with('"');
        let weak = obj.version.etag.starts_with("W/");
        let form = if obj.version.generation.is_some() {
            format!("generation {}", obj.version.generation.unwrap_or(0))
        } else if quoted {
            format!("quoted ETag {}", obj.version.etag)
        } else {
            format!("ETag {} (not quoted)", obj.version.etag)
        };
        if obj.version.generation.is_none() && (weak || !quoted) {
            self.report.warnings.push(format!(
                "the store's ETag {} is {}: RFC 9110 wants a strong, quoted entity tag; it works \
                 here, but proxies may treat it differently",
                obj.version.etag,
                if weak { "weak" } else { "not quoted" }
            ));
        }
        match put {
            Put::Written { version, .. } => {
                current = version;
                self.record(
                    "etag",
                    true,
                    format!("a write conditioned on the version as read ({form}) succeeded"),
                    t,
                );
            }
            Put::ConditionFailed => self.record(
                "etag",
                false,
                format!(
                    "a write conditioned on the version as read ({form}) was refused: reads and \
                     writes report versions differently (ETag quoting?), so a waiter could never \
                     take over"
                ),
                t,
            ),
        }

        // 7. not modified
        let (get, t) = self.get(Some(&current)).await?;
        match get {
            Get::NotModified { .. } => self.record(
                "not_modified",
                true,
                "a poll of an unchanged object answered 'not modified'".into(),
                t,
            ),
            other => {
                self.report.warnings.push(
                    "the store ignores If-None-Match on reads: every poll of a waiter reads \
                     the whole record"
                        .into(),
                );
                self.record(
                    "not_modified",
                    true,
                    format!(
                        "a poll of an unchanged object answered {} (a warning only)",
                        describe_get(&other)
                    ),
                    t,
                );
            }
        }

        // 8. a missing key
        self.missing_key(&v1).await?;

        // 9, 10. races
        self.create_race().await?;
        self.match_race().await?;

        // 11. store clock
        self.store_clock(server_now, last_modified);

        // 12. stale conditional delete
        let start = self.clock.now();
        let key = self.key.clone();
        let stale =
            Self::timed(&self.clock, "a delete", &key, self.store.delete(&key, &v1)).await?;
        let t = self.clock.now() - start;
        let claimed = self.report.conditional_delete_claimed;
        match stale {
            Delete::ConditionFailed => {
                self.report.conditional_delete_honoured = Some(true);
                if !claimed {
                    self.report.warnings.push(
                        "the server refused a stale conditional delete, but the store does not \
                         claim conditional deletes: add conditional_delete=true to the URL to \
                         allow fenced deletes"
                            .into(),
                    );
                }
                self.record(
                    "stale_delete",
                    true,
                    "a delete conditioned on a replaced version was refused".into(),
                    t,
                );
            }
            Delete::Deleted => {
                self.report.conditional_delete_honoured = Some(false);
                self.written.remove(&key);
                if claimed {
                    self.record(
                        "stale_delete",
                        false,
                        "a delete conditioned on a replaced version deleted the object, but the \
                         store claims conditional deletes: set conditional_delete=false"
                            .into(),
                        t,
                    );
                } else {
                    self.record(
                        "stale_delete",
                        true,
                        "the server ignores the condition on delete (deleted a newer version); \
                         the store does not claim conditional deletes, so fenced deletes are \
                         refused (leases never delete)"
                            .into(),
                        t,
                    );
                }
            }
        }
        Ok(())
    }

    /// Reads, writes and deletes of a key that does not exist.
    async fn missing_key(&mut self, some_version: &Version) -> Result<()> {
        let key = format!("{}-missing", self.key);
        let start = self.clock.now();
        let mut problems = vec![];
        let (get, _) = self.get_key(&key, None).await?;
        if !matches!(get, Get::NotFound { .. }) {
            problems.push(format!(
                "a read of a missing key answered {}",
                describe_get(&get)
            ));
        }
        let (put, _) = self
            .put_key(&key, "must not land", Cond::Match(some_version.clone()))
            .await?;
        if let Put::Written { .. } = put {
            problems.push(
                "a write conditioned on a version of a missing key created it: the store \
                 ignores If-Match when the object is absent"
                    .to_string(),
            );
        }
        if self.report.conditional_delete_claimed {
            let d = Self::timed(
                &self.clock,
                "a delete",
                &key,
                self.store.delete(&key, some_version),
            )
            .await?;
            if let (Delete::Deleted, Put::ConditionFailed) = (&d, &put) {
                problems
                    .push("a conditional delete of a missing key reported a deletion".to_string());
            }
        }
        let (after, _) = self.get_key(&key, None).await?;
        let created = matches!(after, Get::Found(_));
        if created && !matches!(put, Put::Written { .. }) {
            problems
                .push("a refused conditional write of a missing key created it anyway".to_string());
        }
        if !created {
            self.written.remove(&key);
        }
        let t = self.clock.now() - start;
        if problems.is_empty() {
            self.record(
                "missing_key",
                true,
                "a missing key reads as absent, a conditional write of it is refused and creates \
                 nothing"
                    .into(),
                t,
            );
        } else {
            self.record("missing_key", false, problems.join("; "), t);
        }
        Ok(())
    }

    /// Start `RACE` writes of `key` together; each gets `cond` and writes `{tag} {i}`. Tags
    /// differ from round to round: a server whose ETag is a hash of the bytes (MD5 on S3) would
    /// give a repeated body a repeated ETag, and a stale `If-Match` would rightly succeed.
    async fn race(&mut self, key: &str, tag: &str, cond: Cond) -> Result<(Vec<Outcome>, Duration)> {
        self.pace(key).await;
        self.written.insert(key.to_string(), ());
        let barrier = Arc::new(tokio::sync::Barrier::new(RACE));
        let start = self.clock.now();
        let tasks: Vec<_> = (0..RACE)
            .map(|i| {
                let store = self.store.clone();
                let clock = self.clock.clone();
                let barrier = barrier.clone();
                let key = key.to_string();
                let cond = cond.clone();
                let body = Bytes::from(format!("{tag} {i}"));
                tokio::spawn(async move {
                    barrier.wait().await;
                    Self::timed(
                        &clock,
                        "a racing write",
                        &key,
                        store.put(&key, body, cond, &Meta::new()),
                    )
                    .await
                })
            })
            .collect();
        let mut outcomes = Vec::with_capacity(RACE);
        let mut failure = None;
        for task in tasks {
            let result = task
                .await
                .map_err(|e| Error::internal(format!("a racing write panicked: {e}")))?;
            outcomes.push(match result {
                Ok(Put::Written { .. }) => Outcome::Won,
                Ok(Put::ConditionFailed) => Outcome::Refused,
                Err(e) if e.kind() == ErrorKind::Unavailable => Outcome::Unknown,
                Err(e) => {
                    failure.get_or_insert(e);
                    Outcome::Unknown
                }
            });
        }
        let elapsed = self.clock.now() - start;
        if outcomes.iter().any(|o| matches!(o, Outcome::Won)) {
            self.last_write.insert(key.to_string(), self.clock.now());
        }
        match failure {
            Some(e) => Err(e),
            None => Ok((outcomes, elapsed)),
        }
    }

    /// Judge one round of a race from what the contenders were told and what the object
    /// holds: whether it went right, what happened, and the version the object is at now.
    async fn judge(
        &mut self,
        name: &'static str,
        what: &str,
        key: &str,
        tag: &str,
        outcomes: Vec<Outcome>,
    ) -> Result<(bool, String, Race, Option<Version>)> {
        let won: Vec<usize> = (0..outcomes.len())
            .filter(|&i| matches!(outcomes[i], Outcome::Won))
            .collect();
        let unknown: Vec<usize> = (0..outcomes.len())
            .filter(|&i| matches!(outcomes[i], Outcome::Unknown))
            .collect();
        let (get, _) = self.get_key(key, None).await?;
        let (holder, version) = match &get {
            Get::Found(obj) => (
                obj.bytes
                    .as_deref()
                    .and_then(|b| std::str::from_utf8(b).ok())
                    .and_then(|s| s.strip_prefix(tag))
                    .and_then(|s| s.strip_prefix(' '))
                    .and_then(|n| n.parse::<usize>().ok()),
                Some(obj.version.clone()),
            ),
            _ => (None, None),
        };
        let race = Race {
            contenders: outcomes.len(),
            won: won.len(),
            refused: outcomes.len() - won.len() - unknown.len(),
            unknown: unknown.len(),
            holder,
        };
        let counts = format!(
            "{} of {} succeeded, {} refused, {} unknown",
            race.won, race.contenders, race.refused, race.unknown
        );
        let (ok, detail) = match (won.as_slice(), holder) {
            ([one], Some(h)) if h == *one => (true, counts),
            ([one], h) => (
                false,
                format!(
                    "{counts} {what}, but the object holds {} instead of the winner's ({one}): \
                     a write told it failed landed anyway",
                    h.map_or("no contender's bytes".to_string(), |h| format!(
                        "contender {h}'s"
                    ))
                ),
            ),
            ([], Some(h)) if unknown.contains(&h) => {
                self.report.warnings.push(format!(
                    "{name}: no contender was told it won; the object holds contender {h}'s \
                     bytes, whose answer was lost: inconclusive, run the doctor again"
                ));
                (true, format!("{counts}; the winner's answer was lost"))
            }
            ([], _) => (
                false,
                format!("{counts} {what}: no contender's write landed, or it cannot be told whose"),
            ),
            (many, _) => (
                false,
                format!(
                    "{counts} {what}: the store checks conditions and writes non-atomically, so \
                     concurrent acquirers can all believe they hold the lease (winners: {many:?})"
                ),
            ),
        };
        Ok((ok, detail, race, version))
    }

    /// Record a race's rounds as one check, failed if any round failed.
    fn record_race(
        &mut self,
        name: &'static str,
        what: &str,
        rounds: Vec<(bool, String)>,
        elapsed: Duration,
    ) {
        let ok = rounds.iter().all(|(ok, _)| *ok);
        let n = rounds.len();
        let detail = match rounds.iter().position(|(ok, _)| !ok) {
            Some(i) => format!("round {} of {n}: {}", i + 1, rounds[i].1),
            None => format!(
                "{n} rounds of {RACE} concurrent {what}, each: {}; the object held the \
                 winner's bytes",
                rounds
                    .iter()
                    .map(|(_, d)| d.as_str())
                    .collect::<Vec<_>>()
                    .join(" / ")
            ),
        };
        self.record(name, ok, detail, elapsed);
    }

    async fn create_race(&mut self) -> Result<()> {
        let start = self.clock.now();
        let what = "creates of one new key";
        let mut rounds = vec![];
        for round in 0..ROUNDS {
            let key = format!("{}-create-race-{round}", self.key);
            let tag = format!("lease doctor create race, round {round}:");
            let (outcomes, _) = self.race(&key, &tag, Cond::Create).await?;
            let (ok, detail, race, _) = self
                .judge("create_race", what, &key, &tag, outcomes)
                .await?;
            self.report.create_race.push(race);
            rounds.push((ok, detail));
        }
        let elapsed = self.clock.now() - start;
        self.record_race("create_race", what, rounds, elapsed);
        Ok(())
    }

    async fn match_race(&mut self) -> Result<()> {
        let start = self.clock.now();
        let what = "updates of one version";
        let key = format!("{}-match-race", self.key);
        let (put, _) = self
            .put_key(&key, "lease doctor race base", Cond::Create)
            .await?;
        let Put::Written { mut version, .. } = put else {
            self.record(
                "match_race",
                false,
                "the object to race on could not be created".into(),
                Duration::ZERO,
            );
            return Ok(());
        };
        let mut rounds = vec![];
        for round in 0..ROUNDS {
            let tag = format!("lease doctor match race, round {round}:");
            let (outcomes, _) = self.race(&key, &tag, Cond::Match(version.clone())).await?;
            let (ok, detail, race, now) =
                self.judge("match_race", what, &key, &tag, outcomes).await?;
            self.report.match_race.push(race);
            rounds.push((ok, detail));
            match now {
                Some(v) => version = v,
                None => break,
            }
        }
        let elapsed = self.clock.now() - start;
        self.record_race("match_race", what, rounds, elapsed);
        Ok(())
    }

    fn store_clock(&mut self, server_now: Option<SystemTime>, modified: Option<SystemTime>) {
        let res = self.report.clock_resolution;
        let rule = self.report.store_clock_rule;
        let (ok, detail) = match (server_now, modified) {
            (Some(now), Some(modified)) => {
                let skew = signed_ms(now, self.report.local_now);
                let wall = self.report.wall_clock;
                if wall && skew.unsigned_abs() > SKEW_WARNING.as_millis() as u64 {
                    self.report.warnings.push(format!(
                        "the store's clock differs from this machine's by {} s (harmless for \
                         leases, which never compare the two, but request signing fails at 15 \
                         minutes)",
                        skew / 1000
                    ));
                }
                let age_ms = signed_ms(now, modified);
                self.report.last_modified_age =
                    Some((age_ms < 0, Duration::from_millis(age_ms.unsigned_abs())));
                let ahead = age_ms < 0 && age_ms.unsigned_abs() > res.as_millis() as u64;
                let behind = age_ms > (MAX_STORE_CLOCK_SPREAD + res).as_millis() as i64;
                if ahead || behind {
                    (
                        !rule,
                        format!(
                            "Last-Modified of a just-written object is {age_ms} ms before the \
                             store's Date: the store's clocks disagree{}",
                            if rule {
                                "; set store_clock_rule=false so waiters only trust their own \
                                 observation"
                            } else {
                                " (the store-clock rule is off)"
                            }
                        ),
                    )
                } else {
                    (
                        true,
                        if wall {
                            format!(
                                "Date and Last-Modified agree ({age_ms} ms apart); the store's \
                                 clock is {skew} ms from this machine's"
                            )
                        } else {
                            format!(
                                "the store's clock (this machine's boot clock) agrees with the \
                                 probe's stamp ({age_ms} ms apart)"
                            )
                        },
                    )
                }
            }
            (None, _) | (_, None) => {
                if rule {
                    self.report.warnings.push(
                        "the store reports no Date or Last-Modified: waiters fall back to their \
                         own observation (ttl + grace after they first see a record)"
                            .into(),
                    );
                }
                (
                    true,
                    format!(
                        "no store clock (Date {}, Last-Modified {})",
                        if server_now.is_some() {
                            "present"
                        } else {
                            "absent"
                        },
                        if modified.is_some() {
                            "present"
                        } else {
                            "absent"
                        }
                    ),
                )
            }
        };
        self.record("store_clock", ok, detail, Duration::ZERO);
    }

    /// Remove every probe: at the version a read shows (tries three times per key).
    async fn cleanup(&mut self) {
        let start = self.clock.now();
        let mut keys: Vec<String> = self.written.keys().cloned().collect();
        keys.sort();
        let mut left = vec![];
        for key in keys {
            let mut removed = false;
            let mut last_error = None;
            for _ in 0..3 {
                let version = match self.get_key(&key, None).await {
                    Ok((Get::Found(obj), _)) => obj.version,
                    Ok((Get::NotFound { .. }, _)) => {
                        removed = true;
                        break;
                    }
                    Ok((Get::NotModified { .. }, _)) => continue,
                    Err(e) => {
                        last_error = Some(e);
                        continue;
                    }
                };
                match Self::timed(
                    &self.clock,
                    "a delete",
                    &key,
                    self.store.delete(&key, &version),
                )
                .await
                {
                    Ok(Delete::Deleted) => {
                        removed = true;
                        break;
                    }
                    Ok(Delete::ConditionFailed) => continue,
                    Err(e) => last_error = Some(e),
                }
            }
            if removed {
                self.written.remove(&key);
            } else {
                let why = last_error.map_or("it kept changing".to_string(), |e| e.to_string());
                left.push(format!("{key} ({why})"));
            }
        }
        let t = self.clock.now() - start;
        self.report.cleaned_up = left.is_empty();
        if left.is_empty() {
            self.record("cleanup", true, "the probes were deleted".into(), t);
        } else {
            self.report
                .warnings
                .push(format!("probes could not be deleted: {}", left.join("; ")));
            // Not a failure of the store's semantics: a worker never needs to delete.
            self.record(
                "cleanup",
                true,
                format!("could not delete {}; remove them by hand", left.join(", ")),
                t,
            );
        }
    }
}

fn describe_get(g: &Get) -> String {
    match g {
        Get::Found(o) => format!("an object (version {}, {} bytes)", o.version, o.size),
        Get::NotModified { .. } => "'not modified'".into(),
        Get::NotFound { .. } => "'not found'".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::store::memory::MemoryStore;
    use crate::store::{Capabilities, Store};
    use async_trait::async_trait;

    #[tokio::test]
    async fn a_correct_store_passes_and_is_left_clean() {
        let mem = MemoryStore::new();
        let store: DynStore = Arc::new(mem.clone());
        let report = check(&store, "probes/").await.unwrap();
        assert!(report.ok(), "{}", report.verdict());
        assert!(report.probe_key.starts_with("probes/lease-doctor-"));
        assert!(report.cleaned_up);
        let json = report.to_json();
        assert_eq!(json["ok"], true);
        assert_eq!(json["conditional_delete"]["honoured"], true);
        for kind in ["create", "match"] {
            let rounds = json["races"][kind].as_array().unwrap();
            assert_eq!(rounds.len(), ROUNDS, "{json}");
            for r in rounds {
                assert_eq!(r["won"], 1, "{json}");
                assert_eq!(r["refused"], RACE as u64 - 1, "{json}");
                assert_eq!(r["contenders"], RACE as u64, "{json}");
            }
        }
        let names: Vec<&str> = report.checks.iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "create",
                "duplicate_create",
                "update",
                "stale_update",
                "read",
                "etag",
                "not_modified",
                "missing_key",
                "create_race",
                "match_race",
                "store_clock",
                "stale_delete",
                "cleanup"
            ]
        );
        for key in [
            report.probe_key.clone(),
            format!("{}-create-race-0", report.probe_key),
            format!("{}-create-race-2", report.probe_key),
            format!("{}-match-race", report.probe_key),
            format!("{}-missing", report.probe_key),
        ] {
            let after = store.get(&key, GetOptions::default()).await.unwrap();
            assert!(matches!(after, Get::NotFound { .. }), "{key} left behind");
        }
    }

    /// A store that ignores every condition, like s3rver.
    #[derive(Debug)]
    struct Careless(MemoryStore);

    #[async_trait]
    impl Store for Careless {
        fn url(&self) -> &str {
            "careless://"
        }
        fn capabilities(&self) -> Capabilities {
            self.0.capabilities()
        }
        async fn get(&self, key: &str, opts: GetOptions<'_>) -> Result<Get> {
            self.0.get(key, opts).await
        }
        async fn put(&self, key: &str, bytes: Bytes, _: Cond, meta: &Meta) -> Result<Put> {
            let current = match self.0.get(key, GetOptions::default()).await? {
                Get::Found(o) => Cond::Match(o.version),
                _ => Cond::Create,
            };
            self.0.put(key, bytes, current, meta).await
        }
        async fn delete(&self, key: &str, _: &Version) -> Result<Delete> {
            match self.0.get(key, GetOptions::default()).await? {
                Get::Found(o) => self.0.delete(key, &o.version).await,
                _ => Ok(Delete::ConditionFailed),
            }
        }
    }

    #[tokio::test]
    async fn a_store_that_ignores_conditions_is_refused() {
        let store: DynStore = Arc::new(Careless(MemoryStore::new()));
        let e = check(&store, "").await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Store);
        for name in ["duplicate_create", "stale_update", "missing_key"] {
            assert!(e.message().contains(name), "{name}: {e}");
        }
        let report = inspect(&store, "").await.unwrap();
        assert!(!report.ok());
        assert_eq!(report.to_json()["conditional_delete"]["honoured"], false);
        assert!(report.cleaned_up);
    }

    /// A store that checks a condition, then writes, with other requests in between: every
    /// single request is answered right, concurrent ones are not (what s3s-fs does).
    #[derive(Debug)]
    struct CheckThenWrite(MemoryStore);

    #[async_trait]
    impl Store for CheckThenWrite {
        fn url(&self) -> &str {
            "check-then-write://"
        }
        fn capabilities(&self) -> Capabilities {
            self.0.capabilities()
        }
        async fn get(&self, key: &str, opts: GetOptions<'_>) -> Result<Get> {
            self.0.get(key, opts).await
        }
        async fn put(&self, key: &str, bytes: Bytes, cond: Cond, meta: &Meta) -> Result<Put> {
            let found = match self.0.get(key, GetOptions::default()).await? {
                Get::Found(o) => Some(o.version),
                _ => None,
            };
            let holds = match (&cond, &found) {
                (Cond::Create, None) => true,
                (Cond::Match(v), Some(cur)) => v == cur,
                _ => false,
            };
            if !holds {
                return Ok(Put::ConditionFailed);
            }
            // The check is done; let the other requests in before writing.
            for _ in 0..8 {
                tokio::task::yield_now().await;
            }
            let now = match self.0.get(key, GetOptions::default()).await? {
                Get::Found(o) => Cond::Match(o.version),
                _ => Cond::Create,
            };
            self.0.put(key, bytes, now, meta).await
        }
        async fn delete(&self, key: &str, v: &Version) -> Result<Delete> {
            self.0.delete(key, v).await
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_store_that_is_only_right_one_request_at_a_time_is_refused() {
        let store: DynStore = Arc::new(CheckThenWrite(MemoryStore::new()));
        let report = inspect(&store, "").await.unwrap();
        let failed: Vec<&str> = report.failures().iter().map(|c| c.name).collect();
        assert_eq!(
            failed,
            ["create_race", "match_race"],
            "{}",
            report.verdict()
        );
        assert!(
            report.create_race.iter().any(|r| r.won > 1),
            "{:?}",
            report.create_race
        );
        assert!(
            report.verdict().contains("non-atomically"),
            "{}",
            report.verdict()
        );
        let json = report.to_json();
        assert!(
            json["races"]["match"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["won"].as_u64().unwrap() > 1),
            "{json}"
        );
        assert!(report.cleaned_up);
        assert_eq!(
            check(&store, "").await.unwrap_err().kind(),
            ErrorKind::Store
        );
    }

    /// A store with GCS's write-rate limit: two writes of one key less than a second apart
    /// fail as unavailable (429).
    #[derive(Debug)]
    struct RateLimited {
        mem: MemoryStore,
        last: std::sync::Mutex<HashMap<String, Instant>>,
    }

    #[async_trait]
    impl Store for RateLimited {
        fn url(&self) -> &str {
            "rate-limited://"
        }
        fn capabilities(&self) -> Capabilities {
            self.mem.capabilities()
        }
        fn min_write_interval(&self) -> Duration {
            Duration::from_secs(1)
        }
        async fn get(&self, key: &str, opts: GetOptions<'_>) -> Result<Get> {
            self.mem.get(key, opts).await
        }
        async fn put(&self, key: &str, bytes: Bytes, cond: Cond, meta: &Meta) -> Result<Put> {
            let now = SystemClock.now();
            let last = self.last.lock().unwrap().get(key).copied();
            if last.is_some_and(|prev| now - prev < Duration::from_secs(1)) {
                return Err(Error::unavailable("429 rate limit exceeded"));
            }
            let put = self.mem.put(key, bytes, cond, meta).await?;
            if let Put::Written { .. } = put {
                self.last.lock().unwrap().insert(key.to_string(), now);
            }
            Ok(put)
        }
        async fn delete(&self, key: &str, v: &Version) -> Result<Delete> {
            self.mem.delete(key, v).await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn writes_of_one_key_are_spaced_by_the_minimum_interval() {
        let store: DynStore = Arc::new(RateLimited {
            mem: MemoryStore::new(),
            last: Default::default(),
        });
        let report = check(&store, "").await.unwrap();
        assert!(report.ok(), "{}", report.verdict());
        assert_eq!(report.to_json()["min_write_interval_ms"], 1000);
    }
}
