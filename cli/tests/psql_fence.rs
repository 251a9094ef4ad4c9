//! The `lease run` + `psql` recipe of docs/postgres.md, as written there: a shell job's SQL
//! fenced with `$LEASE_TOKEN` in one psql transaction, on a real PostgreSQL server
//! (scripts/postgres.sh; `LEASE_TEST_PG`, `LEASE_TEST_PG_BIN`). A later `lease run` gets a
//! higher epoch; the earlier job's token, replayed (a zombie), is refused and writes nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const LEASE: &str = env!("CARGO_BIN_EXE_lease");

fn server() -> Option<(String, PathBuf)> {
    match std::env::var("LEASE_TEST_PG") {
        Ok(d) if !d.is_empty() => {
            let bin = std::env::var("LEASE_TEST_PG_BIN").unwrap_or_else(|_| "/usr/bin".into());
            Some((d, PathBuf::from(bin).join("psql")))
        }
        _ if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("LEASE_TEST_PG is not set (CI=true: the PostgreSQL tests must run)")
        }
        _ => {
            eprintln!("SKIPPED: LEASE_TEST_PG is not set (scripts/postgres.sh start)");
            None
        }
    }
}

fn psql(psql: &Path, dsn: &str, schema: &str, args: &[&str]) -> Output {
    Command::new(psql)
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", dsn])
        .args(args)
        .env("PGOPTIONS", format!("-c search_path={schema}"))
        .output()
        .expect("psql")
}

#[test]
fn lease_run_fences_a_shell_jobs_sql_with_lease_token() {
    let Some((dsn, psql_bin)) = server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let schema = format!("cli_{}", std::process::id());
    let sql = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../postgres/lease_fence.sql");
    let out = psql(
        &psql_bin,
        &dsn,
        "public",
        &[
            "-c",
            &format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let out = psql(
        &psql_bin,
        &dsn,
        &schema,
        &[
            "-1",
            "-f",
            sql.to_str().unwrap(),
            "-c",
            "CREATE TABLE runs (epoch text)",
        ],
    );
    assert!(out.status.success(), "{out:?}");

    // The job, as docs/postgres.md has it: the fence first, then the job's own SQL.
    let job = dir.path().join("job.sql");
    std::fs::write(
        &job,
        "SELECT lease_fence('nightly', :'token');\nINSERT INTO runs VALUES (split_part(:'token', '#', 2));\n",
    )
    .unwrap();
    let lease_url = format!("file://{}/nightly", dir.path().display());
    let run = |n: usize| {
        // `sh -c` because psql reads variables from -v, not from the environment; the token is
        // kept in a file to replay it later.
        let script = format!(
            "echo \"$LEASE_TOKEN\" > {dir}/token{n}; \
             \"$PSQL\" -X -q -1 -v ON_ERROR_STOP=1 -v token=\"$LEASE_TOKEN\" -f {job} \"$DATABASE_URL\"",
            dir = dir.path().display(),
            job = job.display()
        );
        Command::new(LEASE)
            .args(["run", "--ttl", "5s", &lease_url, "--", "sh", "-c", &script])
            .env("PSQL", &psql_bin)
            .env("DATABASE_URL", &dsn)
            .env("PGOPTIONS", format!("-c search_path={schema}"))
            .output()
            .expect("lease run")
    };
    for n in [1, 2] {
        let out = run(n);
        assert!(out.status.success(), "lease run {n}: {out:?}");
    }
    // The first job's token again, after the second job committed: refused, nothing written.
    let first = std::fs::read_to_string(dir.path().join("token1")).unwrap();
    let out = psql(
        &psql_bin,
        &dsn,
        &schema,
        &[
            "-1",
            "-v",
            &format!("token={}", first.trim()),
            "-f",
            job.to_str().unwrap(),
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "the zombie's job was not refused: {out:?}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("newer than this holder's epoch"),
        "{stderr}"
    );
    let out = psql(
        &psql_bin,
        &dsn,
        &schema,
        &["-A", "-t", "-c", "SELECT count(*) FROM runs"],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "2", "{out:?}");
    psql(
        &psql_bin,
        &dsn,
        "public",
        &["-c", &format!("DROP SCHEMA {schema} CASCADE")],
    );
}
