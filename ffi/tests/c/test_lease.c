/*
 * Tests of the C ABI (include/liblease.h), run by ffi/tests/c/Makefile plainly, under valgrind
 * memcheck and under AddressSanitizer + UBSan.
 *
 *   test_lease STORE_URL [TEST...]
 *
 * STORE_URL is a store (file:///dir, memory://ns, s3://bucket?...); each run uses lease names
 * under a prefix unique to the process, so runs never see each other's records. TESTs default
 * to all of them. The lost-callback test needs $LEASE_BIN (the `lease` CLI) to break the lease
 * from outside, as an operator would.
 *
 * Every check aborts the run with a message on failure (exit status 1).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "liblease.h"

static const char *store_url;

/* Whether fenced deletes work on the store under test: fake-gcs-server ignores
 * ifGenerationMatch on delete, so a custom GCS endpoint leaves them off (docs/stores.md). */
static int conditional_deletes(void) { return strncmp(store_url, "gs://", 5) != 0; }
static char prefix[64];

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);       \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

/* Call `expr` (a lease_code with an error out-param named `err`); check the code. */
#define CHECK_CODE(expected, expr)                                                   \
  do {                                                                               \
    lease_error *err = NULL;                                                         \
    lease_code got_ = (expr);                                                        \
    if (got_ != (expected)) {                                                        \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s: %s\n", __FILE__, __LINE__, \
              #expr, lease_code_name(got_), lease_code_name(expected),               \
              lease_error_message(err));                                             \
      exit(1);                                                                       \
    }                                                                                \
    if (got_ != LEASE_OK) {                                                          \
      CHECK(err == NULL || lease_error_kind(err) == got_);                           \
      CHECK(err == NULL || strlen(lease_error_message(err)) > 0);                    \
    } else {                                                                         \
      CHECK(err == NULL);                                                            \
    }                                                                                \
    lease_error_free(err);                                                           \
  } while (0)

/* A code and the message of its error (read through `errp` after the call has returned: C
 * leaves the order of evaluation of arguments unspecified), for checks on the message. */
static lease_code code_and_message(lease_code code, lease_error **errp, char *msg, size_t len) {
  lease_error *err = *errp;
  *errp = NULL;
  snprintf(msg, len, "%s", lease_error_message(err));
  CHECK(code == LEASE_OK || err != NULL);
  CHECK(code == LEASE_OK || lease_error_kind(err) == code);
  lease_error_free(err);
  return code;
}

static void name_of(char *buf, size_t len, const char *test) {
  snprintf(buf, len, "%s/%s", prefix, test);
}

/* The lease URL of `name` in the store: the name goes before the query. */
static void lease_url_of(char *buf, size_t len, const char *name) {
  const char *q = strchr(store_url, '?');
  size_t base = q ? (size_t)(q - store_url) : strlen(store_url);
  while (base > 0 && store_url[base - 1] == '/') base--;
  snprintf(buf, len, "%.*s/%s%s", (int)base, store_url, name, q ? q : "");
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The wall clock in ms since 1970: where the epochs of a new lease record start. */
static uint64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static lease_runtime *new_runtime(void) {
  lease_runtime *rt = NULL;
  CHECK_CODE(LEASE_OK, lease_runtime_new(NULL, &rt, &err));
  CHECK(rt != NULL);
  return rt;
}

static lease_store *open_store(lease_runtime *rt) {
  lease_store *store = NULL;
  CHECK_CODE(LEASE_OK, lease_store_open(rt, store_url, &store, &err));
  CHECK(store != NULL);
  return store;
}

static char *status_json(lease_store *store, const char *name) {
  char *json = NULL;
  CHECK_CODE(LEASE_OK, lease_status(store, name, &json, &err));
  CHECK(json != NULL);
  return json;
}

static int status_has(lease_store *store, const char *name, const char *needle) {
  char *json = status_json(store, name);
  int found = strstr(json, needle) != NULL;
  if (!found) fprintf(stderr, "status of %s lacks %s: %s\n", name, needle, json);
  lease_string_free(json);
  return found;
}

/* ---------------------------------------------------------------------------------------- */

/* Whether the status JSON of `name` contains `needle`, without complaint (for polls). */
static int status_has_quiet(lease_store *store, const char *name, const char *needle) {
  char *json = status_json(store, name);
  int found = strstr(json, needle) != NULL;
  lease_string_free(json);
  return found;
}

static atomic_int never_called;

static void must_not_be_called(void *user_data, const char *reason) {
  (void)user_data;
  fprintf(stderr, "lost callback called unexpectedly: %s\n", reason);
  atomic_fetch_add(&never_called, 1);
}

/* Acquire, inspect, renew, release (twice), re-acquire at a higher epoch; try-once and
 * bounded waits against a holder; free without release releases. */
static void test_life_cycle(void) {
  char name[128];
  name_of(name, sizeof name, "life");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  CHECK(status_has(store, name, "\"state\":\"free\""));

  lease_options opts = lease_options_default();
  CHECK(opts.ttl_ms == 30000 && opts.wait_ms == -1 && opts.label == NULL && opts.cancel == NULL);
  /* 3 s, not less: its request timeout is renew / 2 = ttl / 6, and a 250 ms one (ttl 1.5 s)
   * timed out on the file store under valgrind with both cores busy (stop 39's run). */
  opts.ttl_ms = 3000;
  opts.wait_ms = 0;
  opts.label = "c-life-cycle";
  opts.data = "10.0.0.7:8080";
  lease *l = NULL;
  uint64_t before = wall_ms();
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &opts, &l, &err));
  CHECK(l != NULL);
  uint64_t epoch = lease_epoch(l);
  /* A new record's first epoch is the clock in ms (never re-issued if the record is deleted):
   * epochs compare with each other, not with 1. */
  CHECK(epoch >= before);
  uint64_t left = lease_remaining_ms(l);
  CHECK(left > 0 && left <= 3000);
  CHECK_CODE(LEASE_OK, lease_ensure_held(l, 100, &err));
  CHECK_CODE(LEASE_LOST, lease_ensure_held(l, 60000, &err)); /* more than the ttl */
  CHECK_CODE(LEASE_OK, lease_on_lost(l, must_not_be_called, NULL));
  CHECK(status_has(store, name, "\"state\":\"held\""));
  CHECK(status_has(store, name, "\"label\":\"c-life-cycle\""));
  CHECK(status_has(store, name, "\"data\":\"10.0.0.7:8080\""));
  CHECK(status_has(store, name, "(c)\""));

  /* Someone else (another owner of this process: this thread would wait for itself, see
   * test_owner_and_changes): try once -> held; a bounded wait -> timeout. */
  lease_options other = lease_options_default();
  other.owner = "someone else";
  other.wait_ms = 0;
  lease *l2 = (lease *)0x1; /* outputs are written only on success */
  CHECK_CODE(LEASE_HELD, lease_acquire(store, name, &other, &l2, &err));
  other.wait_ms = 300;
  CHECK_CODE(LEASE_TIMEOUT, lease_acquire(store, name, &other, &l2, &err));
  CHECK(l2 == (lease *)0x1);

  /* Background renewal keeps it past its ttl. */
  sleep_ms(4000);
  CHECK(lease_remaining_ms(l) > 0);
  CHECK_CODE(LEASE_OK, lease_ensure_held(l, 1, &err));
  CHECK(lease_epoch(l) == epoch);

  CHECK_CODE(LEASE_OK, lease_release(l, &err));
  CHECK_CODE(LEASE_OK, lease_release(l, &err)); /* idempotent */
  CHECK(lease_remaining_ms(l) == 0);
  CHECK(lease_epoch(l) == epoch);
  char msg[512];
  lease_error *e = NULL;
  CHECK(code_and_message(lease_ensure_held(l, 0, &e), &e, msg, sizeof msg) == LEASE_LOST);
  CHECK(strstr(msg, "released") != NULL);
  CHECK(status_has(store, name, "\"state\":\"released\""));
  lease_free(l);

  /* Re-acquire: a higher epoch; freeing without release releases. */
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &opts, &l, &err));
  CHECK(lease_epoch(l) == epoch + 1);
  lease_free(l);
  CHECK(status_has(store, name, "\"state\":\"released\""));

  /* The runtime handle may go first: stores and leases keep the runtime alive. */
  lease_runtime_free(rt);
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &opts, &l, &err));
  CHECK(lease_epoch(l) == epoch + 2);
  CHECK_CODE(LEASE_OK, lease_release(l, &err));
  lease_free(l);
  lease_store_free(store);
  CHECK(atomic_load(&never_called) == 0);
}

/* ---------------------------------------------------------------------------------------- */

#define THREADS 8
static int rounds = 10;

struct shared {
  lease_runtime *rt;
  const char *name;
  atomic_int holders;     /* how many threads are inside the critical section */
  int counter;            /* incremented non-atomically under the lease */
  uint64_t first_epoch;   /* written under the lease, by the first holder */
  uint64_t last_epoch;    /* written under the lease */
  atomic_int failures;
  atomic_int stalls;      /* rounds whose holder stalled past its ttl before acting */
};

static void *contender(void *arg) {
  struct shared *s = arg;
  lease_store *store = open_store(s->rt); /* each thread its own handle on the one store */
  lease_options opts = lease_options_default();
  opts.ttl_ms = 10000;
  for (int i = 0; i < rounds; i++) {
    lease *l = NULL;
    lease_error *err = NULL;
    lease_code c = lease_acquire(store, s->name, &opts, &l, &err);
    if (c != LEASE_OK) {
      fprintf(stderr, "acquire: %s: %s\n", lease_code_name(c), lease_error_message(err));
      lease_error_free(err);
      atomic_fetch_add(&s->failures, 1);
      break;
    }
    /* The guarantee is for a holder that checks before it acts: under valgrind on a busy
       machine a thread can stall past its ttl between acquiring and acting, and then a
       takeover is correct. Such a round does no work (and must say it lost the lease). */
    if (lease_ensure_held(l, 5000, &err) != LEASE_OK) {
      fprintf(stderr, "stalled past the ttl before acting: %s\n", lease_error_message(err));
      lease_error_free(err);
      err = NULL;
      atomic_fetch_add(&s->stalls, 1);
      (void)lease_release(l, NULL);
      lease_free(l);
      continue;
    }
    if (atomic_fetch_add(&s->holders, 1) != 0) {
      fprintf(stderr, "two holders at once\n");
      atomic_fetch_add(&s->failures, 1);
    }
    uint64_t epoch = lease_epoch(l);
    if (epoch <= s->last_epoch) {
      fprintf(stderr, "epoch %llu after %llu\n", (unsigned long long)epoch,
              (unsigned long long)s->last_epoch);
      atomic_fetch_add(&s->failures, 1);
    }
    if (s->first_epoch == 0) s->first_epoch = epoch;
    s->last_epoch = epoch;
    int seen = s->counter; /* read, yield, write: a second holder would lose an increment */
    sched_yield();
    sleep_ms(1);
    s->counter = seen + 1;
    atomic_fetch_sub(&s->holders, 1);
    c = lease_release(l, &err);
    if (c != LEASE_OK) {
      fprintf(stderr, "release: %s: %s\n", lease_code_name(c), lease_error_message(err));
      lease_error_free(err);
      atomic_fetch_add(&s->failures, 1);
    }
    lease_free(l);
  }
  lease_store_free(store);
  return NULL;
}

/* 8 threads contend for one lease: no lost increment, epochs strictly increasing. */
static void test_contention(void) {
  char name[128];
  name_of(name, sizeof name, "contended");
  struct shared s = {.rt = new_runtime(), .name = name};
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) CHECK(pthread_create(&t[i], NULL, contender, &s) == 0);
  for (int i = 0; i < THREADS; i++) CHECK(pthread_join(t[i], NULL) == 0);
  CHECK(atomic_load(&s.failures) == 0);
  CHECK(s.counter == THREADS * rounds - atomic_load(&s.stalls));
  /* One new epoch per acquisition (epochs start at the clock in ms: compare relative ones). */
  CHECK(s.last_epoch - s.first_epoch >= (uint64_t)(THREADS * rounds - 1));
  lease_runtime_free(s.rt);
}

/* ---------------------------------------------------------------------------------------- */

/* Many threads read one lease handle while another releases it. */
struct reader_arg {
  lease *l;
  atomic_int *stop;
  int bad;
};

static void *reader(void *arg) {
  struct reader_arg *r = arg;
  uint64_t epoch = lease_epoch(r->l);
  while (!atomic_load(r->stop)) {
    if (lease_epoch(r->l) != epoch) r->bad++;
    uint64_t left = lease_remaining_ms(r->l);
    lease_error *err = NULL;
    lease_code c = lease_ensure_held(r->l, 0, &err);
    if (!((c == LEASE_OK) || (c == LEASE_LOST && left == 0) || c == LEASE_LOST)) r->bad++;
    lease_error_free(err);
    /* Not a hot spin: valgrind runs one thread at a time, and four spinning readers starved
       the runtime's threads so long (about 60 s) that the release found its deadline passed. */
    sleep_ms(1);
  }
  return NULL;
}

static void test_shared_handle(void) {
  char name[128];
  name_of(name, sizeof name, "shared-handle");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  lease *l = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, NULL, &l, &err));
  atomic_int stop = 0;
  struct reader_arg args[4];
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    args[i] = (struct reader_arg){.l = l, .stop = &stop};
    CHECK(pthread_create(&t[i], NULL, reader, &args[i]) == 0);
  }
  sleep_ms(50);
  CHECK_CODE(LEASE_OK, lease_release(l, &err));
  sleep_ms(20);
  atomic_store(&stop, 1);
  for (int i = 0; i < 4; i++) {
    CHECK(pthread_join(t[i], NULL) == 0);
    CHECK(args[i].bad == 0);
  }
  lease_free(l);
  lease_store_free(store);
  lease_runtime_free(rt);
}

/* ---------------------------------------------------------------------------------------- */

struct waiter {
  lease_store *store;
  const char *name;
  lease_cancel_token *token;
  lease_code code;
  char message[512];
};

static void *wait_for_lease(void *arg) {
  struct waiter *w = arg;
  lease_options opts = lease_options_default();
  opts.cancel = w->token; /* wait forever, unless cancelled */
  lease *l = NULL;
  lease_error *err = NULL;
  w->code = code_and_message(lease_acquire(w->store, w->name, &opts, &l, &err), &err, w->message,
                             sizeof w->message);
  if (w->code == LEASE_OK) lease_free(l);
  return NULL;
}

/* A waiting acquire is cancelled from another thread; a cancelled token stops the next one
 * at once. */
static void test_cancel(void) {
  char name[128];
  name_of(name, sizeof name, "cancel");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  lease *held = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, NULL, &held, &err));

  struct waiter w = {.store = store, .name = name, .token = lease_cancel_token_new()};
  CHECK(w.token != NULL);
  w.code = LEASE_INTERNAL;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, wait_for_lease, &w) == 0);
  sleep_ms(300); /* let it start waiting */
  double t0 = now_ms();
  lease_cancel_token_cancel(w.token);
  lease_cancel_token_cancel(w.token); /* any number of times */
  CHECK(pthread_join(t, NULL) == 0);
  double took = now_ms() - t0;
  CHECK(w.code == LEASE_CANCELLED);
  CHECK(strstr(w.message, "cancel") != NULL);
  /* Generous bound (valgrind runs this too): a cancel does not wait out the 30 s ttl. */
  CHECK(took < 10000);

  /* Already cancelled: the next acquire returns at once, even for a free lease. */
  w.code = LEASE_INTERNAL;
  wait_for_lease(&w);
  CHECK(w.code == LEASE_CANCELLED);
  lease_cancel_token_free(w.token);

  CHECK_CODE(LEASE_OK, lease_release(held, &err));
  lease_free(held);
  lease_store_free(store);
  lease_runtime_free(rt);
}

/* ---------------------------------------------------------------------------------------- */

struct lost_state {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int calls;
  char reason[512];
  lease *l;
  lease_store *store;
  lease_code epoch_ok;
  lease_code blocking_call;
};

static void on_lost(void *user_data, const char *reason) {
  struct lost_state *s = user_data;
  /* Allowed here: non-blocking calls. Refused with a code: blocking calls. */
  lease_error *err = NULL;
  char *json = NULL;
  lease_code blocking = lease_status(s->store, "any", &json, &err);
  lease_error_free(err);
  lease_string_free(json);
  lease_code held = lease_ensure_held(s->l, 0, NULL);
  pthread_mutex_lock(&s->mu);
  s->calls++;
  snprintf(s->reason, sizeof s->reason, "%s", reason);
  s->blocking_call = blocking;
  s->epoch_ok = lease_epoch(s->l) > 0 && held == LEASE_LOST ? LEASE_OK : LEASE_INTERNAL;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

static int run_cli(char *const argv[]) {
  pid_t pid = fork(); /* the child execs at once: liblease is not used there */
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDOUT_FILENO); /* its report is not the test's output */
    execv(argv[0], argv);
    _exit(127);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The lost callback fires, once, from a runtime thread, after `lease break URL --yes`. */
static void test_lost_after_break(void) {
  const char *bin = getenv("LEASE_BIN");
  if (bin == NULL || *bin == '\0') {
    fprintf(stderr, "LEASE_BIN is not set: the lost test needs the lease CLI\n");
    exit(1);
  }
  char name[128], url[1024];
  name_of(name, sizeof name, "broken");
  lease_url_of(url, sizeof url, name);
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  struct lost_state s = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
                         .store = store};
  lease_options opts = lease_options_default();
  /* Renewals every second notice the break. Not less: the release's tidy write (which
   * acknowledges the break, checked below) is best effort within a request timeout of ttl/6,
   * and at 1.2 s (200 ms) a loaded machine's file store let it time out once. */
  opts.ttl_ms = 3000;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &opts, &s.l, &err));
  uint64_t epoch = lease_epoch(s.l);
  CHECK_CODE(LEASE_OK, lease_on_lost(s.l, on_lost, &s));

  char *argv[] = {(char *)bin, "break", url, "--yes", NULL};
  int rc = run_cli(argv);
  CHECK(rc == 0);
  /* Broken, and waiting out the broken holder (until ttl + grace after the break, or until it
   * releases): nobody may take it yet. */
  CHECK(status_has(store, name, "\"state\":\"broken\""));

  pthread_mutex_lock(&s.mu);
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 20; /* bounded; a renewal notices within ttl/3 */
  while (s.calls == 0) {
    if (pthread_cond_timedwait(&s.cv, &s.mu, &deadline) == ETIMEDOUT) break;
  }
  int calls = s.calls;
  pthread_mutex_unlock(&s.mu);
  CHECK(calls == 1);
  CHECK(strstr(s.reason, "broken") != NULL);
  CHECK(s.blocking_call == LEASE_INVALID);
  CHECK(s.epoch_ok == LEASE_OK);
  CHECK(lease_remaining_ms(s.l) == 0);
  CHECK_CODE(LEASE_LOST, lease_ensure_held(s.l, 0, &err));
  /* Releasing the lost lease acknowledges the break: the next holder need not wait. */
  CHECK_CODE(LEASE_LOST, lease_release(s.l, &err));
  CHECK(status_has(store, name, "\"state\":\"released\""));
  CHECK(lease_epoch(s.l) == epoch);

  /* Registered after the loss: called at once, on this thread. */
  struct lost_state late = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
                            .store = store, .l = s.l};
  CHECK_CODE(LEASE_OK, lease_on_lost(s.l, on_lost, &late));
  CHECK(late.calls == 1);
  CHECK(late.blocking_call != LEASE_INVALID); /* not a runtime thread: the call may block */

  sleep_ms(500);
  CHECK(s.calls == 1); /* once */
  lease_free(s.l);

  /* The break bumped the epoch: the next holder is above it. */
  lease *next = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &opts, &next, &err));
  CHECK(lease_epoch(next) >= epoch + 2);
  CHECK_CODE(LEASE_OK, lease_release(next, &err));
  lease_free(next);
  lease_store_free(store);
  lease_runtime_free(rt);
}

/* ---------------------------------------------------------------------------------------- */

/* Bad input of every kind returns a code (never a crash), and outputs stay untouched. */
static void test_bad_input(void) {
  lease_runtime *const SENTINEL_RT = (lease_runtime *)0x1;
  lease_runtime *rt = SENTINEL_RT;
  CHECK_CODE(LEASE_INVALID, lease_runtime_new(NULL, NULL, &err));
  lease_runtime_options ro = lease_runtime_options_default();
  ro.worker_threads = 100000;
  CHECK_CODE(LEASE_INVALID, lease_runtime_new(&ro, &rt, &err));
  ro = lease_runtime_options_default();
  ro.client_name = "\xff\xfe";
  CHECK_CODE(LEASE_INVALID, lease_runtime_new(&ro, &rt, &err));
  /* Options not started from their default: no struct_size. */
  lease_runtime_options zeroed;
  memset(&zeroed, 0, sizeof zeroed);
  CHECK_CODE(LEASE_INVALID, lease_runtime_new(&zeroed, &rt, &err));
  CHECK(rt == SENTINEL_RT);
  CHECK(lease_runtime_new(NULL, NULL, NULL) == LEASE_INVALID); /* err may be NULL */
  rt = new_runtime();

  lease_store *store = (lease_store *)0x1;
  CHECK_CODE(LEASE_INVALID, lease_store_open(NULL, store_url, &store, &err));
  CHECK_CODE(LEASE_INVALID, lease_store_open(rt, NULL, &store, &err));
  CHECK_CODE(LEASE_INVALID, lease_store_open(rt, store_url, NULL, &err));
  const char *bad_urls[] = {"", "ftp://bucket", "gs://B", "s3://B", "s3://ab", "memory://",
                            "file://relative/dir", "bare-name", "\xff\xfe://x", "s3://bucket?x=%zz"};
  for (size_t i = 0; i < sizeof bad_urls / sizeof bad_urls[0]; i++) {
    lease_error *e = NULL;
    char msg[512];
    lease_code c = code_and_message(lease_store_open(rt, bad_urls[i], &store, &e), &e, msg,
                                    sizeof msg);
    if (c != LEASE_INVALID) {
      fprintf(stderr, "store_open(%s) returned %s: %s\n", bad_urls[i], lease_code_name(c), msg);
      exit(1);
    }
  }
  CHECK(store == (lease_store *)0x1);
  {
    lease_error *e = NULL;
    char msg[512];
    CHECK(code_and_message(lease_store_open(rt, "\xc3\x28", &store, &e), &e, msg, sizeof msg) ==
          LEASE_INVALID);
    CHECK(strstr(msg, "UTF-8") != NULL);
  }
  /* A mistyped URL is refused with the likely fix (issue 28). */
  {
    const char *typos[][2] = {{"s3:/my-bucket", "did you mean \"s3://my-bucket\""},
                              {"file:/tmp/locks", "did you mean \"file:///tmp/locks\""}};
    for (size_t i = 0; i < sizeof typos / sizeof typos[0]; i++) {
      lease_error *e = NULL;
      char msg[512];
      CHECK(code_and_message(lease_store_open(rt, typos[i][0], &store, &e), &e, msg,
                             sizeof msg) == LEASE_INVALID);
      if (strstr(msg, typos[i][1]) == NULL) {
        fprintf(stderr, "store_open(%s): %s\n", typos[i][0], msg);
        exit(1);
      }
    }
  }
  store = open_store(rt);

  char name[128];
  name_of(name, sizeof name, "bad-input");
  lease *l = (lease *)0x1;
  lease_options opts = lease_options_default();
  opts.wait_ms = 0;
  CHECK_CODE(LEASE_INVALID, lease_acquire(NULL, name, &opts, &l, &err));
  CHECK_CODE(LEASE_INVALID, lease_acquire(store, NULL, &opts, &l, &err));
  CHECK_CODE(LEASE_INVALID, lease_acquire(store, "\xff", &opts, &l, &err));
  CHECK_CODE(LEASE_INVALID, lease_acquire(store, "", &opts, &l, &err));
  CHECK_CODE(LEASE_INVALID, lease_acquire(store, "a//b", &opts, &l, &err));
  CHECK_CODE(LEASE_INVALID, lease_acquire(store, "../x", &opts, &l, &err));
  CHECK_CODE(LEASE_INVALID, lease_acquire(store, name, &opts, NULL, &err));
  lease_options bad = opts;
  bad.ttl_ms = 0;
  CHECK_CODE(LEASE_INVALID, lease_acquire(store, name, &bad, &l, &err));
  bad = opts;
  bad.ttl_ms = 1000ULL * 3600 * 48;
  CHECK_CODE(LEASE_INVALID, lease_acquire(store, name, &bad, &l, &err));
  bad = opts;
  bad.wait_ms = -2;
  CHECK_CODE(LEASE_INVALID, lease_acquire(store, name, &bad, &l, &err));
  bad = opts;
  bad.label = "\xff\xfe";
  CHECK_CODE(LEASE_INVALID, lease_acquire(store, name, &bad, &l, &err));
  bad = opts;
  bad.label = "line\nbreak";
  CHECK_CODE(LEASE_INVALID, lease_acquire(store, name, &bad, &l, &err));
  bad = opts;
  bad.data = "\xc3";
  CHECK_CODE(LEASE_INVALID, lease_acquire(store, name, &bad, &l, &err));
  /* struct_size (docs/ffi.md, "Options"): 0 is refused, saying where to start. */
  bad = opts;
  bad.struct_size = 0;
  {
    lease_error *e = NULL;
    char msg[512];
    CHECK(code_and_message(lease_acquire(store, name, &bad, &l, &e), &e, msg, sizeof msg) ==
          LEASE_INVALID);
    if (strstr(msg, "lease_options_default()") == NULL) {
      fprintf(stderr, "struct_size 0: %s\n", msg);
      exit(1);
    }
  }
  CHECK(l == (lease *)0x1);
  /* A program built against a newer header: a larger struct whose options this library does not
     know are zero is read; one that sets them is refused. */
  {
    struct {
      lease_options o;
      uint64_t newer;
    } big;
    memset(&big, 0, sizeof big);
    big.o = opts;
    big.o.struct_size = sizeof big;
    big.newer = 1;
    CHECK_CODE(LEASE_INVALID, lease_acquire(store, name, &big.o, &l, &err));
    CHECK(l == (lease *)0x1);
    big.newer = 0;
    CHECK_CODE(LEASE_OK, lease_acquire(store, name, &big.o, &l, &err));
    CHECK_CODE(LEASE_OK, lease_release(l, &err));
    lease_free(l);
    l = (lease *)0x1;
  }
  CHECK(lease_acquire(store, NULL, NULL, NULL, NULL) == LEASE_INVALID);

  char *json = (char *)0x1;
  CHECK_CODE(LEASE_INVALID, lease_status(NULL, name, &json, &err));
  CHECK_CODE(LEASE_INVALID, lease_status(store, NULL, &json, &err));
  CHECK_CODE(LEASE_INVALID, lease_status(store, "\xff", &json, &err));
  CHECK_CODE(LEASE_INVALID, lease_status(store, "a//b", &json, &err));
  CHECK_CODE(LEASE_INVALID, lease_status(store, name, NULL, &err));
  CHECK(json == (char *)0x1);

  /* NULL lease handles. */
  CHECK(lease_epoch(NULL) == 0);
  CHECK(lease_remaining_ms(NULL) == 0);
  CHECK_CODE(LEASE_INVALID, lease_ensure_held(NULL, 0, &err));
  CHECK_CODE(LEASE_INVALID, lease_release(NULL, &err));
  CHECK(lease_on_lost(NULL, must_not_be_called, NULL) == LEASE_INVALID);

  /* Release twice, and a NULL callback. */
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &opts, &l, &err));
  CHECK(lease_on_lost(l, NULL, NULL) == LEASE_INVALID);
  CHECK_CODE(LEASE_OK, lease_release(l, &err));
  CHECK_CODE(LEASE_OK, lease_release(l, &err));
  CHECK(lease_release(l, NULL) == LEASE_OK);
  lease_free(l);

  /* Every free accepts NULL; cancelling NULL is a no-op. */
  lease_free(NULL);
  lease_store_free(NULL);
  lease_runtime_free(NULL);
  lease_error_free(NULL);
  lease_string_free(NULL);
  lease_cancel_token_free(NULL);
  lease_cancel_token_cancel(NULL);

  /* Errors, codes and the version. */
  CHECK(lease_error_kind(NULL) == LEASE_OK);
  CHECK(strcmp(lease_error_message(NULL), "") == 0);
  CHECK(strcmp(lease_code_name(LEASE_OK), "LEASE_OK") == 0);
  CHECK(strcmp(lease_code_name(LEASE_HELD), "LEASE_HELD") == 0);
  CHECK(strcmp(lease_code_name(LEASE_FENCED), "LEASE_FENCED") == 0);
  CHECK(strcmp(lease_code_name(LEASE_FORKED), "LEASE_FORKED") == 0);
  CHECK(strcmp(lease_code_name(LEASE_CONFLICT), "LEASE_CONFLICT") == 0);
  CHECK(strcmp(lease_code_name(LEASE_QUEUE_FULL), "LEASE_QUEUE_FULL") == 0);
  CHECK(strcmp(lease_code_name(LEASE_UNSUPPORTED), "LEASE_UNSUPPORTED") == 0);
  CHECK(strcmp(lease_code_name(16), "LEASE_UNKNOWN") == 0);
  CHECK(strcmp(lease_code_name(99), "LEASE_UNKNOWN") == 0);
  CHECK(strcmp(lease_code_name(-1), "LEASE_UNKNOWN") == 0);
  /* The numbers are fixed. */
  CHECK(LEASE_OK == 0 && LEASE_HELD == 1 && LEASE_TIMEOUT == 2 && LEASE_CANCELLED == 3 &&
        LEASE_LOST == 4 && LEASE_FENCED == 5 && LEASE_UNAVAILABLE == 6 && LEASE_INVALID == 7 &&
        LEASE_STORE == 8 && LEASE_CORRUPT == 9 && LEASE_INTERNAL == 10 && LEASE_PANIC == 11 &&
        LEASE_FORKED == 12 && LEASE_CONFLICT == 13 && LEASE_QUEUE_FULL == 14 &&
        LEASE_UNSUPPORTED == 15);
#ifdef EXPECTED_VERSION
  CHECK(strcmp(lease_version(), EXPECTED_VERSION) == 0);
#endif

  lease_store_free(store);
  lease_runtime_free(rt);
}

/* ---------------------------------------------------------------------------------------- */

/* After fork() the child gets LEASE_FORKED from every call, and frees are harmless. */
static void test_fork(void) {
  char name[128];
  name_of(name, sizeof name, "fork");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  lease *l = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, NULL, &l, &err));
  uint64_t epoch = lease_epoch(l);

  /* The child reports through a pipe and ends with SIGKILL: its frees deliberately leak (it
   * cannot shut down the parent's runtime), and under valgrind an ordinary exit would run a
   * leak check over that copy of the parent's memory. */
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    int bad = 0;
    lease_error *err = NULL;
    lease *l2 = NULL;
    lease_runtime *rt2 = NULL;
    if (lease_acquire(store, name, NULL, &l2, &err) != LEASE_FORKED) bad |= 1;
    if (lease_error_kind(err) != LEASE_FORKED || !strstr(lease_error_message(err), "fork"))
      bad |= 2;
    lease_error_free(err);
    if (lease_release(l, NULL) != LEASE_FORKED) bad |= 4;
    if (lease_ensure_held(l, 0, NULL) != LEASE_FORKED) bad |= 8;
    if (lease_runtime_new(NULL, &rt2, NULL) != LEASE_FORKED) bad |= 16;
    if (lease_store_open(rt, store_url, NULL, NULL) != LEASE_FORKED) bad |= 32;
    if (lease_epoch(l) != 0 || lease_remaining_ms(l) != 0) bad |= 64;
    if (lease_cancel_token_new() != NULL) bad |= 128;
    /* Frees do not touch the parent's threads or locks. */
    lease_free(l);
    lease_store_free(store);
    lease_runtime_free(rt);
    if (write(fds[1], &bad, sizeof bad) != (ssize_t)sizeof bad) _exit(1);
    kill(getpid(), SIGKILL);
    _exit(1);
  }
  close(fds[1]);
  int bad = -1;
  ssize_t n = read(fds[0], &bad, sizeof bad);
  close(fds[0]);
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  if (n != (ssize_t)sizeof bad || bad != 0 || !WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
    fprintf(stderr, "fork child: read %zd, bad %d, status %d\n", n, bad, status);
    exit(1);
  }
  /* The parent is unaffected. */
  CHECK(lease_epoch(l) == epoch);
  CHECK_CODE(LEASE_OK, lease_ensure_held(l, 0, &err));
  CHECK_CODE(LEASE_OK, lease_release(l, &err));
  lease_free(l);
  lease_store_free(store);
  lease_runtime_free(rt);
}

/* ---------------------------------------------------------------------------------------- */

static char *token_of(lease *l) {
  char *token = NULL;
  CHECK_CODE(LEASE_OK, lease_token(l, &token, &err));
  CHECK(token != NULL);
  return token;
}

/* A data key of this run (not a lease name). */
/* From the store's root (a leading '/'): a lease's fenced calls read a key from the lease's
 * directory, lease_fenced_get from the store's root, and this names one object for both. */
static void data_key_of(char *buf, size_t len, const char *what) {
  snprintf(buf, len, "/%s-data/%s", prefix, what);
}

/* Fenced writes stamp the writer's epoch and holder; `lease break` waits out the broken holder
 * (a try-once acquire finds the lease held until ttl + grace after the break); after the
 * takeover the old holder's fenced put and delete return LEASE_FENCED with the newer epoch, and
 * the newer data stays. */
static void test_fenced_write_after_break(void) {
  const char *bin = getenv("LEASE_BIN");
  if (bin == NULL || *bin == '\0') {
    fprintf(stderr, "LEASE_BIN is not set: the fencing test needs the lease CLI\n");
    exit(1);
  }
  char name[128], url[1024], key[160];
  name_of(name, sizeof name, "fenced");
  lease_url_of(url, sizeof url, name);
  data_key_of(key, sizeof key, "object");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);

  lease_object *obj = (lease_object *)0x1;
  CHECK_CODE(LEASE_OK, lease_fenced_get(store, key, &obj, &err));
  CHECK(obj == NULL); /* nothing there yet */

  lease_options opts = lease_options_default();
  opts.ttl_ms = 2000; /* the break waits it out: ttl + grace (1 s) (+ 1 s on S3) */
  opts.label = "zombie";
  lease *zombie = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &opts, &zombie, &err));
  char *version = NULL;
  CHECK_CODE(LEASE_OK, lease_fenced_put(zombie, key, (const uint8_t *)"old holder", 10, &version, &err));
  CHECK(version != NULL && strlen(version) > 0);
  CHECK_CODE(LEASE_OK, lease_fenced_get(store, key, &obj, &err));
  CHECK(obj != NULL);
  size_t len = 0;
  const uint8_t *data = lease_object_data(obj, &len);
  CHECK(len == 10 && memcmp(data, "old holder", 10) == 0);
  CHECK(lease_object_epoch(obj) == lease_epoch(zombie));
  CHECK(strcmp(lease_object_version(obj), version) == 0);
  char *token = token_of(zombie);
  char *token_url = NULL, *token_holder = NULL;
  uint64_t token_epoch = 0;
  CHECK_CODE(LEASE_OK, lease_token_parse_holder(token, &token_url, &token_epoch, &token_holder, &err));
  CHECK(token_epoch == lease_epoch(zombie));
  CHECK(strcmp(lease_object_lease(obj), token_url) == 0);
  /* The object names the holder that wrote it, as its token does. */
  CHECK(token_holder != NULL && lease_object_holder(obj) != NULL);
  CHECK(strcmp(lease_object_holder(obj), token_holder) == 0);
  lease_string_free(token_url);
  lease_string_free(token_holder);
  lease_string_free(token);
  lease_string_free(version);
  lease_object_free(obj);

  char *argv[] = {(char *)bin, "break", url, "--yes", NULL};
  CHECK(run_cli(argv) == 0);

  /* The zombie has not acknowledged the break (it is not released): the break waits it out. */
  opts.label = "newer";
  opts.wait_ms = 0;
  lease *newer = (lease *)0x1;
  CHECK_CODE(LEASE_HELD, lease_acquire(store, name, &opts, &newer, &err));
  CHECK(newer == (lease *)0x1);
  opts.wait_ms = 20000;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &opts, &newer, &err));
  CHECK(lease_epoch(newer) > lease_epoch(zombie));
  CHECK_CODE(LEASE_OK, lease_fenced_put(newer, key, (const uint8_t *)"newer holder", 12, NULL, &err));

  /* The zombie's writes are refused, and the error names the newer epoch. */
  lease_error *e = NULL;
  CHECK(lease_fenced_put(zombie, key, (const uint8_t *)"ZOMBIE", 6, NULL, &e) == LEASE_FENCED);
  CHECK(lease_error_kind(e) == LEASE_FENCED);
  CHECK(lease_error_epoch(e) == lease_epoch(newer));
  CHECK(strstr(lease_error_message(e), "epoch") != NULL);
  lease_error_free(e);
  int deleted = -1;
  if (conditional_deletes()) {
    CHECK_CODE(LEASE_FENCED, lease_fenced_delete(zombie, key, &deleted, &err));
    CHECK(deleted == -1);
  }

  CHECK_CODE(LEASE_OK, lease_fenced_get(store, key, &obj, &err));
  data = lease_object_data(obj, &len);
  CHECK(len == 12 && memcmp(data, "newer holder", 12) == 0);
  CHECK(lease_object_epoch(obj) == lease_epoch(newer));
  lease_object_free(obj);
  CHECK_CODE(LEASE_LOST, lease_release(zombie, &err));
  lease_free(zombie);

  /* The holder deletes its own object; a second delete finds nothing. Where deletes are not
   * conditional, fenced deletes are refused rather than done unfenced. */
  if (conditional_deletes()) {
    CHECK_CODE(LEASE_OK, lease_fenced_delete(newer, key, &deleted, &err));
    CHECK(deleted == 1);
    CHECK_CODE(LEASE_OK, lease_fenced_delete(newer, key, &deleted, &err));
    CHECK(deleted == 0);
    CHECK_CODE(LEASE_OK, lease_fenced_get(store, key, &obj, &err));
    CHECK(obj == NULL);
  } else {
    CHECK_CODE(LEASE_STORE, lease_fenced_delete(newer, key, &deleted, &err));
  }
  /* An empty object is fine; the lease record itself is not a data object. */
  CHECK_CODE(LEASE_OK, lease_fenced_put(newer, key, NULL, 0, NULL, &err));
  CHECK_CODE(LEASE_OK, lease_fenced_get(store, key, &obj, &err));
  CHECK(lease_object_data(obj, &len) != NULL && len == 0);
  lease_object_free(obj);
  char record[160];
  snprintf(record, sizeof record, "/%s", name);
  CHECK_CODE(LEASE_INVALID, lease_fenced_put(newer, record, (const uint8_t *)"x", 1, NULL, &err));

  CHECK_CODE(LEASE_OK, lease_release(newer, &err));
  lease_free(newer);
  lease_store_free(store);
  lease_runtime_free(rt);
}

/* Gates admit by the highest epoch per resource; a store-backed gate is shared. */
static void test_gate(void) {
  char name[128], prefix_key[160];
  name_of(name, sizeof name, "gated");
  data_key_of(prefix_key, sizeof prefix_key, "gate");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  lease_gate *mem = NULL, *a = NULL, *b = NULL;
  CHECK_CODE(LEASE_OK, lease_gate_new(rt, &mem, &err));
  CHECK_CODE(LEASE_OK, lease_gate_open(store, prefix_key, &a, &err));
  CHECK_CODE(LEASE_OK, lease_gate_open(store, prefix_key, &b, &err));

  lease_options opts = lease_options_default();
  lease *first = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &opts, &first, &err));
  char *old = token_of(first);
  CHECK_CODE(LEASE_OK, lease_gate_admit(mem, "orders/42", old, &err));
  CHECK_CODE(LEASE_OK, lease_gate_admit(mem, "orders/42", old, &err)); /* same epoch again */
  CHECK_CODE(LEASE_OK, lease_gate_admit(a, "row-1", old, &err));
  CHECK_CODE(LEASE_OK, lease_release(first, &err));
  lease_free(first);

  lease *second = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &opts, &second, &err));
  char *newer = token_of(second);
  CHECK_CODE(LEASE_OK, lease_gate_admit(mem, "orders/42", newer, &err));
  CHECK_CODE(LEASE_OK, lease_gate_admit(b, "row-1", newer, &err));
  lease_error *e = NULL;
  CHECK(lease_gate_admit(mem, "orders/42", old, &e) == LEASE_FENCED);
  CHECK(lease_error_epoch(e) == lease_epoch(second));
  lease_error_free(e);
  CHECK_CODE(LEASE_OK, lease_gate_admit(mem, "orders/43", old, &err)); /* independent resources */
  /* Gate a never saw the newer token itself: the store object tells it. */
  CHECK_CODE(LEASE_FENCED, lease_gate_admit(a, "row-1", old, &err));
  CHECK_CODE(LEASE_INVALID, lease_gate_admit(mem, "orders/42", "not a token", &err));
  CHECK_CODE(LEASE_INVALID, lease_gate_admit(mem, "orders/42", "x#-1", &err));
  CHECK_CODE(LEASE_INVALID, lease_gate_admit(NULL, "orders/42", newer, &err));
  CHECK_CODE(LEASE_INVALID, lease_gate_admit(mem, NULL, newer, &err));
  CHECK_CODE(LEASE_INVALID, lease_gate_admit(mem, "orders/42", NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_gate_admit(mem, "orders/42", "\xff#1", &err));
  CHECK_CODE(LEASE_INVALID, lease_gate_admit(mem, "orders/42", "x#3@", &err));
  /* Two holders with one epoch are never both admitted (a record restored from a backup can
   * hand an epoch out twice; the holder ids tell them apart). */
  CHECK_CODE(LEASE_OK, lease_gate_admit(mem, "twins", "memory://t/k#9@aaaa", &err));
  CHECK_CODE(LEASE_OK, lease_gate_admit(mem, "twins", "memory://t/k#9@aaaa", &err));
  CHECK_CODE(LEASE_FENCED, lease_gate_admit(mem, "twins", "memory://t/k#9@bbbb", &err));
  CHECK_CODE(LEASE_OK, lease_gate_admit(mem, "twins", "memory://t/k#10@bbbb", &err));
  lease_string_free(old);
  lease_string_free(newer);
  CHECK_CODE(LEASE_OK, lease_release(second, &err));
  lease_free(second);

  /* Tokens parse from the right: a '#' in the URL is fine. URL#EPOCH@HOLDER (what
   * lease_token writes) and URL#EPOCH (built by hand) both parse. */
  char *url = NULL, *holder = NULL;
  uint64_t epoch = 0;
  CHECK_CODE(LEASE_OK, lease_token_parse("s3://b/locks/a#b#7", &url, &epoch, &err));
  CHECK(strcmp(url, "s3://b/locks/a#b") == 0 && epoch == 7);
  lease_string_free(url);
  CHECK_CODE(LEASE_OK, lease_token_parse("file:///x#3", NULL, NULL, &err));
  CHECK_CODE(LEASE_OK, lease_token_parse("s3://b/locks/a#b#1767225600000@3f2a9c", &url, &epoch, &err));
  CHECK(strcmp(url, "s3://b/locks/a#b") == 0 && epoch == 1767225600000ULL);
  lease_string_free(url);
  CHECK_CODE(LEASE_OK, lease_token_parse_holder("s3://b/k#1767225600000@3f2a9c", &url, &epoch,
                                                &holder, &err));
  CHECK(strcmp(url, "s3://b/k") == 0 && epoch == 1767225600000ULL && strcmp(holder, "3f2a9c") == 0);
  lease_string_free(url);
  lease_string_free(holder);
  holder = (char *)0x1;
  CHECK_CODE(LEASE_OK, lease_token_parse_holder("s3://b/k#7", NULL, &epoch, &holder, &err));
  CHECK(epoch == 7 && holder == NULL); /* names no holder */
  CHECK_CODE(LEASE_OK, lease_token_parse_holder("s3://b/k#7@ab", NULL, NULL, NULL, &err));
  const char *bad[] = {"", "x", "x#", "#3", "x#-1", "x#1e3", "x#99999999999999999999999",
                       "x#3@", "x#3@a b", "x#@ab", "x#3@a@b", "x#3@\xc3\xa9"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    url = (char *)0x1;
    holder = (char *)0x2;
    epoch = 42;
    CHECK_CODE(LEASE_INVALID, lease_token_parse(bad[i], &url, &epoch, &err));
    CHECK_CODE(LEASE_INVALID, lease_token_parse_holder(bad[i], &url, &epoch, &holder, &err));
    CHECK(url == (char *)0x1 && holder == (char *)0x2 && epoch == 42);
  }
  CHECK_CODE(LEASE_INVALID, lease_token_parse(NULL, &url, &epoch, &err));
  CHECK_CODE(LEASE_INVALID, lease_token_parse_holder(NULL, &url, &epoch, &holder, &err));

  /* A held lease's token names its holder, and round-trips. */
  lease *third = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &opts, &third, &err));
  char *tok = token_of(third);
  CHECK(strchr(tok, '@') != NULL);
  char *lease_url = NULL;
  CHECK_CODE(LEASE_OK, lease_token_parse_holder(tok, &lease_url, &epoch, &holder, &err));
  CHECK(epoch == lease_epoch(third) && holder != NULL && strlen(holder) > 0);
  char again[2048];
  snprintf(again, sizeof again, "%s#%llu@%s", lease_url, (unsigned long long)epoch, holder);
  CHECK(strcmp(again, tok) == 0);
  lease_string_free(lease_url);
  lease_string_free(holder);
  lease_string_free(tok);
  CHECK_CODE(LEASE_OK, lease_release(third, &err));
  lease_free(third);

  lease_gate_free(mem);
  lease_gate_free(a);
  lease_gate_free(b);
  lease_gate_free(NULL);
  lease_store_free(store);
  lease_runtime_free(rt);
}

/* The object at `key` (its bytes as a string, and its version), or "" and "" when absent. */
static void read_object(lease_store *store, const char *key, char *data, size_t data_len,
                        char *version, size_t version_len) {
  lease_object *obj = NULL;
  CHECK_CODE(LEASE_OK, lease_fenced_get(store, key, &obj, &err));
  size_t n = 0;
  const uint8_t *p = lease_object_data(obj, &n);
  CHECK(n < data_len);
  if (n > 0) memcpy(data, p, n);
  data[n] = '\0';
  snprintf(version, version_len, "%s", lease_object_version(obj));
  lease_object_free(obj);
}

/* Version-conditional fenced writes: a write conditioned on a version that another writer of
 * the same epoch replaced is LEASE_CONFLICT and writes nothing; "must be absent" on an existing
 * object is LEASE_CONFLICT; once a newer holder has written, it is LEASE_FENCED (with the newer
 * epoch), even with the current version. */
static void test_fenced_put_if(void) {
  char name[128], key[160], other[160];
  name_of(name, sizeof name, "put-if");
  data_key_of(key, sizeof key, "counter");
  data_key_of(other, sizeof other, "counter-other");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  lease_options opts = lease_options_default();
  opts.wait_ms = 20000;
  lease *a = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &opts, &a, &err));

  /* Create only if absent (NULL), once. */
  char *v1 = NULL;
  CHECK_CODE(LEASE_OK, lease_fenced_put_if(a, key, (const uint8_t *)"1", 1, NULL, &v1, &err));
  CHECK(v1 != NULL && strlen(v1) > 0);
  CHECK_CODE(LEASE_CONFLICT, lease_fenced_put_if(a, key, (const uint8_t *)"9", 1, NULL, NULL, &err));
  CHECK_CODE(LEASE_CONFLICT, lease_fenced_put_if(a, key, (const uint8_t *)"9", 1, "", NULL, &err));

  /* A reads the counter; B (another writer at this epoch: another thread of the same holder)
   * reads it too and writes 2 first. A's write of its own 2, conditioned on what it read, is
   * refused: the increment is not lost, and A must read again. */
  char seen_a[32], ver_a[256], seen_b[32], ver_b[256];
  read_object(store, key, seen_a, sizeof seen_a, ver_a, sizeof ver_a);
  read_object(store, key, seen_b, sizeof seen_b, ver_b, sizeof ver_b);
  CHECK(strcmp(seen_a, "1") == 0 && strcmp(ver_a, v1) == 0 && strcmp(ver_b, v1) == 0);
  char *v2 = NULL;
  CHECK_CODE(LEASE_OK, lease_fenced_put_if(a, key, (const uint8_t *)"2", 1, ver_b, &v2, &err));
  char msg[512];
  lease_error *e = NULL;
  CHECK(code_and_message(lease_fenced_put_if(a, key, (const uint8_t *)"2", 1, ver_a, NULL, &e),
                         &e, msg, sizeof msg) == LEASE_CONFLICT);
  CHECK(strstr(msg, "changed") != NULL);
  CHECK_CODE(LEASE_CONFLICT, lease_fenced_put_if(a, key, (const uint8_t *)"x", 1, "\"nope\"", NULL, &err));
  char now[32], ver_now[256];
  read_object(store, key, now, sizeof now, ver_now, sizeof ver_now);
  CHECK(strcmp(now, "2") == 0 && strcmp(ver_now, v2) == 0);
  /* Read again, decide again: 3. */
  char *v3 = NULL;
  CHECK_CODE(LEASE_OK, lease_fenced_put_if(a, key, (const uint8_t *)"3", 1, ver_now, &v3, &err));
  /* An absent object expected absent: created. */
  CHECK_CODE(LEASE_OK, lease_fenced_put_if(a, other, (const uint8_t *)"x", 1, "", NULL, &err));

  /* A newer holder reads 3 and writes 4. A (released, or a zombie) is then fenced, whether it
   * names the version it read before or the current one. */
  CHECK_CODE(LEASE_OK, lease_release(a, &err));
  lease *b = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &opts, &b, &err));
  CHECK(lease_epoch(b) > lease_epoch(a));
  read_object(store, key, now, sizeof now, ver_now, sizeof ver_now);
  CHECK(strcmp(now, "3") == 0 && strcmp(ver_now, v3) == 0);
  char *v4 = NULL;
  CHECK_CODE(LEASE_OK, lease_fenced_put_if(b, key, (const uint8_t *)"4", 1, ver_now, &v4, &err));
  e = NULL;
  CHECK(lease_fenced_put_if(a, key, (const uint8_t *)"4", 1, v3, NULL, &e) == LEASE_FENCED);
  CHECK(lease_error_epoch(e) == lease_epoch(b));
  lease_error_free(e);
  e = NULL;
  CHECK(lease_fenced_put_if(a, key, (const uint8_t *)"5", 1, v4, NULL, &e) == LEASE_FENCED);
  CHECK(lease_error_epoch(e) == lease_epoch(b));
  lease_error_free(e);
  CHECK_CODE(LEASE_FENCED, lease_fenced_put_if(a, key, (const uint8_t *)"5", 1, NULL, NULL, &err));
  read_object(store, key, now, sizeof now, ver_now, sizeof ver_now);
  CHECK(strcmp(now, "4") == 0 && strcmp(ver_now, v4) == 0);

  lease_string_free(v1);
  lease_string_free(v2);
  lease_string_free(v3);
  lease_string_free(v4);
  lease_free(a);
  CHECK_CODE(LEASE_OK, lease_release(b, &err));
  lease_free(b);
  lease_store_free(store);
  lease_runtime_free(rt);
}

/* The read-modify-write loop of docs/ffi.md ("Read-modify-write"): read, compute, write only if
 * unchanged, and on LEASE_CONFLICT read again after a short random pause. Here the update
 * appends the id `op` to a comma-separated list, so the final list shows which updates landed,
 * and how many times. */
#define LIST_MAX 4096
static lease_code append_op(lease *l, lease_store *store, const char *key, const char *op,
                            lease_error **errp) {
  long pause_ms = 1;
  for (int attempt = 1;; attempt++) {
    lease_object *obj = NULL;
    lease_code c = lease_fenced_get(store, key, &obj, errp);
    if (c != LEASE_OK) return c;
    size_t n = 0;
    const uint8_t *p = lease_object_data(obj, &n); /* NULL, 0 when absent */
    char next[LIST_MAX];
    CHECK(n + strlen(op) + 2 < sizeof next);
    int len = snprintf(next, sizeof next, "%.*s%s%s", (int)n, (const char *)p, n > 0 ? "," : "", op);
    /* The version read ("" when absent: then the object must still be absent). */
    c = lease_fenced_put_if(l, key, (const uint8_t *)next, (size_t)len,
                            lease_object_version(obj), NULL, errp);
    lease_object_free(obj);
    if (c != LEASE_CONFLICT || attempt == 50) return c;
    lease_error_free(*errp);
    *errp = NULL;
    sleep_ms(1 + rand() % pause_ms);
    if (pause_ms < 200) pause_ms *= 2;
  }
}

enum { UPDATERS = 4, MAX_OPS = 64 };

struct updater {
  lease *l;
  lease_store *store;
  const char *key;
  int id;
  int ops;
  lease_code outcome[MAX_OPS];
};

static void *updating(void *arg) {
  struct updater *w = arg;
  for (int i = 0; i < w->ops; i++) {
    char op[32];
    snprintf(op, sizeof op, "t%d-%d", w->id, i);
    lease_error *err = NULL;
    w->outcome[i] = append_op(w->l, w->store, w->key, op, &err);
    if (w->outcome[i] != LEASE_OK)
      fprintf(stderr, "  update %s: %s: %s\n", op, lease_code_name(w->outcome[i]),
              lease_error_message(err));
    lease_error_free(err);
  }
  return NULL;
}

/* How many times `op` is in the comma-separated `list`. */
static int times_in(const char *list, const char *op) {
  int times = 0;
  size_t len = strlen(op);
  for (const char *p = list; *p;) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == len && strncmp(p, op, n) == 0) times++;
    p += n + (end ? 1 : 0);
  }
  return times;
}

/* 4 threads of one holder update one object with the loop, checked against the final list: no
 * acknowledged update lost or applied twice, none reported LEASE_CONFLICT or LEASE_FENCED
 * applied, none applied twice (LEASE_UNAVAILABLE: outcome unknown, applied at most once). */
static void test_fenced_update(void) {
  char name[128], key[160];
  name_of(name, sizeof name, "update");
  data_key_of(key, sizeof key, "update-list");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  lease *l = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, NULL, &l, &err));
  struct updater w[UPDATERS];
  pthread_t t[UPDATERS];
  int ops = rounds < MAX_OPS ? rounds : MAX_OPS;
  for (int i = 0; i < UPDATERS; i++) {
    w[i] = (struct updater){.l = l, .store = store, .key = key, .id = i, .ops = ops};
    CHECK(pthread_create(&t[i], NULL, updating, &w[i]) == 0);
  }
  for (int i = 0; i < UPDATERS; i++) CHECK(pthread_join(t[i], NULL) == 0);
  char list[LIST_MAX], version[256];
  read_object(store, key, list, sizeof list, version, sizeof version);
  int acked = 0, unknown = 0, unknown_landed = 0, refused = 0;
  for (int i = 0; i < UPDATERS; i++) {
    for (int j = 0; j < ops; j++) {
      char op[32];
      snprintf(op, sizeof op, "t%d-%d", i, j);
      int times = times_in(list, op);
      lease_code c = w[i].outcome[j];
      int ok = (c == LEASE_OK && times == 1) ||
               ((c == LEASE_CONFLICT || c == LEASE_FENCED) && times == 0) ||
               (c == LEASE_UNAVAILABLE && times <= 1);
      if (!ok) {
        fprintf(stderr, "update %s: %s, and found %d times in %s\n", op, lease_code_name(c),
                times, list);
        exit(1);
      }
      acked += c == LEASE_OK;
      unknown += c == LEASE_UNAVAILABLE;
      unknown_landed += c == LEASE_UNAVAILABLE && times == 1;
      refused += c == LEASE_CONFLICT || c == LEASE_FENCED;
    }
  }
  fprintf(stderr, "  fenced_update: %d acknowledged, %d outcome unknown (%d of them landed), %d refused\n",
          acked, unknown, unknown_landed, refused);
  CHECK(acked > 0);
  CHECK_CODE(LEASE_OK, lease_release(l, &err));
  lease_free(l);
  lease_store_free(store);
  lease_runtime_free(rt);
}

/* Bad input to the fencing functions returns codes, never crashes. */
static void test_fencing_bad_input(void) {
  char name[128], key[160];
  name_of(name, sizeof name, "fenced-bad");
  data_key_of(key, sizeof key, "bad");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  lease *l = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, NULL, &l, &err));
  const uint8_t *x = (const uint8_t *)"x";
  CHECK_CODE(LEASE_INVALID, lease_fenced_put(NULL, key, x, 1, NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_fenced_put(l, NULL, x, 1, NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_fenced_put(l, key, NULL, 1, NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_fenced_put(l, "\xff", x, 1, NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_fenced_put(l, "", x, 1, NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_fenced_put(l, "a//b", x, 1, NULL, &err));
  char *version = (char *)0x1;
  CHECK_CODE(LEASE_INVALID, lease_fenced_put_if(NULL, key, x, 1, NULL, &version, &err));
  CHECK_CODE(LEASE_INVALID, lease_fenced_put_if(l, NULL, x, 1, NULL, &version, &err));
  CHECK_CODE(LEASE_INVALID, lease_fenced_put_if(l, key, NULL, 1, NULL, &version, &err));
  CHECK_CODE(LEASE_INVALID, lease_fenced_put_if(l, key, x, 1, "\xff", &version, &err));
  /* Above the store's root (the lease is PREFIX/NAME). */
  CHECK_CODE(LEASE_INVALID, lease_fenced_put_if(l, "../../x", x, 1, NULL, &version, &err));
  char record[160];
  snprintf(record, sizeof record, "/%s", name);
  CHECK_CODE(LEASE_INVALID, lease_fenced_put_if(l, record, x, 1, NULL, &version, &err));
  CHECK(version == (char *)0x1);
  /* Where the lease's fenced calls put a key: beside the lease, which is PREFIX/NAME. */
  char *placed = NULL, expected[160];
  CHECK_CODE(LEASE_OK, lease_object_key(l, "./x", &placed, &err));
  snprintf(expected, sizeof expected, "%s/x", prefix);
  CHECK(strcmp(placed, expected) == 0);
  lease_string_free(placed);
  placed = (char *)0x1;
  CHECK_CODE(LEASE_INVALID, lease_object_key(l, "../../x", &placed, &err));
  CHECK_CODE(LEASE_INVALID, lease_object_key(NULL, "x", &placed, &err));
  CHECK_CODE(LEASE_INVALID, lease_object_key(l, NULL, &placed, &err));
  CHECK_CODE(LEASE_INVALID, lease_object_key(l, "x", NULL, &err));
  CHECK(placed == (char *)0x1);
  CHECK_CODE(LEASE_INVALID, lease_fenced_delete(NULL, key, NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_fenced_delete(l, NULL, NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_fenced_delete(l, "../../x", NULL, &err));
  lease_object *obj = (lease_object *)0x1;
  CHECK_CODE(LEASE_INVALID, lease_fenced_get(NULL, key, &obj, &err));
  CHECK_CODE(LEASE_INVALID, lease_fenced_get(store, NULL, &obj, &err));
  CHECK_CODE(LEASE_INVALID, lease_fenced_get(store, key, NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_fenced_get(store, "\xc3", &obj, &err));
  CHECK(obj == (lease_object *)0x1);
  char *token = (char *)0x1;
  CHECK_CODE(LEASE_INVALID, lease_token(NULL, &token, &err));
  CHECK_CODE(LEASE_INVALID, lease_token(l, NULL, &err));
  CHECK(token == (char *)0x1);
  lease_gate *g = (lease_gate *)0x1;
  CHECK_CODE(LEASE_INVALID, lease_gate_new(NULL, &g, &err));
  CHECK_CODE(LEASE_INVALID, lease_gate_new(rt, NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_gate_open(NULL, "p", &g, &err));
  CHECK_CODE(LEASE_INVALID, lease_gate_open(store, NULL, &g, &err));
  CHECK_CODE(LEASE_INVALID, lease_gate_open(store, "a//b", &g, &err));
  CHECK(g == (lease_gate *)0x1);
  size_t len = 99;
  CHECK(lease_object_data(NULL, &len) == NULL && len == 0);
  CHECK(lease_object_epoch(NULL) == 0);
  CHECK(lease_object_lease(NULL) == NULL);
  CHECK(lease_object_holder(NULL) == NULL);
  CHECK(strcmp(lease_object_version(NULL), "") == 0);
  lease_object_free(NULL);
  CHECK(lease_error_epoch(NULL) == 0);
  CHECK_CODE(LEASE_OK, lease_release(l, &err));
  lease_free(l);
  lease_store_free(store);
  lease_runtime_free(rt);
}

/* ---------------------------------------------------------------------------------------- */

/* ---------------------------------------------------------------------------------------- */
/* Queued locks (docs/protocol.md §10): shared readers and a writer, a semaphore, ranges. */

static lease_options queue_opts(const char *label, int shared) {
  lease_options o = lease_options_default();
  o.ttl_ms = 10000;
  o.wait_ms = 60000;
  o.poll_interval_ms = 100;
  o.label = label;
  o.shared = shared;
  o.queue = 1;
  return o;
}

struct queued_acquire {
  lease_store *store;
  const char *name;
  lease_options opts;
  lease *got;
  atomic_int done;
};

static void *queued_acquirer(void *arg) {
  struct queued_acquire *q = arg;
  lease_error *err = NULL;
  lease_code c = lease_acquire(q->store, q->name, &q->opts, &q->got, &err);
  if (c != LEASE_OK) {
    fprintf(stderr, "queued acquire: %s: %s\n", lease_code_name(c), lease_error_message(err));
    lease_error_free(err);
    q->got = NULL;
  }
  atomic_store(&q->done, 1);
  return NULL;
}

/* The labels of the waiters in the status JSON, in order, as "a,b," (a test-sized parse). */
static void waiting_labels(lease_store *store, const char *name, char *out, size_t len) {
  char *json = NULL;
  CHECK_CODE(LEASE_OK, lease_status(store, name, &json, &err));
  out[0] = '\0';
  const char *w = strstr(json, "\"waiting\":[");
  for (const char *p = w ? strstr(w, "\"label\":\"") : NULL; p; p = strstr(p, "\"label\":\"")) {
    p += strlen("\"label\":\"");
    const char *end = strchr(p, '"');
    size_t used = strlen(out);
    snprintf(out + used, len - used, "%.*s,", (int)(end - p), p);
  }
  lease_string_free(json);
}

static void wait_for_waiters(lease_store *store, const char *name, const char *want) {
  char got[256];
  for (int i = 0; i < 1500; i++) {
    waiting_labels(store, name, got, sizeof got);
    if (strcmp(got, want) == 0) return;
    sleep_ms(20);
  }
  fprintf(stderr, "waiters are \"%s\", expected \"%s\"\n", got, want);
  exit(1);
}

/* Two readers hold at once; a writer waits for both; a reader arriving after the writer waits
 * for the writer; tokens follow the grants. */
static void test_queue_readers_writer(void) {
  char name[128];
  name_of(name, sizeof name, "queue-rw");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  lease_options o1 = queue_opts("r1", 1), o2 = queue_opts("r2", 1);
  o2.wait_ms = 0;
  lease *r1 = NULL, *r2 = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &o1, &r1, &err));
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &o2, &r2, &err));
  CHECK(lease_grant_mode(r1) == LEASE_MODE_SHARED && lease_grant_mode(r2) == LEASE_MODE_SHARED);
  CHECK(lease_epoch(r2) > lease_epoch(r1));

  struct queued_acquire w = {.store = store, .name = name, .opts = queue_opts("w", 0)};
  pthread_t tw, tr;
  CHECK(pthread_create(&tw, NULL, queued_acquirer, &w) == 0);
  wait_for_waiters(store, name, "w,");
  struct queued_acquire r3 = {.store = store, .name = name, .opts = queue_opts("r3", 1)};
  CHECK(pthread_create(&tr, NULL, queued_acquirer, &r3) == 0);
  wait_for_waiters(store, name, "w,r3,");

  CHECK_CODE(LEASE_OK, lease_release(r1, &err));
  sleep_ms(300);
  CHECK(!atomic_load(&w.done));
  CHECK_CODE(LEASE_OK, lease_release(r2, &err));
  CHECK(pthread_join(tw, NULL) == 0);
  CHECK(w.got != NULL);
  CHECK(lease_grant_mode(w.got) == LEASE_MODE_EXCLUSIVE);
  CHECK(lease_epoch(w.got) > lease_epoch(r2));
  sleep_ms(300);
  CHECK(!atomic_load(&r3.done));
  CHECK_CODE(LEASE_OK, lease_release(w.got, &err));
  CHECK(pthread_join(tr, NULL) == 0);
  CHECK(r3.got != NULL);
  CHECK(lease_epoch(r3.got) > lease_epoch(w.got));
  CHECK_CODE(LEASE_OK, lease_release(r3.got, &err));
  lease_free(r3.got);
  lease_free(w.got);
  lease_free(r1);
  lease_free(r2);
  lease_store_free(store);
  lease_runtime_free(rt);
}

struct semaphore {
  lease_store *store;
  const char *name;
  pthread_mutex_t mu;
  int running, most, served;
  atomic_int failures;
};

static void *semaphore_worker(void *arg) {
  struct semaphore *s = arg;
  lease_options o = lease_options_default();
  o.ttl_ms = 10000;
  o.wait_ms = 60000;
  o.poll_interval_ms = 100;
  o.permits = 2;
  lease *l = NULL;
  lease_error *err = NULL;
  lease_code c = lease_acquire(s->store, s->name, &o, &l, &err);
  if (c != LEASE_OK) {
    fprintf(stderr, "semaphore acquire: %s: %s\n", lease_code_name(c), lease_error_message(err));
    lease_error_free(err);
    atomic_fetch_add(&s->failures, 1);
    return NULL;
  }
  pthread_mutex_lock(&s->mu);
  if (++s->running > s->most) s->most = s->running;
  pthread_mutex_unlock(&s->mu);
  sleep_ms(200);
  pthread_mutex_lock(&s->mu);
  s->running--;
  s->served++;
  pthread_mutex_unlock(&s->mu);
  if (lease_grant_mode(l) != LEASE_MODE_SHARED) atomic_fetch_add(&s->failures, 1);
  c = lease_release(l, &err);
  if (c != LEASE_OK) {
    lease_error_free(err);
    atomic_fetch_add(&s->failures, 1);
  }
  lease_free(l);
  return NULL;
}

/* A semaphore of 2 permits and 4 threads: never more than 2 at once, all served. */
static void test_queue_semaphore(void) {
  char name[128];
  name_of(name, sizeof name, "queue-sem");
  lease_runtime *rt = new_runtime();
  struct semaphore s = {.store = open_store(rt), .name = name};
  pthread_mutex_init(&s.mu, NULL);
  pthread_t t[4];
  for (int i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, semaphore_worker, &s) == 0);
  for (int i = 0; i < 4; i++) CHECK(pthread_join(t[i], NULL) == 0);
  CHECK(atomic_load(&s.failures) == 0);
  CHECK(s.most == 2 && s.served == 4);
  pthread_mutex_destroy(&s.mu);
  lease_store_free(s.store);
  lease_runtime_free(rt);
}

/* Byte ranges and path scopes; a plain lease has no grant; bad queued-lock options. */
static void test_queue_scopes_and_bad_options(void) {
  char name[128], plain_name[128];
  name_of(name, sizeof name, "queue-ranges");
  name_of(plain_name, sizeof plain_name, "queue-plain");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  lease_options o = lease_options_default();
  o.ttl_ms = 10000;
  o.wait_ms = 0;
  lease *a = NULL, *b = NULL, *c = NULL;
  o.range_start = 0;
  o.range_end = 100;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &o, &a, &err));
  o.range_start = 100;
  o.range_end = 200;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &o, &b, &err));
  CHECK(lease_grant_mode(a) == LEASE_MODE_EXCLUSIVE && lease_epoch(b) > lease_epoch(a));
  o.range_start = 50;
  o.range_end = 150;
  CHECK_CODE(LEASE_HELD, lease_acquire(store, name, &o, &c, &err));
  CHECK(c == NULL);
  lease_free(a);
  lease_free(b);

  lease *plain = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, plain_name, NULL, &plain, &err));
  CHECK(lease_grant_mode(plain) == LEASE_MODE_NONE);
  CHECK(lease_grant_mode(NULL) == LEASE_MODE_NONE);
  lease_free(plain);

  /* A priority (issue 23) makes a request a queued one; out of range it is LEASE_INVALID. The
   * order it gives is tested through this ABI by the Go binding's TestQueuePriority. */
  char prio_name[128];
  name_of(prio_name, sizeof prio_name, "queue-priority");
  lease_options p = lease_options_default();
  p.wait_ms = 0;
  p.priority = -7;
  lease *prio = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, prio_name, &p, &prio, &err));
  CHECK(lease_grant_mode(prio) == LEASE_MODE_EXCLUSIVE);
  lease_free(prio);
  int32_t bad_priorities[] = {1000000001, -1000000001, INT32_MIN, INT32_MAX};
  for (size_t i = 0; i < sizeof bad_priorities / sizeof bad_priorities[0]; i++) {
    p.priority = bad_priorities[i];
    lease *l = NULL;
    CHECK_CODE(LEASE_INVALID, lease_acquire(store, prio_name, &p, &l, &err));
    CHECK(l == NULL);
  }

  struct {
    int shared;
    uint32_t permits;
    const char *scope;
    uint64_t start, end;
  } bad[] = {
      {0, 0, NULL, 5, 1},       /* an empty range */
      {0, 0, NULL, 5, 0},       /* a start without an end */
      {0, 65537, NULL, 0, 0},   /* too many permits */
      {0, 0, "", 0, 0},         /* an empty path */
      {0, 0, "a/../b", 0, 0},   /* `..` */
      {0, 0, "a", 0, 10},       /* a path and a range */
      {0, 0, "\xff\xfe", 0, 0}, /* invalid UTF-8 */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    lease_options x = lease_options_default();
    x.wait_ms = 0;
    x.shared = bad[i].shared;
    x.permits = bad[i].permits;
    x.scope = bad[i].scope;
    x.range_start = bad[i].start;
    x.range_end = bad[i].end;
    lease *l = NULL;
    CHECK_CODE(LEASE_INVALID, lease_acquire(store, name, &x, &l, &err));
    CHECK(l == NULL);
  }
  lease_store_free(store);
  lease_runtime_free(rt);
}

/* Issue 22: holders of disjoint ranges do not fence each other's writes to the object they
 * share; readers fence what they read, so a stale writer's write never lands under them; tokens
 * say their grant's mode and scope. */
static void test_queue_fencing(void) {
  char name[128];
  name_of(name, sizeof name, "queue-fence");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  lease_options o = lease_options_default();
  o.ttl_ms = 10000;
  o.wait_ms = 0;
  lease *a = NULL, *b = NULL;
  o.range_start = 0;
  o.range_end = 100;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &o, &a, &err));
  o.range_start = 100;
  o.range_end = 200;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &o, &b, &err));
  CHECK_CODE(LEASE_OK, lease_fenced_put(a, "blob", (const uint8_t *)"a", 1, NULL, &err));
  CHECK_CODE(LEASE_OK, lease_fenced_put(b, "blob", (const uint8_t *)"ab", 2, NULL, &err));
  /* The earlier, live holder of a disjoint range is not fenced by the later one's write. */
  CHECK_CODE(LEASE_OK, lease_fenced_put(a, "blob", (const uint8_t *)"aba", 3, NULL, &err));
  char *token = NULL, *scope = (char *)0x1;
  lease_mode mode = LEASE_MODE_NONE;
  uint64_t start = 9, end = 9;
  CHECK_CODE(LEASE_OK, lease_token(a, &token, &err));
  CHECK_CODE(LEASE_OK, lease_token_parse_grant(token, &mode, &scope, &start, &end, &err));
  CHECK(mode == LEASE_MODE_EXCLUSIVE && scope == NULL && start == 0 && end == 100);
  CHECK(strstr(token, ";range=0..100") != NULL);
  lease_string_free(token);
  CHECK_CODE(LEASE_OK, lease_release(a, &err));
  CHECK_CODE(LEASE_OK, lease_release(b, &err));
  lease_free(a);
  lease_free(b);

  lease_options w = queue_opts("w", 0), r = queue_opts("r", 1);
  w.wait_ms = r.wait_ms = 0;
  lease *writer = NULL, *reader = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &w, &writer, &err));
  CHECK_CODE(LEASE_OK, lease_fenced_put(writer, "data", (const uint8_t *)"v0", 2, NULL, &err));
  /* Its grant ends; the handle stays in its hands, as a stopped process's would. */
  CHECK_CODE(LEASE_OK, lease_release(writer, &err));
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &r, &reader, &err));
  lease_object *obj = NULL;
  CHECK_CODE(LEASE_OK, lease_fenced_read(reader, "data", &obj, &err));
  size_t n = 0;
  const uint8_t *data = lease_object_data(obj, &n);
  CHECK(n == 2 && memcmp(data, "v0", 2) == 0);
  lease_object_free(obj);
  obj = (lease_object *)0x1;
  CHECK_CODE(LEASE_OK, lease_fenced_read(reader, "none", &obj, &err));
  CHECK(obj == NULL); /* nothing there: a marker now keeps stale writers from creating it */
  lease_error *e = NULL;
  CHECK(lease_fenced_put(writer, "data", (const uint8_t *)"v1", 2, NULL, &e) == LEASE_FENCED);
  CHECK(lease_error_epoch(e) == lease_epoch(reader));
  lease_error_free(e);
  CHECK_CODE(LEASE_FENCED, lease_fenced_put_if(writer, "none", (const uint8_t *)"x", 1, NULL, NULL, &err));
  e = NULL;
  CHECK(lease_fenced_put(reader, "data", (const uint8_t *)"x", 1, NULL, &e) == LEASE_INVALID);
  CHECK(strstr(lease_error_message(e), "fenced_read") != NULL);
  lease_error_free(e);
  CHECK_CODE(LEASE_INVALID, lease_fenced_read(reader, NULL, &obj, &err));
  CHECK_CODE(LEASE_INVALID, lease_fenced_read(reader, "data", NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_fenced_read(NULL, "data", &obj, &err));
  CHECK_CODE(LEASE_OK, lease_token(reader, &token, &err));
  CHECK_CODE(LEASE_OK, lease_token_parse_grant(token, &mode, NULL, NULL, NULL, &err));
  CHECK(mode == LEASE_MODE_SHARED);
  lease_string_free(token);
  CHECK_CODE(LEASE_OK, lease_token_parse_grant("s3://b/l#7@ab;path=t/u%20v", NULL, &scope, &start,
                                               &end, &err));
  CHECK(strcmp(scope, "t/u v") == 0 && start == 0 && end == 0);
  lease_string_free(scope);
  CHECK_CODE(LEASE_INVALID, lease_token_parse_grant("s3://b/l#7@ab;readers", NULL, NULL, NULL,
                                                    NULL, &err));
  CHECK_CODE(LEASE_OK, lease_release(reader, &err));
  lease_free(reader);
  lease_free(writer);
  lease_store_free(store);
  lease_runtime_free(rt);
}

/* The waiters' part of a queued lock's record, read through the store (`"queue":[...]`, one
 * waiter's entry in these tests; `wake` holds where a hint reaches it), into `out`. */
static void queue_part(lease_store *store, const char *name, char *out, size_t len) {
  lease_object *rec = NULL;
  CHECK_CODE(LEASE_OK, lease_fenced_get(store, name, &rec, &err));
  CHECK(rec != NULL);
  size_t n = 0;
  const uint8_t *data = lease_object_data(rec, &n);
  char text[8192];
  CHECK(n < sizeof text);
  memcpy(text, data, n);
  text[n] = '\0';
  lease_object_free(rec);
  const char *q = strstr(text, "\"queue\":[");
  CHECK(q != NULL);
  const char *end = strchr(q, ']');
  CHECK(end != NULL);
  snprintf(out, len, "%.*s", (int)(end - q + 1), q);
}

/* Issue 23: `wake_hints` says where a waiter of a queued lock can be woken. By default (and
 * with "127.0.0.1") its queue entry carries a loopback address; with "off" none (it learns of
 * its grant at its next poll); a value that is neither is LEASE_INVALID. */
static void test_wake_hints(void) {
  char name[128], part[2048];
  name_of(name, sizeof name, "wake-hints");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  const char *choices[] = {NULL, "127.0.0.1", "off"};
  for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++) {
    lease_options h = queue_opts("h", 0);
    h.wait_ms = 0;
    lease *holder = NULL;
    CHECK_CODE(LEASE_OK, lease_acquire(store, name, &h, &holder, &err));
    struct queued_acquire w = {.store = store, .name = name, .opts = queue_opts("w", 0)};
    w.opts.wake_hints = choices[i];
    pthread_t tw;
    CHECK(pthread_create(&tw, NULL, queued_acquirer, &w) == 0);
    wait_for_waiters(store, name, "w,");
    queue_part(store, name, part, sizeof part);
    if (choices[i] != NULL && strcmp(choices[i], "off") == 0) {
      if (strstr(part, "\"wake\"") != NULL) fprintf(stderr, "hints off, yet: %s\n", part);
      CHECK(strstr(part, "\"wake\"") == NULL);
    } else {
      if (strstr(part, "\"wake\":\"udp:127.0.0.1:") == NULL) fprintf(stderr, "no hint: %s\n", part);
      CHECK(strstr(part, "\"wake\":\"udp:127.0.0.1:") != NULL);
    }
    CHECK_CODE(LEASE_OK, lease_release(holder, &err));
    CHECK(pthread_join(tw, NULL) == 0);
    CHECK(w.got != NULL);
    CHECK_CODE(LEASE_OK, lease_release(w.got, &err));
    lease_free(w.got);
    lease_free(holder);
  }
  const char *bad[] = {"", "on-demand", "127.0.0", "udp:127.0.0.1:9", "\xff"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    lease_options x = queue_opts("x", 0);
    x.wait_ms = 0;
    x.wake_hints = bad[i];
    lease *l = NULL;
    char msg[512];
    lease_error *e = NULL;
    CHECK(code_and_message(lease_acquire(store, name, &x, &l, &e), &e, msg, sizeof msg) ==
          LEASE_INVALID);
    CHECK(l == NULL);
    CHECK(i == 4 || strstr(msg, "loopback") != NULL);
  }
  lease_store_free(store);
  lease_runtime_free(rt);
}

struct test {
  const char *name;
  void (*run)(void);
};

/* Issue 28: this thread does not wait for a lease it holds (LEASE_HELD at once; another owner
 * waits as usual); a held lease's ttl and data change with lease_set_ttl / lease_set_data. */
static void test_owner_and_changes(void) {
  char name[128];
  name_of(name, sizeof name, "owner");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  lease_options opts = lease_options_default();
  opts.data = "10.0.0.1:80";
  lease *l = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &opts, &l, &err));

  lease_options again = lease_options_default();
  again.wait_ms = 5000;
  lease *l2 = (lease *)0x1;
  char msg[512];
  lease_error *e = NULL;
  double t0 = now_ms();
  CHECK(code_and_message(lease_acquire(store, name, &again, &l2, &e), &e, msg, sizeof msg) ==
        LEASE_HELD);
  CHECK(now_ms() - t0 < 2500);
  CHECK(strstr(msg, "would wait for itself") != NULL);
  CHECK(l2 == (lease *)0x1);
  again.owner = ""; /* nobody in particular: it waits (here until its wait runs out) */
  again.wait_ms = 300;
  CHECK_CODE(LEASE_TIMEOUT, lease_acquire(store, name, &again, &l2, &err));

  uint64_t left = 0;
  CHECK_CODE(LEASE_OK, lease_set_ttl(l, 60000, &left, &err));
  CHECK(left > 59000 && left <= 60000);
  CHECK(status_has(store, name, "\"ttl_ms\":60000"));
  CHECK_CODE(LEASE_OK, lease_set_data(l, "10.0.0.2:80", NULL, &err));
  CHECK(status_has(store, name, "\"data\":\"10.0.0.2:80\""));
  CHECK_CODE(LEASE_OK, lease_set_data(l, NULL, &left, &err));
  CHECK(status_has(store, name, "\"data\":null"));
  CHECK_CODE(LEASE_INVALID, lease_set_ttl(l, 10, &left, &err));
  CHECK_CODE(LEASE_INVALID, lease_set_ttl(NULL, 1000, &left, &err));
  CHECK_CODE(LEASE_OK, lease_release(l, &err));
  CHECK_CODE(LEASE_LOST, lease_set_ttl(l, 60000, NULL, &err));
  lease_free(l);
  lease_store_free(store);
  lease_runtime_free(rt);
}

/* Issue 23, "Yield on request": the holder learns it through `lease_on_yield`, keeps the lock,
 * releases, and the waiter named by `to` gets it. Mirrors python/tests/test_queue.py's
 * test_a_yield_request_reaches_the_holder_and_it_hands_over. Then a bad `to` and a plain lease
 * are LEASE_INVALID. */
struct yield_told {
  pthread_mutex_t mu;
  int count;
  char by[64], to[128], reason[64];
};

static void on_yield(void *user_data, const char *by, const char *to, const char *reason) {
  struct yield_told *t = user_data;
  pthread_mutex_lock(&t->mu);
  t->count++;
  snprintf(t->by, sizeof t->by, "%s", by);
  snprintf(t->to, sizeof t->to, "%s", to ? to : "(null)");
  snprintf(t->reason, sizeof t->reason, "%s", reason ? reason : "(null)");
  pthread_mutex_unlock(&t->mu);
}

static int yield_count(struct yield_told *t) {
  pthread_mutex_lock(&t->mu);
  int n = t->count;
  pthread_mutex_unlock(&t->mu);
  return n;
}

static void test_a_yield_request_reaches_the_holder_and_it_hands_over(void) {
  char name[128], plain[128];
  name_of(name, sizeof name, "yield");
  name_of(plain, sizeof plain, "yield-plain");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  lease_options ho = queue_opts("holder", 0);
  lease *holder = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &ho, &holder, &err));
  struct yield_told told = {.mu = PTHREAD_MUTEX_INITIALIZER};
  CHECK_CODE(LEASE_OK, lease_on_yield(holder, on_yield, &told));
  CHECK(lease_on_yield(holder, NULL, &told) == LEASE_INVALID);

  struct queued_acquire w = {.store = store, .name = name, .opts = queue_opts("waiter", 0)};
  pthread_t tw;
  CHECK(pthread_create(&tw, NULL, queued_acquirer, &w) == 0);
  wait_for_waiters(store, name, "waiter,");
  char *json = NULL;
  CHECK_CODE(LEASE_OK, lease_status(store, name, &json, &err));
  const char *id = strstr(strstr(json, "\"waiting\":["), "\"id\":\"") + strlen("\"id\":\"");
  char waiter_id[128];
  snprintf(waiter_id, sizeof waiter_id, "%.*s", (int)(strchr(id, '"') - id), id);
  lease_string_free(json);

  size_t asked = 99;
  CHECK_CODE(LEASE_OK, lease_ask_yield(store, name, waiter_id, "deploy", "op", &asked, &err));
  CHECK(asked == 1);
  for (int i = 0; i < 1500 && yield_count(&told) == 0; i++) sleep_ms(20);
  CHECK(yield_count(&told) == 1);
  CHECK(strcmp(told.by, "op") == 0 && strcmp(told.to, waiter_id) == 0 &&
        strcmp(told.reason, "deploy") == 0);
  CHECK_CODE(LEASE_OK, lease_ensure_held(holder, 0, &err)); /* not a loss */
  CHECK(!atomic_load(&w.done));

  /* A bad `to`: LEASE_INVALID, naming it. */
  lease_error *e = NULL;
  CHECK(lease_ask_yield(store, name, "no-such-waiter", NULL, NULL, NULL, &e) == LEASE_INVALID);
  CHECK(strstr(lease_error_message(e), "no-such-waiter") != NULL);
  lease_error_free(e);
  e = NULL;

  CHECK_CODE(LEASE_OK, lease_release(holder, &err));
  CHECK(pthread_join(tw, NULL) == 0);
  CHECK(w.got != NULL);
  CHECK(lease_epoch(w.got) > lease_epoch(holder));
  CHECK_CODE(LEASE_OK, lease_release(w.got, &err));
  CHECK(yield_count(&told) == 1);
  lease_free(w.got);
  lease_free(holder);

  /* A plain lease is asked through KEY.yield, naming its one tenure; a `to` is LEASE_INVALID
     (it has no waiters), as the core says. */
  lease_options po = lease_options_default();
  po.ttl_ms = 10000;
  lease *p = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, plain, &po, &p, &err));
  CHECK(lease_ask_yield(store, plain, "x", NULL, NULL, NULL, &e) == LEASE_INVALID);
  CHECK(strstr(lease_error_message(e), "no waiters") != NULL);
  lease_error_free(e);
  size_t plain_asked = 0;
  CHECK_CODE(LEASE_OK, lease_ask_yield(store, plain, NULL, "deploy", NULL, &plain_asked, &err));
  CHECK(plain_asked == 1);
  CHECK_CODE(LEASE_OK, lease_release(p, &err));
  lease_free(p);
  lease_store_free(store);
  lease_runtime_free(rt);
}

/* Issue 23: a waiter acquired with `ask_yield` asks the holder in its way for itself (`by` and
 * `to` its own id, its `yield_reason`); the holder releases and the waiter gets the lock.
 * Mirrors python/tests/test_queue.py's
 * test_a_waiter_that_asks_to_yield_is_handed_the_lock_when_the_holder_steps_aside. */
static void test_a_waiter_that_asks_to_yield_is_handed_the_lock_when_the_holder_steps_aside(void) {
  char name[128];
  name_of(name, sizeof name, "ask-yield");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  lease_options ho = queue_opts("holder", 0);
  lease *holder = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &ho, &holder, &err));
  struct yield_told told = {.mu = PTHREAD_MUTEX_INITIALIZER};
  CHECK_CODE(LEASE_OK, lease_on_yield(holder, on_yield, &told));

  struct queued_acquire w = {.store = store, .name = name, .opts = queue_opts("waiter", 0)};
  w.opts.queue = 0; /* ask_yield alone makes it a queued request */
  w.opts.ask_yield = 1;
  w.opts.yield_reason = "deploy";
  pthread_t tw;
  CHECK(pthread_create(&tw, NULL, queued_acquirer, &w) == 0);
  for (int i = 0; i < 1500 && yield_count(&told) == 0; i++) sleep_ms(20);
  CHECK(yield_count(&told) == 1);
  wait_for_waiters(store, name, "waiter,");
  char *json = NULL;
  CHECK_CODE(LEASE_OK, lease_status(store, name, &json, &err));
  const char *id = strstr(strstr(json, "\"waiting\":["), "\"id\":\"") + strlen("\"id\":\"");
  char waiter_id[128];
  snprintf(waiter_id, sizeof waiter_id, "%.*s", (int)(strchr(id, '"') - id), id);
  lease_string_free(json);
  /* The waiter asks for itself: it is both who asks and whom to hand the lock to. */
  pthread_mutex_lock(&told.mu);
  CHECK(strcmp(told.by, waiter_id) == 0 && strcmp(told.to, waiter_id) == 0 &&
        strcmp(told.reason, "deploy") == 0);
  pthread_mutex_unlock(&told.mu);
  CHECK_CODE(LEASE_OK, lease_ensure_held(holder, 0, &err)); /* not a loss */
  CHECK(!atomic_load(&w.done));

  CHECK_CODE(LEASE_OK, lease_release(holder, &err));
  CHECK(pthread_join(tw, NULL) == 0);
  CHECK(w.got != NULL);
  CHECK(lease_grant_mode(w.got) == LEASE_MODE_EXCLUSIVE);
  CHECK(lease_epoch(w.got) > lease_epoch(holder));
  char *token = NULL;
  CHECK_CODE(LEASE_OK, lease_token(w.got, &token, &err));
  CHECK(strstr(token, waiter_id) != NULL);
  lease_string_free(token);
  CHECK_CODE(LEASE_OK, lease_release(w.got, &err));
  CHECK(yield_count(&told) == 1);
  lease_free(w.got);
  lease_free(holder);
  lease_store_free(store);
  lease_runtime_free(rt);
}

struct lost_health {
  pthread_mutex_t mu;
  int lost;
  char reason[64];
};

static void on_health_lost(void *user_data, lease_health health, uint64_t remaining_ms,
                           const char *reason) {
  (void)remaining_ms;
  struct lost_health *h = user_data;
  if (health != LEASE_HEALTH_LOST) return;
  pthread_mutex_lock(&h->mu);
  h->lost++;
  snprintf(h->reason, sizeof h->reason, "%s", reason ? reason : "(null)");
  pthread_mutex_unlock(&h->mu);
}

static int lost_count(struct lost_health *h) {
  pthread_mutex_lock(&h->mu);
  int n = h->lost;
  pthread_mutex_unlock(&h->mu);
  return n;
}

/* Issue 23: `preempt = "every-effect-fenced"` takes a live holder's lease at once (with a try
 * that may not wait), at a higher epoch; the holder learns it at its next renewal, reason
 * `preempted`. Mirrors python/tests/test_lease.py's
 * test_preempt_takes_a_live_lease_at_once_and_the_holder_loses_it_as_preempted. */
static void preempt_a_live_holder(int queued);

static void test_preempt_takes_a_live_lease_at_once_and_the_holder_loses_it_as_preempted(void) {
  preempt_a_live_holder(0);
  /* A queued lock's grant (docs/protocol.md §10, "Preemption of a queued lock"). */
  preempt_a_live_holder(1);
}

static void preempt_a_live_holder(int queued) {
  char name[128];
  name_of(name, sizeof name, queued ? "preempt-queued" : "preempt");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  lease_options ho = lease_options_default();
  ho.ttl_ms = 3000;
  ho.label = "old";
  ho.queue = queued;
  lease *holder = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &ho, &holder, &err));
  struct lost_health h = {.mu = PTHREAD_MUTEX_INITIALIZER};
  CHECK_CODE(LEASE_OK, lease_on_health(holder, on_health_lost, &h));
  lease_options to = lease_options_default();
  to.ttl_ms = 3000;
  to.wait_ms = 0;
  to.owner = ""; /* not this thread, which holds it */
  to.queue = queued;
  lease *taker = NULL;
  /* Without the mode: held. */
  CHECK_CODE(LEASE_HELD, lease_acquire(store, name, &to, &taker, &err));
  CHECK(taker == NULL);
  /* With it: at once, though it may not wait. */
  to.label = "new";
  to.preempt = "every-effect-fenced";
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &to, &taker, &err));
  CHECK(lease_epoch(taker) > lease_epoch(holder));
  CHECK(status_has(store, name, "\"label\":\"new\""));
  /* The old holder learns it at its next renewal (every ttl/3). */
  for (int i = 0; i < 1500 && lost_count(&h) == 0; i++) sleep_ms(20);
  CHECK(lost_count(&h) == 1);
  CHECK(strcmp(h.reason, "preempted") == 0);
  CHECK_CODE(LEASE_LOST, lease_ensure_held(holder, 0, &err));
  CHECK_CODE(LEASE_LOST, lease_release(holder, &err));
  CHECK_CODE(LEASE_OK, lease_ensure_held(taker, 0, &err));
  CHECK_CODE(LEASE_OK, lease_release(taker, &err));
  lease_free(taker);
  lease_free(holder);
  lease_store_free(store);
  lease_runtime_free(rt);
}

/* Issue 23: bad `ask_yield`, `yield_reason` and `preempt` options are LEASE_INVALID, saying what
 * to do; nothing is written. Mirrors python/tests/test_queue.py's
 * test_bad_yield_and_preempt_options. */
static void test_bad_yield_and_preempt_options(void) {
  char name[128];
  name_of(name, sizeof name, "bad-yield");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  char long_reason[258];
  memset(long_reason, 'x', 257);
  long_reason[257] = '\0';
  struct {
    const char *preempt;
    int queue, shared, ask_yield;
    const char *yield_reason, *says;
  } bad[] = {
      {"yes", 0, 0, 0, NULL, "every-effect-fenced"},
      {"Never ", 0, 0, 0, NULL, "every-effect-fenced"},
      {"true", 0, 0, 0, NULL, "believing"},
      {"every-effect-fenced", 0, 1, 0, NULL, "only an exclusive request"},
      {"\xff", 0, 0, 0, NULL, "UTF-8"},
      {NULL, 0, 0, 0, "why", "set ask_yield"},
      {NULL, 0, 0, 1, long_reason, "at most 256 bytes"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    lease_options x = lease_options_default();
    x.wait_ms = 0;
    x.preempt = bad[i].preempt;
    x.queue = bad[i].queue;
    x.shared = bad[i].shared;
    x.ask_yield = bad[i].ask_yield;
    x.yield_reason = bad[i].yield_reason;
    lease *l = NULL;
    lease_error *e = NULL;
    char msg[1024];
    CHECK(code_and_message(lease_acquire(store, name, &x, &l, &e), &e, msg, sizeof msg) ==
          LEASE_INVALID);
    if (strstr(msg, bad[i].says) == NULL) {
      fprintf(stderr, "case %zu: \"%s\" does not say \"%s\"\n", i, msg, bad[i].says);
      exit(1);
    }
    CHECK(l == NULL);
  }
  CHECK(status_has(store, name, "\"state\":\"free\""));
  /* "never" is the default, said out loud. */
  lease_options n = lease_options_default();
  n.wait_ms = 0;
  n.preempt = "never";
  lease *l = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &n, &l, &err));
  CHECK(lease_grant_mode(l) == LEASE_MODE_NONE);
  CHECK_CODE(LEASE_OK, lease_release(l, &err));
  lease_free(l);
  lease_store_free(store);
  lease_runtime_free(rt);
}

/* --- Shared sessions: many grants, one heartbeat (docs/protocol.md §10, "Shared sessions";
 * the Python binding's test_shared_session.py is the reference). */

#define SESSION_THREADS 8

struct session_acquirers {
  lease_session *session;
  char (*names)[128];
  lease_shared_grant **grants;
  int n;
  int first; /* this thread takes first, first + SESSION_THREADS, ... */
  int failed;
};

static void *session_acquirer(void *arg) {
  struct session_acquirers *a = arg;
  lease_options o = lease_options_default();
  o.wait_ms = 60000;
  o.poll_interval_ms = 100;
  for (int i = a->first; i < a->n; i += SESSION_THREADS) {
    lease_error *err = NULL;
    lease_code c = lease_session_acquire(a->session, a->names[i], &o, &a->grants[i], &err);
    if (c != LEASE_OK) {
      fprintf(stderr, "session acquire %s: %s: %s\n", a->names[i], lease_code_name(c),
              lease_error_message(err));
      lease_error_free(err);
      a->grants[i] = NULL;
      a->failed = 1;
    }
  }
  return NULL;
}

/* A plain queued request that tries once: LEASE_OK (then released) or LEASE_HELD. */
static lease_code try_queued(lease_store *store, const char *name) {
  lease_options o = lease_options_default();
  o.ttl_ms = 5000;
  o.queue = 1;
  o.wait_ms = 0;
  lease *l = NULL;
  lease_error *err = NULL;
  lease_code c = lease_acquire(store, name, &o, &l, &err);
  lease_error_free(err);
  if (c == LEASE_OK) {
    CHECK_CODE(LEASE_OK, lease_release(l, &err));
    lease_free(l);
  }
  return c;
}

/* Many grants on one session (200 on a file store, 50 on the others), taken by eight threads at
 * once, released one by one: all held, the rest stay held after half are released, others see
 * them held, closing the session releases the rest. */
static void test_session_many_grants(void) {
  int n = strncmp(store_url, "file://", 7) == 0 ? 200 : 50;
  char(*names)[128] = calloc((size_t)n, sizeof *names);
  lease_shared_grant **grants = calloc((size_t)n, sizeof *grants);
  CHECK(names != NULL && grants != NULL);
  for (int i = 0; i < n; i++) {
    char test[64];
    snprintf(test, sizeof test, "session-many-%d", i);
    name_of(names[i], sizeof names[i], test);
  }
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  lease_session_options so = lease_session_options_default();
  so.ttl_ms = 10000;
  so.label = "c-many";
  lease_session *session = NULL;
  CHECK_CODE(LEASE_OK, lease_session_open(store, &so, &session, &err));
  CHECK(lease_session_alive(session) == 1);
  CHECK(lease_session_attached(session) == 0);
  CHECK(lease_session_ttl_ms(session) == 10000);
  const char *sid = lease_session_sid(session);
  CHECK(strlen(sid) > 0);
  CHECK(strstr(lease_session_key(session), ".lease-sessions/") != NULL);
  CHECK(strstr(lease_session_key(session), sid) != NULL);
  CHECK(lease_session_lost_reason(session) == NULL);

  pthread_t threads[SESSION_THREADS];
  struct session_acquirers a[SESSION_THREADS];
  for (int t = 0; t < SESSION_THREADS; t++) {
    a[t] = (struct session_acquirers){session, names, grants, n, t, 0};
    CHECK(pthread_create(&threads[t], NULL, session_acquirer, &a[t]) == 0);
  }
  for (int t = 0; t < SESSION_THREADS; t++) {
    CHECK(pthread_join(threads[t], NULL) == 0);
    CHECK(!a[t].failed);
  }
  CHECK(lease_session_attached(session) == (size_t)n);
  size_t sid_len = strlen(sid);
  for (int i = 0; i < n; i++) {
    lease_shared_grant *g = grants[i];
    CHECK(lease_shared_grant_held(g) == 1);
    CHECK(lease_shared_grant_epoch(g) > 0);
    {
      /* URL#EPOCH@SID.N: the grant's entry id is its token's holder. */
      char *url_out = NULL, *holder_out = NULL;
      uint64_t epoch_out = 0;
      CHECK_CODE(LEASE_OK, lease_token_parse_holder(lease_shared_grant_token(g), &url_out,
                                                    &epoch_out, &holder_out, &err));
      CHECK(epoch_out == lease_shared_grant_epoch(g));
      CHECK(strcmp(url_out, lease_shared_grant_url(g)) == 0);
      CHECK(strcmp(holder_out, lease_shared_grant_id(g)) == 0);
      lease_string_free(url_out);
      lease_string_free(holder_out);
    }
    CHECK(lease_shared_grant_mode(g) == LEASE_MODE_EXCLUSIVE);
    CHECK(strcmp(lease_shared_grant_key(g), names[i]) == 0);
    CHECK(strstr(lease_shared_grant_url(g), names[i]) != NULL);
    const char *id = lease_shared_grant_id(g);
    CHECK(strncmp(id, sid, sid_len) == 0 && id[sid_len] == '.');
    CHECK(lease_shared_grant_lost_reason(g) == NULL);
    CHECK(lease_shared_grant_lost_kind(g) == NULL);
    for (int j = 0; j < i; j++) CHECK(strcmp(id, lease_shared_grant_id(grants[j])) != 0);
  }
  /* Others see the locks held: a plain queued request cannot be granted. */
  CHECK(try_queued(store, names[n - 1]) == LEASE_HELD);

  int half = n / 2;
  for (int i = 0; i < half; i++) {
    CHECK_CODE(LEASE_OK, lease_shared_grant_release(grants[i], &err));
    CHECK(lease_shared_grant_held(grants[i]) == 0);
    CHECK_CODE(LEASE_OK, lease_shared_grant_release(grants[i], &err)); /* idempotent */
  }
  for (int i = half; i < n; i++) {
    if (lease_shared_grant_held(grants[i]) != 1) {
      char *why = lease_shared_grant_lost_reason(grants[i]);
      fprintf(stderr, "grant %d not held after the others' release: %s\n", i, why ? why : "?");
      exit(1);
    }
    CHECK_CODE(LEASE_OK, lease_shared_grant_ensure_held(grants[i], &err));
  }
  {
    lease_error *e = NULL;
    char msg[512];
    CHECK(code_and_message(lease_shared_grant_ensure_held(grants[0], &e), &e, msg, sizeof msg) ==
          LEASE_LOST);
    CHECK(strstr(msg, "released") != NULL);
  }
  /* A released lock is free for others; a held one is not. */
  CHECK(try_queued(store, names[0]) == LEASE_OK);
  CHECK(try_queued(store, names[n - 1]) == LEASE_HELD);
  CHECK(lease_session_alive(session) == 1);

  /* Closing releases the rest. */
  CHECK_CODE(LEASE_OK, lease_session_close(session, &err));
  CHECK_CODE(LEASE_OK, lease_session_close(session, &err)); /* idempotent */
  CHECK(lease_session_alive(session) == 0);
  for (int i = half; i < n; i++) CHECK(lease_shared_grant_held(grants[i]) == 0);
  CHECK(try_queued(store, names[n - 1]) == LEASE_OK);
  for (int i = 0; i < n; i++) lease_shared_grant_free(grants[i]);
  lease_session_free(session);
  lease_store_free(store);
  lease_runtime_free(rt);
  free(grants);
  free(names);
}

struct session_waiter {
  lease_session *session;
  const char *name;
  lease_cancel_token *cancel;
  lease_code code;
};

static void *session_waiter(void *arg) {
  struct session_waiter *w = arg;
  lease_options o = lease_options_default();
  o.poll_interval_ms = 100;
  o.cancel = w->cancel;
  lease_shared_grant *g = NULL;
  lease_error *err = NULL;
  w->code = lease_session_acquire(w->session, w->name, &o, &g, &err);
  lease_error_free(err);
  lease_shared_grant_free(g);
  return NULL;
}

/* An acquire through a session waiting for a held lock, cancelled through its token from
 * another thread, returns LEASE_CANCELLED and leaves the lock's queue and the session: nobody
 * is handed the lock once its holder releases. */
static void test_session_cancel(void) {
  char name[128];
  name_of(name, sizeof name, "session-cancel");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  lease_options h = queue_opts("holder", 0);
  lease *holder = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &h, &holder, &err));
  lease_session_options so = lease_session_options_default();
  so.ttl_ms = 5000;
  lease_session *session = NULL;
  CHECK_CODE(LEASE_OK, lease_session_open(store, &so, &session, &err));
  struct session_waiter w = {session, name, lease_cancel_token_new(), LEASE_OK};
  CHECK(w.cancel != NULL);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, session_waiter, &w) == 0);
  int waiting = 0;
  for (int i = 0; i < 1500 && !waiting; i++) {
    waiting = status_has_quiet(store, name, "\"waiting\":[{");
    if (!waiting) sleep_ms(20);
  }
  CHECK(waiting);
  lease_cancel_token_cancel(w.cancel);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(w.code == LEASE_CANCELLED);
  int left = 0;
  for (int i = 0; i < 1500 && !left; i++) {
    left = lease_session_attached(session) == 0 && status_has_quiet(store, name, "\"waiting\":[]");
    if (!left) sleep_ms(20);
  }
  CHECK(left);
  CHECK_CODE(LEASE_OK, lease_release(holder, &err));
  lease_free(holder);
  CHECK(!status_has_quiet(store, name, "\"state\":\"held\""));
  lease_cancel_token_free(w.cancel);
  CHECK_CODE(LEASE_OK, lease_session_close(session, &err));
  lease_session_free(session);
  lease_store_free(store);
  lease_runtime_free(rt);
}

/* Bad input to sessions and their grants: typed LEASE_INVALID errors that say what to do. */
static void test_session_bad_input(void) {
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  lease_session *const SENTINEL = (lease_session *)0x1;
  lease_session *session = SENTINEL;
  CHECK_CODE(LEASE_INVALID, lease_session_open(NULL, NULL, &session, &err));
  CHECK_CODE(LEASE_INVALID, lease_session_open(store, NULL, NULL, &err));
  lease_session_options zeroed;
  memset(&zeroed, 0, sizeof zeroed);
  CHECK_CODE(LEASE_INVALID, lease_session_open(store, &zeroed, &session, &err));
  struct {
    uint64_t ttl_ms;
    const char *prefix;
    const char *label;
    const char *says;
  } bad[] = {
      {0, NULL, NULL, "ttl"},
      {25ULL * 3600 * 1000, NULL, NULL, "ttl"},
      {5000, "team-a", NULL, "prefix"},
      {5000, NULL, "\xff\xfe", "UTF-8"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    lease_session_options o = lease_session_options_default();
    o.ttl_ms = bad[i].ttl_ms;
    o.prefix = bad[i].prefix;
    o.label = bad[i].label;
    lease_error *e = NULL;
    char msg[1024];
    CHECK(code_and_message(lease_session_open(store, &o, &session, &e), &e, msg, sizeof msg) ==
          LEASE_INVALID);
    if (strstr(msg, bad[i].says) == NULL) {
      fprintf(stderr, "case %zu: \"%s\" does not say \"%s\"\n", i, msg, bad[i].says);
      exit(1);
    }
  }
  CHECK(session == SENTINEL);

  lease_session_options so = lease_session_options_default();
  so.ttl_ms = 5000;
  session = NULL;
  CHECK_CODE(LEASE_OK, lease_session_open(store, &so, &session, &err));
  char name[128];
  name_of(name, sizeof name, "session-bad");
  lease_shared_grant *const GSENTINEL = (lease_shared_grant *)0x1;
  lease_shared_grant *g = GSENTINEL;
  CHECK_CODE(LEASE_INVALID, lease_session_acquire(NULL, name, NULL, &g, &err));
  CHECK_CODE(LEASE_INVALID, lease_session_acquire(session, NULL, NULL, &g, &err));
  CHECK_CODE(LEASE_INVALID, lease_session_acquire(session, name, NULL, NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_session_acquire(session, "\xff\xfe", NULL, &g, &err));
  /* Locks of another store: another bucket, another directory, another kind of store. */
  const char *others[] = {
      "s3://another-bucket/locks/x?endpoint=http://127.0.0.1:1&region=us-east-1",
      "file:///nonexistent-lease-dir/sub/x",
      "memory://elsewhere/x",
  };
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
    lease_error *e = NULL;
    char msg[1024];
    CHECK(code_and_message(lease_session_acquire(session, others[i], NULL, &g, &e), &e, msg,
                           sizeof msg) == LEASE_INVALID);
    if (strstr(msg, "not in this session's store") == NULL) {
      fprintf(stderr, "%s: \"%s\"\n", others[i], msg);
      exit(1);
    }
  }
  struct {
    lease_options o;
    const char *says;
  } bad_acq[] = {
      {lease_options_default(), "the session's ttl applies"},
      {lease_options_default(), "per-grant data"},
      {lease_options_default(), "struct_size"},
      {lease_options_default(), ""},
  };
  bad_acq[0].o.ttl_ms = 5000;
  bad_acq[1].o.data = "10.0.0.2";
  bad_acq[2].o.struct_size = 0;
  bad_acq[3].o.permits = 2;
  bad_acq[3].o.scope = "a";
  bad_acq[3].o.range_start = 0;
  bad_acq[3].o.range_end = 1;
  for (size_t i = 0; i < sizeof bad_acq / sizeof bad_acq[0]; i++) {
    lease_error *e = NULL;
    char msg[1024];
    CHECK(code_and_message(lease_session_acquire(session, name, &bad_acq[i].o, &g, &e), &e, msg,
                           sizeof msg) == LEASE_INVALID);
    if (strstr(msg, bad_acq[i].says) == NULL) {
      fprintf(stderr, "case %zu: \"%s\" does not say \"%s\"\n", i, msg, bad_acq[i].says);
      exit(1);
    }
  }
  CHECK(g == GSENTINEL);
  CHECK(lease_session_attached(session) == 0);
  CHECK(lease_session_alive(session) == 1);

  /* The lock's URL in this store names it as its key does (a key at the store's root: a file
   * lock URL's directory is its store). */
  char top[128], url[512];
  snprintf(top, sizeof top, "%s-session-url", prefix);
  lease_url_of(url, sizeof url, top);
  lease_options once = lease_options_default();
  once.wait_ms = 0;
  g = NULL;
  CHECK_CODE(LEASE_OK, lease_session_acquire(session, url, &once, &g, &err));
  CHECK(strcmp(lease_shared_grant_key(g), top) == 0);
  CHECK(lease_shared_grant_held(g) == 1);
  /* Held through the session: a second request that tries once is refused. */
  lease_shared_grant *g2 = GSENTINEL;
  lease_error *e2 = NULL;
  lease_code c2 = lease_session_acquire(session, top, &once, &g2, &e2);
  CHECK(c2 == LEASE_HELD);
  lease_error_free(e2);
  CHECK(g2 == GSENTINEL);
  CHECK_CODE(LEASE_OK, lease_shared_grant_release(g, &err));

  /* NULL handles: neutral values. */
  CHECK(lease_session_alive(NULL) == 0 && lease_session_attached(NULL) == 0);
  CHECK(lease_session_ttl_ms(NULL) == 0 && lease_session_lost_reason(NULL) == NULL);
  CHECK(strcmp(lease_session_sid(NULL), "") == 0 && strcmp(lease_session_url(NULL), "") == 0);
  CHECK(lease_shared_grant_epoch(NULL) == 0 && lease_shared_grant_held(NULL) == 0);
  CHECK(lease_shared_grant_mode(NULL) == LEASE_MODE_NONE);
  CHECK(strcmp(lease_shared_grant_id(NULL), "") == 0);
  CHECK(lease_shared_grant_lost_kind(NULL) == NULL);
  CHECK_CODE(LEASE_INVALID, lease_shared_grant_release(NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_shared_grant_ensure_held(NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_session_close(NULL, &err));
  lease_shared_grant_free(NULL);
  lease_session_free(NULL);

  /* After close: acquiring is refused, saying so. */
  CHECK_CODE(LEASE_OK, lease_session_close(session, &err));
  {
    lease_error *e = NULL;
    char msg[1024];
    CHECK(code_and_message(lease_session_acquire(session, name, NULL, &g2, &e), &e, msg,
                           sizeof msg) == LEASE_INVALID);
    CHECK(strstr(msg, "closed") != NULL);
  }
  lease_shared_grant_free(g);
  lease_session_free(session);
  lease_store_free(store);
  lease_runtime_free(rt);
}

/* Reads `key` (from the store's root) and checks its bytes are `want`; returns the object (free
 * it with lease_object_free). */
static lease_object *get_expecting(lease_store *store, const char *key, const char *want) {
  lease_object *obj = NULL;
  CHECK_CODE(LEASE_OK, lease_fenced_get(store, key, &obj, &err));
  CHECK(obj != NULL);
  size_t len = 0;
  const uint8_t *data = lease_object_data(obj, &len);
  if (len != strlen(want) || memcmp(data, want, len) != 0) {
    fprintf(stderr, "%s holds \"%.*s\", expected \"%s\"\n", key, (int)len, (const char *)data, want);
    exit(1);
  }
  return obj;
}

/* A shared grant's fenced calls, as a lease's (the Python and Node tests "a shared grant's fenced
 * writes, and its stale write after a takeover is fenced" are the reference): its writes carry
 * its token (epoch, and its entry id as holder); a put_if at the right version lands, at a stale
 * one or "still absent" it is LEASE_CONFLICT; a fenced read; a delete. Then it is cut off: on a
 * file store its session's record is deleted by hand (the grant is lost: session_deleted);
 * elsewhere, where the test cannot delete an object by hand, the session is closed (the grant
 * released). Another holder takes the lock and writes with its higher epoch, and the grant's
 * stale writes are refused with LEASE_FENCED naming that epoch: a write that were not fenced
 * would land. */
static void test_a_shared_grants_fenced_writes_and_its_stale_write_after_a_takeover_is_fenced(
    void) {
  char name[128];
  name_of(name, sizeof name, "session-fence");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_store(rt);
  lease_session_options so = lease_session_options_default();
  so.ttl_ms = 3000;
  lease_session *session = NULL;
  CHECK_CODE(LEASE_OK, lease_session_open(store, &so, &session, &err));
  lease_options wait = lease_options_default();
  wait.wait_ms = 30000;
  wait.poll_interval_ms = 100;
  lease_shared_grant *g = NULL;
  CHECK_CODE(LEASE_OK, lease_session_acquire(session, name, &wait, &g, &err));
  uint64_t epoch = lease_shared_grant_epoch(g);

  /* Where its calls put "sg-data": beside the lock, as a lease's. */
  char *key = NULL;
  CHECK_CODE(LEASE_OK, lease_shared_grant_object_key(g, "sg-data", &key, &err));
  char beside[160];
  snprintf(beside, sizeof beside, "%s/sg-data", prefix);
  CHECK(strcmp(key, beside) == 0);

  char *v1 = NULL;
  CHECK_CODE(LEASE_OK, lease_shared_grant_fenced_put(g, "sg-data", (const uint8_t *)"one", 3, &v1, &err));
  CHECK(v1 != NULL && strlen(v1) > 0);
  lease_object *obj = get_expecting(store, key, "one");
  CHECK(strcmp(lease_object_version(obj), v1) == 0);
  CHECK(lease_object_epoch(obj) == epoch);
  CHECK(strcmp(lease_object_holder(obj), lease_shared_grant_id(g)) == 0);
  CHECK(strcmp(lease_object_lease(obj), lease_shared_grant_url(g)) == 0);
  lease_object_free(obj);

  /* A read-modify-write at the version read lands; at a stale version, or expecting the object
   * absent, it is a conflict and writes nothing. */
  char *v2 = NULL;
  CHECK_CODE(LEASE_OK,
             lease_shared_grant_fenced_put_if(g, "sg-data", (const uint8_t *)"one+1", 5, v1, &v2, &err));
  CHECK(v2 != NULL && strcmp(v2, v1) != 0);
  CHECK_CODE(LEASE_CONFLICT,
             lease_shared_grant_fenced_put_if(g, "sg-data", (const uint8_t *)"x", 1, v1, NULL, &err));
  CHECK_CODE(LEASE_CONFLICT,
             lease_shared_grant_fenced_put_if(g, "sg-data", (const uint8_t *)"x", 1, NULL, NULL, &err));
  CHECK_CODE(LEASE_OK, lease_shared_grant_fenced_read(g, "sg-data", &obj, &err));
  size_t len = 0;
  const uint8_t *data = lease_object_data(obj, &len);
  CHECK(len == 5 && memcmp(data, "one+1", 5) == 0);
  CHECK(strcmp(lease_object_version(obj), v2) == 0 && lease_object_epoch(obj) == epoch);
  lease_object_free(obj);
  obj = (lease_object *)0x1;
  CHECK_CODE(LEASE_OK, lease_shared_grant_fenced_read(g, "sg-none", &obj, &err));
  CHECK(obj == NULL);
  int deleted = -1;
  if (conditional_deletes()) {
    CHECK_CODE(LEASE_OK, lease_shared_grant_fenced_put(g, "sg-gone", (const uint8_t *)"g", 1, NULL, &err));
    CHECK_CODE(LEASE_OK, lease_shared_grant_fenced_delete(g, "sg-gone", &deleted, &err));
    CHECK(deleted == 1);
    CHECK_CODE(LEASE_OK, lease_shared_grant_fenced_delete(g, "sg-gone", &deleted, &err));
    CHECK(deleted == 0);
  }

  /* Bad input: LEASE_INVALID, nothing written. */
  const uint8_t *x = (const uint8_t *)"x";
  char *nothing = (char *)0x1;
  CHECK_CODE(LEASE_INVALID, lease_shared_grant_fenced_put(NULL, "sg-data", x, 1, NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_shared_grant_fenced_put(g, NULL, x, 1, NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_shared_grant_fenced_put(g, "sg-data", NULL, 1, NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_shared_grant_fenced_put(g, "../../../../x", x, 1, NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_shared_grant_fenced_put_if(NULL, "sg-data", x, 1, NULL, NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_shared_grant_fenced_put_if(g, "sg-data", x, 1, "\xff", NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_shared_grant_fenced_read(NULL, "sg-data", &obj, &err));
  CHECK_CODE(LEASE_INVALID, lease_shared_grant_fenced_read(g, "sg-data", NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_shared_grant_fenced_delete(NULL, "sg-data", NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_shared_grant_fenced_delete(g, "\xc3", NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_shared_grant_object_key(NULL, "sg-data", &nothing, &err));
  CHECK_CODE(LEASE_INVALID, lease_shared_grant_object_key(g, "sg-data", NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_shared_grant_object_key(g, "../../../../x", &nothing, &err));
  CHECK(nothing == (char *)0x1);
  obj = get_expecting(store, key, "one+1");
  lease_object_free(obj);

  /* Cut off. */
  int by_hand = strncmp(store_url, "file://", 7) == 0;
  if (by_hand) {
    const char *dir = store_url + 7;
    size_t dlen = strcspn(dir, "?");
    char record[1024];
    snprintf(record, sizeof record, "%.*s/%s", (int)dlen, dir, lease_session_key(session));
    if (unlink(record) != 0) {
      fprintf(stderr, "removing the session's record %s: %s\n", record, strerror(errno));
      exit(1);
    }
    int lost = 0;
    for (int i = 0; i < 1500 && !lost; i++) {
      lost = lease_shared_grant_held(g) == 0;
      if (!lost) sleep_ms(20);
    }
    CHECK(lost);
    char *kind = lease_shared_grant_lost_kind(g);
    CHECK(kind != NULL && strcmp(kind, "session_deleted") == 0);
    lease_string_free(kind);
  } else {
    CHECK_CODE(LEASE_OK, lease_session_close(session, &err));
    CHECK(lease_shared_grant_held(g) == 0);
  }
  lease_options q = queue_opts("next", 0);
  q.wait_ms = 30000;
  lease *next = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire(store, name, &q, &next, &err));
  CHECK(lease_epoch(next) > epoch);
  char *v3 = NULL;
  CHECK_CODE(LEASE_OK, lease_fenced_put(next, "sg-data", (const uint8_t *)"two", 3, &v3, &err));

  /* The grant's stale writes are refused, naming the newer epoch; the newer data stays. */
  lease_error *e = NULL;
  CHECK(lease_shared_grant_fenced_put(g, "sg-data", (const uint8_t *)"stale", 5, NULL, &e) ==
        LEASE_FENCED);
  CHECK(lease_error_kind(e) == LEASE_FENCED && lease_error_epoch(e) == lease_epoch(next));
  lease_error_free(e);
  e = NULL;
  CHECK(lease_shared_grant_fenced_put_if(g, "sg-data", (const uint8_t *)"stale", 5, v3, NULL, &e) ==
        LEASE_FENCED);
  CHECK(lease_error_epoch(e) == lease_epoch(next));
  lease_error_free(e);
  CHECK_CODE(LEASE_FENCED, lease_shared_grant_fenced_read(g, "sg-data", &obj, &err));
  if (conditional_deletes()) {
    deleted = -1;
    CHECK_CODE(LEASE_FENCED, lease_shared_grant_fenced_delete(g, "sg-data", &deleted, &err));
    CHECK(deleted == -1);
  }
  obj = get_expecting(store, key, "two");
  CHECK(lease_object_epoch(obj) == lease_epoch(next));
  CHECK(strcmp(lease_object_version(obj), v3) == 0);
  lease_object_free(obj);

  /* Releasing a lost grant reports the loss (work under it may have overlapped). */
  CHECK_CODE(by_hand ? LEASE_LOST : LEASE_OK, lease_shared_grant_release(g, &err));
  CHECK_CODE(LEASE_OK, lease_release(next, &err));
  lease_free(next);
  lease_string_free(v1);
  lease_string_free(v2);
  lease_string_free(v3);
  lease_string_free(key);
  lease_shared_grant_free(g);
  CHECK_CODE(LEASE_OK, lease_session_close(session, &err));
  lease_session_free(session);
  lease_store_free(store);
  lease_runtime_free(rt);
}

/* --- The process's shared session (docs/protocol.md §10, "The API": *Per-process default*):
 * lease_acquire_on_process_session takes a queued lock by its URL through one session per
 * store and ttl, opened on first use and released by itself one ttl after its last grant. */

/* The session id of a grant: its entry id SID.N without ".N". */
static void sid_of(lease_shared_grant *g, char *buf, size_t len) {
  const char *id = lease_shared_grant_id(g);
  const char *dot = strrchr(id, '.');
  CHECK(dot != NULL && dot > id);
  snprintf(buf, len, "%.*s", (int)(dot - id), id);
}

/* A store handle on the store a lock URL of this run names (its session records are there): for
 * a file URL the lock's directory, otherwise the store under test. */
static lease_store *open_lock_store(lease_runtime *rt) {
  lease_store *store = NULL;
  if (strncmp(store_url, "file://", 7) == 0) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", store_url, prefix);
    CHECK_CODE(LEASE_OK, lease_store_open(rt, dir, &store, &err));
  } else {
    store = open_store(rt);
  }
  return store;
}

/* The key of the lock `name` (a name_of) in open_lock_store's store. */
static const char *in_lock_store(const char *name) {
  return strncmp(store_url, "file://", 7) == 0 ? name + strlen(prefix) + 1 : name;
}

static lease_shared_grant *acquire_on_process_session(const char *name, uint64_t ttl_ms) {
  char url[512];
  lease_url_of(url, sizeof url, name);
  lease_options o = lease_options_default();
  o.ttl_ms = ttl_ms;
  o.poll_interval_ms = 100;
  lease_shared_grant *g = NULL;
  CHECK_CODE(LEASE_OK, lease_acquire_on_process_session(url, &o, &g, &err));
  CHECK(g != NULL);
  return g;
}

struct process_waiter {
  const char *name;
  uint64_t ttl_ms;
  lease_cancel_token *cancel;
  lease_code code;
  char sid[128];
  int held;
};

static void *process_waiter(void *arg) {
  struct process_waiter *w = arg;
  char url[512];
  lease_url_of(url, sizeof url, w->name);
  lease_options o = lease_options_default();
  o.ttl_ms = w->ttl_ms;
  o.poll_interval_ms = 100;
  o.cancel = w->cancel;
  lease_shared_grant *g = NULL;
  lease_error *err = NULL;
  w->code = lease_acquire_on_process_session(url, &o, &g, &err);
  if (w->code != LEASE_OK && w->cancel == NULL) {
    fprintf(stderr, "process-session waiter: %s: %s\n", lease_code_name(w->code),
            lease_error_message(err));
  }
  lease_error_free(err);
  if (g != NULL) {
    sid_of(g, w->sid, sizeof w->sid);
    w->held = lease_shared_grant_held(g);
    lease_error *e = NULL;
    if (lease_shared_grant_release(g, &e) != LEASE_OK) w->held = -1;
    lease_error_free(e);
  }
  lease_shared_grant_free(g);
  return NULL;
}

/* Waits (bounded) until the queue of `name` has a waiter. */
static void wait_for_a_waiter(lease_store *store, const char *name) {
  int waiting = 0;
  for (int i = 0; i < 1500 && !waiting; i++) {
    waiting = status_has_quiet(store, name, "\"waiting\":[{");
    if (!waiting) sleep_ms(20);
  }
  CHECK(waiting);
}

/* Two locks taken this way share one session (one SID in their ids and tokens) and are both
 * held; releasing one leaves the other held; a second thread waiting for the other is handed it
 * when it is released; one ttl after the last release the session's record is gone. */
static void test_process_session(void) {
  const uint64_t ttl = 2000; /* a ttl of this test's alone: its session is its own */
  char a[128], b[128];
  name_of(a, sizeof a, "process-session-a");
  name_of(b, sizeof b, "process-session-b");
  lease_runtime *rt = new_runtime();
  lease_shared_grant *ga = acquire_on_process_session(a, ttl);
  lease_shared_grant *gb = acquire_on_process_session(b, ttl);
  /* The lock's store, where its session's record is. */
  CHECK(strcmp(lease_shared_grant_store_url(ga), lease_shared_grant_store_url(gb)) == 0);
  CHECK(strcmp(lease_shared_grant_store_url(NULL), "") == 0);
  lease_store *store = NULL;
  CHECK_CODE(LEASE_OK, lease_store_open(rt, lease_shared_grant_store_url(ga), &store, &err));
  char sa[128], sb[128];
  sid_of(ga, sa, sizeof sa);
  sid_of(gb, sb, sizeof sb);
  CHECK(strcmp(sa, sb) == 0);
  CHECK(strcmp(lease_shared_grant_id(ga), lease_shared_grant_id(gb)) != 0);
  char at[160];
  snprintf(at, sizeof at, "@%s.", sa);
  CHECK(strstr(lease_shared_grant_token(ga), at) != NULL);
  CHECK(strstr(lease_shared_grant_token(gb), at) != NULL);
  CHECK(lease_shared_grant_mode(ga) == LEASE_MODE_EXCLUSIVE);
  CHECK(lease_shared_grant_held(ga) == 1 && lease_shared_grant_held(gb) == 1);
  CHECK(status_has(store, in_lock_store(a), "\"state\":\"held\""));
  CHECK(status_has(store, in_lock_store(b), "\"state\":\"held\""));

  /* The session's record, at the store's root. */
  char record[192];
  snprintf(record, sizeof record, ".lease-sessions/%s", sa);
  CHECK(!status_has_quiet(store, record, "\"state\":\"free\""));

  CHECK_CODE(LEASE_OK, lease_shared_grant_release(ga, &err));
  CHECK(lease_shared_grant_held(ga) == 0);
  CHECK(lease_shared_grant_held(gb) == 1);
  CHECK_CODE(LEASE_OK, lease_shared_grant_ensure_held(gb, &err));

  /* A hand-over: another thread (another owner) waits for b through the process session. */
  struct process_waiter w = {b, ttl, NULL, LEASE_INTERNAL, "", 0};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, process_waiter, &w) == 0);
  wait_for_a_waiter(store, in_lock_store(b));
  CHECK(lease_shared_grant_held(gb) == 1);
  CHECK_CODE(LEASE_OK, lease_shared_grant_release(gb, &err));
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(w.code == LEASE_OK);
  CHECK(w.held == 1);
  CHECK(strcmp(w.sid, sa) == 0); /* the same process's session */
  lease_shared_grant_free(ga);
  lease_shared_grant_free(gb);

  /* Nothing attached any more: one ttl later the session releases and deletes its record
   * (polled, at most 30 s). */
  int gone = 0;
  for (int i = 0; i < 300 && !gone; i++) {
    gone = status_has_quiet(store, record, "\"state\":\"free\"");
    if (!gone) sleep_ms(100);
  }
  CHECK(gone);
  /* The next acquisition opens a fresh session. */
  lease_shared_grant *gc = acquire_on_process_session(a, ttl);
  char sc[128];
  sid_of(gc, sc, sizeof sc);
  CHECK(strcmp(sc, sa) != 0);
  CHECK_CODE(LEASE_OK, lease_shared_grant_release(gc, &err));
  lease_shared_grant_free(gc);
  lease_store_free(store);
  lease_runtime_free(rt);
}

/* A request waiting through the process session, cancelled through its token, returns
 * LEASE_CANCELLED and leaves the lock's queue. */
static void test_process_session_cancel(void) {
  const uint64_t ttl = 3000;
  char name[128];
  name_of(name, sizeof name, "process-session-cancel");
  lease_runtime *rt = new_runtime();
  lease_store *store = open_lock_store(rt);
  lease_shared_grant *holder = acquire_on_process_session(name, ttl);
  struct process_waiter w = {name, ttl, lease_cancel_token_new(), LEASE_INTERNAL, "", 0};
  CHECK(w.cancel != NULL);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, process_waiter, &w) == 0);
  wait_for_a_waiter(store, in_lock_store(name));
  lease_cancel_token_cancel(w.cancel);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(w.code == LEASE_CANCELLED);
  int left = 0;
  for (int i = 0; i < 1500 && !left; i++) {
    left = status_has_quiet(store, in_lock_store(name), "\"waiting\":[]");
    if (!left) sleep_ms(20);
  }
  CHECK(left);
  CHECK(lease_shared_grant_held(holder) == 1);
  CHECK_CODE(LEASE_OK, lease_shared_grant_release(holder, &err));
  lease_shared_grant_free(holder);
  lease_cancel_token_free(w.cancel);
  lease_store_free(store);
  lease_runtime_free(rt);
}

/* Bad input: typed LEASE_INVALID errors that say what to do, nothing written to *out. */
static void test_process_session_bad_input(void) {
  char name[128], url[512];
  name_of(name, sizeof name, "process-session-bad");
  lease_url_of(url, sizeof url, name);
  lease_shared_grant *const SENTINEL = (lease_shared_grant *)0x1;
  lease_shared_grant *g = SENTINEL;
  CHECK_CODE(LEASE_INVALID, lease_acquire_on_process_session(NULL, NULL, &g, &err));
  CHECK_CODE(LEASE_INVALID, lease_acquire_on_process_session(url, NULL, NULL, &err));
  CHECK_CODE(LEASE_INVALID, lease_acquire_on_process_session("\xff\xfe", NULL, &g, &err));
  lease_options zeroed;
  memset(&zeroed, 0, sizeof zeroed);
  CHECK_CODE(LEASE_INVALID, lease_acquire_on_process_session(url, &zeroed, &g, &err));
  struct {
    lease_options o;
    const char *says;
  } bad[] = {
      {lease_options_default(), "data"},
      {lease_options_default(), "ttl"},
      {lease_options_default(), "wait_ms"},
  };
  bad[0].o.data = "x";
  bad[1].o.ttl_ms = 5;
  bad[2].o.wait_ms = -2;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char msg[512];
    lease_error *e = NULL;
    CHECK(code_and_message(lease_acquire_on_process_session(url, &bad[i].o, &g, &e), &e, msg,
                           sizeof msg) == LEASE_INVALID);
    if (strstr(msg, bad[i].says) == NULL) {
      fprintf(stderr, "bad option %zu: message lacks %s: %s\n", i, bad[i].says, msg);
      exit(1);
    }
  }
  {
    char msg[512];
    lease_error *e = NULL;
    CHECK(code_and_message(lease_acquire_on_process_session("nope://x/y", NULL, &g, &e), &e, msg,
                           sizeof msg) == LEASE_INVALID);
  }
  CHECK(g == SENTINEL);
}

/* After fork(): a grant inherited from the parent is refused in the child (LEASE_FORKED); the
 * child's own acquisition opens the child's own session (another SID) and works, fenced writes
 * and release included; the parent's grant is unaffected. */
static void test_process_session_fork(void) {
  const uint64_t ttl = 4000;
  char a[128], b[128];
  name_of(a, sizeof a, "process-session-fork-a");
  name_of(b, sizeof b, "process-session-fork-b");
  lease_shared_grant *ga = acquire_on_process_session(a, ttl);
  char sa[128];
  sid_of(ga, sa, sizeof sa);

  /* The child reports through a pipe and ends with SIGKILL, as test_fork's does. */
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    int bad = 0;
    lease_error *err = NULL;
    if (lease_shared_grant_release(ga, &err) != LEASE_FORKED) bad |= 1;
    if (lease_error_kind(err) != LEASE_FORKED || !strstr(lease_error_message(err), "fork"))
      bad |= 2;
    lease_error_free(err);
    err = NULL;
    if (lease_shared_grant_ensure_held(ga, NULL) != LEASE_FORKED) bad |= 4;
    if (lease_shared_grant_held(ga) != 0) bad |= 8;
    if (lease_shared_grant_fenced_put(ga, "x", (const uint8_t *)"x", 1, NULL, NULL) !=
        LEASE_FORKED)
      bad |= 16;
    char url[512];
    lease_url_of(url, sizeof url, b);
    lease_options o = lease_options_default();
    o.ttl_ms = ttl;
    o.wait_ms = 30000;
    lease_shared_grant *gb = NULL;
    lease_code c = lease_acquire_on_process_session(url, &o, &gb, &err);
    if (c != LEASE_OK) {
      fprintf(stderr, "fork child: acquire: %s: %s\n", lease_code_name(c),
              lease_error_message(err));
      bad |= 32;
    } else {
      char sb[128];
      sid_of(gb, sb, sizeof sb);
      if (strcmp(sb, sa) == 0) bad |= 64;
      if (lease_shared_grant_held(gb) != 1) bad |= 128;
      if (lease_shared_grant_ensure_held(gb, NULL) != LEASE_OK) bad |= 256;
      if (lease_shared_grant_fenced_put(gb, "fork-data", (const uint8_t *)"c", 1, NULL, NULL) !=
          LEASE_OK)
        bad |= 512;
      if (lease_shared_grant_release(gb, NULL) != LEASE_OK) bad |= 1024;
      if (lease_shared_grant_held(gb) != 0) bad |= 2048;
    }
    lease_error_free(err);
    /* Frees do not touch the parent's threads or locks. */
    lease_shared_grant_free(ga);
    if (write(fds[1], &bad, sizeof bad) != (ssize_t)sizeof bad) _exit(1);
    kill(getpid(), SIGKILL);
    _exit(1);
  }
  close(fds[1]);
  int bad = -1;
  ssize_t n = read(fds[0], &bad, sizeof bad);
  close(fds[0]);
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  if (n != (ssize_t)sizeof bad || bad != 0 || !WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
    fprintf(stderr, "fork child: read %zd, bad %d, status %d\n", n, bad, status);
    exit(1);
  }
  /* The parent's grant is unaffected, and the child's release let the parent take b. */
  CHECK(lease_shared_grant_held(ga) == 1);
  CHECK_CODE(LEASE_OK, lease_shared_grant_ensure_held(ga, &err));
  lease_shared_grant *gb = acquire_on_process_session(b, ttl);
  char sb[128];
  sid_of(gb, sb, sizeof sb);
  CHECK(strcmp(sb, sa) == 0);
  CHECK_CODE(LEASE_OK, lease_shared_grant_release(gb, &err));
  CHECK_CODE(LEASE_OK, lease_shared_grant_release(ga, &err));
  lease_shared_grant_free(gb);
  lease_shared_grant_free(ga);
}

static const struct test tests[] = {
    {"life_cycle", test_life_cycle},
    {"owner_and_changes", test_owner_and_changes},
    {"contention", test_contention},
    {"shared_handle", test_shared_handle},
    {"cancel", test_cancel},
    {"lost_after_break", test_lost_after_break},
    {"bad_input", test_bad_input},
    {"fork", test_fork},
    {"fenced_write_after_break", test_fenced_write_after_break},
    {"gate", test_gate},
    {"fenced_put_if", test_fenced_put_if},
    {"fenced_update", test_fenced_update},
    {"fencing_bad_input", test_fencing_bad_input},
    {"queue_readers_writer", test_queue_readers_writer},
    {"queue_semaphore", test_queue_semaphore},
    {"queue_scopes_and_bad_options", test_queue_scopes_and_bad_options},
    {"queue_fencing", test_queue_fencing},
    {"wake_hints", test_wake_hints},
    {"a_yield_request_reaches_the_holder_and_it_hands_over",
     test_a_yield_request_reaches_the_holder_and_it_hands_over},
    {"a_waiter_that_asks_to_yield_is_handed_the_lock_when_the_holder_steps_aside",
     test_a_waiter_that_asks_to_yield_is_handed_the_lock_when_the_holder_steps_aside},
    {"preempt_takes_a_live_lease_at_once_and_the_holder_loses_it_as_preempted",
     test_preempt_takes_a_live_lease_at_once_and_the_holder_loses_it_as_preempted},
    {"bad_yield_and_preempt_options", test_bad_yield_and_preempt_options},
    {"session_many_grants", test_session_many_grants},
    {"session_cancel", test_session_cancel},
    {"session_bad_input", test_session_bad_input},
    {"a_shared_grants_fenced_writes_and_its_stale_write_after_a_takeover_is_fenced",
     test_a_shared_grants_fenced_writes_and_its_stale_write_after_a_takeover_is_fenced},
    {"process_session", test_process_session},
    {"process_session_cancel", test_process_session_cancel},
    {"process_session_bad_input", test_process_session_bad_input},
    {"process_session_fork", test_process_session_fork},
};

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s STORE_URL [TEST...]\n", argv[0]);
    return 64;
  }
  store_url = argv[1];
  const char *r = getenv("LEASE_TEST_ROUNDS");
  if (r != NULL && atoi(r) > 0) rounds = atoi(r);
  snprintf(prefix, sizeof prefix, "c-test-%ld-%ld", (long)getpid(), (long)time(NULL));
  int ran = 0;
  for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
    int selected = argc == 2;
    for (int a = 2; a < argc; a++) selected |= strcmp(argv[a], tests[i].name) == 0;
    if (!selected) continue;
    double t0 = now_ms();
    tests[i].run();
    printf("ok   %-24s %s (%.0f ms)\n", tests[i].name, store_url, now_ms() - t0);
    fflush(stdout);
    ran++;
  }
  if (ran == 0 || ran < argc - 2) {
    fprintf(stderr, "unknown test name among the arguments\n");
    return 64;
  }
  return 0;
}
