// Package pgfence fences writes at a PostgreSQL database through database/sql (with pgx's
// stdlib driver, or any driver whose errors have a SQLState method): a lease holder's token is
// checked and recorded inside the holder's own transaction (docs/postgres.md).
//
//	tx, err := db.BeginTx(ctx, nil)
//	if err != nil { return err }
//	defer tx.Rollback()
//	if err := pgfence.Fence(ctx, tx, "jobs", l.Token(), nil); err != nil {
//		return err // errors.Is(err, lease.ErrFenced): a newer holder was admitted; stop
//	}
//	// … the transaction's reads and writes …
//	return tx.Commit()
//
// The transaction commits only if no later holder of the resource has been admitted, and a
// later holder's admission waits for (or refuses) this one while it is open. The SQL, one
// table and one function, is Schema (lease_fence.sql), installed by Migrate or by
// `psql -X -1 -f lease_fence.sql`. The package uses the caller's transaction or database
// handle and never opens a connection.
package pgfence

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	lease "github.com/lease-dev/lease/bindings/go"
)

// Schema is the one SQL definition of database fencing: the lease_fence table and function.
//
//go:embed lease_fence.sql
var Schema string

// Options bound the wait and the transaction of a Fence. The zero value leaves both to the
// session's settings.
type Options struct {
	// LockWait > 0: wait at most this long for an earlier holder's transaction that still
	// holds the resource, then an error matching lease.ErrTimeout. 0: the session's
	// lock_timeout (usually forever).
	LockWait time.Duration
	// IdleTimeout > 0: the server ends this session once it has been idle in this transaction
	// this long (idle_in_transaction_session_timeout), so a paused holder cannot block the
	// resource longer; its transaction is rolled back.
	IdleTimeout time.Duration
}

const fenceSQL = "SELECT lease_fence($1, $2, $3::text::interval, $4::text::interval)"

// Fence admits token for resource inside tx, or returns an error matching lease.ErrFenced: a
// newer holder of resource was admitted (the error's AdmittedEpoch), another holder with the
// same epoch was, or another lease's token fenced resource. It holds the resource's row lock
// until tx ends. Call it before the reads and writes it protects, not inside a savepoint you
// may roll back. Other errors: lease.ErrConflict (a serialization failure or a deadlock: roll
// back and run the transaction again), lease.ErrTimeout (Options.LockWait ran out),
// lease.ErrInvalid (a malformed token), lease.ErrStore (lease_fence is not installed: Migrate);
// any other driver error is returned as it is.
func Fence(ctx context.Context, tx *sql.Tx, resource string, token lease.Token, opts *Options) error {
	if tx == nil {
		return &Error{Kind: lease.ErrInvalid, Message: "pgfence.Fence: tx is nil"}
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	t := token.String()
	if _, err := tx.ExecContext(ctx, fenceSQL, resource, t, interval(o.LockWait), interval(o.IdleTimeout)); err != nil {
		return MapError(err)
	}
	return nil
}

func interval(d time.Duration) any {
	if d <= 0 {
		return nil
	}
	ms := d.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	return strconv.FormatInt(ms, 10) + " milliseconds"
}

// Migrate installs (or upgrades) the lease_fence table and function in the first schema of the
// search_path, in one transaction. Safe to run from many processes at once.
func Migrate(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, Schema); err != nil {
		return err
	}
	return tx.Commit()
}

// Error is a database error mapped to a lease error kind. errors.Is(err, lease.ErrFenced) (or
// the kind it has) matches it, and errors.As reaches the driver's error (*pgconn.PgError).
type Error struct {
	// Kind is one of lease.ErrFenced, ErrInvalid, ErrConflict, ErrTimeout, ErrStore.
	Kind error
	// SQLState is the database's code (LF001 for a refused token).
	SQLState string
	Message  string
	// AdmittedEpoch is the epoch admitted for the resource, when the error names it.
	AdmittedEpoch uint64
	// Err is the driver's error.
	Err error
}

func (e *Error) Error() string        { return e.Message }
func (e *Error) Is(target error) bool { return target == e.Kind }
func (e *Error) Unwrap() error        { return e.Err }

var admittedRe = regexp.MustCompile(`#([0-9]+)(?:@[0-9A-Za-z]+)?$`)

// MapError maps a driver error of a fenced transaction to an *Error, or returns it unchanged
// when fencing maps none. Use it on the other statements too: a COMMIT that fails with a
// serialization failure is lease.ErrConflict.
func MapError(err error) error {
	var st interface{ SQLState() string }
	if err == nil || !errors.As(err, &st) {
		return err
	}
	code, msg := st.SQLState(), messageOf(st, err)
	e := &Error{SQLState: code, Err: err, Message: fmt.Sprintf("%s (SQLSTATE %s)", msg, code)}
	switch {
	case code == "LF001":
		e.Kind = lease.ErrFenced
		if m := admittedRe.FindStringSubmatch(field(st, "Detail")); m != nil {
			e.AdmittedEpoch, _ = strconv.ParseUint(m[1], 10, 64)
		}
	case code == "LF002":
		e.Kind = lease.ErrInvalid
	case code == "40001" || code == "40P01":
		e.Kind = lease.ErrConflict
		e.Message += ": roll back and run the transaction again"
	case code == "55P03":
		e.Kind = lease.ErrTimeout
		e.Message += ": an earlier holder's transaction still holds the resource; retry later"
	case (code == "42883" || code == "42P01") && strings.Contains(msg, "lease_fence"):
		e.Kind = lease.ErrStore
		e.Message += ": lease_fence is not installed in this database: run pgfence.Migrate or `psql -X -1 -f lease_fence.sql`"
	default:
		return err
	}
	return e
}

// The primary message without the driver's decorations (pgconn's Message field), else Error().
func messageOf(st any, err error) string {
	if m := field(st, "Message"); m != "" {
		return m
	}
	return err.Error()
}

// A string field of the driver's error struct (pgconn.PgError and lib/pq's Error have Message
// and Detail), or "".
func field(v any, name string) string {
	r := reflect.ValueOf(v)
	for r.Kind() == reflect.Pointer || r.Kind() == reflect.Interface {
		if r.IsNil() {
			return ""
		}
		r = r.Elem()
	}
	if r.Kind() != reflect.Struct {
		return ""
	}
	f := r.FieldByName(name)
	if !f.IsValid() || f.Kind() != reflect.String {
		return ""
	}
	return f.String()
}
