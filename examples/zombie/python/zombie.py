"""The scenario from Martin Kleppmann's "How to do distributed locking", made runnable, in
Python. The same command-line contract as the Rust version (examples/zombie/rust), so
examples/zombie/run.sh plays either::

    zombie.py zombie LEASE_URL DATA_KEY   hold the lease, write, check the lease, then stop
                                          (SIGSTOP to itself: a GC pause between the check
                                          and the write); when continued, write again
    zombie.py newer LEASE_URL DATA_KEY    wait for the lease, write as the newer holder
    zombie.py show LEASE_URL DATA_KEY     print the object and the epoch that wrote it

The zombie exits 0 when the store rejected its late write (``lease.Fenced``), 1 if the write
went through (the bug fencing prevents), 2 on any other error.
"""

from __future__ import annotations

import os
import signal
import sys

import lease

TTL = 2.0
WAIT = 120.0


def zombie(url: str, key: str) -> int:
    held = lease.acquire(url, ttl=TTL, wait=WAIT)
    held.fenced_put(key, f"written by the first holder, epoch {held.epoch}")
    # The check passes...
    held.ensure_held(0.5)
    print(f"zombie: epoch {held.epoch} checked its lease; pausing before the write", flush=True)
    # ...and the process stops right here, as in a long GC pause.
    os.kill(os.getpid(), signal.SIGSTOP)
    print(f"zombie: resumed; lease says {held.remaining():.1f}s left; writing anyway", flush=True)
    try:
        held.fenced_put(key, f"ZOMBIE WRITE from epoch {held.epoch}")
    except lease.Fenced as e:
        print(f"zombie: the store rejected the write: {e}", flush=True)
        return 0
    print("zombie: the write went through: this is the bug fencing prevents", flush=True)
    return 1


def newer(url: str, key: str) -> int:
    with lease.acquire(url, ttl=TTL, wait=WAIT) as held:
        held.fenced_put(key, f"written by the newer holder, epoch {held.epoch}")
        print(f"newer: took over at epoch {held.epoch} and wrote", flush=True)
    return 0


def show(url: str, key: str) -> int:
    obj = lease.fenced_get(url, key=key)
    if obj is None:
        print(f"{key}: absent")
    else:
        epoch = "none" if obj.epoch is None else str(obj.epoch)
        print(f"{key}: {obj.text!r} (epoch {epoch})")
    return 0


def main(argv: list[str]) -> int:
    modes = {"zombie": zombie, "newer": newer, "show": show}
    if len(argv) != 3 or argv[0] not in modes:
        print("usage: zombie.py zombie|newer|show LEASE_URL DATA_KEY", file=sys.stderr)
        return 2
    mode, url, key = argv
    try:
        return modes[mode](url, key)
    except lease.LeaseError as e:
        print(f"zombie.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
