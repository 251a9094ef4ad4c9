//! `lease_fence` on a real PostgreSQL server (scripts/postgres.sh; `LEASE_TEST_PG`): the
//! admission rule, the waits, the isolation levels, the idle timeout, and the error mapping.
//! Each test works in a schema of its own, installed by `migrate`.

#![allow(clippy::disallowed_methods)] // these tests wait on a real server in real time

use std::time::Duration;

use lease::{ErrorKind, FencingToken};
use lease_postgres::{error, fence, fence_with, migrate, FenceOptions};
use tokio_postgres::{Client, NoTls};

/// The test server, or `None` (skipped, said on stderr) outside CI when none was started.
fn dsn() -> Option<String> {
    match std::env::var("LEASE_TEST_PG") {
        Ok(d) if !d.is_empty() => Some(d),
        _ if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("LEASE_TEST_PG is not set (CI=true: the PostgreSQL tests must run; scripts/postgres.sh start)")
        }
        _ => {
            eprintln!("SKIPPED: LEASE_TEST_PG is not set (scripts/postgres.sh start)");
            None
        }
    }
}

async fn connect(dsn: &str, schema: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(dsn, NoTls).await.expect("connect");
    tokio::spawn(conn);
    client
        .batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {schema}; SET search_path = {schema}; \
             SET application_name = '{schema}'"
        ))
        .await
        .expect("schema");
    client
}

/// A fresh schema with lease_fence installed, and a connection to it.
async fn setup(dsn: &str, test: &str) -> (Client, String) {
    let schema = format!("t_{test}_{}", std::process::id());
    let admin = connect(dsn, "public").await;
    admin
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
    let mut client = connect(dsn, &schema).await;
    migrate(&mut client).await.expect("migrate");
    client
        .batch_execute("CREATE TABLE data (id int PRIMARY KEY, v text)")
        .await
        .unwrap();
    (client, schema)
}

fn token(lease: &str, epoch: u64, holder: Option<&str>) -> FencingToken {
    let t = FencingToken::new(lease, epoch);
    match holder {
        Some(h) => t.with_holder(h),
        None => t,
    }
}

/// Admit `t` in a transaction of its own and commit it.
async fn admit(client: &mut Client, resource: &str, t: &FencingToken) -> lease::Result<()> {
    let tx = client.transaction().await.map_err(error)?;
    fence(&tx, resource, t).await?;
    tx.commit().await.map_err(error)
}

/// Until a session of this test (its application_name is the schema) waits on a lock inside
/// lease_fence.
async fn wait_for_lock_waiter(observer: &Client) {
    for _ in 0..3000 {
        let row = observer
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                 AND query LIKE '%lease_fence%' AND pid <> pg_backend_pid() \
                 AND application_name = current_setting('application_name')",
                &[],
            )
            .await
            .unwrap();
        if row.get::<_, i64>(0) > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no admission ever waited on the row lock");
}

#[tokio::test]
async fn the_admission_rule_is_the_gates() {
    let Some(dsn) = dsn() else { return };
    let (mut c, _) = setup(&dsn, "rule").await;
    let l = "s3://bucket/locks/jobs";
    admit(&mut c, "jobs", &token(l, 5, Some("aa")))
        .await
        .unwrap();
    // The same holder again, and a higher epoch.
    admit(&mut c, "jobs", &token(l, 5, Some("aa")))
        .await
        .unwrap();
    admit(&mut c, "jobs", &token(l, 6, Some("bb")))
        .await
        .unwrap();
    // A lower epoch: Fenced, carrying the admitted epoch.
    let e = admit(&mut c, "jobs", &token(l, 5, Some("aa")))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Fenced, "{e}");
    assert_eq!(e.epoch(), Some(6));
    assert_eq!(e.lease(), Some(l));
    // The same epoch of another holder.
    let e = admit(&mut c, "jobs", &token(l, 6, Some("cc")))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Fenced, "{e}");
    assert!(e.to_string().contains("another holder"), "{e}");
    // Another lease's token, even with a higher epoch.
    let e = admit(
        &mut c,
        "jobs",
        &token("s3://bucket/locks/other", 99, Some("aa")),
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Fenced, "{e}");
    assert!(
        e.to_string().contains("another lease") || e.to_string().contains("fenced by the lease"),
        "{e}"
    );
    // A token without a holder cannot be told apart at the same epoch: admitted, and it does not
    // erase the holder recorded, so another holder of epoch 6 is still refused.
    admit(&mut c, "jobs", &token(l, 6, None)).await.unwrap();
    let e = admit(&mut c, "jobs", &token(l, 6, Some("cc")))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Fenced, "{e}");
    admit(&mut c, "jobs", &token(l, 6, Some("bb")))
        .await
        .unwrap();
    // Resources are independent.
    admit(&mut c, "other", &token(l, 1, Some("aa")))
        .await
        .unwrap();
    let rows = c
        .query(
            "SELECT resource, epoch::text, holder FROM lease_fence ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    let got: Vec<(String, String, Option<String>)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        got,
        vec![
            ("jobs".into(), "6".into(), Some("bb".into())),
            ("other".into(), "1".into(), Some("aa".into()))
        ]
    );
}

#[tokio::test]
async fn bad_input_and_a_missing_install_are_typed() {
    let Some(dsn) = dsn() else { return };
    let (c, schema) = setup(&dsn, "bad").await;
    for (resource, token) in [
        ("", "u#1@aa"),
        ("r", "u#x"),
        ("r", "u#1@"),
        ("r", "#1"),
        ("r", "u#18446744073709551616"),
    ] {
        let e = c
            .execute("SELECT lease_fence($1, $2)", &[&resource, &token])
            .await
            .map_err(error)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{resource:?} {token:?}: {e}");
    }
    // NULL is refused, never taken as "no check".
    let e = c
        .execute("SELECT lease_fence('r', NULL)", &[])
        .await
        .map_err(error)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    // Without the migration: Store, saying what to do.
    c.batch_execute(&format!(
        "DROP FUNCTION {schema}.lease_fence(text, text, interval, interval)"
    ))
    .await
    .unwrap();
    let mut c = c;
    let tx = c.transaction().await.unwrap();
    let e = fence(&tx, "r", &token("u", 1, Some("aa")))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Store, "{e}");
    assert!(e.to_string().contains("migrate"), "{e}");
}

/// A queued lock's shared or scoped grant's token (`;shared`, `;path=P`, `;range=A..B`) is
/// `Invalid` with a message saying what to do, never read as a whole-lock token: one row per
/// resource cannot apply the per-scope rule (docs/postgres.md). `;exclusive` alone names the
/// whole lock held exclusively, as the library's parser reads it: admitted.
#[tokio::test]
async fn a_shared_or_scoped_grants_token_is_refused_as_invalid() {
    let Some(dsn) = dsn() else { return };
    let (mut c, _) = setup(&dsn, "scoped").await;
    let l = "s3://bucket/locks/jobs";
    let grants = [
        token(l, 7, Some("aa")).with_mode(lease::Mode::Shared),
        token(l, 7, Some("aa")).with_scope(lease::Scope::path("tables/a#b;c").unwrap()),
        token(l, 7, Some("aa")).with_scope(lease::Scope::Range { start: 0, end: 10 }),
        token(l, 7, None)
            .with_mode(lease::Mode::Shared)
            .with_scope(lease::Scope::Range { start: 0, end: 10 }),
    ];
    for t in &grants {
        let e = admit(&mut c, "jobs", t).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{t}: {e}");
        assert!(e.to_string().contains("shared or scoped grant"), "{t}: {e}");
    }
    let rows = c.query("SELECT 1 FROM lease_fence", &[]).await.unwrap();
    assert!(rows.is_empty(), "a refused grant was recorded");
    for text in [format!("{l}#7@aa;exclusive"), format!("{l}#8;exclusive")] {
        c.execute("SELECT lease_fence('jobs', $1)", &[&text])
            .await
            .unwrap_or_else(|e| panic!("{text}: {e}"));
    }
    let row = c
        .query_one("SELECT epoch::text, holder FROM lease_fence", &[])
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, Option<String>>(1)),
        ("8".into(), None)
    );
    // A whole-lock exclusive token of a lower epoch is still refused by the row they left.
    let e = admit(&mut c, "jobs", &token(l, 7, Some("aa")))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Fenced, "{e}");
}

#[tokio::test]
async fn a_later_admission_waits_for_the_earlier_transaction() {
    let Some(dsn) = dsn() else { return };
    let (mut a, schema) = setup(&dsn, "wait").await;
    let mut b = connect(&dsn, &schema).await;
    let observer = connect(&dsn, &schema).await;
    let l = "file:///locks/w";
    let ta = a.transaction().await.unwrap();
    fence(&ta, "w", &token(l, 5, Some("aa"))).await.unwrap();
    ta.execute("INSERT INTO data VALUES (1, 'a')", &[])
        .await
        .unwrap();
    // B (a newer holder) is admitted only once A's transaction ends.
    let later = tokio::spawn(async move {
        let tb = b.transaction().await.unwrap();
        fence(&tb, "w", &token(l, 6, Some("bb"))).await?;
        let seen: Option<String> = tb
            .query_opt("SELECT v FROM data WHERE id = 1", &[])
            .await
            .map_err(error)?
            .map(|r| r.get(0));
        tb.execute("UPDATE data SET v = 'b' WHERE id = 1", &[])
            .await
            .map_err(error)?;
        tb.commit().await.map_err(error)?;
        Ok::<_, lease::Error>(seen)
    });
    wait_for_lock_waiter(&observer).await;
    assert!(
        !later.is_finished(),
        "B was admitted while A's transaction was open"
    );
    ta.commit().await.unwrap();
    // B waited for A's commit, and read A's write.
    assert_eq!(later.await.unwrap().unwrap(), Some("a".to_string()));
    let v: String = a
        .query_one("SELECT v FROM data WHERE id = 1", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(v, "b");
    // A's transaction is over: its next one is refused.
    let e = admit(&mut a, "w", &token(l, 5, Some("aa")))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Fenced);
}

#[tokio::test]
async fn lock_wait_bounds_the_wait() {
    let Some(dsn) = dsn() else { return };
    let (mut a, schema) = setup(&dsn, "lockwait").await;
    let mut b = connect(&dsn, &schema).await;
    let l = "file:///locks/lw";
    let ta = a.transaction().await.unwrap();
    fence(&ta, "lw", &token(l, 5, Some("aa"))).await.unwrap();
    for wait in [Duration::ZERO, Duration::from_millis(50)] {
        let tb = b.transaction().await.unwrap();
        let e = fence_with(
            &tb,
            "lw",
            &token(l, 6, Some("bb")),
            &FenceOptions::new().lock_wait(wait),
        )
        .await
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
        assert!(e.kind().is_retryable());
    }
    ta.rollback().await.unwrap();
    // The lock_timeout was the fence's alone: the session's own setting is unchanged.
    let tb = b.transaction().await.unwrap();
    fence_with(
        &tb,
        "lw",
        &token(l, 6, Some("bb")),
        &FenceOptions::new().lock_wait(Duration::from_secs(5)),
    )
    .await
    .unwrap();
    let lt: String = tb.query_one("SHOW lock_timeout", &[]).await.unwrap().get(0);
    assert_eq!(lt, "0");
    tb.commit().await.unwrap();
}

#[tokio::test]
async fn under_repeatable_read_and_serializable_a_concurrent_admission_is_a_conflict() {
    use tokio_postgres::IsolationLevel::{RepeatableRead, Serializable};
    let Some(dsn) = dsn() else { return };
    let (mut a, schema) = setup(&dsn, "rr").await;
    let observer = connect(&dsn, &schema).await;
    let l = "file:///locks/rr";
    for (epoch, level) in [(5, RepeatableRead), (7, Serializable)] {
        let mut b = connect(&dsn, &schema).await;
        let ta = a.transaction().await.unwrap();
        fence(&ta, "rr", &token(l, epoch, Some("aa")))
            .await
            .unwrap();
        let later = tokio::spawn(async move {
            let tb = b
                .build_transaction()
                .isolation_level(level)
                .start()
                .await
                .unwrap();
            fence(&tb, "rr", &token(l, epoch + 1, Some("bb"))).await
        });
        wait_for_lock_waiter(&observer).await;
        ta.commit().await.unwrap();
        let e = later.await.unwrap().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Conflict, "{level:?}: {e}");
        // Run again, it is admitted.
        admit(&mut a, "rr", &token(l, epoch + 1, Some("bb")))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn idle_timeout_ends_a_paused_holders_transaction() {
    let Some(dsn) = dsn() else { return };
    let (mut a, schema) = setup(&dsn, "idle").await;
    let mut b = connect(&dsn, &schema).await;
    let l = "file:///locks/idle";
    let ta = a.transaction().await.unwrap();
    fence_with(
        &ta,
        "idle",
        &token(l, 5, Some("aa")),
        &FenceOptions::new().idle_timeout(Duration::from_millis(200)),
    )
    .await
    .unwrap();
    ta.execute("INSERT INTO data VALUES (2, 'zombie')", &[])
        .await
        .unwrap();
    // A is now "paused" with its transaction open. B, waiting without a bound, gets in once the
    // server has ended A's session.
    admit(&mut b, "idle", &token(l, 6, Some("bb")))
        .await
        .unwrap();
    let e = ta.commit().await.map_err(error).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let n: i64 = b
        .query_one("SELECT count(*) FROM data WHERE id = 2", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "the paused holder's write landed");
}

#[tokio::test]
async fn a_rolled_back_admission_is_not_recorded() {
    let Some(dsn) = dsn() else { return };
    let (mut c, _) = setup(&dsn, "rollback").await;
    let l = "file:///locks/rb";
    admit(&mut c, "rb", &token(l, 5, Some("aa"))).await.unwrap();
    let tx = c.transaction().await.unwrap();
    fence(&tx, "rb", &token(l, 9, Some("zz"))).await.unwrap();
    tx.rollback().await.unwrap();
    // Epoch 9 never committed a transaction: 6 is still admitted.
    admit(&mut c, "rb", &token(l, 6, Some("bb"))).await.unwrap();
}

#[tokio::test]
async fn migrate_runs_from_many_sessions_at_once() {
    let Some(dsn) = dsn() else { return };
    let schema = format!("t_migrate_{}", std::process::id());
    let admin = connect(&dsn, "public").await;
    admin
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        ))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let dsn = dsn.clone();
        let schema = schema.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = connect(&dsn, &schema).await;
            migrate(&mut c).await
        }));
    }
    for t in tasks {
        t.await.unwrap().expect("concurrent migrate");
    }
    // Installed into that schema, and usable from a session whose search_path lacks it.
    let mut other = connect(&dsn, "public").await;
    let tx = other.transaction().await.unwrap();
    tx.execute(&format!("SELECT {schema}.lease_fence('m', 'u#1@aa')"), &[])
        .await
        .unwrap();
    tx.commit().await.unwrap();
}
