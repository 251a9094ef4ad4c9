//! The machinery of one run: a store (with the S3 fault proxy in front of an S3 server), the
//! worker processes (Rust, `lease run`, Python, Node), and the fault injector, which does
//! what a scenario asks and logs each thing it does to `injector.log` beside the workers' logs.
//! Every process is killed when the run is dropped, on failure too.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lease::store::{Cond, Get, GetOptions, Meta};
use lease_systests::monotonic_ns;
use lease_systests::proxy::{Fault, FaultProxy, RandomFaults};
use serde_json::{json, Value};

pub const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The programs the workers run, found once.
pub struct Tools {
    pub lease_bin: PathBuf,
    pub worker_bin: PathBuf,
    pub python: PathBuf,
    pub node: PathBuf,
    /// The wall-clock step library (`tests/workers/wallstep.c`, built here).
    pub wallstep: PathBuf,
}

impl Tools {
    /// Everything the workers need, or a panic that says how to get it: the test is only built
    /// (`--features languages`) where these are meant to exist (scripts/test builds them first).
    pub fn find(scratch: &Path) -> Tools {
        let worker_bin = PathBuf::from(env!("CARGO_BIN_EXE_lease-queue-worker"));
        let lease_bin = std::env::var_os("LEASE_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| worker_bin.with_file_name("lease"));
        assert!(
            lease_bin.exists(),
            "no lease CLI at {lease_bin:?}: `cargo build -p lease-cli`, or set LEASE_BIN"
        );
        let python = std::env::var_os("LEASE_HISTORY_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(ROOT).join(".venv/python/bin/python"));
        let ok = Command::new(&python)
            .args(["-c", "import lease"])
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            ok,
            "{python:?} cannot `import lease`: run scripts/test-python.sh (or set \
             LEASE_HISTORY_PYTHON to a Python with the package installed)"
        );
        let node = PathBuf::from("node");
        let package = std::env::var_os("LEASE_NODE_PACKAGE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(ROOT).join("node"));
        let ok = Command::new(&node)
            .args(["-e", "require(process.argv[1])"])
            .arg(&package)
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            ok,
            "node cannot require {package:?}: run scripts/test-node.sh (it builds \
             node/lease.node), or set LEASE_NODE_PACKAGE"
        );
        let wallstep = scratch.join("libwallstep.so");
        let out = Command::new("cc")
            .args(["-O2", "-Wall", "-shared", "-fPIC", "-o"])
            .arg(&wallstep)
            .arg(PathBuf::from(ROOT).join("tests/workers/wallstep.c"))
            .arg("-ldl")
            .output()
            .expect("cc (a C compiler) is needed for the wall-clock steps");
        assert!(
            out.status.success(),
            "building wallstep.c: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let tools = Tools {
            lease_bin,
            worker_bin,
            python,
            node,
            wallstep,
        };
        tools.check_wallstep(scratch);
        tools
    }

    /// The step library moves the wall clock of a process (here `date`), and not its
    /// monotonic clock: else the clock steps of the run would prove nothing.
    fn check_wallstep(&self, scratch: &Path) {
        let file = scratch.join("check.wallstep");
        set_wall_offset(&file, 3_600_000_000_000);
        let out = Command::new("date")
            .arg("+%s")
            .env("LD_PRELOAD", &self.wallstep)
            .env("LEASE_WALLSTEP_FILE", &file)
            .output()
            .unwrap();
        let stepped: i64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert!(
            (stepped - now - 3600).abs() < 5,
            "the wall-clock step library did not step `date`: {stepped} vs {now}"
        );
    }
}

/// Set the wall-clock offset (nanoseconds) that the step library of the processes started with
/// `file` reads. The file is mapped by them, so it is created once and then only overwritten:
/// a truncating write would leave it empty for an instant, and a process reading its clock
/// then dies of SIGBUS (`a_clock_step_never_kills_the_process_it_steps`).
/// One aligned 8-byte `pwrite` at offset 0, which the page cache copies whole.
pub fn set_wall_offset(file: &Path, offset_ns: i64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(file)
        .unwrap();
    f.write_all_at(&offset_ns.to_le_bytes(), 0).unwrap();
}

/// Which language a worker is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    Rust,
    Cli,
    Python,
    Node,
}

/// A store for one run.
pub struct Store {
    pub name: &'static str,
    /// The store URL the injector uses (straight to the server), with a trailing path prefix
    /// unique to the run for S3.
    direct: String,
    /// The same through the fault proxy (S3), as the workers get it.
    proxied: String,
    pub resolution_ms: u64,
    pub poll_ms: u64,
    pub proxy: Option<FaultProxy>,
    pub rt: tokio::runtime::Runtime,
}

/// A lease URL for `key` in the store at `store_url` (which may carry `?options`).
pub fn lease_url(store_url: &str, key: &str) -> String {
    match store_url.split_once('?') {
        Some((base, query)) => format!("{}/{key}?{query}", base.trim_end_matches('/')),
        None => format!("{}/{key}", store_url.trim_end_matches('/')),
    }
}

impl Store {
    pub fn file(dir: &Path) -> Store {
        let base = format!("file://{}/locks", dir.display());
        Store {
            name: "file",
            direct: base.clone(),
            proxied: base,
            resolution_ms: 10,
            poll_ms: 100,
            proxy: None,
            rt: runtime(),
        }
    }

    /// An S3 server of scripts/stores.sh (`env` its store URL), behind a fault proxy.
    pub fn s3(name: &'static str, store_url: &str) -> Store {
        let rt = runtime();
        let upstream = lease_systests::proxy::endpoint_addr(store_url)
            .expect("an S3 store URL with endpoint=http://HOST:PORT");
        let proxy = rt.block_on(FaultProxy::start(upstream)).unwrap();
        let prefix = format!("queue-history/{}-{}", std::process::id(), monotonic_ns());
        let direct = lease_url(store_url, &prefix);
        let proxied = proxy.store_url(&direct);
        Store {
            name,
            direct,
            proxied,
            resolution_ms: 1000,
            // Moto is one Python process for every worker: poll it less often.
            poll_ms: 200,
            proxy: Some(proxy),
            rt,
        }
    }

    /// The URL of lock `lock`, as workers use it.
    pub fn url(&self, lock: &str) -> String {
        lease_url(&self.proxied, lock)
    }

    fn direct(&self, key: &str) -> (lease::store::DynStore, String) {
        let parsed = lease::LeaseUrl::parse(&lease_url(&self.direct, key)).unwrap();
        (parsed.store.open().unwrap(), parsed.key)
    }

    /// Lost and late replies, drawn at random for every request through the proxy from now
    /// on (`None`: none any more).
    pub fn net_faults(&self, seed: Option<u64>) {
        let Some(proxy) = &self.proxy else { return };
        proxy.set_random(seed.map(|seed| RandomFaults {
            seed,
            faults: vec![
                (Fault::DropReply, 0.01),
                (Fault::Delay(Duration::from_millis(1200)), 0.01),
                (Fault::DelayReply(Duration::from_millis(1200)), 0.01),
                (Fault::SLOW_DOWN, 0.01),
            ],
        }));
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A worker process. Dropping it kills it with everything it started.
pub struct Proc {
    pub name: String,
    pub lang: Lang,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Option<BufReader<ChildStdout>>,
    /// The file its wall-clock offset is read from.
    wallstep: Option<PathBuf>,
    /// Whether its end is told in the injector's log already: killed by the injector (kill -9,
    /// or at the run's deadline), or reported as died. Else an exit by a signal or with a
    /// failure is its own crash.
    end_told: bool,
}

impl Proc {
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Whether it still runs. Once it has exited (and been reaped) its pid may belong to
    /// someone else: it is never signalled again.
    fn alive(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_none()
    }

    /// Send `sig` to it and everything it started (children first listed, then itself).
    fn signal_all(&mut self, sig: i32) {
        if self.alive() {
            let mut all = descendants(self.pid());
            all.push(self.pid());
            for pid in all {
                signal(pid, sig);
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.signal_all(libc::SIGKILL);
        let _ = self.child.wait();
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) on a process of this test (or a finished one: harmless).
    unsafe { libc::kill(pid, sig) };
}

/// Every process below `pid` (by parent links in /proc), children first.
fn descendants(pid: i32) -> Vec<i32> {
    let mut parent: BTreeMap<i32, i32> = BTreeMap::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid …: comm may hold spaces, so read after its last ')'.
        if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
            if let Some(pp) = rest.split_whitespace().nth(1).and_then(|x| x.parse().ok()) {
                parent.insert(p, pp);
            }
        }
    }
    let mut out = vec![];
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        for (&c, &pp) in &parent {
            if pp == p {
                out.push(c);
                frontier.push(c);
            }
        }
    }
    out
}

/// One run on one store: its directory of logs, its processes, its injector.
pub struct Run {
    pub dir: PathBuf,
    pub store: Store,
    pub tools: Arc<Tools>,
    injector: Mutex<std::fs::File>,
    procs: Mutex<Vec<Proc>>,
    pub seed: u64,
    /// When the run began (CLOCK_MONOTONIC ns): reports count from here.
    pub origin_ns: u64,
    /// The round's start while it is closed ([`Run::gate_starts`], [`Run::go`]): a worker
    /// spawned then waits for this file before its first request.
    start_gate: Mutex<Option<PathBuf>>,
}

impl Run {
    pub fn new(dir: PathBuf, store: Store, tools: Arc<Tools>, seed: u64) -> Run {
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        let injector = std::fs::File::create(dir.join("logs/injector.log")).unwrap();
        let origin_ns = monotonic_ns();
        Run {
            origin_ns,
            dir,
            store,
            tools,
            injector: Mutex::new(injector),
            procs: Mutex::new(vec![]),
            seed,
            start_gate: Mutex::new(None),
        }
    }

    /// Close the round's start: the workers spawned from now until [`Run::go`] get ready (a
    /// first read of the store, which builds the client and opens a connection), log `ready`
    /// and wait. So their first waits measure the protocol, not 24 workers starting on two
    /// cores at once (seen in CI: lone first grants 1.5 to 1.7 s after the request, past
    /// the liveness bound's 1.5 s slack, the same scenario 0.3 to 1 s on a quieter machine).
    pub fn gate_starts(&self) {
        *self.start_gate.lock().unwrap() = Some(self.dir.join("go"));
    }

    /// Open the round's start once every worker spawned so far is ready (or gone) and no
    /// new one came for 100 ms, or when `limit` runs out; logged as the injector's `go`.
    /// Returns the workers that were not ready.
    pub fn go(&self, limit: Duration) -> Vec<String> {
        let end = Instant::now() + limit;
        let names = |run: &Run| -> Vec<String> {
            let procs = run.procs.lock().unwrap_or_else(|e| e.into_inner());
            procs.iter().map(|p| p.name.clone()).collect()
        };
        let not_ready = |run: &Run, names: &[String]| -> Vec<String> {
            names
                .iter()
                .filter(|n| run.count(n, "ready") == 0 && !run.exited(n))
                .cloned()
                .collect()
        };
        let mut seen = names(self);
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let now = names(self);
            let waiting = not_ready(self, &now);
            if (waiting.is_empty() && now == seen) || Instant::now() > end {
                let gate = self.start_gate.lock().unwrap().take();
                if let Some(gate) = gate {
                    std::fs::write(&gate, b"go\n").unwrap();
                }
                self.inject("go", json!({ "workers": now.len() }));
                return waiting;
            }
            seen = now;
        }
    }

    pub fn log_path(&self, name: &str) -> PathBuf {
        self.dir
            .join("logs")
            .join(format!("{}.log", name.replace('/', "_")))
    }

    /// Append an event to the injector's log.
    pub fn inject(&self, ev: &str, fields: Value) {
        self.inject_at(monotonic_ns(), ev, fields)
    }

    fn inject_at(&self, t: u64, ev: &str, fields: Value) {
        let mut v = json!({ "t": t, "w": "injector", "ev": ev });
        if let Value::Object(m) = fields {
            v.as_object_mut().unwrap().extend(m);
        }
        let mut f = self.injector.lock().unwrap();
        writeln!(f, "{v}").unwrap();
    }

    /// Start a worker: `spec` as tests/src/bin/queue-worker.rs reads it (its `url` and
    /// `lease_bin` filled in here). With `wallstep`, its wall clock can be stepped.
    pub fn spawn(&self, lang: Lang, spec: Value, wallstep: bool) -> String {
        let mut spec = spec;
        let name = spec["name"].as_str().unwrap().to_string();
        let lock = spec["lock"].as_str().unwrap().to_string();
        // The negative controls' workers reach the store directly: a random fault (a join
        // held up past the record's deletion, landing late) can keep their scenario from
        // making the overlap the checks must catch, and then "not caught" says nothing about
        // the checks (a cold run of 2026-11-27: control-deleted-record, seed 113104 on moto).
        spec["url"] = if crate::CONTROLS.contains(&lock.as_str()) {
            json!(lease_url(&self.store.direct, &lock))
        } else {
            json!(self.store.url(&lock))
        };
        spec["lease_bin"] = json!(self.tools.lease_bin);
        spec["poll_ms"] = json!(self.store.poll_ms);
        if let Some(gate) = &*self.start_gate.lock().unwrap() {
            spec["go"] = json!(gate);
        }
        let log = self.log_path(&name);
        let spec_text = spec.to_string();
        let t = &self.tools;
        let mut cmd = match lang {
            Lang::Rust | Lang::Cli => {
                let mut c = Command::new(&t.worker_bin);
                c.arg(if lang == Lang::Rust { "run" } else { "cli" });
                c
            }
            Lang::Python => {
                let mut c = Command::new(&t.python);
                c.arg(PathBuf::from(ROOT).join("tests/workers/queue_worker.py"));
                c
            }
            Lang::Node => {
                let mut c = Command::new(&t.node);
                c.arg(PathBuf::from(ROOT).join("tests/workers/queue-worker.js"));
                c
            }
        };
        cmd.arg(&log).arg(&spec_text);
        let step_file = wallstep.then(|| {
            let f = self
                .dir
                .join(format!("{}.wallstep", name.replace('/', "_")));
            set_wall_offset(&f, 0);
            cmd.env("LD_PRELOAD", &t.wallstep)
                .env("LEASE_WALLSTEP_FILE", &f);
            f
        });
        let stderr = std::fs::File::create(
            self.dir
                .join("logs")
                .join(format!("{}.stderr", name.replace('/', "_"))),
        )
        .unwrap();
        use std::os::unix::process::CommandExt;
        let mut child = cmd
            .env_remove("LEASE_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name} ({lang:?}): {e}"));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().map(BufReader::new);
        self.procs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Proc {
                name: name.clone(),
                lang,
                child,
                stdin,
                stdout,
                wallstep: step_file,
                end_told: false,
            });
        name
    }

    fn with_proc<T>(&self, name: &str, f: impl FnOnce(&mut Proc) -> T) -> T {
        let mut procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
        let p = procs
            .iter_mut()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no worker {name}"));
        f(p)
    }

    /// kill -9. A `lease run` worker: its driver, then `lease run` itself (whose watchdog
    /// then kills the command, as after a real kill -9 of `lease run`).
    pub fn kill(&self, name: &str) {
        self.with_proc(name, |p| {
            if !p.alive() {
                return;
            }
            let kids = descendants(p.pid());
            p.end_told = true;
            signal(p.pid(), libc::SIGKILL);
            if p.lang == Lang::Cli {
                for k in kids.iter().filter(|&&k| parent_of(k) == Some(p.pid())) {
                    signal(*k, libc::SIGKILL);
                }
            }
        });
        self.inject("kill", json!({ "target": name }));
    }

    /// SIGSTOP: a worker's process; for a `lease run` worker, `supervisor` stops `lease run`
    /// alone (its watchdog must kill the command) and `all` stops it with its watchdog and
    /// command.
    pub fn stop(&self, name: &str, what: &str) {
        self.with_proc(name, |p| {
            if !p.alive() {
                return;
            }
            let pids: Vec<i32> = match (p.lang, what) {
                (Lang::Cli, "supervisor") => descendants(p.pid())
                    .into_iter()
                    .filter(|&k| parent_of(k) == Some(p.pid()))
                    .collect(),
                _ => {
                    let mut all = descendants(p.pid());
                    all.push(p.pid());
                    all
                }
            };
            for pid in pids {
                signal(pid, libc::SIGSTOP);
            }
        });
        self.inject("stop", json!({ "target": name, "what": what }));
    }

    /// Send `sig` to a worker without a word in the injector's log: a crash, as the harness
    /// must find it by itself (its own test).
    pub fn crash(&self, name: &str, sig: i32) {
        self.with_proc(name, |p| signal(p.pid(), sig));
    }

    pub fn cont(&self, name: &str) {
        self.with_proc(name, |p| p.signal_all(libc::SIGCONT));
        self.inject("cont", json!({ "target": name }));
    }

    /// Step the wall clock of a worker started with `wallstep` (its total offset from now on).
    pub fn clock_step(&self, name: &str, offset_ms: i64) {
        self.with_proc(name, |p| {
            let f = p.wallstep.as_ref().expect("started without wallstep");
            set_wall_offset(f, offset_ms * 1_000_000);
        });
        self.inject("clock", json!({ "target": name, "offset_ms": offset_ms }));
    }

    /// The next line the worker printed (the zombie's `gate`), within `limit`.
    pub fn read_line(&self, name: &str, limit: Duration) -> Option<String> {
        let mut out = self.with_proc(name, |p| p.stdout.take())?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = out.read_line(&mut line);
            let _ = tx.send(line);
        });
        rx.recv_timeout(limit).ok().map(|l| l.trim().to_string())
    }

    pub fn write_line(&self, name: &str, line: &str) {
        self.with_proc(name, |p| {
            if let Some(i) = p.stdin.as_mut() {
                let _ = writeln!(i, "{line}");
            }
        });
    }

    /// How many `ev` events the worker has logged.
    pub fn count(&self, name: &str, ev: &str) -> usize {
        std::fs::read_to_string(self.log_path(name))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["ev"] == ev)
            .count()
    }

    /// Wait (at most `limit`) until the worker has logged `n` events `ev`.
    pub fn wait_for(&self, name: &str, ev: &str, n: usize, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if self.count(name, ev) >= n {
                return true;
            }
            if self.exited(name) {
                return self.count(name, ev) >= n;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn exited(&self, name: &str) -> bool {
        self.with_proc(name, |p| !p.alive())
    }

    /// Wait for these workers to finish, at most until `deadline`; a worker still running
    /// then is logged (`timeout`: it was left waiting, or hung) and killed.
    pub fn finish(&self, names: &[String], deadline: Instant) {
        for name in names {
            while !self.exited(name) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            if !self.exited(name) {
                self.inject("timeout", json!({ "target": name }));
                self.with_proc(name, |p| {
                    p.end_told = true;
                    p.signal_all(libc::SIGKILL)
                });
            }
        }
        // A worker that died of itself (a signal nobody sent, a failed exit) is a crash: the
        // checker reports it and judges it as killed at its last event. Before this, such a
        // death left a grant that simply stopped in the log, and the waiters behind it were
        // reported late behind someone else.
        for p in self
            .procs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter_mut()
        {
            if p.end_told {
                continue;
            }
            if let Ok(Some(status)) = p.child.try_wait() {
                if !status.success() {
                    p.end_told = true;
                    self.inject(
                        "died",
                        json!({ "target": p.name, "status": status.to_string() }),
                    );
                }
            }
        }
    }

    /// The lock's record, as JSON, with its version (S3 and file alike, read straight from
    /// the server).
    fn record(&self, lock: &str) -> Option<(Value, lease::store::Version)> {
        let (store, key) = self.store.direct(lock);
        match self
            .store
            .rt
            .block_on(store.get(&key, GetOptions::default()))
            .unwrap()
        {
            Get::Found(o) => {
                let v = serde_json::from_slice(o.bytes.as_deref()?).ok()?;
                Some((v, o.version))
            }
            _ => None,
        }
    }

    /// Delete the lock's record as a person or a lifecycle rule would: whatever it holds.
    /// (`Err`: why it could not, for the scenario's notes.)
    pub fn delete_record(&self, lock: &str) -> Result<(), String> {
        self.delete_object(lock)?;
        self.inject("delete-record", json!({ "lock": lock }));
        Ok(())
    }

    fn delete_object(&self, key_in_run: &str) -> Result<(), String> {
        let (store, key) = self.store.direct(key_in_run);
        for _ in 0..10 {
            let got = self
                .store
                .rt
                .block_on(store.get(&key, GetOptions::default()))
                .map_err(|e| e.to_string())?;
            let Get::Found(o) = got else {
                return Err(format!("{key} is not there"));
            };
            let deleted = self.store.rt.block_on(store.delete(&key, &o.version));
            if matches!(deleted, Ok(lease::store::Delete::Deleted)) {
                return Ok(());
            }
        }
        Err(format!("{key} kept changing"))
    }

    /// Delete the sessions of the participants labelled `labels` (holders or waiters), once
    /// every one of them is in the lock's record. The record lists only ids (format 2); who
    /// each participant is, its label too, is in its session (`LOCK.q/ID`). A waiter that logged
    /// its request may not have joined yet: under the run's network faults a join whose reply
    /// was lost waits for its timeout before it is resent. So this waits, bounded, until all of
    /// them show (`Err` if they do not within `JOINED`, with the record last seen).
    pub fn delete_sessions(&self, lock: &str, labels: &[&str]) -> Result<(), String> {
        const JOINED: Duration = Duration::from_secs(20);
        let deadline = Instant::now() + JOINED;
        let ids = loop {
            let (record, _) = self
                .record(lock)
                .ok_or_else(|| format!("{lock} has no queued lock's record"))?;
            let found: Vec<Option<String>> = labels
                .iter()
                .map(|label| self.session_of(lock, &record, label))
                .collect();
            if found.iter().all(Option::is_some) {
                break found.into_iter().flatten().collect::<Vec<_>>();
            }
            if Instant::now() >= deadline {
                let missing: Vec<&str> = labels
                    .iter()
                    .zip(&found)
                    .filter(|(_, id)| id.is_none())
                    .map(|(label, _)| *label)
                    .collect();
                return Err(format!(
                    "after {JOINED:?}, no session of {lock}'s record {record} is {missing:?}'s"
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        for (id, label) in ids.iter().zip(labels) {
            self.delete_object(&format!("{lock}.q/{id}"))?;
            self.inject(
                "delete-session",
                json!({ "lock": lock, "id": id, "of": label }),
            );
        }
        Ok(())
    }

    /// The id of the entry of `record` (granted or queued) whose session is `label`'s.
    fn session_of(&self, lock: &str, record: &Value, label: &str) -> Option<String> {
        ["grants", "queue"]
            .iter()
            .flat_map(|k| record[k].as_array().cloned().unwrap_or_default())
            .filter_map(|e| e["id"].as_str().map(str::to_string))
            .find(|id| {
                self.record(&format!("{lock}.q/{id}"))
                    .is_some_and(|(session, _)| session["holder"]["label"] == label)
            })
    }

    /// Rewrite the lock's record as a later version of the library could write it: a
    /// waiter with a mode this version does not know (issue 22 item 3).
    pub fn newer_format(&self, lock: &str) -> Result<(), String> {
        for _ in 0..20 {
            let (mut record, version) = self
                .record(lock)
                .ok_or_else(|| format!("{lock} has no queued lock's record"))?;
            let mut entry = record["grants"][0].clone();
            if entry.is_null() {
                return Err(format!("{lock} has no holder: {record}"));
            }
            // A participant of its own (a fresh id), in a mode this version does not know.
            entry["id"] = json!(format!("{:032x}", monotonic_ns()));
            entry["mode"] = json!("intent-exclusive");
            entry.as_object_mut().unwrap().remove("token");
            record["queue"].as_array_mut().unwrap().push(entry);
            record["rev"] = json!(record["rev"].as_u64().unwrap_or(0) + 1);
            let (store, key) = self.store.direct(lock);
            let put = self.store.rt.block_on(store.put(
                &key,
                bytes::Bytes::from(record.to_string()),
                Cond::Match(version),
                &Meta::default(),
            ));
            if matches!(put, Ok(lease::store::Put::Written { .. })) {
                self.inject("newer-format", json!({ "lock": lock }));
                return Ok(());
            }
        }
        Err(format!("{lock} kept changing"))
    }

    /// Copy the proxy's log of faults into the injector's.
    pub fn log_net_faults(&self) {
        let Some(proxy) = &self.store.proxy else {
            return;
        };
        for a in proxy.applied() {
            self.inject_at(
                a.t_ns,
                "net",
                json!({ "fault": a.fault.name(), "method": a.method, "key": a.target }),
            );
        }
    }
}

fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

impl Drop for Run {
    fn drop(&mut self) {
        // Kill every worker (and what it started) even when a scenario panicked.
        self.procs.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}
