#![cfg(feature = "azure")]
//! The conformance suite, the protocol and fenced writes on Azure Blob Storage, against
//! Azurite on 127.0.0.1 (started by `scripts/stores.sh start`, whose env file names it:
//! `LEASE_TEST_AZURE_AZURITE`). Under CI it is mandatory.
//!
//! What Azurite 3.35 does, found here: a create of an existing blob answers 409
//! `BlobAlreadyExists` (not 412); `If-Match` on a missing blob answers 412; stale conditional
//! deletes are refused (412), so fenced deletes work; metadata names come back capitalised
//! (`x-ms-meta-Lease_Epoch`).
//!
//! Credentials are tested on Azurite itself where it checks them (shared key, SAS, connection
//! strings); the Entra ID chain against a token endpoint and a blob endpoint played here
//! (Azurite accepts bearer tokens only over HTTPS).

mod conformance;
mod remote;

use std::sync::Arc;
use std::time::Duration;

use lease::store::{DynStore, Get, GetOptions};
use lease::{Client, ErrorKind, LeaseOptions, StoreUrl};
use remote::unique;

fn servers() -> Vec<(&'static str, String)> {
    remote::servers("Azure", &[("azurite", "LEASE_TEST_AZURE_AZURITE")])
}

/// A new store (and HTTP client) for `url`, not shared with other tests (each has its own
/// runtime).
fn open(url: &str) -> DynStore {
    match StoreUrl::parse(url).unwrap_or_else(|e| panic!("{url}: {e}")) {
        StoreUrl::Azure {
            account,
            container,
            options,
        } => Arc::new(
            lease::store::azure::AzureStore::open(&account, &container, &options)
                .unwrap_or_else(|e| panic!("{url}: {e}")),
        ),
        other => panic!("not an az:// URL: {other}"),
    }
}

macro_rules! suite {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            for (server, url) in servers() {
                eprintln!("{} on {server}", stringify!($name));
                let prefix = unique(concat!("conformance/", stringify!($name)));
                conformance::$name(open(&url), &prefix).await;
            }
        }
    )*};
}

conformance::every_case!(suite, identical_rewrites_make_new_versions);

#[tokio::test]
async fn polling_reads_carry_the_store_clock() {
    for (_, url) in servers() {
        remote::polling_reads_carry_the_store_clock(
            open(&url),
            &format!("{}/clock", unique("azure")),
        )
        .await;
    }
}

#[tokio::test]
async fn conditional_delete_capability_is_truthful() {
    for (server, url) in servers() {
        let key = format!("{}/stale-delete", unique("azure"));
        remote::conditional_delete_capability_is_truthful(server, open(&url), &key).await;
    }
}

#[tokio::test]
async fn both_spellings_name_one_store() {
    for (_, url) in servers() {
        let (a, key) = Client::for_url(&url.replacen("az://", "azure://", 1).replacen(
            "/lease-test?",
            "/lease-test/spelling?",
            1,
        ))
        .unwrap();
        let (b, _) =
            Client::for_url(&url.replacen("/lease-test?", "/lease-test/spelling?", 1)).unwrap();
        assert!(Arc::ptr_eq(a.store(), b.store()));
        assert_eq!(key, "spelling");
        assert!(a
            .lease_url(&key)
            .starts_with("az://devstoreaccount1/lease-test/spelling"));
    }
}

#[tokio::test]
async fn missing_container_is_a_store_error_naming_it() {
    for (server, url) in servers() {
        let other = url.replacen("/lease-test?", "/no-such-container?", 1);
        let store = open(&other);
        let e = store
            .get("some/key", GetOptions::default())
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Store, "{server}: {e}");
        let m = e.to_string();
        assert!(
            m.contains("no-such-container") && m.contains("some/key") && m.contains("create it"),
            "{server}: {m}"
        );
        assert!(m.contains(&remote::endpoint_of(&url)), "{server}: {m}");
        let e = store
            .put(
                "some/key",
                "x".into(),
                lease::store::Cond::Create,
                &Default::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Store, "{server}: {e}");
    }
}

#[tokio::test]
async fn closed_port_is_unavailable_naming_the_endpoint() {
    if servers().is_empty() {
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let store = open(&format!(
        "az://devstoreaccount1/lease-test?endpoint=http://127.0.0.1:{port}/devstoreaccount1&use_emulator=true&connect_timeout=2s"
    ));
    let e = store.get("k", GetOptions::default()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
}

#[test]
fn bad_options_are_invalid_errors_naming_the_option() {
    for (url, needle) in [
        ("az://acct/cont/k?colour=blue", "colour"),
        ("az://acct/cont/k?endpoint=ftp://x", "ftp://x"),
        ("azure://acct/cont/k?account_key=abc", "account_key"),
        ("az://acct/cont/k?sas_token=sv%3D1", "sas_token"),
        ("az://acct/Cont/k", "container"),
    ] {
        let e = Client::for_url(url).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{url}: {e}");
        assert!(e.to_string().contains(needle), "{url}: {e}");
    }
}

// ---------------------------------------------------------------------------------------------
// Raw requests to Azurite, for what the store never does itself.

/// Send one signed request to the blob `path` (`/container/key`) and return the status and the
/// `x-ms-error-code`.
async fn raw(url: &str, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let endpoint = remote::endpoint_of(url);
    let parsed = url::Url::parse(&endpoint).unwrap();
    let full_path = format!("{}{path}", parsed.path().trim_end_matches('/'));
    let (path_only, query) = full_path.split_once('?').unwrap_or((&full_path, ""));
    let query: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect();
    let mut all: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    all.push(("x-ms-version".into(), "2023-11-03".into()));
    all.push(("x-ms-date".into(), httpdate_now()));
    all.push(("content-length".into(), "0".into()));
    let auth = lease::store::azure::shared_key_authorization(
        lease::store::azure::DEV_ACCOUNT,
        lease::store::azure::DEV_KEY,
        method,
        &all,
        path_only,
        &query,
    )
    .unwrap();
    all.push(("authorization".into(), auth));
    let host = format!("{}:{}", parsed.host_str().unwrap(), parsed.port().unwrap());
    let mut request =
        format!("{method} {full_path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n");
    for (k, v) in &all {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    let mut socket = tokio::net::TcpStream::connect(&host).await.unwrap();
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut reply = String::new();
    socket.read_to_string(&mut reply).await.unwrap();
    let status: u16 = reply.split_whitespace().nth(1).unwrap().parse().unwrap();
    let code = reply
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("x-ms-error-code")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    (status, code)
}

fn httpdate_now() -> String {
    use lease::clock::Clock;
    let secs = lease::clock::SystemClock
        .wall()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    // Howard Hinnant's civil_from_days, for an HTTP date without another dependency.
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][m as usize - 1];
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][days.rem_euclid(7) as usize];
    format!(
        "{weekday}, {d:02} {month} {y} {:02}:{:02}:{:02} GMT",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[tokio::test]
async fn a_blob_with_an_azure_lease_is_a_store_error_saying_so() {
    for (server, url) in servers() {
        let store = open(&url);
        let key = format!("{}/leased", unique("azure"));
        let v = remote::written(
            store
                .put(
                    &key,
                    "x".into(),
                    lease::store::Cond::Create,
                    &Default::default(),
                )
                .await
                .unwrap(),
        );
        let (status, code) = raw(
            &url,
            "PUT",
            &format!("/lease-test/{key}?comp=lease"),
            &[
                ("x-ms-lease-action", "acquire"),
                ("x-ms-lease-duration", "15"),
            ],
        )
        .await;
        assert_eq!(
            status, 201,
            "{server}: lease acquire answered {status} {code}"
        );
        let e = store
            .put(
                &key,
                "y".into(),
                lease::store::Cond::Match(v),
                &Default::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Store, "{server}: {e}");
        assert!(e.message().contains("Azure blob lease"), "{server}: {e}");
        let (status, _) = raw(
            &url,
            "PUT",
            &format!("/lease-test/{key}?comp=lease"),
            &[
                ("x-ms-lease-action", "break"),
                ("x-ms-lease-break-period", "0"),
            ],
        )
        .await;
        assert_eq!(status, 202, "{server}");
    }
}

// ---------------------------------------------------------------------------------------------
// The protocol on Azure.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_renew_release_and_reacquire() {
    for (server, url) in servers() {
        let key = format!("{}/cycle", unique("protocol"));
        remote::acquire_renew_release_and_reacquire(server, open(&url), &key).await;
    }
}

#[test]
fn a_waiter_takes_over_after_a_crash_and_not_before_the_deadline() {
    for (server, url) in servers() {
        let key = format!("{}/crash", unique("protocol"));
        remote::a_waiter_takes_over_after_a_crash(
            server,
            || open(&url),
            &key,
            Duration::from_secs(2),
        );
    }
}

#[test]
fn a_fresh_process_takes_over_a_long_dead_lease_at_once() {
    for (server, url) in servers() {
        let key = format!("{}/long-dead", unique("protocol"));
        remote::a_fresh_process_takes_over_a_long_dead_lease(
            server,
            || open(&url),
            &key,
            // Not shorter: a request's timeout is a fraction of the ttl (83 ms at 500 ms), and
            // the one try this test allows failed as "unavailable" when Azurite answered later
            // than that on a loaded machine (two test binaries beside two builds).
            Duration::from_secs(2),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_one_lease_on_azure() {
    for (server, url) in servers() {
        let key = format!("{}/contended", unique("protocol"));
        remote::many_clients_one_lease(server, || open(&url), &key, 3, Duration::from_secs(6))
            .await;
    }
}

#[tokio::test]
async fn doctor_accepts_azurite() {
    for (server, url) in servers() {
        remote::doctor_accepts(server, open(&url), &unique("doctor"), true).await;
    }
}

#[tokio::test]
async fn fenced_writes_and_deletes_refuse_a_zombie() {
    for (server, url) in servers() {
        let store = open(&url);
        let base = unique("fence");
        let lock = format!("{base}/lock");
        // `data` beside the lease `{base}/lock`: the client, with no lease, reads it from the
        // store's root.
        let data = format!("{base}/data");
        let opts = LeaseOptions::new(Duration::from_secs(3)).wait(Duration::from_secs(30));
        let a = Client::new(store.clone());
        let b = Client::new(open(&url));
        let zombie = a.acquire(&lock, &opts).await.unwrap();
        zombie.fenced_put("data", "from A").await.unwrap();
        b.break_lease(&lock, None, lease::BreakMode::AllowTwoHolders)
            .await
            .unwrap();
        let newer = b.acquire(&lock, &opts).await.unwrap();
        assert!(newer.epoch() > zombie.epoch());
        newer.fenced_put("data", "from B").await.unwrap();
        let e = zombie.fenced_put("data", "zombie").await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Fenced, "{server}: {e}");
        let e = zombie.fenced_delete("data").await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Fenced, "{server}: {e}");
        let got = b.fenced_get(&data).await.unwrap().unwrap();
        assert_eq!(got.bytes.as_ref(), b"from B", "{server}");
        assert_eq!(got.epoch, Some(newer.epoch()));
        assert!(newer.fenced_delete("data").await.unwrap(), "{server}");
        assert!(b.fenced_get(&data).await.unwrap().is_none());
        newer.release().await.unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Credentials.

const CREDENTIAL_VARS: &[&str] = &[
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCOUNT",
    "AZURE_TENANT_ID",
    "AZURE_CLIENT_ID",
    "AZURE_CLIENT_SECRET",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_AUTHORITY_HOST",
    "IDENTITY_ENDPOINT",
    "IDENTITY_HEADER",
];

/// Runs a check in a child process with another environment (the credential chain reads it).
fn run_child(mode: &str, envs: &[(&str, &str)]) {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_check", "--ignored", "--nocapture"])
        .env("LEASE_TEST_CHILD_MODE", mode);
    for var in CREDENTIAL_VARS {
        cmd.env_remove(var);
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child check {mode} failed:\n{text}");
    assert!(
        text.contains("1 passed"),
        "child check {mode} ran no test:\n{text}"
    );
}

/// An account SAS for the blob service, signed with Azurite's key (version 2019-12-12 form).
fn account_sas(permissions: &str) -> String {
    use base64::Engine;
    let key = base64::engine::general_purpose::STANDARD
        .decode(lease::store::azure::DEV_KEY)
        .unwrap();
    let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &key);
    let (sv, ss, srt, se, spr) = (
        "2019-12-12",
        "b",
        "sco",
        "2099-01-01T00:00:00Z",
        "https,http",
    );
    let to_sign = format!(
        "{}\n{permissions}\n{ss}\n{srt}\n\n{se}\n\n{spr}\n{sv}\n",
        lease::store::azure::DEV_ACCOUNT
    );
    let sig = base64::engine::general_purpose::STANDARD
        .encode(aws_lc_rs::hmac::sign(&key, to_sign.as_bytes()).as_ref());
    let sig: String =
        percent_encoding::utf8_percent_encode(&sig, percent_encoding::NON_ALPHANUMERIC).to_string();
    format!("sv={sv}&ss={ss}&srt={srt}&sp={permissions}&se={se}&spr={spr}&sig={sig}")
}

#[test]
fn credentials_azurite_checks() {
    for (_, url) in servers() {
        let endpoint = remote::endpoint_of(&url);
        // The URL without use_emulator: credentials come from the environment only.
        let plain = format!("az://devstoreaccount1/lease-test?endpoint={endpoint}");
        run_child(
            "ok",
            &[
                ("LEASE_TEST_CHILD_URL", &plain),
                ("AZURE_STORAGE_KEY", lease::store::azure::DEV_KEY),
                ("AZURE_STORAGE_ACCOUNT", "devstoreaccount1"),
            ],
        );
        run_child(
            "ok",
            &[
                ("LEASE_TEST_CHILD_URL", "az://devstoreaccount1/lease-test"),
                (
                    "AZURE_STORAGE_CONNECTION_STRING",
                    &format!(
                        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={};BlobEndpoint={endpoint};",
                        lease::store::azure::DEV_KEY
                    ),
                ),
            ],
        );
        run_child(
            "ok",
            &[
                ("LEASE_TEST_CHILD_URL", &plain),
                ("AZURE_STORAGE_SAS_TOKEN", &account_sas("rwdlac")),
            ],
        );
        // A SAS without write permission: reads work, writes are refused (403).
        run_child(
            "read-only",
            &[
                ("LEASE_TEST_CHILD_URL", &plain),
                (
                    "AZURE_STORAGE_SAS_TOKEN",
                    &format!("?{}", account_sas("rl")),
                ),
            ],
        );
        // A wrong key: Azurite refuses the signature.
        run_child(
            "refused",
            &[
                ("LEASE_TEST_CHILD_URL", &plain),
                (
                    "AZURE_STORAGE_KEY",
                    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==",
                ),
            ],
        );
        // A connection string for another account.
        run_child(
            "other-account",
            &[
                ("LEASE_TEST_CHILD_URL", &plain),
                (
                    "AZURE_STORAGE_CONNECTION_STRING",
                    "AccountName=someoneelse;AccountKey=a2V5",
                ),
            ],
        );
    }
}

/// An HTTP/1.1 server on 127.0.0.1 playing Entra ID's token endpoint (`POST /TENANT/oauth2/
/// v2.0/token`) and a blob service that answers 404 BlobNotFound; returns its address and the
/// request lines and `authorization` headers it saw.
async fn fake_entra(
    token: &'static str,
) -> (String, Arc<std::sync::Mutex<Vec<(String, String, String)>>>) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            let log = log.clone();
            tokio::spawn(async move {
                let (r, mut w) = socket.into_split();
                let mut r = BufReader::new(r);
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let (mut auth, mut len) = (String::new(), 0usize);
                    loop {
                        let mut h = String::new();
                        r.read_line(&mut h).await.unwrap();
                        let h = h.trim_end();
                        if h.is_empty() {
                            break;
                        }
                        let (k, v) = h.split_once(':').unwrap();
                        if k.eq_ignore_ascii_case("authorization") {
                            auth = v.trim().to_string();
                        }
                        if k.eq_ignore_ascii_case("content-length") {
                            len = v.trim().parse().unwrap();
                        }
                    }
                    let mut body = vec![0; len];
                    r.read_exact(&mut body).await.unwrap();
                    let line = line.trim_end().to_string();
                    let is_token = line.contains("/oauth2/v2.0/token");
                    log.lock().unwrap().push((
                        line,
                        auth,
                        String::from_utf8_lossy(&body).into_owned(),
                    ));
                    let reply = if is_token {
                        let body = format!(
                            r#"{{"access_token":"{token}","expires_in":3599,"token_type":"Bearer"}}"#
                        );
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        )
                    } else {
                        "HTTP/1.1 404 The specified blob does not exist.\r\nx-ms-error-code: BlobNotFound\r\ndate: Tue, 24 Nov 2026 02:45:14 GMT\r\ncontent-length: 0\r\n\r\n".to_string()
                    };
                    if w.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

#[test]
fn entra_id_credentials_from_the_environment() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (addr, seen) = rt.block_on(fake_entra("tok-entra"));
    let url = format!("az://acct1/cont?endpoint={addr}/acct1");
    run_child(
        "not-found",
        &[
            ("LEASE_TEST_CHILD_URL", &url),
            ("AZURE_TENANT_ID", "tenant-1"),
            ("AZURE_CLIENT_ID", "client-1"),
            ("AZURE_CLIENT_SECRET", "secret-1"),
            ("AZURE_AUTHORITY_HOST", &addr),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let federated = dir.path().join("token");
    std::fs::write(&federated, "federated-jwt\n").unwrap();
    run_child(
        "not-found",
        &[
            ("LEASE_TEST_CHILD_URL", &url),
            ("AZURE_TENANT_ID", "tenant-1"),
            ("AZURE_CLIENT_ID", "client-2"),
            ("AZURE_FEDERATED_TOKEN_FILE", federated.to_str().unwrap()),
            ("AZURE_AUTHORITY_HOST", &addr),
        ],
    );
    let seen = seen.lock().unwrap().clone();
    let tokens: Vec<_> = seen.iter().filter(|s| s.0.contains("/token")).collect();
    assert_eq!(tokens.len(), 2, "{seen:#?}");
    assert!(tokens[0].0.starts_with("POST /tenant-1/oauth2/v2.0/token"));
    assert!(
        tokens[0].2.contains("client_secret=secret-1")
            && tokens[0]
                .2
                .contains("scope=https%3A%2F%2Fstorage.azure.com%2F.default"),
        "{:?}",
        tokens[0]
    );
    assert!(
        tokens[1].2.contains("client_assertion=federated-jwt")
            && tokens[1].2.contains("client_id=client-2"),
        "{:?}",
        tokens[1]
    );
    let reads: Vec<_> = seen.iter().filter(|s| s.0.starts_with("GET")).collect();
    assert_eq!(reads.len(), 2, "{seen:#?}");
    for r in reads {
        assert!(r.0.starts_with("GET /acct1/cont/not-found-"), "{r:?}");
        assert_eq!(r.1, "Bearer tok-entra", "{r:?}");
    }
}

#[tokio::test]
#[ignore = "run in a child process by the credential tests"]
async fn child_check() {
    let mode = std::env::var("LEASE_TEST_CHILD_MODE").unwrap();
    let url = std::env::var("LEASE_TEST_CHILD_URL").unwrap();
    let store = open(&url);
    let key = format!("{}/child", unique(&mode));
    let read = store.get(&key, GetOptions::default()).await;
    let no_meta = lease::store::Meta::new();
    let write = || store.put(&key, "x".into(), lease::store::Cond::Create, &no_meta);
    match mode.as_str() {
        "ok" => {
            assert!(matches!(read.unwrap(), Get::NotFound { .. }));
            assert!(matches!(
                write().await.unwrap(),
                lease::store::Put::Written { .. }
            ));
        }
        "not-found" => {
            assert!(matches!(read.unwrap(), Get::NotFound { .. }));
        }
        "read-only" => {
            assert!(matches!(read.unwrap(), Get::NotFound { .. }));
            let e = write().await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Store, "{e}");
            assert!(e.message().contains("403"), "{e}");
            eprintln!("read-only SAS: {e}");
        }
        "refused" => {
            let e = read.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Store, "{e}");
            assert!(
                e.message().contains("403") && e.message().contains("AZURE_STORAGE_KEY"),
                "{e}"
            );
            eprintln!("wrong key: {e}");
        }
        "other-account" => {
            let e = read.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Store, "{e}");
            assert!(e.message().contains("someoneelse"), "{e}");
        }
        other => panic!("unknown child mode {other}"),
    }
}
