//! Cloud tokens as the real services hand them out (issue 29, items 2 and 3): `lease run`, the
//! real binary, with no key but the platform's identity, against fake-gcs-server and Azurite
//! behind a proxy that checks the bearer tokens, and token endpoints played by
//! `lease_systests::cloud_identity` (each citing the documentation it plays):
//!
//! - App Service / Azure Functions' identity endpoint answers `expires_on` alone: a lease held
//!   through several token lifetimes keeps its token fresh and the lease held.
//! - GCE's metadata server and Azure's IMDS blip (503, a dropped connection; 404, 410, 429,
//!   5xx): an outage shorter than `--wait` delays the acquisition, it does not end it (exit 69),
//!   and a holder whose token is still valid keeps using it while the endpoint blips.
//!
//! On `LEASE_TEST_GCS_FAKE` and `LEASE_TEST_AZURE_AZURITE` (`scripts/stores.sh`); under CI
//! each is mandatory.

#![allow(clippy::disallowed_methods)] // real servers in real time

use std::process::Output;
use std::time::Duration;

use lease::store::azure::{DEV_ACCOUNT, DEV_KEY};
use lease_systests::cloud_identity::{
    azure_requires_bearer, azure_shared_key, gcs_requires_bearer, Blip, Flavor, TokenServer,
};
use lease_systests::proxy::{endpoint_addr, FaultProxy};
use lease_systests::server;
use tokio::process::Command;

fn lease_url(store_url: &str, key: &str) -> String {
    let (base, query) = store_url.split_once('?').unwrap_or((store_url, ""));
    format!("{}/{key}?{query}", base.trim_end_matches('/'))
}

fn unique(what: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("tokens/{what}-{}-{t}", std::process::id())
}

/// The store of `url` behind a proxy that takes only the tokens `tokens` issued, and the
/// lease URL through it, with no credential but the platform's identity.
async fn store_behind(url: &str, server: &TokenServer, key: &str) -> (FaultProxy, String) {
    let proxy = FaultProxy::start(endpoint_addr(url).unwrap())
        .await
        .unwrap();
    let through = proxy.store_url(url);
    let through = if through.starts_with("az://") {
        proxy.set_intercept(Some(azure_requires_bearer(server.tokens())));
        proxy.set_rewrite(Some(azure_shared_key(DEV_ACCOUNT, DEV_KEY)));
        // Not the emulator's published key: the identity chain.
        through.replace("&use_emulator=true", "")
    } else {
        proxy.set_intercept(Some(gcs_requires_bearer(server.tokens())));
        // An http:// endpoint defaults to no credentials (an emulator): ask for them.
        format!("{through}&anonymous=false")
    };
    (proxy, lease_url(&through, key))
}

/// `lease run ARGS` with only `server`'s identity in its environment. Bounded: killed after
/// 60 s (and the test fails).
async fn lease_run(server: &TokenServer, args: &[&str]) -> Output {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lease"));
    cmd.arg("run").args(args);
    for var in [
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_STORAGE_KEY",
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_ACCOUNT",
        "AZURE_TENANT_ID",
        "AZURE_CLIENT_ID",
        "AZURE_CLIENT_SECRET",
        "AZURE_FEDERATED_TOKEN_FILE",
        "IDENTITY_ENDPOINT",
        "IDENTITY_HEADER",
        "AZURE_POD_IDENTITY_AUTHORITY_HOST",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_OAUTH_ACCESS_TOKEN",
        "STORAGE_EMULATOR_HOST",
        "GCE_METADATA_HOST",
        "LEASE_LOG",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("LEASE_HOME", home.path())
        // No gcloud login, and no `az` beyond the system's (none is logged in here).
        .env("CLOUDSDK_CONFIG", home.path())
        .env("HOME", home.path())
        .env("PATH", "/usr/bin:/bin")
        .envs(server.env())
        .kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("lease run did not end within 60 s")
        .unwrap()
}

fn says(out: &Output) -> String {
    format!(
        "exit {:?}; stderr {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    )
}

// ---------------------------------------------------------------------------------------------
// Item 2: App Service's tokens carry `expires_on` alone.

#[tokio::test]
async fn an_app_service_token_with_only_expires_on_is_refreshed_and_the_lease_kept() {
    let Some(url) = server("LEASE_TEST_AZURE_AZURITE") else {
        return;
    };
    // Tokens of 3 s; the lease (ttl 3 s, renewed every second) is held for 7 s: over two token
    // lifetimes, so a holder that kept its first token has every renewal refused.
    let identity = TokenServer::start(Flavor::AppService, Duration::from_secs(3))
        .await
        .unwrap();
    let (proxy, lease) = store_behind(&url, &identity, &unique("app-service")).await;
    let out = lease_run(&identity, &["--ttl", "3s", &lease, "--", "sleep", "7"]).await;
    let counts = proxy.counts();
    assert_eq!(out.status.code(), Some(0), "{}", says(&out));
    assert!(
        identity.issued() >= 2,
        "{} token(s) fetched over 7 s of 3 s tokens; {}",
        identity.issued(),
        says(&out)
    );
    assert_eq!(counts.status(401), 0, "{counts:?}; {}", says(&out));
    assert!(
        counts.writes() >= 4,
        "the acquisition and renewals: {counts:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Item 3: a metadata server's outage shorter than the wait.

#[tokio::test]
async fn a_gce_metadata_server_outage_shorter_than_the_wait_only_delays_the_acquisition() {
    let Some(url) = server("LEASE_TEST_GCS_FAKE") else {
        return;
    };
    let metadata = TokenServer::start(Flavor::Gce, Duration::from_secs(3600))
        .await
        .unwrap();
    metadata.blip(&[Blip::Status(503), Blip::Drop], Duration::from_secs(4));
    let (proxy, lease) = store_behind(&url, &metadata, &unique("gce-outage")).await;
    let out = lease_run(&metadata, &["--wait", "50s", &lease, "--", "true"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", says(&out));
    assert!(metadata.refused() >= 2, "the outage was not seen");
    assert_eq!(metadata.issued(), 1);
    assert_eq!(proxy.counts().status(401), 0);
}

#[tokio::test]
async fn an_imds_outage_shorter_than_the_wait_only_delays_the_acquisition() {
    let Some(url) = server("LEASE_TEST_AZURE_AZURITE") else {
        return;
    };
    let imds = TokenServer::start(Flavor::Imds, Duration::from_secs(3600))
        .await
        .unwrap();
    imds.blip(
        &[
            Blip::Status(404),
            Blip::Status(410),
            Blip::Status(429),
            Blip::Status(500),
            Blip::Status(503),
        ],
        Duration::from_secs(4),
    );
    let (proxy, lease) = store_behind(&url, &imds, &unique("imds-outage")).await;
    let out = lease_run(&imds, &["--wait", "50s", &lease, "--", "true"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", says(&out));
    assert!(imds.refused() >= 2, "the outage was not seen");
    assert_eq!(imds.issued(), 1);
    assert_eq!(proxy.counts().status(401), 0);
}

// ---------------------------------------------------------------------------------------------
// Item 3: a still-valid token is used while the metadata server blips.

#[tokio::test]
async fn a_still_valid_token_is_used_while_the_metadata_server_blips() {
    let Some(url) = server("LEASE_TEST_GCS_FAKE") else {
        return;
    };
    // A token of 10 s is due for a refresh after 5 s; the metadata server is out from the
    // first token on for 8 s, so the refreshes at 5 s and later fail until then while the
    // token still works until 10 s. The holder (ttl 6 s) runs 9 s.
    let metadata = TokenServer::start(Flavor::Gce, Duration::from_secs(10))
        .await
        .unwrap();
    let (proxy, lease) = store_behind(&url, &metadata, &unique("gce-blip")).await;
    let args = ["--ttl", "6s", &lease, "--", "sleep", "9"];
    let run = lease_run(&metadata, &args);
    let blip = async {
        // Bounded: the first token comes within seconds, or the run has failed already.
        for _ in 0..200 {
            if metadata.issued() >= 1 {
                metadata.blip(&[Blip::Status(503), Blip::Drop], Duration::from_secs(8));
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let (out, ()) = tokio::join!(run, blip);
    let counts = proxy.counts();
    assert_eq!(out.status.code(), Some(0), "{}", says(&out));
    assert!(
        metadata.refused() >= 1,
        "no refresh was tried during the blip: {}",
        says(&out)
    );
    assert_eq!(counts.status(401), 0, "{counts:?}");
    assert!(
        counts.writes() >= 4,
        "the acquisition and renewals: {counts:?}"
    );
}
