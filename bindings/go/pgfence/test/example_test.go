package test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	lease "github.com/lease-dev/lease/bindings/go"
	"github.com/lease-dev/lease/bindings/go/pgfence"
)

// countJob is the example of docs/postgres.md and docs/ffi.md: a counter and an outbox row in
// one transaction fenced by the holder's token.
func countJob(ctx context.Context, db *sql.DB, l *lease.Lease) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	// An error matching lease.ErrFenced once a newer holder of "jobs" was admitted.
	if err := pgfence.Fence(ctx, tx, "jobs", l.Token(), &pgfence.Options{IdleTimeout: 10 * time.Second}); err != nil {
		return err
	}
	var n int64
	if err := tx.QueryRowContext(ctx, "SELECT n FROM counters WHERE name = 'jobs'").Scan(&n); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE counters SET n = $1 WHERE name = 'jobs'", n+1); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO outbox (body) VALUES ($1)", fmt.Sprintf("jobs is now %d", n+1)); err != nil {
		return err
	}
	return pgfence.MapError(tx.Commit())
}

func TestTheDocsExample(t *testing.T) {
	db, _ := setup(t)
	ctx := context.Background()
	for _, q := range []string{
		"CREATE TABLE counters (name text PRIMARY KEY, n bigint NOT NULL)",
		"CREATE TABLE outbox (id bigserial PRIMARY KEY, body text NOT NULL)",
		"INSERT INTO counters VALUES ('jobs', 0)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	store, err := lease.Open("file://" + t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	l, err := store.Acquire(ctx, "jobs", &lease.Options{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := 0; i < 2; i++ {
		if err := countJob(ctx, db, l); err != nil {
			t.Fatal(err)
		}
	}
	var n int64
	if err := db.QueryRow("SELECT n FROM counters WHERE name = 'jobs'").Scan(&n); err != nil || n != 2 {
		t.Fatalf("counter %d, %v", n, err)
	}
}
