//! `askYield`: ask the holders of a queued lock to step aside (docs/protocol.md §10, "Yield on
//! request"). A holder is told through `Lease.onYield` / `yieldRequest` (see `held`).

use napi::bindgen_prelude::Unknown;
use napi::{Env, Result};
use napi_derive::napi;

use crate::acquire::client;
use crate::runtime;

/// Options of `askYield`.
#[napi(object)]
#[derive(Default)]
pub struct AskYieldOptions {
    /// The waiting participant's id (or an unambiguous prefix of it) to hand over to: the
    /// holders in its way are asked. Without it, every holder is asked.
    pub to: Option<String>,
    /// Why (at most 256 bytes).
    pub reason: Option<String>,
    /// Who asks (1 to 128 bytes; default `user@host` of this process).
    pub by: Option<String>,
}

/// A yield request as it stands in the lock's record (what `askYield` resolves to).
#[napi(object)]
pub struct YieldRequest {
    /// The tokens of the grants asked, ascending.
    pub tokens: Vec<f64>,
    pub by: String,
    pub to: Option<String>,
    pub reason: Option<String>,
}

/// Ask the holders of the queued lock at `url` to step aside (docs/protocol.md §10, "Yield on
/// request"). Each holder asked learns it once (`Lease.onYield`, `yieldRequest`) and keeps the
/// lease until it releases. Resolves to the request as it stands, or `null` when nobody holds
/// anything in `to`'s way; rejects with `LEASE_INVALID` for a plain lease, an unknown or
/// ambiguous `to`, or a bad `by`/`reason`.
#[napi(
    js_name = "askYield",
    ts_args_type = "url: string, options?: AskYieldOptions",
    ts_return_type = "Promise<YieldRequest | null>"
)]
pub fn ask_yield<'e>(
    env: &'e Env,
    url: String,
    options: Option<AskYieldOptions>,
) -> Result<Unknown<'e>> {
    let o = options.unwrap_or_default();
    let ask = lease::YieldAsk {
        by: o.by.unwrap_or_else(lease::asker_name),
        to: o.to,
        reason: o.reason,
    };
    runtime::call(
        env,
        async move {
            let (client, key) = client(&url)?;
            client.ask_yield(&key, ask).await
        },
        |_, r| {
            Ok(r.map(|r| YieldRequest {
                tokens: r.tokens.iter().map(|&t| t as f64).collect(),
                by: r.by,
                to: r.to,
                reason: r.reason,
            }))
        },
    )
}
