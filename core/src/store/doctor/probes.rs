//! Single-request probes beyond the main sequence: a missing key, the store's clock, and the
//! cleanup of every probe written.

use std::time::{Duration, SystemTime};

use crate::error::Result;
use crate::store::{Cond, Delete, Get, Put, Version};

use super::report::signed_ms;
use super::{Doctor, MAX_STORE_CLOCK_SKEW, SKEW_WARNING};

impl Doctor {
    /// Reads, writes and deletes of a key that does not exist.
    pub(super) async fn missing_key(&mut self, some_version: &Version) -> Result<()> {
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

    /// The store's clock: `server_now` (`Date`) of a read of the object last written by a
    /// write sent `since_write` ago (on our clock), and its `last_modified`. The store stamped
    /// that write after it was sent, so an honest `Date` is at most `since_write` (plus the
    /// resolution, and the spread of the store's clocks) after `Last-Modified`, and never
    /// before it by more than the resolution.
    pub(super) fn store_clock(
        &mut self,
        server_now: Option<SystemTime>,
        modified: Option<SystemTime>,
        since_write: Duration,
    ) {
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
                let behind = age_ms < 0 && age_ms.unsigned_abs() > res.as_millis() as u64;
                let allowed = since_write + res + MAX_STORE_CLOCK_SKEW;
                let ahead = age_ms > allowed.as_millis() as i64;
                if ahead {
                    // Unsafe for clients that trust Date (lease before issue 29's fix), slow for
                    // this one: every takeover by the store's clock needs the store's own stamp.
                    (
                        !rule,
                        format!(
                            "the store's Date is {} s ahead of its own clock: a write stamped \
                             Last-Modified {} ms before the Date of a read answered {} ms after \
                             the write was sent. A gateway or proxy in front of the store sets its \
                             own Date (nginx does by default: add `proxy_pass_header Date;`), or \
                             its clock runs ahead. This version of lease confirms takeovers by the \
                             store's own stamp, but clients that trust Date (lease before 0.2) can \
                             take a live lease{}",
                            (age_ms - since_write.as_millis() as i64) / 1000,
                            age_ms,
                            since_write.as_millis(),
                            if rule {
                                "; fix the gateway, or set store_clock_rule=false everywhere"
                            } else {
                                " (the store-clock rule is off here)"
                            }
                        ),
                    )
                } else if behind {
                    (
                        !rule,
                        format!(
                            "Last-Modified of a just-written object is {} ms after the store's \
                             Date: the store's clocks disagree (or a gateway in front of it sets \
                             a Date that runs behind){}",
                            -age_ms,
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
    pub(super) async fn cleanup(&mut self) {
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

pub(super) fn describe_get(g: &Get) -> String {
    match g {
        Get::Found(o) => format!("an object (version {}, {} bytes)", o.version, o.size),
        Get::NotModified { .. } => "'not modified'".into(),
        Get::NotFound { .. } => "'not found'".into(),
    }
}
