//! `lease doctor`: does this store really do what leases rely on?
//!
//! Some S3-compatible servers accept `If-None-Match` and `If-Match` and then ignore them (s3rver,
//! older gateways); leases on such a store would silently allow two holders. The doctor writes
//! a probe object under a prefix and checks, on the real store:
//!
//! 1. `create`: a `Create` of a new key succeeds;
//! 2. `duplicate_create`: a second `Create` of it is refused;
//! 3. `update`: a `Match` on the current version succeeds;
//! 4. `stale_update`: a `Match` on the replaced version is refused;
//! 5. `read`: a read returns what was written, at the version the write reported;
//! 6. `not_modified`: a read with `if_none_match` on the current version answers "not modified"
//!    (otherwise every poll of a waiter costs a full read: a warning, not a failure);
//! 7. `store_clock`: the store's clock (`Date`, `Last-Modified`) is present and consistent, as
//!    the store-clock takeover rule needs;
//! 8. `stale_delete`: a delete conditioned on the replaced version is refused, when the store
//!    claims conditional deletes (else what the server does is reported);
//! 9. `cleanup`: the probe is deleted.
//!
//! [`check`] refuses a store that fails any of 1-5, 7 or a claimed 8 with an
//! [`ErrorKind::Store`](crate::ErrorKind::Store) error; [`inspect`] returns the same report without refusing.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde_json::json;

use crate::clock::{Clock, Rng, SystemClock};
use crate::error::{Error, Result};
use crate::record::timestamp;
use crate::store::{Cond, Delete, DynStore, Get, GetOptions, Meta, Put, Version};

/// Longest the doctor waits for one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How far `Last-Modified` of an object written a moment ago may be from `Date`.
const MAX_STORE_CLOCK_SPREAD: Duration = Duration::from_secs(60);
/// A difference between this machine's clock and the store's worth a warning (SigV4 itself
/// fails at 15 minutes).
const SKEW_WARNING: Duration = Duration::from_secs(300);

/// One check and what it found.
#[derive(Debug, Clone)]
pub struct Check {
    /// `create`, `duplicate_create`, `update`, `stale_update`, `read`, `not_modified`,
    /// `store_clock`, `stale_delete` or `cleanup`.
    pub name: &'static str,
    pub ok: bool,
    /// What was seen, for people.
    pub detail: String,
    /// How long the check's requests took.
    pub elapsed: Duration,
}

/// What the doctor found.
#[derive(Debug, Clone)]
pub struct Report {
    /// The store's URL.
    pub store: String,
    /// The key of the probe object.
    pub probe_key: String,
    pub checks: Vec<Check>,
    /// Whether the store claims conditional deletes (`Capabilities::conditional_delete`).
    pub conditional_delete_claimed: bool,
    /// Whether the server refused a stale conditional delete (`None`: not tested).
    pub conditional_delete_honoured: Option<bool>,
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
    pub warnings: Vec<String>,
    /// Whether the probe object was removed.
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
                "{}: conditional writes work; leases are safe here",
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
    ///   "conditional_delete": { "claimed": true, "honoured": true },
    ///   "clock": { "server_now": "2026-…Z", "local_now": "2026-…Z", "skew_ms": -120,
    ///              "last_modified_age_ms": 0, "resolution_ms": 1000, "store_clock_rule": true },
    ///   "warnings": [ "…" ], "cleaned_up": true }
    /// ```
    /// `skew_ms` is the store's clock minus this machine's; `honoured` is `null` when not tested.
    pub fn to_json(&self) -> serde_json::Value {
        let skew_ms = self
            .server_now
            .filter(|_| self.wall_clock)
            .map(|s| signed_ms(s, self.local_now));
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

/// Check the store; refuse it with an [`ErrorKind::Store`](crate::ErrorKind::Store) error if it does not honour the
/// conditions leases rely on. `prefix` is where the probe object goes (`""` for the top).
///
/// Errors reaching the store (permissions, missing bucket, unavailable) are returned as they
/// are, after removing the probe if one was written.
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
    crate::store::validate_key(&key)
        .map_err(|e| e.context(format!("doctor probe under prefix {prefix:?}")))?;
    let caps = store.capabilities();
    let mut d = Doctor {
        store: store.clone(),
        key,
        clock: clock.clone(),
        current: None,
        report: Report {
            store: store.url().to_string(),
            probe_key: String::new(),
            checks: Vec::new(),
            conditional_delete_claimed: caps.conditional_delete,
            conditional_delete_honoured: None,
            server_now: None,
            local_now: clock.wall(),
            last_modified_age: None,
            clock_resolution: caps.clock_resolution,
            store_clock_rule: caps.store_clock_rule,
            wall_clock: caps.wall_clock,
            warnings: Vec::new(),
            cleaned_up: false,
        },
    };
    d.report.probe_key = d.key.clone();
    let result = d.run().await;
    d.cleanup().await;
    match result {
        Ok(()) => Ok(d.report),
        Err(e) => {
            let mut e = e.context(format!("lease doctor on {}", store.url()));
            if !d.report.cleaned_up && d.current.is_some() {
                e = e.context(format!("(probe {} may be left behind)", d.key));
            }
            Err(e)
        }
    }
}

struct Doctor {
    store: DynStore,
    key: String,
    clock: Arc<dyn Clock>,
    /// The probe's version as far as the doctor knows (None: not written, or deleted).
    current: Option<Version>,
    report: Report,
}

impl Doctor {
    async fn timed<T>(
        &self,
        what: &str,
        f: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        tokio::select! {
            r = f => r,
            _ = self.clock.sleep(REQUEST_TIMEOUT) => Err(Error::unavailable(format!(
                "{what} of {} did not answer within {}s", self.key, REQUEST_TIMEOUT.as_secs()
            ))),
        }
    }

    async fn put(&self, body: &str, cond: Cond) -> Result<(Put, Duration)> {
        let start = self.clock.now();
        let put = self
            .timed(
                "a write",
                self.store
                    .put(&self.key, Bytes::from(body.to_string()), cond, &Meta::new()),
            )
            .await?;
        Ok((put, self.clock.now() - start))
    }

    async fn get(&self, if_none_match: Option<&Version>) -> Result<(Get, Duration)> {
        let start = self.clock.now();
        let opts = GetOptions {
            if_none_match,
            max_len: Some(64 * 1024),
        };
        let get = self
            .timed("a read", self.store.get(&self.key, opts))
            .await?;
        Ok((get, self.clock.now() - start))
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
        self.current = Some(v1.clone());
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
                self.current = Some(version);
                self.record(
                    "duplicate_create",
                    false,
                    "a second create of the same key succeeded: the store ignores \
                     If-None-Match: * (create-if-absent), so two clients could both acquire"
                        .into(),
                    t,
                );
            }
        }

        // 3. update on the current version
        let cur = self.current.clone().expect("written above");
        let (put, t) = self.put("lease doctor probe 3", Cond::Match(cur)).await?;
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
        self.current = Some(v3.clone());

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
                self.current = Some(version);
                self.record(
                    "stale_update",
                    false,
                    "a write conditioned on a replaced version succeeded: the store ignores \
                     If-Match, so a holder that lost its lease could overwrite the new holder"
                        .into(),
                    t,
                );
            }
        }
        let expected_body = if self.current.as_ref() == Some(&v3) {
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
        let same_version = Some(&obj.version) == self.current.as_ref();
        self.record(
            "read",
            same_body && same_version,
            if same_body && same_version {
                "read back what was written, at the version the write reported".into()
            } else {
                format!(
                    "read back {:?} at version {}, expected {expected_body:?} at {}",
                    obj.bytes.as_deref().map(String::from_utf8_lossy),
                    obj.version,
                    self.current.as_ref().map_or("?".into(), |v| v.to_string())
                )
            },
            t,
        );

        // 6. not modified
        let (get, t) = self.get(Some(&obj.version)).await?;
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
                    format!("a poll of an unchanged object answered {other:?} (a warning only)"),
                    t,
                );
            }
        }

        // 7. store clock
        self.report.server_now = obj.server_now;
        self.store_clock(obj.server_now, obj.last_modified);

        // 8. stale conditional delete
        let start = self.clock.now();
        let stale = self
            .timed("a delete", self.store.delete(&self.key, &v1))
            .await?;
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
                self.current = None;
                self.report.cleaned_up = true;
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
                        "the server ignores If-Match on delete (deleted a newer version); the \
                         store does not claim conditional deletes, so fenced deletes are not \
                         offered (leases never delete)"
                            .into(),
                        t,
                    );
                }
            }
        }
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

    /// Remove the probe: at the version the doctor knows, else at the version a read shows.
    async fn cleanup(&mut self) {
        if self.report.cleaned_up {
            self.record(
                "cleanup",
                true,
                "the probe is gone (removed by the stale delete)".into(),
                Duration::ZERO,
            );
            return;
        }
        let start = self.clock.now();
        let mut last_error = None;
        for _ in 0..3 {
            let version = match self.get(None).await {
                Ok((Get::Found(obj), _)) => obj.version,
                Ok((Get::NotFound { .. }, _)) => {
                    self.report.cleaned_up = true;
                    break;
                }
                Ok((Get::NotModified { .. }, _)) => continue,
                Err(e) => {
                    last_error = Some(e);
                    continue;
                }
            };
            match self
                .timed("a delete", self.store.delete(&self.key, &version))
                .await
            {
                Ok(Delete::Deleted) => {
                    self.report.cleaned_up = true;
                    self.current = None;
                    break;
                }
                Ok(Delete::ConditionFailed) => continue,
                Err(e) => last_error = Some(e),
            }
        }
        let t = self.clock.now() - start;
        if self.report.cleaned_up {
            self.record("cleanup", true, "the probe was deleted".into(), t);
        } else {
            let why = last_error.map_or("it kept changing".to_string(), |e| e.to_string());
            self.report.warnings.push(format!(
                "the probe {} could not be deleted: {why}",
                self.key
            ));
            // Not a failure of the store's semantics: a worker never needs to delete.
            self.record(
                "cleanup",
                true,
                format!("could not delete the probe ({why}); remove it by hand"),
                t,
            );
        }
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
        let names: Vec<&str> = report.checks.iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "create",
                "duplicate_create",
                "update",
                "stale_update",
                "read",
                "not_modified",
                "store_clock",
                "stale_delete",
                "cleanup"
            ]
        );
        let after = store
            .get(&report.probe_key, GetOptions::default())
            .await
            .unwrap();
        assert!(matches!(after, Get::NotFound { .. }));
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
        assert!(
            e.message().contains("duplicate_create") && e.message().contains("stale_update"),
            "{e}"
        );
        let report = inspect(&store, "").await.unwrap();
        assert!(!report.ok());
        assert_eq!(report.to_json()["conditional_delete"]["honoured"], false);
        assert!(report.cleaned_up);
    }
}
