// The C side of Lease.Lost: the lost callback registered with lease_on_lost. It runs on a
// liblease runtime thread and calls into Go, which only closes a channel (it never blocks).
#include <stdint.h>

#include "liblease.h"
#include "_cgo_export.h"

static void lease_go_lost_trampoline(void *user_data, const char *reason) {
  goLeaseLost((uintptr_t)user_data, (char *)reason);
}

enum lease_code lease_go_on_lost(const struct lease *l, uintptr_t handle) {
  return lease_on_lost(l, lease_go_lost_trampoline, (void *)handle);
}

// The C side of Lease.HealthChanges: each change goes to Go, which only sends on a buffered
// channel without blocking.
static void lease_go_health_trampoline(void *user_data, enum lease_health health,
                                       uint64_t remaining_ms, const char *reason) {
  goLeaseHealth((uintptr_t)user_data, (int)health, remaining_ms, (char *)reason);
}

enum lease_code lease_go_on_health(const struct lease *l, uintptr_t handle) {
  return lease_on_health(l, lease_go_health_trampoline, (void *)handle);
}

// The C side of Lease.YieldRequests: each yield request goes to Go, which only sends on a
// buffered channel without blocking.
static void lease_go_yield_trampoline(void *user_data, const char *by, const char *to,
                                      const char *reason) {
  goLeaseYield((uintptr_t)user_data, (char *)by, (char *)to, (char *)reason);
}

enum lease_code lease_go_on_yield(const struct lease *l, uintptr_t handle) {
  return lease_on_yield(l, lease_go_yield_trampoline, (void *)handle);
}
