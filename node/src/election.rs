//! Leader elections: `Election` (campaign, resign, leader, observe) and the `Leader` shape.

use std::sync::Arc;

use napi::bindgen_prelude::{Env, External, Result, Unknown};
use napi_derive::napi;

use crate::acquire::{client, next_or_cancelled, token, Cancel};
use crate::held::Lease;
use crate::options::LeaseOptions;
use crate::{error, options, runtime};

use crate::status::{watch_poll, Holder, Nullable, WatchOptions};

/// The leader of an election.
#[napi(object)]
pub struct Leader {
    pub holder: Holder,
    /// The leader's fencing token.
    pub epoch: f64,
    /// What the leader published (`options.data`).
    #[napi(ts_type = "string | null")]
    pub data: Nullable,
}

/// `{ holder, epoch, data }` (the core's `Leader` JSON), or `null` when nobody leads.
fn leader_json(l: Option<lease::Leader>) -> serde_json::Value {
    l.map_or(serde_json::Value::Null, |l| l.to_json())
}

/// Options of `Election.campaign`.
#[napi(object)]
pub struct CampaignOptions {
    /// Cancels the campaign: the promise rejects with an `AbortError`.
    #[napi(ts_type = "AbortSignal")]
    pub signal: Option<options::Signal>,
}

/// One participant in a leader election on one lease: `campaign()` resolves once it leads
/// (holding the lease), `resign()` releases it, `leader()` and `observe()` tell everyone who
/// leads and at which epoch.
#[napi]
pub struct Election {
    inner: Arc<lease::Election>,
}

#[napi]
impl Election {
    /// `options.wait` bounds how long `campaign` waits (default: as long as it takes);
    /// `options.data` is published while this participant leads. (A campaign's own
    /// `signal` goes to `campaign()`.)
    #[napi(
        constructor,
        ts_args_type = "url: string, options?: Omit<LeaseOptions, 'signal'>"
    )]
    pub fn new(env: Env, url: String, options: Option<LeaseOptions>) -> Result<Election> {
        // Opening an S3 store builds its HTTP client, which wants a runtime context.
        let rt = runtime::handle()?;
        let _entered = rt.enter();
        let e = (|| {
            let opts = options.unwrap_or_default().to_core()?;
            let (client, key) = client(&url)?;
            // Bad options fail here, not at the first campaign.
            opts.timing(&client.store().capabilities())?;
            Ok(lease::Election::new(client, key, opts))
        })()
        .map_err(|e: lease::Error| error::to_napi(&env, &e))?;
        Ok(Election { inner: Arc::new(e) })
    }

    /// Resolve once this participant leads, with its lease (the current one if it already
    /// leads).
    #[napi(
        ts_args_type = "options?: CampaignOptions",
        ts_return_type = "Promise<Lease>"
    )]
    pub fn campaign<'e>(&self, env: &'e Env, cancel: Option<Cancel>) -> Result<Unknown<'e>> {
        let inner = self.inner.clone();
        let cancel = token(cancel);
        runtime::call(
            env,
            async move { inner.campaign_with_cancel(&cancel).await },
            |env, l| Ok(Lease::register(env, l)),
        )
    }

    /// Stop leading (release the lease); does nothing when not leading.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn resign<'e>(&self, env: &'e Env) -> Result<Unknown<'e>> {
        let inner = self.inner.clone();
        runtime::call(env, async move { inner.resign().await }, |_, ()| Ok(()))
    }

    /// Who leads now (`null`: nobody).
    #[napi(ts_return_type = "Promise<Leader | null>")]
    pub fn leader<'e>(&self, env: &'e Env) -> Result<Unknown<'e>> {
        let inner = self.inner.clone();
        runtime::call(env, async move { inner.leader().await }, |_, l| {
            Ok(leader_json(l))
        })
    }

    /// Whether this participant leads now.
    #[napi(getter)]
    pub fn is_leader(&self) -> bool {
        self.inner.lease().is_some()
    }

    /// Leadership changes: yields the leader now, then each change of leader or epoch
    /// (`null`: nobody leads).
    #[napi(
        ts_args_type = "options?: WatchOptions",
        ts_return_type = "AsyncIterableIterator<Leader | null>"
    )]
    pub fn observe(
        &self,
        env: Env,
        options: Option<WatchOptions>,
    ) -> Result<External<LeaderWatch>> {
        let w = watch_poll(&options)
            .and_then(|poll| self.inner.observe(poll))
            .map_err(|e| error::to_napi(&env, &e))?;
        Ok(External::new(Arc::new(tokio::sync::Mutex::new(w))))
    }
}

/// Reads leadership changes; `Election.observe()` iterates over it with `_leaderNext`.
pub type LeaderWatch = Arc<tokio::sync::Mutex<lease::LeaderWatch>>;

#[napi(js_name = "_leaderNext", skip_typescript)]
pub fn leader_next<'e>(
    env: &'e Env,
    watcher: &External<LeaderWatch>,
    cancel: Option<Cancel>,
) -> Result<Unknown<'e>> {
    let inner = (**watcher).clone();
    let cancel = token(cancel);
    runtime::call(
        env,
        async move {
            let mut w = inner.lock().await;
            next_or_cancelled(w.next(), cancel, "observe").await
        },
        |_, l| Ok(leader_json(l)),
    )
}
