//! Time and randomness, injected.
//!
//! Every decision in the protocol reads time through a [`Clock`] and randomness through an
//! [`Rng`], so the protocol can be run in simulated time: hours of leases in milliseconds, with
//! deterministic interleavings (tokio's paused clock drives the simulation). This is the only
//! module allowed to read the real clocks; clippy's `disallowed-methods` enforces that.

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;

/// The monotonic instant type used everywhere (tokio's, so simulated time works).
pub use tokio::time::Instant;

/// This machine's time since boot, suspend included, with the boot and the time namespace it
/// belongs to: comparable between processes of one boot in one time namespace, immune to
/// wall-clock steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootTime {
    pub boot_id: Arc<str>,
    /// The Linux time namespace `since_boot` was read in (`time:[4026531834]`), or `-` on a
    /// kernel without time namespaces. Processes of one boot in different time namespaces
    /// (checkpoint-restore, `unshare --time`, some container runtimes) see `CLOCK_BOOTTIME`
    /// shifted by arbitrary offsets, so readings compare only within one namespace.
    pub time_namespace: Arc<str>,
    pub since_boot: Duration,
}

/// A source of monotonic time, wall-clock time and sleeping.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Monotonic time: the only time a holder trusts for its own deadline.
    fn now(&self) -> Instant;
    /// Wall-clock time: informational timestamps, and the "store clock" of local stores.
    fn wall(&self) -> SystemTime;
    /// Sleep until `deadline` on this clock's monotonic time line.
    fn sleep_until(&self, deadline: Instant) -> BoxFuture<'static, ()>;
    /// Sleep for `d`.
    fn sleep(&self, d: Duration) -> BoxFuture<'static, ()> {
        self.sleep_until(self.now() + d)
    }
    /// This machine's boot time, where the platform has one (local stores stamp writes with
    /// it; see `store::file`).
    fn boot_time(&self) -> Option<BootTime> {
        None
    }
}

/// The real clocks of this machine.
///
/// `now()` advances with `CLOCK_BOOTTIME`, which keeps counting while the system is suspended,
/// unlike `CLOCK_MONOTONIC` (what `std`'s and tokio's `Instant` read on Linux). A holder
/// suspended past its deadline therefore knows, the moment it resumes, that its lease is gone;
/// on `CLOCK_MONOTONIC` it would believe it still had the time left before the suspend. Sleeps
/// run on tokio's timer in slices of at most [`SLEEP_SLICE`], re-checking `now()`, so a
/// deadline that passed during a suspend is noticed within one slice of resuming.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

/// Longest single timer sleep of [`SystemClock`].
pub const SLEEP_SLICE: Duration = Duration::from_secs(1);

/// `CLOCK_BOOTTIME` (Linux; `CLOCK_MONOTONIC` elsewhere).
fn boottime() -> Duration {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    const CLOCK: libc::clockid_t = libc::CLOCK_BOOTTIME;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec for clock_gettime to fill; the clock id is valid.
    unsafe { libc::clock_gettime(CLOCK, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The boot id, read once (Linux; `None` elsewhere).
fn boot_id() -> Option<Arc<str>> {
    static ID: OnceLock<Option<Arc<str>>> = OnceLock::new();
    ID.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .map(Arc::from)
    })
    .clone()
}

/// The time namespace of this process, read on every call: a process can be restored by CRIU
/// into a new one, or join another with `setns(2)`, so a cached value could name a namespace
/// whose clock it no longer reads. `-` when the kernel has no time namespaces (before Linux
/// 5.6, or built without them): then every process of the boot reads one `CLOCK_BOOTTIME`.
/// `None` when it cannot be told (no `/proc`): the boot clock is then not used at all.
fn time_namespace() -> Option<Arc<str>> {
    match std::fs::read_link("/proc/self/ns/time") {
        Ok(link) => Some(Arc::from(link.to_string_lossy().as_ref())),
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                && std::fs::symlink_metadata("/proc/self/ns/mnt").is_ok() =>
        {
            Some(Arc::from("-"))
        }
        Err(_) => None,
    }
}

/// A tokio instant and the boot time at the same moment: maps one time line onto the other.
#[allow(clippy::disallowed_methods)]
fn anchor() -> (Instant, Duration) {
    static ANCHOR: OnceLock<(Instant, Duration)> = OnceLock::new();
    *ANCHOR.get_or_init(|| (Instant::now(), boottime()))
}

#[allow(clippy::disallowed_methods)]
impl Clock for SystemClock {
    fn now(&self) -> Instant {
        let (at, boot) = anchor();
        at + boottime().saturating_sub(boot)
    }
    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }
    fn sleep_until(&self, deadline: Instant) -> BoxFuture<'static, ()> {
        let clock = *self;
        Box::pin(async move {
            loop {
                let left = deadline.saturating_duration_since(clock.now());
                if left.is_zero() {
                    return;
                }
                tokio::time::sleep(left.min(SLEEP_SLICE)).await;
            }
        })
    }
    fn boot_time(&self) -> Option<BootTime> {
        Some(BootTime {
            boot_id: boot_id()?,
            time_namespace: time_namespace()?,
            since_boot: boottime(),
        })
    }
}

/// A simulated clock for tests, driven by tokio's paused time
/// (`#[tokio::test(start_paused = true)]`).
///
/// Each `SimClock` can run at its own rate (to model clock-rate drift between machines) and have
/// its wall clock stepped (to model NTP steps or a resumed VM), so the protocol's margins can be
/// tested deliberately.
pub struct SimClock {
    origin: Instant,
    origin_wall: SystemTime,
    /// Rate of this clock relative to the simulation's true time, in parts per million.
    rate_ppm: u64,
    wall_offset_ms: Mutex<i64>,
}

impl fmt::Debug for SimClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimClock")
            .field("rate_ppm", &self.rate_ppm)
            .field("wall_offset_ms", &*self.wall_offset_ms.lock().unwrap())
            .finish()
    }
}

impl SimClock {
    /// A clock whose wall time starts at `origin_wall` now and runs at the true rate.
    #[allow(clippy::disallowed_methods)]
    pub fn new(origin_wall: SystemTime) -> Self {
        SimClock {
            origin: Instant::now(),
            origin_wall,
            rate_ppm: 1_000_000,
            wall_offset_ms: Mutex::new(0),
        }
    }

    /// A clock at a fixed, recognisable wall time (2026-01-01T00:00:00Z).
    pub fn at_2026() -> Self {
        SimClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600))
    }

    /// The same clock running at `rate` times true speed (1.05 = 5% fast).
    pub fn with_rate(mut self, rate: f64) -> Self {
        assert!(rate > 0.0, "clock rate must be positive");
        self.rate_ppm = (rate * 1_000_000.0).round() as u64;
        self
    }

    /// Step the wall clock by `delta_ms` (negative steps back), as NTP or a resumed VM would.
    pub fn step_wall(&self, delta_ms: i64) {
        *self.wall_offset_ms.lock().unwrap() += delta_ms;
    }

    #[allow(clippy::disallowed_methods)]
    fn true_elapsed(&self) -> Duration {
        Instant::now().saturating_duration_since(self.origin)
    }

    fn scale(&self, d: Duration) -> Duration {
        Duration::from_nanos((d.as_nanos() * self.rate_ppm as u128 / 1_000_000) as u64)
    }

    fn unscale(&self, d: Duration) -> Duration {
        Duration::from_nanos((d.as_nanos() * 1_000_000 / self.rate_ppm as u128) as u64)
    }
}

#[allow(clippy::disallowed_methods)]
impl Clock for SimClock {
    fn now(&self) -> Instant {
        self.origin + self.scale(self.true_elapsed())
    }

    fn wall(&self) -> SystemTime {
        let base = self.origin_wall + self.scale(self.true_elapsed());
        let offset = *self.wall_offset_ms.lock().unwrap();
        if offset >= 0 {
            base + Duration::from_millis(offset as u64)
        } else {
            base - Duration::from_millis(offset.unsigned_abs())
        }
    }

    fn sleep_until(&self, deadline: Instant) -> BoxFuture<'static, ()> {
        // Convert a deadline on this clock's time line into the simulation's true time line.
        let local = deadline.saturating_duration_since(self.origin);
        Box::pin(tokio::time::sleep_until(self.origin + self.unscale(local)))
    }
}

/// A small, fast pseudo-random generator (SplitMix64), seeded from the OS or by a test.
///
/// Used for holder ids, write nonces, temporary file names and jitter; holder ids take 128
/// bits from it. A generator seeded from entropy reseeds itself when it finds itself in a new
/// process: after `fork()` every child would otherwise continue from its parent's state and
/// draw the same "random" holder ids as its siblings, and two holders with one id defeat the
/// read-back that tells whose write landed.
#[derive(Debug)]
pub struct Rng {
    state: AtomicU64,
    /// The process the state belongs to; 0 for a deterministic (test) generator.
    owner: AtomicU32,
}

fn entropy_seed() -> u64 {
    let mut seed = [0u8; 8];
    // getrandom only fails on exotic platforms; fall back to the address of a local and the
    // process id, which still differ between processes.
    if getrandom::fill(&mut seed).is_err() {
        let local = 0u8;
        let mix = (&local as *const u8 as u64) ^ ((std::process::id() as u64) << 32);
        seed = mix.to_le_bytes();
    }
    u64::from_le_bytes(seed)
}

impl Rng {
    /// Seeded from the operating system's entropy, and again in every forked child.
    pub fn from_entropy() -> Self {
        Rng {
            state: AtomicU64::new(entropy_seed()),
            owner: AtomicU32::new(std::process::id()),
        }
    }

    /// Deterministic, for tests.
    pub fn seeded(seed: u64) -> Self {
        Rng {
            state: AtomicU64::new(seed),
            owner: AtomicU32::new(0),
        }
    }

    pub fn next_u64(&self) -> u64 {
        let owner = self.owner.load(Ordering::Relaxed);
        if owner != 0 {
            let pid = std::process::id();
            if pid != owner
                && self
                    .owner
                    .compare_exchange(owner, pid, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                self.state.store(entropy_seed(), Ordering::Relaxed);
            }
        }
        let mut z = self
            .state
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniformly distributed fraction in [0, 1).
    pub fn fraction(&self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `d` scaled by a random factor in [1 - spread, 1 + spread].
    pub fn jitter(&self, d: Duration, spread: f64) -> Duration {
        let factor = 1.0 - spread + 2.0 * spread * self.fraction();
        d.mul_f64(factor.max(0.0))
    }

    /// 128 random bits as 32 hex digits: an id that is unique per acquisition.
    pub fn hex_id(&self) -> String {
        format!("{:016x}{:016x}", self.next_u64(), self.next_u64())
    }

    /// 64 random bits as 16 hex digits: a nonce that tells one write from another.
    pub fn nonce(&self) -> String {
        format!("{:016x}", self.next_u64())
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn sim_clock_follows_paused_time_and_rate() {
        let fast = SimClock::at_2026().with_rate(2.0);
        let normal = SimClock::at_2026();
        let t0 = normal.now();
        let w0 = normal.wall();
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(normal.now() - t0, Duration::from_secs(10));
        assert_eq!(
            normal.wall().duration_since(w0).unwrap(),
            Duration::from_secs(10)
        );
        // The fast clock's sleep of 20 s of its own time takes 10 s of true time.
        let f0 = fast.now();
        let n0 = normal.now();
        fast.sleep(Duration::from_secs(20)).await;
        assert_eq!(fast.now() - f0, Duration::from_secs(20));
        assert_eq!(normal.now() - n0, Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn sim_clock_wall_steps() {
        let c = SimClock::at_2026();
        let w0 = c.wall();
        c.step_wall(-5_000);
        assert_eq!(w0.duration_since(c.wall()).unwrap(), Duration::from_secs(5));
    }

    #[tokio::test]
    async fn system_clock_sleeps_and_knows_its_boot() {
        let c = SystemClock;
        let t0 = c.now();
        c.sleep(Duration::from_millis(30)).await;
        assert!(c.now() - t0 >= Duration::from_millis(30));
        let boot = c.boot_time().expect("Linux has a boot id");
        assert_eq!(boot.boot_id.len(), 36);
        assert!(
            boot.time_namespace.starts_with("time:[") || &*boot.time_namespace == "-",
            "{boot:?}"
        );
        assert!(c.boot_time().unwrap().since_boot >= boot.since_boot);
    }

    #[test]
    fn forked_children_draw_different_numbers() {
        let rng = Rng::from_entropy();
        rng.next_u64();
        let mut fds = [0i32; 2];
        // SAFETY: plain pipe/fork/read/write/_exit; the children only draw numbers (no
        // allocation, no locks) and write 8 bytes before _exit.
        unsafe {
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
            let mut children = vec![];
            for _ in 0..2 {
                let pid = libc::fork();
                assert!(pid >= 0);
                if pid == 0 {
                    let n = rng.next_u64().to_le_bytes();
                    libc::write(fds[1], n.as_ptr().cast(), 8);
                    libc::_exit(0);
                }
                children.push(pid);
            }
            for pid in children {
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            let mut buf = [0u8; 16];
            assert_eq!(libc::read(fds[0], buf.as_mut_ptr().cast(), 16), 16);
            libc::close(fds[0]);
            libc::close(fds[1]);
            assert_ne!(
                buf[..8],
                buf[8..],
                "two forked children drew the same number"
            );
        }
        // A seeded generator stays deterministic.
        assert_eq!(Rng::seeded(3).next_u64(), Rng::seeded(3).next_u64());
    }

    #[test]
    fn rng_is_deterministic_when_seeded_and_ids_are_unique() {
        let a = Rng::seeded(7);
        let b = Rng::seeded(7);
        assert_eq!(a.next_u64(), b.next_u64());
        let ids: std::collections::HashSet<_> = (0..1000).map(|_| a.hex_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert_eq!(a.hex_id().len(), 32);
        for _ in 0..1000 {
            let j = a.jitter(Duration::from_secs(1), 0.2);
            assert!(j >= Duration::from_millis(800) && j <= Duration::from_millis(1200));
        }
    }
}
