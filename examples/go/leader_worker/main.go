// A worker that runs its job only while it is the leader, with the Go binding of lease.
//
//	go run ./leader_worker LEASE_STORE NAME [STEPS]
//
// Waits (at most a minute) to acquire the lease NAME in the store (file:///dir,
// s3://bucket?..., memory://ns), prints its epoch (the fencing token to hand to whatever the
// job writes), then runs STEPS steps of work. Before each step it checks that the lease is
// still held with time to spare, and it stops at once when l.Lost() closes. Ctrl-C cancels a
// wait or stops the work; the lease is released on the way out.
//
// Needs liblease where pkg-config finds it (see docs/ffi.md, "Go").
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"time"

	lease "github.com/lease-dev/lease/bindings/go"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: leader_worker LEASE_STORE NAME [STEPS]")
		os.Exit(64)
	}
	steps := 5
	if len(os.Args) > 3 {
		steps, _ = strconv.Atoi(os.Args[3])
	}
	if err := run(os.Args[1], os.Args[2], steps); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(storeURL, name string, steps int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	store, err := lease.Open(storeURL)
	if err != nil {
		return err
	}
	defer store.Close()

	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	fmt.Println("waiting for", name)
	l, err := store.Acquire(waitCtx, name, &lease.Options{TTL: 5 * time.Second, Label: "go-example"})
	switch {
	case errors.Is(err, lease.ErrTimeout):
		return fmt.Errorf("someone else led for a whole minute: %w", err)
	case err != nil:
		return err
	}
	defer l.Close() // releases the lease
	fmt.Println("leader at epoch", l.Epoch())

	for i := 1; i <= steps; i++ {
		// Before each step: still leader, with at least 1 s left?
		if err := l.EnsureHeld(time.Second); err != nil {
			return err
		}
		fmt.Printf("epoch %d: step %d of %d (%v left)\n", l.Epoch(), i, steps, l.Remaining().Round(time.Millisecond))
		select {
		case <-time.After(200 * time.Millisecond): // the job's work
		case <-l.Lost():
			return fmt.Errorf("lost the lease: %s", l.LostReason())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := l.Release(); err != nil {
		return err
	}
	fmt.Println("released at epoch", l.Epoch())
	return nil
}
