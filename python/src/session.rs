//! Shared sessions (docs/protocol.md §10, "Shared sessions: one heartbeat for many grants",
//! issue 24): `lease.open_session(url)` opens one `SharedSession` of the core on a store, and
//! `Session.acquire(url_or_key)` takes queued-lock grants through it, all kept by the session's
//! one renewal task and one confirmation task. `lease.acquire_on_process_session(url)` takes
//! a grant through the process's own session for that store and ttl (the core's registry,
//! `SharedSession::acquire_on_process_session`): opened on first use, released by itself one
//! ttl after its last grant, never closed from Python but at interpreter exit. The Python layer (`lease/_session.py`) wraps
//! the two classes here, `SessionCore` and `GrantCore`, with the keyword arguments, the context
//! managers and asyncio.
//!
//! As `held.rs` does for a `Lease`: blocking calls release the GIL (`runtime::block`), asyncio
//! calls settle a future (`runtime::spawn_settle`), errors are mapped in `error.rs` only, and a
//! forked child never touches its parent's session or grants (they are leaked there).

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pyo3::prelude::*;
use tokio_util::sync::CancellationToken;

use crate::error::{invalid, to_py, IntoPyResult};
use crate::fence::{self, Expected, Fences, Read};
use crate::options::{self, Options, Target};
use crate::runtime::{self, block, Pending};
use lease::{
    Client, Error, ErrorKind, LeaseOptions, SessionOptions, SharedGrant, SharedSession, StoreUrl,
};

/// `lease.open_session`'s arguments, checked: the store's client and the session's options.
fn session_args(
    url: &Bound<'_, PyAny>,
    ttl: &Bound<'_, PyAny>,
    label: Option<&Bound<'_, PyAny>>,
    prefix: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Client, StoreUrl, SessionOptions)> {
    let text = options::url_text(url)?;
    let store = lease::session_store(&text).py()?;
    let client = options::client_of(&store, &text)?;
    let mut opts = SessionOptions::new(options::ttl_seconds(ttl)?);
    if let Some(label) = options::opt_text("label", label)? {
        opts = opts.label(label);
    }
    if let Some(prefix) = options::opt_text("prefix", prefix)? {
        opts = opts.prefix(prefix);
    }
    Ok((client, store, opts))
}

/// open_session(url, ttl, label, prefix) -> SessionCore: blocks (GIL released) until the
/// session's first record is written.
#[pyfunction]
#[pyo3(signature = (url, ttl, label=None, prefix=None))]
pub fn _open_session(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    ttl: &Bound<'_, PyAny>,
    label: Option<&Bound<'_, PyAny>>,
    prefix: Option<&Bound<'_, PyAny>>,
) -> PyResult<SessionCore> {
    crate::log::refresh_level(py, false);
    let (client, store, opts) = session_args(url, ttl, label, prefix)?;
    let c = client.clone();
    let session = block(py, async move { SharedSession::open(&c, opts).await }, None)?.py()?;
    Ok(SessionCore::new(session, client, store))
}

/// Start opening a session for asyncio; `done(ok, value)` receives the SessionCore.
#[pyfunction]
#[pyo3(signature = (url, ttl, done, label=None, prefix=None))]
pub fn _open_session_start(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    ttl: &Bound<'_, PyAny>,
    done: Py<PyAny>,
    label: Option<&Bound<'_, PyAny>>,
    prefix: Option<&Bound<'_, PyAny>>,
) -> PyResult<Pending> {
    crate::log::refresh_level(py, false);
    let (client, store, opts) = session_args(url, ttl, label, prefix)?;
    let c = client.clone();
    let abort = runtime::spawn_settle(
        py,
        async move { SharedSession::open(&c, opts).await },
        done,
        move |py, session| {
            let core = SessionCore::new(session, client, store);
            Ok(Bound::new(py, core)?.into_any().unbind())
        },
    )?;
    Ok(Pending::abort(abort))
}

/// A grant through the process's session and that session (a `SessionCore` for the grant's
/// `session` accessor; the Python layer keeps one per session).
fn process_grant(client: Client, grant: SharedGrant) -> (GrantCore, SessionCore) {
    let session = SessionCore::of_process(grant.session().clone(), client);
    (GrantCore::new(grant), session)
}

/// acquire_on_process_session(url, options) -> (GrantCore, SessionCore): blocks (GIL released)
/// until granted; Ctrl-C while it waits cancels it (it leaves the lock's queue and the
/// session).
#[pyfunction]
pub fn _acquire_on_process_session(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    options: &Bound<'_, Options>,
) -> PyResult<(GrantCore, SessionCore)> {
    crate::log::refresh_level(py, false);
    let Target { client, key, .. } = options::target(url)?;
    let opts = options.get().core.clone();
    let cancel = CancellationToken::new();
    let token = cancel.clone();
    let c = client.clone();
    let grant = block(
        py,
        async move {
            SharedSession::acquire_on_process_session_with_cancel(&c, &key, &opts, &token).await
        },
        Some(&cancel),
    )?
    .py()?;
    Ok(process_grant(client, grant))
}

/// Start an acquisition through the process's session for asyncio; `done(ok, value)`
/// receives `(GrantCore, SessionCore)`. Cancelling it stops a waiting request: it leaves the
/// lock's queue and the session.
#[pyfunction]
pub fn _acquire_on_process_session_start(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    options: &Bound<'_, Options>,
    done: Py<PyAny>,
) -> PyResult<Pending> {
    crate::log::refresh_level(py, false);
    let Target { client, key, .. } = options::target(url)?;
    let opts = options.get().core.clone();
    let cancel = CancellationToken::new();
    let token = cancel.clone();
    let c = client.clone();
    runtime::spawn_settle(
        py,
        async move {
            SharedSession::acquire_on_process_session_with_cancel(&c, &key, &opts, &token).await
        },
        done,
        move |py, grant| {
            let (g, s) = process_grant(client, grant);
            Ok((Bound::new(py, g)?, Bound::new(py, s)?)
                .into_pyobject(py)?
                .into_any()
                .unbind())
        },
    )?;
    Ok(Pending::token(cancel))
}

/// One shared session of this process on one store (`lease.Session` wraps it).
#[pyclass(module = "lease._lease", name = "SessionCore", frozen)]
pub struct SessionCore {
    session: ManuallyDrop<SharedSession>,
    client: Client,
    /// The store, to read lock URLs against (`None`: the process's session, which takes no
    /// acquisitions through `Session.acquire`).
    store: Option<StoreUrl>,
    /// The process that opened it. A forked child does not hold its parent's session.
    pid: u32,
    /// The process's session (`lease.acquire_on_process_session`): it closes by itself, one
    /// ttl after its last grant is released; nothing here closes it but interpreter exit.
    process: bool,
    /// `close()` was called (or started).
    closed: AtomicBool,
}

impl Drop for SessionCore {
    fn drop(&mut self) {
        if self.pid != runtime::pid() {
            // A forked child: the session belongs to the parent's runtime; leak it.
            return;
        }
        // SAFETY: taken exactly once, here.
        let session = unsafe { ManuallyDrop::take(&mut self.session) };
        // Not closed: its tasks would renew it for the life of the process. Close it in the
        // background (the Python layer keeps the session alive while a grant of it is). The
        // process's session is the core's registry's: it releases itself when idle.
        if !self.process && !self.closed.load(Ordering::SeqCst) {
            if let Ok(h) = runtime::handle() {
                h.spawn(async move { session.close().await });
            }
        }
    }
}

impl SessionCore {
    fn new(session: SharedSession, client: Client, store: StoreUrl) -> SessionCore {
        SessionCore {
            session: ManuallyDrop::new(session),
            client,
            store: Some(store),
            pid: runtime::pid(),
            process: false,
            closed: AtomicBool::new(false),
        }
    }

    /// The process's session of a grant acquired through it.
    fn of_process(session: SharedSession, client: Client) -> SessionCore {
        SessionCore {
            session: ManuallyDrop::new(session),
            client,
            store: None,
            pid: runtime::pid(),
            process: true,
            closed: AtomicBool::new(false),
        }
    }

    /// `InvalidArgument` for what only an explicit session does (`what`: acquire, close).
    fn process_refuses(&self, what: &str) -> PyErr {
        invalid(format!(
            "the shared session {} is this process's (lease.acquire_on_process_session): {what}",
            self.session.url()
        ))
    }

    fn forked(&self) -> bool {
        self.pid != runtime::pid()
    }

    /// The session, unless this is a forked child or it was closed: then `InvalidArgument`
    /// saying so (acquiring through a closed session is a mistake of the caller; a lost
    /// session gives the core's `LeaseLost`).
    fn usable(&self) -> PyResult<SharedSession> {
        if self.process {
            return Err(self.process_refuses(
                "acquire through it with lease.acquire_on_process_session(url, ttl=…) (the \
                 ttl chooses the session), or open a session of your own (lease.open_session)",
            ));
        }
        if self.forked() {
            return Err(invalid(format!(
                "the shared session {} was opened by process {} before os.fork(): a forked \
                 child does not hold its parent's session (open one in the child)",
                self.session.url(),
                self.pid
            )));
        }
        if self.closed.load(Ordering::SeqCst) {
            return Err(invalid(format!(
                "the shared session {} is closed: open another (lease.open_session) to acquire \
                 more",
                self.session.url()
            )));
        }
        Ok((*self.session).clone())
    }

    /// The key in this session's store of `obj`: a lock URL (`s3://…`, `file://…`, a path,
    /// an `os.PathLike`) in the same store, or a key (`jobs/7`: no scheme, not a path).
    fn key_of(&self, obj: &Bound<'_, PyAny>) -> PyResult<String> {
        let text = options::url_text(obj)?;
        // A path object (`pathlib.Path`) always names a location, never a key.
        let is_path = !obj.is_instance_of::<pyo3::types::PyString>();
        let Some(store) = &self.store else {
            return Err(self.process_refuses("it takes no acquisitions through Session.acquire"));
        };
        lease::session_lock_key(store, &text, is_path).py()
    }

    fn acquire_args(
        &self,
        target: &Bound<'_, PyAny>,
        options: &Bound<'_, Options>,
    ) -> PyResult<(SharedSession, String, LeaseOptions)> {
        let session = self.usable()?;
        let key = self.key_of(target)?;
        Ok((session, key, options.get().core.clone()))
    }
}

#[pymethods]
impl SessionCore {
    /// The session's id (`SID`).
    #[getter]
    fn sid(&self) -> String {
        self.session.sid()
    }

    /// The session record's URL.
    #[getter]
    fn url(&self) -> &str {
        self.session.url()
    }

    /// The session record's key in its store (`PREFIX.lease-sessions/SID`).
    #[getter]
    fn key(&self) -> &str {
        self.session.key()
    }

    /// The store's URL.
    #[getter]
    fn store(&self) -> String {
        self.client.store().url().to_string()
    }

    /// The ttl in seconds.
    #[getter]
    fn ttl(&self) -> f64 {
        self.session.ttl().as_secs_f64()
    }

    /// True while the session is believed (its last landed renewal less than a ttl ago) and
    /// not closed.
    #[getter]
    fn alive(&self) -> bool {
        !self.forked() && !self.closed.load(Ordering::SeqCst) && self.session.is_alive()
    }

    /// How many grants and waiters are attached (or attaching).
    #[getter]
    fn attached(&self) -> usize {
        if self.forked() {
            return 0;
        }
        self.session.attached()
    }

    /// Why the session was lost, or None while it is not.
    #[getter]
    fn lost_reason(&self) -> Option<String> {
        if self.forked() {
            return Some(format!("opened by process {} before os.fork()", self.pid));
        }
        self.session.lost_reason().map(|r| r.to_string())
    }

    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// True for the process's session (`lease.acquire_on_process_session`).
    #[getter]
    fn process(&self) -> bool {
        self.process
    }

    /// acquire(url_or_key, options) -> GrantCore: blocks (GIL released) until granted.
    fn acquire(
        &self,
        py: Python<'_>,
        target: &Bound<'_, PyAny>,
        options: &Bound<'_, Options>,
    ) -> PyResult<GrantCore> {
        crate::log::refresh_level(py, false);
        let (session, key, opts) = self.acquire_args(target, options)?;
        // Ctrl-C while it waits cancels it: it leaves the lock's queue.
        let cancel = CancellationToken::new();
        let token = cancel.clone();
        let grant = block(
            py,
            async move { session.acquire_with_cancel(&key, &opts, &token).await },
            Some(&cancel),
        )?
        .py()?;
        Ok(GrantCore::new(grant))
    }

    /// Start an acquire for asyncio; `done(ok, value)` receives the GrantCore. Cancelling it
    /// stops a waiting request: it leaves the lock's queue and the session.
    fn _acquire_start(
        &self,
        py: Python<'_>,
        target: &Bound<'_, PyAny>,
        options: &Bound<'_, Options>,
        done: Py<PyAny>,
    ) -> PyResult<Pending> {
        crate::log::refresh_level(py, false);
        let (session, key, opts) = self.acquire_args(target, options)?;
        let cancel = CancellationToken::new();
        let token = cancel.clone();
        runtime::spawn_settle(
            py,
            async move { session.acquire_with_cancel(&key, &opts, &token).await },
            done,
            |py, grant| Ok(Bound::new(py, GrantCore::new(grant))?.into_any().unbind()),
        )?;
        Ok(Pending::token(cancel))
    }

    /// Close the session (idempotent): every grant still attached is released (its leave
    /// sent), then the session record is released and deleted. Blocks until done.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.process {
            return Err(self.closes_by_itself());
        }
        self.close_now(py)
    }

    /// Close it even if it is the process's (interpreter exit: its grants' waiters need not
    /// wait out the ttl).
    fn _close_at_exit(&self, py: Python<'_>) -> PyResult<()> {
        self.close_now(py)
    }

    /// Start closing; `done(ok, None)` when finished.
    fn _close_start(&self, py: Python<'_>, done: Py<PyAny>) -> PyResult<Pending> {
        if self.process {
            return Err(self.closes_by_itself());
        }
        let session = if self.forked() || self.closed.swap(true, Ordering::SeqCst) {
            None
        } else {
            Some((*self.session).clone())
        };
        runtime::spawn_settle(
            py,
            async move {
                if let Some(s) = session {
                    s.close().await;
                }
                Ok::<(), Error>(())
            },
            done,
            |py, ()| Ok(py.None()),
        )?;
        Ok(Pending::detached())
    }

    fn __repr__(&self) -> String {
        let state = if self.forked() {
            "inherited across fork".to_string()
        } else if self.closed.load(Ordering::SeqCst) {
            "closed".to_string()
        } else if let Some(r) = self.session.lost_reason() {
            format!("lost: {r}")
        } else {
            format!("{} attached", self.session.attached())
        };
        let whose = if self.process { " (the process's)" } else { "" };
        format!("<lease.Session{whose} {} {state}>", self.session.url())
    }
}

impl SessionCore {
    fn closes_by_itself(&self) -> PyErr {
        self.process_refuses(
            "it closes by itself one ttl after its last grant is released (release the \
             grants: grant.release()); close() is for a session of lease.open_session",
        )
    }

    fn close_now(&self, py: Python<'_>) -> PyResult<()> {
        if self.forked() || self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let session = (*self.session).clone();
        block(py, async move { session.close().await }, None)
    }
}

/// A grant of a queued lock held through a shared session (`lease.SharedGrant` wraps it). Its
/// release, loss and idempotence are the core's (`SharedGrant::release(&self)`); this keeps
/// the grant, the text Python reads often, and the process that acquired it.
#[pyclass(module = "lease._lease", name = "GrantCore", frozen)]
pub struct GrantCore {
    /// Shared with a release running on the runtime (`_release_start`).
    grant: ManuallyDrop<Arc<SharedGrant>>,
    epoch: u64,
    /// `URL#EPOCH@SID.N`, with the grant's mode and scope.
    token: String,
    key: String,
    url: String,
    id: String,
    info: lease::Grant,
    pid: u32,
}

impl Drop for GrantCore {
    fn drop(&mut self) {
        // SAFETY: taken exactly once, here.
        let grant = unsafe { ManuallyDrop::take(&mut self.grant) };
        if self.pid != runtime::pid() {
            // A forked child: the grant is the parent's; leak it.
            std::mem::forget(grant);
            return;
        }
        // Not released: released in the background (the core's release on drop), on the
        // runtime.
        match runtime::handle() {
            Ok(h) => {
                let _entered = h.enter();
                drop(grant);
            }
            Err(_) => drop(grant),
        }
    }
}

impl GrantCore {
    fn new(grant: SharedGrant) -> GrantCore {
        let info = grant.grant().clone();
        GrantCore {
            epoch: info.token,
            token: grant.token().to_string(),
            key: grant.key().to_string(),
            url: grant.url().to_string(),
            id: grant.id().to_string(),
            info,
            grant: ManuallyDrop::new(Arc::new(grant)),
            pid: runtime::pid(),
        }
    }

    fn forked(&self) -> bool {
        self.pid != runtime::pid()
    }

    /// The grant to release or fence with: `None` in a forked child (it touches nothing of
    /// its parent's).
    fn owned(&self) -> Option<Arc<SharedGrant>> {
        (!self.forked()).then(|| Arc::clone(&self.grant))
    }

    /// `LeaseLost` in a forked child: it does not hold its parent's grants.
    fn inherited_error(&self) -> PyErr {
        to_py(
            Error::new(
                ErrorKind::Lost,
                format!(
                    "{} (token {}) was acquired by process {} before os.fork(): a forked \
                     child does not hold its parent's grants",
                    self.url, self.epoch, self.pid
                ),
            )
            .with_lease(&self.url)
            .with_epoch(self.epoch),
        )
    }

    /// What fences this grant's fenced operations (not in a forked child).
    fn fences(&self) -> PyResult<Fences> {
        match self.owned() {
            Some(g) => Ok(Fences::Grant(g)),
            None => Err(self.inherited_error()),
        }
    }
}

#[pymethods]
impl GrantCore {
    /// The fencing number: strictly increasing per lock.
    #[getter]
    fn epoch(&self) -> u64 {
        self.epoch
    }

    /// `URL#EPOCH@SID.N`: the token to hand to resources that check it, as `Lease.token`
    /// (its holder is the grant's entry id).
    #[getter]
    fn token(&self) -> &str {
        &self.token
    }

    #[getter]
    fn key(&self) -> &str {
        &self.key
    }

    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    /// Its entry id in the lock's record, `SID.N`.
    #[getter]
    fn id(&self) -> &str {
        &self.id
    }

    /// `{mode, token, scope, range, permits}` for `lease.Grant`.
    #[getter]
    fn grant<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        crate::held::grant_obj(py, &self.info)
    }

    /// True while held: its session believed, and a read of the lock's record sent less than
    /// a ttl ago showed it. False once lost or released.
    #[getter]
    fn held(&self) -> bool {
        !self.forked() && self.grant.is_held()
    }

    /// Why it was lost (its own loss, or its session's), or None while it is not.
    #[getter]
    fn lost_reason(&self) -> Option<String> {
        if self.forked() {
            return Some(format!("acquired by process {} before os.fork()", self.pid));
        }
        self.grant.lost_reason().map(|r| r.to_string())
    }

    /// The latest yield request that named this grant (`lease.YieldRequested`), or None: a
    /// waiter or an operator asked it to step aside. Not a loss. None once released.
    #[getter]
    fn yield_requested<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        if self.forked() || self.grant.is_released() {
            return Ok(None);
        }
        self.grant
            .yield_requested()
            .map(|y| crate::held::yield_requested_obj(py, &y))
            .transpose()
    }

    /// The kind of its loss (`session_deleted`, `expired`, `taken_over`, `removed`, …), or None.
    #[getter]
    fn lost_kind(&self) -> Option<&'static str> {
        if self.forked() {
            return None;
        }
        self.grant.lost_reason().map(|r| r.kind())
    }

    /// `None` while held; else raise `LeaseLost` naming why (lost, or released).
    fn ensure_held(&self) -> PyResult<()> {
        if self.forked() {
            return Err(self.inherited_error());
        }
        self.grant.ensure_held().py()
    }

    /// Write `data` at `key` under this grant's token, as `Lease.fenced_put` (exclusive
    /// grants only; `key` placed beside the lock); `Fenced` once a later grant of the lock
    /// wrote it. Returns the object's new version.
    #[pyo3(signature = (key, data, *, if_version = None, if_absent = None))]
    fn fenced_put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
        if_version: Option<&Bound<'_, PyAny>>,
        if_absent: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<String> {
        let expected = Expected::from_args(if_version, if_absent)?;
        fence::put(py, self.fences()?, key, data, expected)
    }

    #[pyo3(signature = (key, data, done, if_version = None, if_absent = None))]
    fn _fenced_put_start(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
        done: Py<PyAny>,
        if_version: Option<&Bound<'_, PyAny>>,
        if_absent: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Pending> {
        let expected = Expected::from_args(if_version, if_absent)?;
        fence::put_start(py, self.fences()?, key, data, expected, done)
    }

    /// Read `key` beside the lock (a dict for `lease.FencedObject`, or None): what
    /// `fenced_update` reads.
    fn _fenced_get(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        fence::get_in(py, self.fences()?, key, Read::Plain)
    }

    fn _fenced_get_start(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        done: Py<PyAny>,
    ) -> PyResult<Pending> {
        fence::get_in_start(py, self.fences()?, key, Read::Plain, done)
    }

    /// Read `key` and fence it with this grant's token, as `Lease.fenced_read`.
    fn fenced_read<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        fence::read_object(py, self.fences()?, key)
    }

    fn _fenced_read_start(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        done: Py<PyAny>,
    ) -> PyResult<Pending> {
        fence::get_in_start(py, self.fences()?, key, Read::Fenced, done)
    }

    /// Delete `key` unless a later grant of the lock wrote it (`Fenced`); false if it did not
    /// exist.
    fn fenced_delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        fence::delete(py, self.fences()?, key)
    }

    fn _fenced_delete_start(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        done: Py<PyAny>,
    ) -> PyResult<Pending> {
        fence::delete_start(py, self.fences()?, key, done)
    }

    /// Release it alone (idempotent): its belief ends at once, its leave grants the next
    /// waiter, and the session's other grants stay held. Raises `LeaseLost` if it was lost
    /// before.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let Some(grant) = self.owned() else {
            return Ok(());
        };
        block(py, async move { grant.release().await }, None)?.py()
    }

    /// Start releasing; `done(ok, None)` when finished.
    fn _release_start(&self, py: Python<'_>, done: Py<PyAny>) -> PyResult<Pending> {
        let grant = self.owned();
        runtime::spawn_settle(
            py,
            async move {
                match grant {
                    Some(g) => g.release().await,
                    None => Ok(()),
                }
            },
            done,
            |py, ()| Ok(py.None()),
        )?;
        Ok(Pending::detached())
    }

    /// Release in the background, without waiting (used when nobody is left to wait).
    fn _release_background(&self) -> PyResult<()> {
        if let Some(g) = self.owned() {
            runtime::handle()?.spawn(async move {
                let _ = g.release().await;
            });
        }
        Ok(())
    }

    fn __repr__(&self) -> String {
        let state = if self.forked() {
            "inherited across fork".to_string()
        } else if let Some(r) = self.grant.lost_reason() {
            format!("lost: {r}")
        } else if self.grant.is_held() {
            "held".to_string()
        } else if self.grant.is_released() {
            "released".to_string()
        } else {
            "not confirmed".to_string()
        };
        format!(
            "<lease.SharedGrant {} token={} {state}>",
            self.url, self.epoch
        )
    }
}
