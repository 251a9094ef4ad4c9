//! Histories of real processes holding queued locks and leases, and a checker for them
//! (Jepsen style): every worker appends what it did to its own log, the fault injector appends
//! what it did to its own, and [`check`] reads them all. Pure: no I/O but [`read_logs`].
//!
//! A log is JSON lines, one event each, on `CLOCK_MONOTONIC` (which every process of this
//! machine shares, and which neither a wall-clock step nor the `unshare --time --boottime` the
//! tests use moves): `{"t": NS, "w": WORKER, "ev": KIND, …}`. A worker's events:
//!
//! | `ev` | fields | meaning |
//! |---|---|---|
//! | `start` | `pid`, `lang`, `gated` | the process began; `gated`: every `act` follows a belief check |
//! | `request` | `lock`, `mode`, `scope`, `permits`, `ttl_ms`, `poll_ms` | it asks for a grant |
//! | `grant` | `token`, `queued` | the acquire returned: it holds (`queued`: a queued lock's grant, false for a plain lease) |
//! | `renewed` | `t_send` | its session (or lease) was renewed by a write sent at `t_send` |
//! | `act` | | it believed it held at `t` (gated: a belief check passed at `t`) |
//! | `read` | `key`, `value` or `error` | it read the data (`null`: absent) while holding; a failed read saw nothing |
//! | `write` | `key`, `value`, `outcome`, `sent`, `checked` | a fenced write, sent at `sent` |
//! | `end` | | its last belief before its release |
//! | `released` | `outcome` | its release returned (`ok`, or the error's kind) |
//! | `lost` | `reason` | a belief check failed: it stopped acting |
//! | `error` | `kind`, `message` | a request failed |
//! | `done` | | it finished its work |
//!
//! The injector's events (`w` = `injector`): `kill`, `stop` (`what`: `process`, `supervisor`
//! — a `lease run` without its command — or `all`), `cont`, each with a `target` worker;
//! `net` (`fault`, `method`, `key`) for each request the S3 proxy disturbed; `clock`
//! (`target`, `offset_ms`) for a wall-clock step; `delete-record` (`lock`), `delete-session`
//! (`lock`, `id`), `newer-format` (`lock`); `timeout` (`target`) for a worker still running
//! when the run's time was up.

mod check;
mod model;

pub use check::{check, Config, Report, Violation};
pub use model::{Event, Kind, Mode, Scope};

/// Parse the JSON-lines logs in `texts` (one per process), in any order.
pub fn parse_logs<'a>(texts: impl IntoIterator<Item = &'a str>) -> Result<Vec<Event>, String> {
    let mut events = vec![];
    for text in texts {
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            // A process killed mid-write may leave a torn last line: only the last may be.
            match Event::parse(line) {
                Ok(e) => events.push(e),
                Err(e) if n + 1 == text.lines().count() => {
                    eprintln!("history: ignoring a torn last line {line:?}: {e}")
                }
                Err(e) => return Err(format!("line {} {line:?}: {e}", n + 1)),
            }
        }
    }
    Ok(events)
}

/// Read every `*.log` file in `dir`.
pub fn read_logs(dir: &std::path::Path) -> Result<Vec<Event>, String> {
    let mut texts = vec![];
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|x| x == "log") {
            texts.push(std::fs::read_to_string(&path).map_err(|e| format!("{path:?}: {e}"))?);
        }
    }
    parse_logs(texts.iter().map(String::as_str))
}

#[cfg(test)]
mod tests;
