/*
 * Wall-clock steps for one process, while it runs: an LD_PRELOAD library for the queued-lock
 * history test (tests/tests/queue_history.rs).
 *
 *   cc -O2 -shared -fPIC -o libwallstep.so wallstep.c -ldl
 *   LD_PRELOAD=libwallstep.so LEASE_WALLSTEP_FILE=F program
 *
 * F holds 8 bytes: a signed offset in nanoseconds (little-endian), added to every reading of
 * the wall clock (CLOCK_REALTIME and its variants, gettimeofday, time). The test writes F to
 * step the clock, as NTP or an operator steps it; the process sees the new offset at its next
 * reading (F is mapped, not read). CLOCK_MONOTONIC and CLOCK_BOOTTIME are left alone: a step
 * of the wall clock does not move them, and the history's timestamps come from the former.
 *
 * libfaketime does more, but it is not installed everywhere this test runs, and with its
 * defaults it fakes the monotonic clocks too, which no real clock step does.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile const int64_t *offset_ns;
static int (*real_clock_gettime)(clockid_t, struct timespec *);

__attribute__((constructor)) static void wallstep_init(void) {
  real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
  const char *path = getenv("LEASE_WALLSTEP_FILE");
  if (path == NULL) return;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  void *p = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (p != MAP_FAILED) offset_ns = (volatile const int64_t *)p;
}

static int64_t offset(void) {
  return offset_ns == NULL ? 0 : __atomic_load_n(offset_ns, __ATOMIC_RELAXED);
}

static int is_wall(clockid_t clk) {
  return clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE || clk == CLOCK_TAI;
}

static void shift(struct timespec *ts, int64_t by) {
  int64_t ns = (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec + by;
  ts->tv_sec = ns / 1000000000LL;
  ts->tv_nsec = ns % 1000000000LL;
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
  if (real_clock_gettime == NULL) wallstep_init();
  int r = real_clock_gettime(clk, ts);
  if (r == 0 && is_wall(clk)) shift(ts, offset());
  return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
  struct timespec ts;
  (void)tz;
  int r = clock_gettime(CLOCK_REALTIME, &ts);
  if (r == 0) {
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
  }
  return r;
}

time_t time(time_t *t) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (t != NULL) *t = ts.tv_sec;
  return ts.tv_sec;
}
