// The Go worker of the cross-language test (ffi/tests/cross/run.sh).
//
//	crossworker LEASE_STORE NAME HISTORY ROUNDS HOLD_MS
//
// ROUNDS times: acquire NAME (waiting), append "START go PID EPOCH" to HISTORY, work HOLD_MS,
// check the lease is still held, append "END go PID EPOCH", release. Each line is one write to
// a file opened with O_APPEND, so lines of concurrent workers never interleave.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	lease "github.com/lease-dev/lease/bindings/go"
)

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: crossworker LEASE_STORE NAME HISTORY ROUNDS HOLD_MS")
		os.Exit(64)
	}
	rounds, _ := strconv.Atoi(os.Args[4])
	holdMs, _ := strconv.Atoi(os.Args[5])
	if err := run(os.Args[1], os.Args[2], os.Args[3], rounds, time.Duration(holdMs)*time.Millisecond); err != nil {
		fmt.Fprintln(os.Stderr, "crossworker:", err)
		os.Exit(1)
	}
}

func run(storeURL, name, history string, rounds int, hold time.Duration) error {
	f, err := os.OpenFile(history, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	record := func(what string, epoch uint64) error {
		_, err := f.WriteString(fmt.Sprintf("%s go %d %d\n", what, os.Getpid(), epoch))
		return err
	}
	store, err := lease.Open(storeURL)
	if err != nil {
		return err
	}
	defer store.Close()
	for i := 0; i < rounds; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		l, err := store.Acquire(ctx, name, &lease.Options{TTL: 5 * time.Second, Label: "cross-go"})
		cancel()
		if err != nil {
			return err
		}
		if err := record("START", l.Epoch()); err != nil {
			return err
		}
		time.Sleep(hold)
		if err := l.EnsureHeld(0); err != nil {
			return err
		}
		if err := record("END", l.Epoch()); err != nil {
			return err
		}
		if err := l.Close(); err != nil {
			return err
		}
	}
	return nil
}
