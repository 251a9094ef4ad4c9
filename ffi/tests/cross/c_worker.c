/*
 * The C worker of the cross-language test (ffi/tests/cross/run.sh).
 *
 *   c_worker LEASE_STORE NAME HISTORY ROUNDS HOLD_MS
 *
 * ROUNDS times: acquire NAME (waiting), append "START c PID EPOCH" to HISTORY, work HOLD_MS,
 * check the lease is still held, append "END c PID EPOCH", release. Each line is one write(2)
 * to a file opened with O_APPEND, so lines of concurrent workers never interleave.
 */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "liblease.h"

static void die(const char *what, lease_code code, lease_error *err) {
  fprintf(stderr, "c_worker: %s: %s: %s\n", what, lease_code_name(code), lease_error_message(err));
  lease_error_free(err);
  exit(1);
}

static void record(int fd, const char *what, unsigned long long epoch) {
  char line[128];
  int n = snprintf(line, sizeof line, "%s c %ld %llu\n", what, (long)getpid(), epoch);
  if (write(fd, line, (size_t)n) != n) {
    perror("c_worker: write");
    exit(1);
  }
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: c_worker LEASE_STORE NAME HISTORY ROUNDS HOLD_MS\n");
    return 64;
  }
  int rounds = atoi(argv[4]);
  long hold_ms = atol(argv[5]);
  int fd = open(argv[3], O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd < 0) {
    perror("c_worker: open history");
    return 1;
  }
  lease_runtime *rt = NULL;
  lease_store *store = NULL;
  lease_error *err = NULL;
  lease_code c;
  if ((c = lease_runtime_new(NULL, &rt, &err)) != LEASE_OK) die("runtime", c, err);
  if ((c = lease_store_open(rt, argv[1], &store, &err)) != LEASE_OK) die("open", c, err);
  lease_options opts = lease_options_default();
  opts.ttl_ms = 5000;
  opts.wait_ms = 120000;
  opts.label = "cross-c";
  for (int i = 0; i < rounds; i++) {
    lease *l = NULL;
    if ((c = lease_acquire(store, argv[2], &opts, &l, &err)) != LEASE_OK) die("acquire", c, err);
    unsigned long long epoch = lease_epoch(l);
    record(fd, "START", epoch);
    struct timespec ts = {hold_ms / 1000, (hold_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    if ((c = lease_ensure_held(l, 0, &err)) != LEASE_OK) die("ensure_held", c, err);
    record(fd, "END", epoch);
    if ((c = lease_release(l, &err)) != LEASE_OK) die("release", c, err);
    lease_free(l);
  }
  lease_store_free(store);
  lease_runtime_free(rt);
  close(fd);
  return 0;
}
