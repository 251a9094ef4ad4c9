//! `lease status`, `lease watch`, `lease break`.

use std::time::Duration;

use lease::clock::{Clock, SystemClock};
use lease::protocol::queue::MAX_BYPASS;
use lease::{format_duration, BreakMode, Client, LeaseState, Participant, QueueStatus, Status};

use crate::exit::{self, Exit};

fn human(s: &Status) -> String {
    let mut out = format!("lease:      {}\nstate:      {}\n", s.url, s.state);
    if let Some(q) = &s.queue {
        // Each holder with its own token, ttl and mode (`queue_lines`): a single `holder:` line
        // beside the lock's latest token named one of several holders, with another's token.
        if let Some(e) = s.epoch {
            out += &format!("epoch:      {e} (the latest token handed out)\n");
        }
        return out + &queue_lines(q);
    }
    if let Some(e) = s.epoch {
        out += &format!("epoch:      {e}\n");
    }
    if let Some(p) = &s.preempted {
        out += &format!(
            "preempted:  {} at epoch {} (taken while live: it may still believe it holds until \
             its next renewal)\n",
            p.id, p.epoch
        );
    }
    if let Some(h) = &s.holder {
        let who = if s.state == LeaseState::Released {
            "last holder"
        } else {
            "holder"
        };
        // At least one space after the colon: "last holder" fills the column.
        let pad = " ".repeat(11usize.saturating_sub(who.len()).max(1));
        out += &format!("{who}:{pad}{}\n", h.describe());
    }
    if let Some(t) = s.ttl {
        out += &format!("ttl:        {}\n", format_duration(t));
    }
    if let Some(t) = s.expires_in {
        out += &format!(
            "free in:    {} at the latest, unless renewed (by the store's clock)\n",
            format_duration(t)
        );
    }
    if let Some(d) = &s.data {
        out += &format!("data:       {d}\n");
    }
    if let Some(d) = &s.detail {
        out += &format!("detail:     {d}\n");
    }
    if matches!(
        s.state,
        LeaseState::Held | LeaseState::Broken | LeaseState::Expired
    ) {
        // Waiters on a plain lease only read: nothing records them.
        out += "waiters:    not recorded for a plain lease (a queued lock, `lease run --queue`, \
                lists them in order)\n";
    }
    out
}

/// A waiter's priority and how often it was passed over, where either is not the default:
/// `, priority 5, passed over 3 times (due at 8)`, or `, due` once it goes next whatever the
/// priorities (docs/protocol.md §10, "Priorities").
fn standing(w: &Participant) -> String {
    let mut out = String::new();
    if w.priority != 0 {
        out += &format!(", priority {}", w.priority);
    }
    if w.passed >= MAX_BYPASS {
        out += ", due";
    } else if w.passed > 0 {
        out += &format!(
            ", passed over {} time{} (due at {MAX_BYPASS})",
            w.passed,
            if w.passed == 1 { "" } else { "s" }
        );
    }
    out
}

/// A queued lock's holders (with their tokens), the grants on their way out, and its waiters,
/// in the order they will go.
fn queue_lines(q: &QueueStatus) -> String {
    let mut out = String::new();
    if let Some(n) = q.permits {
        out += &format!(
            "permits:    {n} ({} in use)\n",
            q.holders.len() + q.departing.len()
        );
    }
    out += &format!("holders:    {}\n", q.holders.len());
    for g in &q.holders {
        out += &format!(
            "  token {}  {}\n",
            g.token.unwrap_or_default(),
            g.describe()
        );
    }
    if !q.departing.is_empty() {
        out += &format!(
            "departing:  {} (their sessions ended; the waiters remove them)\n",
            q.departing.len()
        );
        for g in &q.departing {
            out += &format!(
                "  token {}  {}, session {}\n",
                g.token.unwrap_or_default(),
                g.describe(),
                g.session.as_str()
            );
        }
    }
    out += &format!("waiting:    {}\n", q.waiting.len());
    for (i, w) in q.waiting.iter().enumerate() {
        let session = if w.session.is_live() {
            String::new()
        } else {
            format!(", session {}", w.session.as_str())
        };
        out += &format!("  {}. {}{session}{}\n", i + 1, w.describe(), standing(w));
    }
    out
}

fn one_line(s: &Status) -> String {
    let mut line = format!(
        "{} {}",
        lease::record::timestamp(SystemClock.wall()),
        s.state
    );
    if let Some(e) = s.epoch {
        line += &format!(" epoch {e}");
    }
    if let Some(h) = &s.holder {
        line += &format!(
            " {} {}",
            if s.state == LeaseState::Held {
                "by"
            } else {
                "last held by"
            },
            h.describe()
        );
    }
    line
}

/// The tenures before the current one, most recent first: one line each.
fn history_lines(s: &Status) -> String {
    let mut out = format!("history:    {} earlier tenures\n", s.history.len());
    for t in &s.history {
        let by =
            t.by.as_deref()
                .map(|b| format!(" by {b}"))
                .unwrap_or_default();
        out += &format!(
            "  epoch {}  {}  {} .. {}  {}{by}\n",
            t.epoch,
            t.holder.describe(),
            t.acquired_at.as_deref().unwrap_or("?"),
            t.ended_at.as_deref().unwrap_or("?"),
            t.end,
        );
    }
    out
}

pub async fn status(url: &str, json: bool, history: bool) -> Result<Exit, Exit> {
    let (client, key) = Client::for_url(url)?;
    let s = client.status(&key).await?;
    if json {
        println!("{}", s.to_json());
    } else {
        print!("{}", human(&s));
        if history {
            print!("{}", history_lines(&s));
        }
    }
    Ok(Exit::ok())
}

/// A `lease watch --json` line: the status's keys, plus `reason` (what changed,
/// [`Status::transition`]) and `time` (when this watcher saw it, RFC 3339).
fn watch_json(s: &Status, before: Option<&Status>) -> serde_json::Value {
    let mut v = s.to_json();
    v["reason"] = s.transition(before).into();
    v["time"] = lease::record::timestamp(SystemClock.wall()).into();
    v
}

pub async fn watch(url: &str, json: bool, poll: Duration) -> Result<Exit, Exit> {
    let (client, key) = Client::for_url(url)?;
    let mut watcher = client.watch(&key, poll)?;
    let interrupted = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    tokio::pin!(interrupted);
    let mut before: Option<Status> = None;
    loop {
        tokio::select! {
            s = watcher.next() => {
                let s = s?;
                if json {
                    println!("{}", watch_json(&s, before.as_ref()));
                    before = Some(s);
                } else {
                    println!("{}", one_line(&s));
                }
            }
            _ = &mut interrupted => return Ok(Exit::ok()),
        }
    }
}

pub async fn break_lease(url: &str, yes: bool, allow_two_holders: bool) -> Result<Exit, Exit> {
    if !yes {
        return Err(Exit::fail(
            exit::USAGE,
            format!("refusing to break {url} without --yes: its holder will lose the lease at its next renewal"),
        ));
    }
    let (client, key) = Client::for_url(url)?;
    // The user as records name it ($USER, else the uid's name or number: not "unknown" where
    // $USER is unset); the breaker's host and pid are in its holder record, which messages show.
    let mut who = "lease break".to_string();
    if let Some(user) = lease::current_user() {
        who += &format!(" by {user}");
    }
    let mode = if allow_two_holders {
        BreakMode::AllowTwoHolders
    } else {
        BreakMode::WaitOutHolder
    };
    let lease_url = client.lease_url(&key);
    let before = client.break_lease(&key, Some(who), mode).await?;
    // What it looks like now: the epoch the break wrote, or the lock's grants on their way out.
    let after = client.status(&key).await.ok();
    let now_at = after
        .as_ref()
        .and_then(|s| s.epoch)
        .map_or_else(|| "?".to_string(), |e| e.to_string());
    match before {
        Some(before) if before.queue.is_some() => {
            let q = before.queue.as_ref().expect("a queued lock");
            let broken: Vec<String> = q
                .holders
                .iter()
                .chain(&q.departing)
                .map(|g| format!("{} token {}", g.describe(), g.token.unwrap_or_default()))
                .collect();
            let next = if allow_two_holders {
                "the waiters may go on at once (the broken holders may still believe they hold \
                 for up to their ttl)"
            } else {
                "each stops at its next renewal, and the waiters go on once it lets go, or at \
                 the latest when its ttl and grace have passed"
            };
            println!(
                "broke the grants of {lease_url}: {}; {next}; the lock's tokens are at {now_at}: \
                 the next grant gets a higher one",
                broken.join(", ")
            );
        }
        Some(before) if before.state == LeaseState::Broken && !allow_two_holders => {
            println!(
                "{lease_url} is already broken; it is free once its holder lets go or in {}",
                before.expires_in.map_or("?".into(), format_duration)
            );
        }
        Some(before) => {
            let by = before.holder.as_ref().map_or_else(
                || "an unknown holder (corrupt record)".to_string(),
                |h| h.describe(),
            );
            let epoch = before
                .epoch
                .map_or_else(|| "?".to_string(), |e| e.to_string());
            if allow_two_holders {
                println!(
                    "broke {lease_url}: it was held by {by} at epoch {epoch}; it is now released \
                     at epoch {now_at} (the broken holder may still believe it holds for up to \
                     its ttl)"
                );
            } else {
                println!(
                    "broke {lease_url}: it was held by {by} at epoch {epoch}; it is now at epoch \
                     {now_at}, held for the break; the next holder may start when that holder \
                     lets go, or at the latest when its ttl and grace have passed"
                );
            }
        }
        None => println!("{lease_url} is not held; nothing to break"),
    }
    Ok(Exit::ok())
}

/// `lease permits URL N|none`.
pub async fn set_permits(url: &str, permits: &str) -> Result<Exit, Exit> {
    let permits = match permits {
        "none" => None,
        n => Some(n.parse::<u32>().map_err(|_| {
            Exit::fail(
                exit::USAGE,
                format!("permits {n:?} is not a number: give a number of permits, or `none`"),
            )
        })?),
    };
    let (client, key) = Client::for_url(url)?;
    let before = client.set_permits(&key, permits).await?;
    let show = |p: Option<u32>| p.map_or_else(|| "no limit".to_string(), |n| n.to_string());
    println!(
        "{}: permits {} (were {}); requests must now ask for {} or for no number",
        client.lease_url(&key),
        show(permits),
        show(before),
        show(permits)
    );
    Ok(Exit::ok())
}

/// `lease yield`: ask the holders of a queued lock, or a plain lease's holder, to step aside.
pub async fn ask_yield(
    url: &str,
    to: Option<String>,
    reason: Option<String>,
) -> Result<Exit, Exit> {
    let (client, key) = Client::for_url(url)?;
    let by = lease::asker_name();
    let ask = lease::YieldAsk {
        by,
        to: to.clone(),
        reason,
    };
    let url = client.lease_url(&key);
    match client.ask_yield(&key, ask).await? {
        Some(request) => {
            let tokens: Vec<String> = request.tokens.iter().map(u64::to_string).collect();
            println!(
                "{url}: asked the holder{} with token{} {} to yield{}; they learn it at their \
                 next renewal and release when they choose",
                if tokens.len() == 1 { "" } else { "s" },
                if tokens.len() == 1 { "" } else { "s" },
                tokens.join(", "),
                to.map(|t| format!(", handing over to {t}"))
                    .unwrap_or_default()
            );
            Ok(Exit::ok())
        }
        None => Err(Exit::fail(
            exit::USAGE,
            format!(
                "{url}: nothing to ask: nobody holds anything in the way{}",
                to.map(|t| format!(" of {t}")).unwrap_or_default()
            ),
        )),
    }
}

/// Probes go under the URL's own path (`s3://bucket/locks` → `locks/PREFIX/…`): a user may be
/// allowed only there.
async fn doctor_report(url: &str, prefix: &str) -> lease::Result<lease::doctor::Report> {
    let (store, path) = lease::StoreUrl::parse_with_path(url)?;
    let store = store.open()?;
    let prefix = prefix.trim_matches('/');
    let under = match (path.is_empty(), prefix.is_empty()) {
        (true, _) => prefix.to_string(),
        (false, true) => path,
        (false, false) => format!("{path}/{prefix}"),
    };
    lease::doctor::inspect(&store, &under).await
}

pub async fn doctor(url: &str, prefix: &str, json: bool) -> Result<Exit, Exit> {
    let report = match doctor_report(url, prefix).await {
        Ok(report) => report,
        Err(e) => {
            // --json prints a result in every case: scripts read stdout, not stderr.
            if json {
                let failed = serde_json::json!({
                    "ok": false,
                    "verdict": e.to_string(),
                    "store": url,
                    "error": { "kind": e.kind().to_string(), "message": e.to_string() },
                    "checks": [],
                });
                println!("{failed}");
            }
            return Err(exit::from_error(&e));
        }
    };
    if json {
        println!("{}", report.to_json());
    } else {
        for c in &report.checks {
            println!(
                "{} {:<17} {}",
                if c.ok { "ok  " } else { "FAIL" },
                c.name,
                c.detail
            );
        }
        for w in &report.warnings {
            println!("warn {w}");
        }
        if !report.min_write_interval.is_zero() {
            println!(
                "note this store takes about one write per {} per object: keep the renew \
                 interval (ttl/3 by default) at least that long",
                lease::format_duration(report.min_write_interval)
            );
        }
    }
    if report.ok() {
        if !json {
            println!("{}", report.verdict());
        }
        Ok(Exit::ok())
    } else {
        Err(Exit::fail(exit::STORE, report.verdict()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(priority: i32, passed: u32) -> Participant {
        Participant {
            holder: lease::Holder::default(),
            mode: lease::Mode::Exclusive,
            scope: lease::Scope::Whole,
            token: None,
            ttl: Duration::from_secs(30),
            since: None,
            data: None,
            session: lease::SessionState::Live,
            priority,
            passed,
        }
    }

    /// What `lease status` adds to a waiter's line: nothing for the defaults, its priority, how
    /// often it was passed over, and `due` once it goes next whatever the priorities.
    #[test]
    fn a_waiters_standing_is_shown_only_where_it_is_not_the_default() {
        assert_eq!(standing(&waiter(0, 0)), "");
        assert_eq!(standing(&waiter(-3, 0)), ", priority -3");
        assert_eq!(standing(&waiter(0, 1)), ", passed over 1 time (due at 8)");
        assert_eq!(
            standing(&waiter(2, MAX_BYPASS - 1)),
            ", priority 2, passed over 7 times (due at 8)"
        );
        assert_eq!(standing(&waiter(0, MAX_BYPASS)), ", due");
    }
}
