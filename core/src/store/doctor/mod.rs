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
//! `etag` quoting warning) with an [`ErrorKind::Store`](crate::ErrorKind::Store) error;
//! [`inspect`] returns the same report without refusing.

mod probes;
mod race;
mod report;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::clock::{Clock, Instant, Rng, SystemClock};
use crate::error::{Error, Result};
use crate::store::{Cond, Delete, DynStore, Get, GetOptions, Meta, Put, Version};

use probes::describe_get;
pub use report::{Check, Race, Report};

/// Longest the doctor waits for one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How far the store's own clocks (the one that stamps `Last-Modified`, the one that sets
/// `Date`) may disagree: the least takeover grace, which covers it. **(changed)** It was 60 s
/// in the direction of a `Date` ahead, the unsafe one: a gateway whose `Date` ran 30 s ahead
/// passed (issue 29).
const MAX_STORE_CLOCK_SKEW: Duration = Duration::from_secs(1);
/// A difference between this machine's clock and the store's worth a warning (SigV4 itself
/// fails at 15 minutes).
const SKEW_WARNING: Duration = Duration::from_secs(300);
/// Contenders per race.
pub const RACE: usize = 16;
/// Rounds per race.
pub const ROUNDS: usize = 3;

/// Check the store; refuse it with an [`ErrorKind::Store`](crate::ErrorKind::Store) error if it
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
    pub(super) async fn timed<T>(
        clock: &Arc<dyn Clock>,
        what: &str,
        key: &str,
        f: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        tokio::select! {
            r = f => r,
            _ = clock.sleep(REQUEST_TIMEOUT) => Err(Error::unavailable(format!(
                "{what} of {key} did not answer within {}",
                crate::duration::format_duration(REQUEST_TIMEOUT)
            ))),
        }
    }

    /// Wait until `key` may be written again (GCS: one write per second per object).
    pub(super) async fn pace(&mut self, key: &str) {
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

    pub(super) async fn put_key(
        &mut self,
        key: &str,
        body: &str,
        cond: Cond,
    ) -> Result<(Put, Duration)> {
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

    pub(super) async fn put(&mut self, body: &str, cond: Cond) -> Result<(Put, Duration)> {
        let key = self.key.clone();
        self.put_key(&key, body, cond).await
    }

    pub(super) async fn get_key(
        &self,
        key: &str,
        if_none_match: Option<&Version>,
    ) -> Result<(Get, Duration)> {
        let start = self.clock.now();
        let opts = GetOptions {
            if_none_match,
            max_len: Some(64 * 1024),
        };
        let get = Self::timed(&self.clock, "a read", key, self.store.get(key, opts)).await?;
        Ok((get, self.clock.now() - start))
    }

    pub(super) async fn get(&self, if_none_match: Option<&Version>) -> Result<(Get, Duration)> {
        self.get_key(&self.key, if_none_match).await
    }

    pub(super) fn record(
        &mut self,
        name: &'static str,
        ok: bool,
        detail: String,
        elapsed: Duration,
    ) {
        self.report.checks.push(Check {
            name,
            ok,
            detail,
            elapsed,
        });
    }

    pub(super) async fn run(&mut self) -> Result<()> {
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

        // 3. update on the current version (the object's last write, whose Last-Modified the
        // read in 5 shows: the store's clock cannot have moved on more since than our own did)
        let update_sent = self.clock.now();
        let (put, t) = match self
            .put("lease doctor probe 3", Cond::Match(current.clone()))
            .await
        {
            Ok(answer) => answer,
            // An object that was just created and cannot be overwritten (a GCS hold or
            // retention policy, an Object Lock): leases cannot live here, say why.
            Err(e) if e.kind() == crate::error::ErrorKind::Store => {
                self.record(
                    "update",
                    false,
                    format!(
                        "an object written a moment ago cannot be overwritten, and lease records \
                         are rewritten at every renewal: {}",
                        e.message()
                    ),
                    Duration::ZERO,
                );
                return Ok(());
            }
            Err(e) => return Err(e),
        };
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
        let since_update = self.clock.now().saturating_duration_since(update_sent);
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
        self.store_clock(server_now, last_modified, since_update);

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
}
