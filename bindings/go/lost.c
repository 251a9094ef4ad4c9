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
