package lease

// Shared sessions (docs/protocol.md §10, "Shared sessions: one heartbeat for many grants";
// issue 24) through the Go binding, mirroring python/tests/test_shared_session.py: many grants
// on one session, on the file store and on moto; a holder process killed with SIGKILL hands its
// locks over; a cancelled Session.Acquire leaves the queue and the session; the session's
// record deleted loses every grant; bad input gives typed errors; a grant's fenced writes, and
// its stale write after a takeover is fenced.

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// sessionNames is n fresh lock names of one test.
func sessionNames(t *testing.T, what string, n int) []string {
	base := uniqueName(t, what)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s/%d", base, i)
	}
	return names
}

func openSession(t *testing.T, base string, opts SessionOptions) *Session {
	t.Helper()
	s, err := OpenSession(context.Background(), base, opts)
	if err != nil {
		t.Fatalf("OpenSession(%q): %v", base, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// tryQueued tries a plain queued request once: nil (then released) or the error.
func tryQueued(t *testing.T, store *Store, name string) error {
	t.Helper()
	l, err := store.TryAcquire(context.Background(), name, &Options{TTL: 5 * time.Second, Queue: true})
	if err == nil {
		if err := l.Close(); err != nil {
			t.Fatalf("release %s: %v", name, err)
		}
	}
	return err
}

// Many grants on one session (200 on file, 50 on moto), taken by eight goroutines at once and
// released one by one: all held, the rest stay held after half are released, others see them
// held, and closing the session releases the rest.
func TestSessionManyGrantsReleasedOneByOne(t *testing.T) {
	forFileAndMoto(t, func(t *testing.T, base string) {
		n := 50
		if strings.HasPrefix(base, "file://") {
			n = 200
		}
		names := sessionNames(t, "session-many", n)
		store := open(t, base)
		session := openSession(t, base, SessionOptions{TTL: 10 * time.Second, Label: "go-many"})
		if !session.Alive() || session.Attached() != 0 || session.TTL() != 10*time.Second {
			t.Fatalf("a new session: alive %v, attached %d, ttl %v", session.Alive(), session.Attached(), session.TTL())
		}
		if !strings.Contains(session.Key(), ".lease-sessions/"+session.SID()) {
			t.Fatalf("session key %q, sid %q", session.Key(), session.SID())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		grants := make([]*SharedGrant, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := w; i < n; i += 8 {
					grants[i], errs[i] = session.Acquire(ctx, names[i], &Options{PollInterval: queuePoll})
				}
			}(w)
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("Acquire %s: %v", names[i], err)
			}
		}
		if got := session.Attached(); got != n {
			t.Fatalf("attached %d, want %d", got, n)
		}
		ids := map[string]bool{}
		for i, g := range grants {
			if !g.Held() || g.Token().Epoch != g.Epoch() || g.Token().Holder != g.ID() ||
				g.Token().String() != fmt.Sprintf("%s#%d@%s", g.URL(), g.Epoch(), g.ID()) ||
				g.Epoch() == 0 || g.Mode() != ModeExclusive {
				t.Fatalf("grant %d: held %v, token %v, epoch %d, mode %v", i, g.Held(), g.Token(), g.Epoch(), g.Mode())
			}
			if g.Key() != names[i] || !strings.Contains(g.URL(), names[i]) || g.LostReason() != "" {
				t.Fatalf("grant %d: key %q, url %q, lost %q", i, g.Key(), g.URL(), g.LostReason())
			}
			if !strings.HasPrefix(g.ID(), session.SID()+".") || ids[g.ID()] {
				t.Fatalf("grant %d: id %q (session %s), seen before: %v", i, g.ID(), session.SID(), ids[g.ID()])
			}
			ids[g.ID()] = true
		}
		// Others see the locks held: a plain queued request cannot be granted.
		expectErr(t, tryQueued(t, store, names[n-1]), ErrHeld)

		half := n / 2
		for _, g := range grants[:half] {
			if err := g.Release(); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if g.Held() {
				t.Fatal("held after Release")
			}
			if err := g.Release(); err != nil { // idempotent
				t.Fatalf("second Release: %v", err)
			}
		}
		for i, g := range grants[half:] {
			if !g.Held() {
				t.Fatalf("grant %d not held after the others' release: %s", half+i, g.LostReason())
			}
			if err := g.EnsureHeld(); err != nil {
				t.Fatalf("EnsureHeld: %v", err)
			}
		}
		e := expectErr(t, grants[0].EnsureHeld(), ErrLost)
		if !strings.Contains(e.Message, "released") {
			t.Fatalf("EnsureHeld of a released grant: %q", e.Message)
		}
		// A released lock is free for others; a held one is not.
		if err := tryQueued(t, store, names[0]); err != nil {
			t.Fatalf("a released lock: %v", err)
		}
		expectErr(t, tryQueued(t, store, names[n-1]), ErrHeld)
		if !session.Alive() {
			t.Fatalf("session not alive: %s", session.LostReason())
		}

		// Closing releases the rest.
		if err := session.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := session.Close(); err != nil { // idempotent
			t.Fatalf("second Close: %v", err)
		}
		if session.Alive() {
			t.Fatal("alive after Close")
		}
		for _, g := range grants[half:] {
			if g.Held() {
				t.Fatal("a grant held after its session's Close")
			}
		}
		if err := tryQueued(t, store, names[n-1]); err != nil {
			t.Fatalf("a lock of a closed session: %v", err)
		}
		for _, g := range grants {
			_ = g.Close()
		}
	})
}

// The child of TestSessionKill9OfTheHolderHandsItsLocksOver: it holds the locks named in
// $LEASE_SESSION_CHILD_LOCKS (in the store $LEASE_SESSION_CHILD_STORE) through one session,
// prints their epochs, and sleeps until killed. Skipped when run as a test.
func TestSessionChildHolder(t *testing.T) {
	storeURL := os.Getenv("LEASE_SESSION_CHILD_STORE")
	if storeURL == "" {
		t.Skip("the child process of TestSessionKill9OfTheHolderHandsItsLocksOver")
	}
	names := strings.Split(os.Getenv("LEASE_SESSION_CHILD_LOCKS"), ",")
	session, err := OpenSession(context.Background(), storeURL, SessionOptions{TTL: 3 * time.Second, Label: "go-killed"})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, name := range names {
		g, err := session.Acquire(ctx, name, &Options{PollInterval: queuePoll})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("held", i, g.Epoch())
	}
	fmt.Println("all held")
	time.Sleep(10 * time.Minute)
}

// A process holding 50 locks through a session is killed with SIGKILL: five waiters get their
// locks, each at a higher epoch, once the dead session's ttl + grace has passed (bounded waits,
// no timed assertion).
func TestSessionKill9OfTheHolderHandsItsLocksOver(t *testing.T) {
	forFileAndMoto(t, func(t *testing.T, base string) {
		const n = 50
		names := sessionNames(t, "session-killed", n)
		child := exec.Command(os.Args[0], "-test.run=^TestSessionChildHolder$", "-test.count=1")
		child.Env = append(os.Environ(), "LEASE_SESSION_CHILD_STORE="+base,
			"LEASE_SESSION_CHILD_LOCKS="+strings.Join(names, ","))
		child.Stderr = os.Stderr
		out, err := child.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		epochs := map[int]uint64{}
		func() {
			defer func() {
				_ = child.Process.Signal(syscall.SIGKILL)
				_ = child.Wait()
			}()
			lines := bufio.NewScanner(out)
			for lines.Scan() {
				f := strings.Fields(lines.Text())
				if len(f) >= 2 && f[0] == "all" {
					break
				}
				if len(f) == 3 && f[0] == "held" {
					i, _ := strconv.Atoi(f[1])
					epoch, _ := strconv.ParseUint(f[2], 10, 64)
					epochs[i] = epoch
				} else if len(f) > 0 && f[0] == "error" {
					t.Fatalf("the child: %s", lines.Text())
				}
			}
		}()
		if len(epochs) != n {
			t.Fatalf("the child held %d of %d", len(epochs), n)
		}
		// A sample of five, waited for at once (each waiter judges the dead session itself:
		// absent renewals for its ttl plus grace).
		store := open(t, base)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		sample := []int{0, 10, 20, 30, 40}
		got := make([]*Lease, len(sample))
		errs := make([]error, len(sample))
		var wg sync.WaitGroup
		for k, i := range sample {
			wg.Add(1)
			go func(k, i int) {
				defer wg.Done()
				got[k], errs[k] = store.Acquire(ctx, names[i], &Options{TTL: 3 * time.Second, Queue: true, PollInterval: queuePoll})
			}(k, i)
		}
		wg.Wait()
		for k, i := range sample {
			if errs[k] != nil {
				t.Fatalf("waiter of %s: %v", names[i], errs[k])
			}
			if got[k].Epoch() <= epochs[i] {
				t.Fatalf("%s: epoch %d after the killed holder's %d", names[i], got[k].Epoch(), epochs[i])
			}
			if err := got[k].Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A Session.Acquire waiting for a held lock, cancelled through its ctx, returns ErrCancelled
// and leaves the lock's queue and the session (nobody is handed the lock once its holder
// releases).
func TestSessionCancelledAcquireLeavesTheQueueAndTheSession(t *testing.T) {
	base := "file://" + t.TempDir()
	store := open(t, base)
	name := uniqueName(t, "session-cancel")
	holder, err := store.Acquire(context.Background(), name, &Options{TTL: 5 * time.Second, Queue: true, Label: "holder"})
	if err != nil {
		t.Fatal(err)
	}
	session := openSession(t, base, SessionOptions{TTL: 5 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	result := make(chan error, 1)
	go func() {
		g, err := session.Acquire(ctx, name, &Options{PollInterval: queuePoll})
		if err == nil {
			_ = g.Close()
		}
		result <- err
	}()
	waitUntil(t, "the session's request waiting", func() bool {
		st, err := store.Status(name)
		return err == nil && len(st.Waiting) == 1
	})
	cancel()
	select {
	case err := <-result:
		expectErr(t, err, ErrCancelled)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%v does not match context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the cancelled Session.Acquire did not return (the cancellation did not reach it)")
	}
	waitUntil(t, "the cancelled request leaving the queue and the session", func() bool {
		st, err := store.Status(name)
		return err == nil && len(st.Waiting) == 0 && session.Attached() == 0
	})
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := store.Status(name)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != "free" && st.State != "released" {
		t.Fatalf("after the holder's release the lock is %s (handed to the cancelled request?)", st.State)
	}
}

// The session's record deleted (by hand, or a lifecycle rule): every grant reports its loss,
// session_deleted, within a bounded poll.
func TestSessionDeletingTheRecordLosesEveryGrant(t *testing.T) {
	dir := t.TempDir()
	base := "file://" + dir
	names := sessionNames(t, "session-deleted", 20)
	session := openSession(t, base, SessionOptions{TTL: 3 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	grants := make([]*SharedGrant, len(names))
	for i, name := range names {
		g, err := session.Acquire(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		grants[i] = g
		defer g.Close()
	}
	record := filepath.Join(dir, filepath.FromSlash(session.Key()))
	if err := os.Remove(record); err != nil {
		t.Fatalf("removing the session's record: %v", err)
	}
	waitUntil(t, "every grant lost", func() bool {
		for _, g := range grants {
			if g.LostReason() == "" {
				return false
			}
		}
		return true
	})
	for _, g := range grants {
		if g.Held() || g.LostKind() != "session_deleted" {
			t.Fatalf("held %v, lost %s: %s", g.Held(), g.LostKind(), g.LostReason())
		}
		e := expectErr(t, g.EnsureHeld(), ErrLost)
		if !strings.Contains(e.Message, "session's record was deleted") {
			t.Fatalf("EnsureHeld: %q", e.Message)
		}
	}
	if session.Alive() || session.LostReason() == "" {
		t.Fatalf("session alive %v, lost %q", session.Alive(), session.LostReason())
	}
	// A lost session takes no more grants.
	short, cancelShort := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShort()
	_, err := session.Acquire(short, names[0], nil)
	expectErr(t, err, ErrLost)
	// Releasing a lost grant reports the loss (work under it may have overlapped).
	expectErr(t, grants[0].Release(), ErrLost)
	expectErr(t, grants[1].Close(), ErrLost)
	if grants[1].LostKind() != "session_deleted" {
		t.Fatalf("after Close: %q", grants[1].LostKind())
	}
	if err := session.Close(); err != nil {
		t.Fatal(err)
	}
}

// Bad input: errors matching ErrInvalid that say what to do.
func TestSessionBadInput(t *testing.T) {
	dir := t.TempDir()
	base := "file://" + dir
	ctx := context.Background()
	for _, c := range []struct {
		opts SessionOptions
		says string
	}{
		{SessionOptions{TTL: -time.Second}, "negative"},
		{SessionOptions{TTL: 25 * time.Hour}, "ttl"},
		{SessionOptions{TTL: time.Second, Prefix: "team-a"}, "prefix"},
		{SessionOptions{Label: "a\x00b"}, "NUL"},
	} {
		_, err := OpenSession(ctx, base, c.opts)
		e := expectErr(t, err, ErrInvalid)
		if !strings.Contains(e.Message, c.says) {
			t.Fatalf("%+v: %q does not say %q", c.opts, e.Message, c.says)
		}
	}
	_, err := OpenSession(ctx, "ftp://nowhere", SessionOptions{})
	expectErr(t, err, ErrInvalid)

	session := openSession(t, base, SessionOptions{TTL: 5 * time.Second})
	for _, other := range []string{
		"s3://another-bucket/locks/x?endpoint=http://127.0.0.1:1&region=us-east-1",
		"file://" + dir + "/sub/x",
		"memory://elsewhere/x",
	} {
		_, err := session.Acquire(ctx, other, nil)
		e := expectErr(t, err, ErrInvalid)
		if !strings.Contains(e.Message, "not in this session's store") {
			t.Fatalf("%s: %q", other, e.Message)
		}
	}
	for _, c := range []struct {
		opts *Options
		says string
	}{
		{&Options{TTL: 5 * time.Second}, "TTL"},
		{&Options{Data: "10.0.0.2"}, "per-grant data"},
		{&Options{Permits: 2, Scope: "a", Range: &ByteRange{0, 1}}, "scope"},
	} {
		_, err := session.Acquire(ctx, "x", c.opts)
		e := expectErr(t, err, ErrInvalid)
		if !strings.Contains(e.Message, c.says) {
			t.Fatalf("%+v: %q does not say %q", c.opts, e.Message, c.says)
		}
	}
	if session.Attached() != 0 || !session.Alive() {
		t.Fatalf("attached %d, alive %v", session.Attached(), session.Alive())
	}
	// The lock's URL in this store names it as its key does.
	g, err := session.Acquire(ctx, leaseURL(base, "by-url"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if g.Key() != "by-url" || !g.Held() {
		t.Fatalf("key %q, held %v", g.Key(), g.Held())
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := session.Close(); err != nil {
		t.Fatal(err)
	}
	if err := session.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	_, err = session.Acquire(ctx, "x", nil)
	e := expectErr(t, err, ErrInvalid)
	if !strings.Contains(e.Message, "closed") {
		t.Fatalf("after Close: %q", e.Message)
	}
}

// Close of a session ends an Acquire still waiting through it (ErrInvalid: the session was
// closed), whose request leaves the lock's queue; Close does not wait for the lock.
func TestSessionCloseEndsAWaitingAcquire(t *testing.T) {
	base := "file://" + t.TempDir()
	store := open(t, base)
	name := uniqueName(t, "session-close-waiting")
	holder, err := store.Acquire(context.Background(), name, &Options{TTL: 5 * time.Second, Queue: true})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	session := openSession(t, base, SessionOptions{TTL: 5 * time.Second})
	result := make(chan error, 1)
	go func() {
		g, err := session.Acquire(context.Background(), name, &Options{PollInterval: queuePoll})
		if err == nil {
			_ = g.Close()
		}
		result <- err
	}()
	waitUntil(t, "the session's request waiting", func() bool {
		st, err := store.Status(name)
		return err == nil && len(st.Waiting) == 1
	})
	closed := make(chan error, 1)
	go func() { closed <- session.Close() }()
	select {
	case err := <-result:
		e := expectErr(t, err, ErrInvalid)
		if !strings.Contains(e.Message, "closed while this acquisition waited") {
			t.Fatalf("%q", e.Message)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not end the waiting Acquire")
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the request leaving the queue", func() bool {
		st, err := store.Status(name)
		return err == nil && len(st.Waiting) == 0
	})
}

// deleteSessionRecord deletes a session's record by hand (a holder cut off from the store looks
// the same to others), as python/tests/test_shared_session.py does: on a file store its file,
// on moto (path-style) a DELETE signed (AWS Signature Version 4) with the test credentials the
// library uses.
func deleteSessionRecord(t *testing.T, base, sessionKey string) {
	t.Helper()
	if dir, ok := strings.CutPrefix(base, "file://"); ok {
		if err := os.Remove(filepath.Join(dir, filepath.FromSlash(sessionKey))); err != nil {
			t.Fatalf("removing the session's record: %v", err)
		}
		return
	}
	head, rawQuery, _ := strings.Cut(strings.TrimPrefix(base, "s3://"), "?")
	bucket := strings.Trim(head, "/")
	query, err := url.ParseQuery(rawQuery)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := strings.TrimRight(query.Get("endpoint"), "/")
	region := query.Get("region")
	if region == "" {
		region = "us-east-1"
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	sum := func(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }
	mac := func(k []byte, s string) []byte { m := hmac.New(sha256.New, k); m.Write([]byte(s)); return m.Sum(nil) }
	now := time.Now().UTC()
	amz, day := now.Format("20060102T150405Z"), now.Format("20060102")
	empty := sum(nil)
	objPath := "/" + bucket + "/" + sessionKey
	signed := "host;x-amz-content-sha256;x-amz-date"
	canonical := "DELETE\n" + objPath + "\n\nhost:" + u.Host + "\nx-amz-content-sha256:" + empty +
		"\nx-amz-date:" + amz + "\n\n" + signed + "\n" + empty
	scope := day + "/" + region + "/s3/aws4_request"
	toSign := "AWS4-HMAC-SHA256\n" + amz + "\n" + scope + "\n" + sum([]byte(canonical))
	k := []byte("AWS4" + os.Getenv("AWS_SECRET_ACCESS_KEY"))
	for _, part := range []string{day, region, "s3", "aws4_request"} {
		k = mac(k, part)
	}
	req, err := http.NewRequest(http.MethodDelete, endpoint+objPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-amz-date", amz)
	req.Header.Set("x-amz-content-sha256", empty)
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+os.Getenv("AWS_ACCESS_KEY_ID")+"/"+
		scope+", SignedHeaders="+signed+", Signature="+hex.EncodeToString(mac(k, toSign)))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("deleting the session's record: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusNoContent {
		t.Fatalf("deleting the session's record: %s", res.Status)
	}
}

// A shared grant's fenced calls, as a Lease's (python/tests/test_shared_session.py and
// node/test/session.test.js, "a shared grant's fenced writes, and its stale write after a
// takeover is fenced"): its writes carry its token; FencedPutIf at the right version lands, at
// a stale one or expecting the object absent it is ErrConflict; FencedUpdate, FencedRead,
// FencedDelete. Then its session's record is deleted by hand, the grant is lost, another holder
// takes the lock and writes with its higher epoch, and the grant's stale writes are refused
// with ErrFenced naming that epoch. On the file store and moto.
func TestSessionGrantFencedWritesAndItsStaleWriteAfterATakeoverIsFenced(t *testing.T) {
	forFileAndMoto(t, func(t *testing.T, base string) {
		store := open(t, base)
		name := uniqueName(t, "session-fence")
		session := openSession(t, base, SessionOptions{TTL: 3 * time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		g, err := session.Acquire(ctx, name, &Options{PollInterval: queuePoll})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		// Beside the lock, as a lease's.
		key := path.Base(name) + ".data"
		placed, err := g.ObjectKey(key)
		if err != nil || placed != path.Join(path.Dir(name), key) {
			t.Fatalf("ObjectKey: %q, %v", placed, err)
		}
		v1, err := g.FencedPut(key, []byte("one"))
		if err != nil || v1 == "" {
			t.Fatalf("FencedPut: %q, %v", v1, err)
		}
		obj, err := store.FencedGet("/" + placed)
		if err != nil || obj == nil || string(obj.Data) != "one" || obj.Version != v1 ||
			obj.Epoch != g.Epoch() || obj.Holder != g.ID() || obj.Lease != g.Token().Lease {
			t.Fatalf("FencedGet: %+v, %v (grant %v)", obj, err, g.Token())
		}
		v2, err := g.FencedUpdate(key, func(old *FencedObject) []byte {
			return append(append([]byte{}, old.Data...), "+1"...)
		})
		if err != nil || v2 == v1 {
			t.Fatalf("FencedUpdate: %q, %v", v2, err)
		}
		_, err = g.FencedPutIf(key, []byte("x"), v1)
		expectErr(t, err, ErrConflict)
		_, err = g.FencedPutIf(key, []byte("x"), "")
		expectErr(t, err, ErrConflict)
		v3, err := g.FencedPutIf(key, []byte("one+2"), v2)
		if err != nil {
			t.Fatalf("FencedPutIf at the version read: %v", err)
		}
		read, err := g.FencedRead(key)
		if err != nil || read == nil || string(read.Data) != "one+2" || read.Version != v3 {
			t.Fatalf("FencedRead: %+v, %v", read, err)
		}
		if _, err := g.FencedPut(key+".gone", []byte("g")); err != nil {
			t.Fatal(err)
		}
		// Conditional deletes: the file store, and moto (its URL says so).
		if deleted, err := g.FencedDelete(key + ".gone"); err != nil || !deleted {
			t.Fatalf("FencedDelete: %v, %v", deleted, err)
		}
		if deleted, err := g.FencedDelete(key + ".gone"); err != nil || deleted {
			t.Fatalf("second FencedDelete: %v, %v", deleted, err)
		}

		// Cut off: the session's record deleted; the grant is lost, another takes the lock.
		deleteSessionRecord(t, base, session.Key())
		waitUntil(t, "the grant lost", func() bool { return g.LostReason() != "" })
		next, err := store.Acquire(ctx, name, &Options{TTL: 5 * time.Second, Queue: true, PollInterval: queuePoll})
		if err != nil {
			t.Fatal(err)
		}
		defer next.Close()
		if next.Epoch() <= g.Epoch() {
			t.Fatalf("epoch %d after %d", next.Epoch(), g.Epoch())
		}
		v4, err := next.FencedPut(key, []byte("two"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = g.FencedPut(key, []byte("stale"))
		if e := expectErr(t, err, ErrFenced); e.Epoch != next.Epoch() {
			t.Fatalf("fenced error epoch %d, want %d", e.Epoch, next.Epoch())
		}
		_, err = g.FencedPutIf(key, []byte("stale"), v4)
		expectErr(t, err, ErrFenced)
		_, err = g.FencedUpdate(key, func(*FencedObject) []byte { return []byte("stale") })
		expectErr(t, err, ErrFenced)
		_, err = g.FencedDelete(key)
		expectErr(t, err, ErrFenced)
		obj, err = store.FencedGet("/" + placed)
		if err != nil || obj == nil || string(obj.Data) != "two" || obj.Epoch != next.Epoch() {
			t.Fatalf("after the stale writes: %+v, %v", obj, err)
		}
		// Releasing a lost grant reports the loss; a closed grant's calls say it is closed.
		expectErr(t, g.Close(), ErrLost)
		_, err = g.FencedPut(key, []byte("x"))
		expectErr(t, err, ErrInvalid)
		_, err = g.ObjectKey(key)
		expectErr(t, err, ErrInvalid)
		if err := next.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// The process's shared session (AcquireOnProcessSession, docs/protocol.md §10, "The API":
// Per-process default).

// sidOf is the session id of a grant: its ID (SID.N) without ".N".
func sidOf(t *testing.T, g *SharedGrant) string {
	t.Helper()
	i := strings.LastIndex(g.ID(), ".")
	if i <= 0 {
		t.Fatalf("grant id %q is not SID.N", g.ID())
	}
	return g.ID()[:i]
}

// Two locks taken through the process's session share one session (one SID in their IDs and
// tokens) and are both held; releasing one leaves the other held; another goroutine waiting for
// the other is handed it when it is released; one TTL after the last release the session's
// record is gone, and the next acquisition opens a fresh session.
func TestAcquireOnProcessSessionSharesOneSessionAndGoesOneTTLAfterTheLastRelease(t *testing.T) {
	forFileAndMoto(t, func(t *testing.T, base string) {
		const ttl = 2 * time.Second // this test's own: its session is its own
		ctx := context.Background()
		a, b := leaseURL(base, uniqueName(t, "process-a")), leaseURL(base, uniqueName(t, "process-b"))
		ga, err := AcquireOnProcessSession(ctx, a, &Options{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		defer ga.Close()
		gb, err := AcquireOnProcessSession(ctx, b, &Options{TTL: ttl, PollInterval: queuePoll})
		if err != nil {
			t.Fatal(err)
		}
		defer gb.Close()
		sid := sidOf(t, ga)
		if sidOf(t, gb) != sid || ga.ID() == gb.ID() {
			t.Fatalf("grants %s and %s: not two grants of one session", ga.ID(), gb.ID())
		}
		for _, g := range []*SharedGrant{ga, gb} {
			if !strings.Contains(g.Token().String(), "@"+sid+".") || !g.Held() || g.Session() != nil {
				t.Fatalf("grant %s: token %s, held %v, session %v", g.ID(), g.Token(), g.Held(), g.Session())
			}
		}
		if ga.StoreURL() != gb.StoreURL() || ga.StoreURL() == "" {
			t.Fatalf("store URLs %q and %q", ga.StoreURL(), gb.StoreURL())
		}
		store := open(t, ga.StoreURL())
		record := ".lease-sessions/" + sid
		if st, err := store.Status(record); err != nil || st.State == "free" {
			t.Fatalf("the session's record %s: %v, %v", record, st, err)
		}

		if err := ga.Release(); err != nil {
			t.Fatal(err)
		}
		if ga.Held() || !gb.Held() {
			t.Fatalf("after releasing a: a held %v, b held %v", ga.Held(), gb.Held())
		}
		if err := gb.EnsureHeld(); err != nil {
			t.Fatal(err)
		}

		// A hand-over to another goroutine waiting through the process's session.
		got := make(chan *SharedGrant, 1)
		failed := make(chan error, 1)
		go func() {
			g, err := AcquireOnProcessSession(ctx, b, &Options{TTL: ttl, PollInterval: queuePoll})
			if err != nil {
				failed <- err
				return
			}
			got <- g
		}()
		waitUntil(t, "the second request waiting", func() bool {
			st, err := store.Status(gb.Key())
			return err == nil && len(st.Waiting) == 1
		})
		if !gb.Held() {
			t.Fatal("b lost while another waited")
		}
		if err := gb.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case g := <-got:
			if !g.Held() || sidOf(t, g) != sid || g.Epoch() <= gb.Epoch() {
				t.Fatalf("handed-over grant %s: held %v, epoch %d after %d", g.ID(), g.Held(), g.Epoch(), gb.Epoch())
			}
			if err := g.Close(); err != nil {
				t.Fatal(err)
			}
		case err := <-failed:
			t.Fatal(err)
		case <-time.After(30 * time.Second):
			t.Fatal("the waiter was not handed b")
		}
		if err := ga.Close(); err != nil {
			t.Fatal(err)
		}

		// Nothing attached any more: one TTL later the session's record is gone.
		waitUntil(t, "the idle session's record deleted", func() bool {
			st, err := store.Status(record)
			return err == nil && st.State == "free"
		})
		gc, err := AcquireOnProcessSession(ctx, a, &Options{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		if sidOf(t, gc) == sid {
			t.Fatalf("after the idle release, a grant on the old session %s", sid)
		}
		if err := gc.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// A request waiting through the process's session whose ctx is cancelled returns ErrCancelled
// and leaves the lock's queue; Data and bad input are refused with ErrInvalid.
func TestAcquireOnProcessSessionCancelAndBadInput(t *testing.T) {
	forFileAndMoto(t, func(t *testing.T, base string) {
		const ttl = 3 * time.Second
		name := leaseURL(base, uniqueName(t, "process-cancel"))
		holder, err := AcquireOnProcessSession(context.Background(), name, &Options{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close()
		store := open(t, holder.StoreURL())
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		result := make(chan error, 1)
		go func() {
			g, err := AcquireOnProcessSession(ctx, name, &Options{TTL: ttl, PollInterval: queuePoll})
			if err == nil {
				_ = g.Close()
			}
			result <- err
		}()
		waitUntil(t, "the request waiting", func() bool {
			st, err := store.Status(holder.Key())
			return err == nil && len(st.Waiting) == 1
		})
		cancel()
		select {
		case err := <-result:
			expectErr(t, err, ErrCancelled)
		case <-time.After(30 * time.Second):
			t.Fatal("the cancelled AcquireOnProcessSession did not return")
		}
		waitUntil(t, "the cancelled request leaving the queue", func() bool {
			st, err := store.Status(holder.Key())
			return err == nil && len(st.Waiting) == 0
		})
		if !holder.Held() {
			t.Fatal("the holder lost its grant")
		}

		bad := leaseURL(base, uniqueName(t, "process-bad"))
		e := expectErr(t, func() error {
			_, err := AcquireOnProcessSession(context.Background(), bad, &Options{Data: "x"})
			return err
		}(), ErrInvalid)
		if !strings.Contains(e.Message, "data") {
			t.Fatalf("the refusal of data does not say so: %s", e.Message)
		}
		for _, c := range []struct {
			url  string
			opts *Options
		}{
			{bad, &Options{TTL: time.Millisecond}},
			{"nope://x/y", nil},
			{"bad\x00url", nil},
		} {
			_, err := AcquireOnProcessSession(context.Background(), c.url, c.opts)
			expectErr(t, err, ErrInvalid)
		}
	})
}
