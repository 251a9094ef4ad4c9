// pgfence on a real PostgreSQL server (scripts/postgres.sh; LEASE_TEST_PG), through
// database/sql with pgx's stdlib driver: the admission rule and its errors, the waits, and the
// real-process histories (postgres/tests/history.py) with the Go worker (./worker). A module of
// its own, so that pgx is a dependency of these tests and never of users of bindings/go.
package test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"
	lease "github.com/lease-dev/lease/bindings/go"
	"github.com/lease-dev/lease/bindings/go/pgfence"
)

const l = "s3://bucket/locks/jobs"

func dsn(t *testing.T) string {
	d := os.Getenv("LEASE_TEST_PG")
	if d == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("LEASE_TEST_PG is not set (CI=true: the PostgreSQL tests must run)")
		}
		t.Skip("LEASE_TEST_PG is not set (scripts/postgres.sh start)")
	}
	return d
}

// A fresh schema with lease_fence installed by Migrate, and a handle whose sessions use it.
func setup(t *testing.T) (*sql.DB, string) {
	d := dsn(t)
	schema := fmt.Sprintf("go_%d_%d", os.Getpid(), time.Now().UnixNano())
	admin, err := sql.Open("pgx", d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec("DROP SCHEMA " + schema + " CASCADE"); admin.Close() })
	sep := "?"
	if strings.Contains(d, "?") {
		sep = "&"
	}
	db, err := sql.Open("pgx", d+sep+"search_path="+schema+"&application_name="+schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := pgfence.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	if err := pgfence.Migrate(context.Background(), db); err != nil {
		t.Fatal("migrate again:", err)
	}
	return db, schema
}

func tok(t *testing.T, s string) lease.Token {
	tk, err := lease.ParseToken(s)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func admit(db *sql.DB, resource string, token lease.Token, opts *pgfence.Options) error {
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := pgfence.Fence(ctx, tx, resource, token, opts); err != nil {
		return err
	}
	return tx.Commit()
}

func TestAdmissionRuleAndErrors(t *testing.T) {
	db, _ := setup(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(admit(db, "jobs", tok(t, l+"#5@aa"), nil))
	must(admit(db, "jobs", tok(t, l+"#5@aa"), nil))
	must(admit(db, "jobs", tok(t, l+"#6@bb"), nil))
	err := admit(db, "jobs", tok(t, l+"#5@aa"), nil)
	var fe *pgfence.Error
	if !errors.Is(err, lease.ErrFenced) || !errors.As(err, &fe) || fe.AdmittedEpoch != 6 || fe.SQLState != "LF001" {
		t.Fatalf("a lower epoch: %#v", err)
	}
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != "LF001" {
		t.Fatalf("the driver's error is not reachable: %v", err)
	}
	if err := admit(db, "jobs", tok(t, l+"#6@cc"), nil); !errors.Is(err, lease.ErrFenced) || !strings.Contains(err.Error(), "another holder") {
		t.Fatalf("equal epoch, another holder: %v", err)
	}
	if err := admit(db, "jobs", tok(t, "s3://bucket/locks/other#99@aa"), nil); !errors.Is(err, lease.ErrFenced) {
		t.Fatalf("another lease: %v", err)
	}
	must(admit(db, "jobs", tok(t, l+"#6"), nil))
	if err := admit(db, "jobs", tok(t, l+"#6@cc"), nil); !errors.Is(err, lease.ErrFenced) {
		t.Fatalf("a holderless token erased the holder: %v", err)
	}
	if err := admit(db, "", tok(t, l+"#7@aa"), nil); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("empty resource: %v", err)
	}
	// A queued lock's shared or scoped grant: refused as invalid, never read as a whole-lock
	// token (docs/postgres.md), and nothing recorded.
	for _, s := range []string{l + "#9@aa;shared", l + "#9@aa;path=tables/users", l + "#9@aa;range=0..10"} {
		if err := admit(db, "jobs", tok(t, s), nil); !errors.Is(err, lease.ErrInvalid) || !strings.Contains(err.Error(), "shared or scoped grant") {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if err := admit(db, "jobs", tok(t, l+"#6@cc"), nil); !errors.Is(err, lease.ErrFenced) {
		t.Fatalf("a refused grant changed the row: %v", err)
	}
}

func TestWaitsAndRepeatableRead(t *testing.T) {
	db, schema := setup(t)
	ctx := context.Background()
	a, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pgfence.Fence(ctx, a, "w", tok(t, l+"#5@aa"), nil); err != nil {
		t.Fatal(err)
	}
	for _, wait := range []time.Duration{time.Millisecond, 50 * time.Millisecond} {
		if err := admit(db, "w", tok(t, l+"#6@bb"), &pgfence.Options{LockWait: wait}); !errors.Is(err, lease.ErrTimeout) {
			t.Fatalf("lock wait %v: %v", wait, err)
		}
	}
	done := make(chan error, 1)
	go func() {
		b, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
		if err != nil {
			done <- err
			return
		}
		defer func() { _ = b.Rollback() }()
		done <- pgfence.Fence(ctx, b, "w", tok(t, l+"#6@bb"), nil)
	}()
	for i := 0; ; i++ {
		var n int
		if err := db.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND application_name = $1 AND query LIKE '%lease_fence%'", schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if i > 3000 {
			t.Fatal("no admission ever waited on the row lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("B was admitted while A's transaction was open: %v", err)
	default:
	}
	if err := a.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, lease.ErrConflict) {
		t.Fatalf("repeatable read: %v", err)
	}
	if err := admit(db, "w", tok(t, l+"#6@bb"), nil); err != nil {
		t.Fatal(err)
	}
}

func TestMissingInstallSaysMigrate(t *testing.T) {
	d := dsn(t)
	db, err := sql.Open("pgx", d)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.Exec("SET LOCAL search_path = pg_catalog"); err != nil {
		t.Fatal(err)
	}
	if err := pgfence.Fence(ctx, tx, "x", tok(t, l+"#1@aa"), nil); !errors.Is(err, lease.ErrStore) || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("missing install: %v", err)
	}
}

// The histories need the worker binary: go build ./worker (test-ffi.sh builds it and passes
// LEASE_PG_GO_WORKER).
func TestHistories(t *testing.T) {
	d := dsn(t)
	worker := os.Getenv("LEASE_PG_GO_WORKER")
	if worker == "" {
		worker = filepath.Join(t.TempDir(), "worker")
		if out, err := exec.Command("go", "build", "-o", worker, "./worker").CombinedOutput(); err != nil {
			t.Fatalf("go build ./worker: %v\n%s", err, out)
		}
	}
	cmd := exec.Command("python3", "../../../../postgres/tests/history.py", "--dsn", d, "--worker", worker)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("history.py: %v", err)
	}
}
