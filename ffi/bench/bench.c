/*
 * The C side of liblease's benchmark (ffi/bench/run.py): the cost of calls through the C ABI.
 *
 *   bench LEASE_STORE CALLS CYCLES
 *
 * Prints one JSON line: ns per lease_epoch, per lease_remaining_ms (CALLS calls each, on one
 * held lease), and per acquire + release + free cycle of an uncontended lease (CYCLES cycles
 * after CYCLES/10 of warm-up), the same loop as the Rust baseline lease-cycle-bench.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "liblease.h"

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void check(lease_code c, lease_error *err, const char *what) {
  if (c != LEASE_OK) {
    fprintf(stderr, "bench: %s: %s: %s\n", what, lease_code_name(c), lease_error_message(err));
    exit(1);
  }
}

static volatile uint64_t sink;

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: bench LEASE_STORE CALLS CYCLES\n");
    return 64;
  }
  long calls = atol(argv[2]), cycles = atol(argv[3]);
  lease_runtime *rt = NULL;
  lease_store *store = NULL;
  lease_error *err = NULL;
  check(lease_runtime_new(NULL, &rt, &err), err, "runtime");
  check(lease_store_open(rt, argv[1], &store, &err), err, "open");
  lease_options opts = lease_options_default();
  opts.ttl_ms = 30000;
  opts.wait_ms = 10000;

  lease *held = NULL;
  check(lease_acquire(store, "bench-calls", &opts, &held, &err), err, "acquire");
  uint64_t sum = 0;
  double t0 = now_ns();
  for (long i = 0; i < calls; i++) sum += lease_epoch(held);
  double epoch_ns = (now_ns() - t0) / calls;
  t0 = now_ns();
  for (long i = 0; i < calls; i++) sum += lease_remaining_ms(held);
  double remaining_ns = (now_ns() - t0) / calls;
  sink = sum;
  check(lease_release(held, &err), err, "release");
  lease_free(held);

  for (long i = 0; i < cycles / 10 + 1; i++) {
    lease *l = NULL;
    check(lease_acquire(store, "bench-cycle", &opts, &l, &err), err, "acquire");
    check(lease_release(l, &err), err, "release");
    lease_free(l);
  }
  t0 = now_ns();
  for (long i = 0; i < cycles; i++) {
    lease *l = NULL;
    check(lease_acquire(store, "bench-cycle", &opts, &l, &err), err, "acquire");
    check(lease_release(l, &err), err, "release");
    lease_free(l);
  }
  double cycle_ns = (now_ns() - t0) / cycles;
  printf("{\"epoch_ns\": %.3f, \"remaining_ns\": %.3f, \"cycle_ns\": %.1f}\n", epoch_ns, remaining_ns,
         cycle_ns);
  lease_store_free(store);
  lease_runtime_free(rt);
  return 0;
}
