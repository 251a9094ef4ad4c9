// The Go worker of the real-process histories (postgres/tests/history.py; the protocol is in
// postgres/examples/history_worker.rs): a lease holder running read-modify-write transactions
// on a counter, fenced by pgfence, printing what happened to each.
//
//	worker DSN LEASE_URL RESOURCE NAME OPS PAUSE FENCE
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	lease "github.com/lease-dev/lease/bindings/go"
	"github.com/lease-dev/lease/bindings/go/pgfence"
)

func say(format string, args ...any) {
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

func envMs(name string) time.Duration {
	v, _ := strconv.Atoi(os.Getenv(name))
	return time.Duration(v) * time.Millisecond
}

func pause(at, wanted string, op int) {
	if op == 1 && at == wanted {
		say("paused %s", at)
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	}
}

func main() {
	if len(os.Args) != 8 {
		fmt.Fprintln(os.Stderr, "usage: worker DSN LEASE_URL RESOURCE NAME OPS PAUSE FENCE")
		os.Exit(64)
	}
	dsn, url, resource, name, at, fencing := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[6], os.Args[7]
	ops, _ := strconv.Atoi(os.Args[5])
	ctx := context.Background()
	var held *lease.Lease
	var token lease.Token
	if t := os.Getenv("LEASE_PG_TOKEN"); t != "" {
		var err error
		if token, err = lease.ParseToken(t); err != nil {
			say("error setup invalid %v", err)
			os.Exit(4)
		}
	} else {
		// file:///dir/lease: the store is the directory, the lease its last element.
		store, err := lease.Open(strings.TrimSuffix(url, "/"+path.Base(url)))
		if err != nil {
			say("error setup store %v", err)
			os.Exit(4)
		}
		ttl := envMs("LEASE_PG_TTL_MS")
		if ttl == 0 {
			ttl = time.Second
		}
		if held, err = store.Acquire(ctx, path.Base(url), &lease.Options{TTL: ttl}); err != nil {
			say("error setup acquire %v", err)
			os.Exit(4)
		}
		token = held.Token()
	}
	say("holding %d %s", token.Epoch, token)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		say("error setup open %v", err)
		os.Exit(4)
	}
	db.SetMaxOpenConns(1)
	think := envMs("LEASE_PG_THINK_MS")
	opts := &pgfence.Options{IdleTimeout: envMs("LEASE_PG_IDLE_TIMEOUT_MS")}
	for i := 1; i <= ops; i++ {
		op := fmt.Sprintf("%s-%d", name, i)
		if held != nil && held.EnsureHeld(100*time.Millisecond) != nil {
			say("lost %s", op)
			os.Exit(5)
		}
		read, err := transaction(ctx, db, i, op, name, resource, at, fencing == "fence", token, opts, think)
		if err != nil {
			var fe *pgfence.Error
			if errors.Is(err, lease.ErrFenced) && errors.As(err, &fe) {
				say("fenced %s %d", op, fe.AdmittedEpoch)
				os.Exit(3)
			}
			say("error %s %s", op, strings.ReplaceAll(err.Error(), "\n", " "))
			os.Exit(4)
		}
		say("ack %s %d %d", op, read, token.Epoch)
	}
	if held != nil {
		_ = held.Release()
	}
	say("done")
}

func transaction(ctx context.Context, db *sql.DB, i int, op, name, resource, at string, fenced bool,
	token lease.Token, opts *pgfence.Options, think time.Duration) (int64, error) {
	time.Sleep(think)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	pause(at, "before-fence", i)
	if fenced {
		if err := pgfence.Fence(ctx, tx, resource, token, opts); err != nil {
			return 0, err
		}
	}
	var read int64
	if err := tx.QueryRowContext(ctx, "SELECT n FROM pg_counter WHERE id = $1", resource).Scan(&read); err != nil {
		return 0, err
	}
	pause(at, "after-read", i)
	time.Sleep(think / 2)
	if _, err := tx.ExecContext(ctx, "UPDATE pg_counter SET n = $1 WHERE id = $2", read+1, resource); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx,
		"INSERT INTO pg_history (op, worker, epoch, read_n, resource) VALUES ($1, $2, $3::text::numeric, $4, $5)",
		op, name, strconv.FormatUint(token.Epoch, 10), read, resource); err != nil {
		return 0, err
	}
	pause(at, "before-commit", i)
	return read, pgfence.MapError(tx.Commit())
}
