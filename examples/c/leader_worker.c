/*
 * A worker that runs its job only while it is the leader, through liblease's C ABI.
 *
 *   leader_worker LEASE_STORE NAME [STEPS]
 *
 * Waits to acquire the lease NAME in the store (file:///dir, s3://bucket?..., memory://ns),
 * prints its epoch (the fencing token to hand to whatever the job writes), then runs STEPS
 * steps of work (default 5). Before each step it checks that the lease is still held with time
 * to spare; if the lease is lost (the lost callback fires on a runtime thread and only sets a
 * flag) it stops at once. Run two of them on the same lease: one works, the other waits, then
 * takes over at a higher epoch.
 *
 * Build: make (needs liblease installed: see docs/ffi.md); run: make run STORE=file:///tmp/x
 */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "liblease.h"

static atomic_int lost; /* set by the lost callback */

/* Runs on a liblease runtime thread: keep it short, never block, never call blocking
 * liblease functions here. */
static void on_lost(void *user_data, const char *reason) {
  (void)user_data;
  fprintf(stderr, "lost the lease: %s\n", reason);
  atomic_store(&lost, 1);
}

static int fail(const char *what, lease_code code, lease_error *err) {
  fprintf(stderr, "%s: %s: %s\n", what, lease_code_name(code), lease_error_message(err));
  lease_error_free(err);
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s LEASE_STORE NAME [STEPS]\n", argv[0]);
    return 64;
  }
  int steps = argc > 3 ? atoi(argv[3]) : 5;
  lease_runtime *rt = NULL;
  lease_store *store = NULL;
  lease *l = NULL;
  lease_error *err = NULL;
  lease_code c;
  int rc = 0;

  if ((c = lease_runtime_new(NULL, &rt, &err)) != LEASE_OK) return fail("runtime", c, err);
  if ((c = lease_store_open(rt, argv[1], &store, &err)) != LEASE_OK) {
    rc = fail("open", c, err);
    goto out;
  }

  lease_options opts = lease_options_default();
  opts.ttl_ms = 5000;    /* renewed every ttl/3 in the background */
  opts.wait_ms = 60000;  /* wait up to a minute for the current leader */
  opts.label = "c-example";
  printf("waiting for %s\n", argv[2]);
  fflush(stdout);
  if ((c = lease_acquire(store, argv[2], &opts, &l, &err)) != LEASE_OK) {
    rc = fail("acquire", c, err);
    goto out;
  }
  lease_on_lost(l, on_lost, NULL);
  printf("leader at epoch %llu\n", (unsigned long long)lease_epoch(l));
  fflush(stdout);

  for (int i = 1; i <= steps; i++) {
    /* Before each step: still leader, with at least 1 s left? */
    if (atomic_load(&lost) || (c = lease_ensure_held(l, 1000, &err)) != LEASE_OK) {
      rc = atomic_load(&lost) ? 1 : fail("ensure_held", c, err);
      break;
    }
    printf("epoch %llu: step %d of %d (%llu ms left)\n", (unsigned long long)lease_epoch(l), i,
           steps, (unsigned long long)lease_remaining_ms(l));
    fflush(stdout);
    struct timespec ts = {0, 200 * 1000000L}; /* the job's work */
    nanosleep(&ts, NULL);
  }

  if ((c = lease_release(l, &err)) != LEASE_OK && rc == 0) rc = fail("release", c, err);
  if (rc == 0) printf("released at epoch %llu\n", (unsigned long long)lease_epoch(l));
out:
  lease_free(l); /* NULL is fine; after it returns no lost callback runs */
  lease_store_free(store);
  lease_runtime_free(rt);
  return rc;
}
