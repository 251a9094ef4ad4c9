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

/// The recipe's setting: `lease_fence` and the table `runs` installed in a fresh schema, the
/// job's SQL as docs/postgres.md has it (the fence first, then the job's own SQL), and a lease
/// in a scratch directory. The schema is dropped at the end.
struct Job {
    dsn: String,
    psql_bin: PathBuf,
    schema: String,
    dir: tempfile::TempDir,
    sql: PathBuf,
    lease_url: String,
}

impl Job {
    fn install(dsn: String, psql_bin: PathBuf, schema: String) -> Job {
        let dir = tempfile::tempdir().unwrap();
        let fence = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../postgres/lease_fence.sql");
        let drop_create = format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}");
        let out = psql(&psql_bin, &dsn, "public", &["-c", &drop_create]);
        assert!(out.status.success(), "{out:?}");
        let install = [
            "-1",
            "-f",
            fence.to_str().unwrap(),
            "-c",
            "CREATE TABLE runs (epoch text)",
        ];
        let out = psql(&psql_bin, &dsn, &schema, &install);
        assert!(out.status.success(), "{out:?}");
        let sql = dir.path().join("job.sql");
        std::fs::write(
            &sql,
            "SELECT lease_fence('nightly', :'token');\nINSERT INTO runs VALUES (split_part(:'token', '#', 2));\n",
        )
        .unwrap();
        let lease_url = format!("file://{}/nightly", dir.path().display());
        Job {
            dsn,
            psql_bin,
            schema,
            dir,
            sql,
            lease_url,
        }
    }

    /// `lease run [flags] LEASE -- sh -c 'psql … -f job.sql'`; the token is kept in `token{n}`.
    fn run(&self, flags: &[&str], n: usize) -> Output {
        // `sh -c` because psql reads variables from -v, not from the environment.
        let script = format!(
            "echo \"$LEASE_TOKEN\" > {dir}/token{n}; \
             \"$PSQL\" -X -q -1 -v ON_ERROR_STOP=1 -v token=\"$LEASE_TOKEN\" -f {job} \"$DATABASE_URL\"",
            dir = self.dir.path().display(),
            job = self.sql.display()
        );
        Command::new(LEASE)
            .args(["run", "--ttl", "5s"])
            .args(flags)
            .args([&self.lease_url, "--", "sh", "-c", &script])
            .env("PSQL", &self.psql_bin)
            .env("DATABASE_URL", &self.dsn)
            .env("PGOPTIONS", format!("-c search_path={}", self.schema))
            .output()
            .expect("lease run")
    }

    /// The token `lease run` number `n` exported.
    fn token(&self, n: usize) -> String {
        let token = std::fs::read_to_string(self.dir.path().join(format!("token{n}"))).unwrap();
        token.trim().to_string()
    }

    /// The job's SQL run again by hand with `token` (a zombie replaying its token, say).
    fn replay(&self, token: &str) -> Output {
        let var = format!("token={token}");
        let args = ["-1", "-v", &var, "-f", self.sql.to_str().unwrap()];
        psql(&self.psql_bin, &self.dsn, &self.schema, &args)
    }

    fn runs(&self) -> String {
        let count = ["-A", "-t", "-c", "SELECT count(*) FROM runs"];
        let out = psql(&self.psql_bin, &self.dsn, &self.schema, &count);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let drop = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema);
        psql(&self.psql_bin, &self.dsn, "public", &["-c", &drop]);
    }
}

#[test]
fn lease_run_fences_a_shell_jobs_sql_with_lease_token() {
    let Some((dsn, psql_bin)) = server() else {
        return;
    };
    let job = Job::install(dsn, psql_bin, format!("cli_{}", std::process::id()));
    for n in [1, 2] {
        let out = job.run(&[], n);
        assert!(out.status.success(), "lease run {n}: {out:?}");
    }
    // The first job's token again, after the second job committed: refused, nothing written.
    let out = job.replay(&job.token(1));
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
    assert_eq!(job.runs(), "2");
}

/// A queued lock's shared or scoped grant: `$LEASE_TOKEN` says so (`;shared`, `;path=P`,
/// `;range=A..B`), and `lease_fence` refuses it with LF002 (psql's exit 3) saying what to do,
/// rather than admit it as a whole-lock token; the job writes nothing. A whole-lock exclusive
/// grant of the same queued lock is admitted.
#[test]
fn lease_fence_refuses_a_shared_or_scoped_grants_lease_token() {
    let Some((dsn, psql_bin)) = server() else {
        return;
    };
    let job = Job::install(dsn, psql_bin, format!("cli_scoped_{}", std::process::id()));
    let grants: [&[&str]; 3] = [
        &["--shared"],
        &["--scope", "tables/users"],
        &["--range", "0..4096"],
    ];
    for (n, flags) in grants.into_iter().enumerate() {
        let out = job.run(flags, n);
        assert_eq!(
            out.status.code(),
            Some(3),
            "{flags:?} was not refused: {out:?}"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("shared or scoped grant"),
            "{flags:?}: {stderr}"
        );
        assert!(job.token(n).contains(';'), "{flags:?}: {}", job.token(n));
    }
    assert_eq!(job.runs(), "0");
    let out = job.run(&["--queue"], 9);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(job.runs(), "1");
}
