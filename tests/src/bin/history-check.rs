//! Check a directory of history logs (`*.log`: the workers' and the injector's) by hand.
//!
//! ```text
//! lease-history-check DIR [--resolution-ms N] [--slack-ms N] [--allow TEXT]…
//! ```
//! Prints the report (`lease_systests::history`); exits 1 if it found a violation.

use lease_systests::history::{check, read_logs, Config};

fn usage() -> ! {
    eprintln!("usage: lease-history-check DIR [--resolution-ms N] [--slack-ms N] [--allow TEXT]…");
    std::process::exit(64)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = args.first().unwrap_or_else(|| usage());
    let mut cfg = Config::default();
    let mut i = 1;
    while i < args.len() {
        let value = args.get(i + 1).unwrap_or_else(|| usage());
        match args[i].as_str() {
            "--resolution-ms" => cfg.resolution_ms = value.parse().unwrap_or_else(|_| usage()),
            "--slack-ms" => cfg.slack_ms = value.parse().unwrap_or_else(|_| usage()),
            "--allow" => cfg.allowed_errors.push(value.clone()),
            _ => usage(),
        }
        i += 2;
    }
    let events = read_logs(std::path::Path::new(dir)).unwrap_or_else(|e| {
        eprintln!("lease-history-check: {e}");
        std::process::exit(2)
    });
    let report = check(events, &cfg);
    print!("{report}");
    std::process::exit(i32::from(!report.ok()))
}
