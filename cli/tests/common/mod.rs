//! What the `lease` command's tests share: a private default store per test and bounded waits.
//! Each test file is its own crate and uses a part of this, hence the `dead_code` allowance.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn lease_bin() -> &'static str {
    env!("CARGO_BIN_EXE_lease")
}

/// A private default store (LEASE_HOME) for one test.
pub struct Env {
    pub home: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Env {
        Env {
            home: tempfile::tempdir().unwrap(),
        }
    }

    /// `lease ARGS` on this test's store, without the caller's LEASE_LOG.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(lease_bin());
        c.args(args)
            .env("LEASE_HOME", self.home.path())
            .env_remove("LEASE_LOG");
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    pub fn spawn(&self, args: &[&str]) -> Child {
        self.cmd(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.home.path().join(name)
    }

    pub fn status_json(&self, lease: &str) -> serde_json::Value {
        let out = self.run(&["status", lease, "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Wait (at most a minute) until `path` exists.
pub fn wait_for(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
