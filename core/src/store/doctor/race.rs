//! The races: many contenders write one key at once; exactly one may win each round.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::error::{Error, ErrorKind, Result};
use crate::store::{Cond, Get, Meta, Put, Version};

use super::report::Race;
use super::{Doctor, Outcome, RACE, ROUNDS};

impl Doctor {
    /// Start `RACE` writes of `key` together; each gets `cond` and writes `{tag} {i}`. Tags
    /// differ from round to round: a server whose ETag is a hash of the bytes (MD5 on S3) would
    /// give a repeated body a repeated ETag, and a stale `If-Match` would rightly succeed.
    pub(super) async fn race(
        &mut self,
        key: &str,
        tag: &str,
        cond: Cond,
    ) -> Result<(Vec<Outcome>, Duration)> {
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
    pub(super) async fn judge(
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
    pub(super) fn record_race(
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

    pub(super) async fn create_race(&mut self) -> Result<()> {
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

    pub(super) async fn match_race(&mut self) -> Result<()> {
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
}
