"""Health states, metrics and each epoch's history, seen from Python (issue 25)."""

from __future__ import annotations

import fcntl
import queue
from pathlib import Path

import pytest

import lease

WAIT = 10.0  # a bound on each wait for an event, never a timing assertion


def next_health(events: "queue.Queue[lease.HealthEvent]") -> lease.HealthEvent:
    return events.get(timeout=WAIT)


def test_health_goes_late_then_unknown_and_back_when_renewals_fail(tmp_path: Path) -> None:
    """The file store's writers wait at most a bounded time for the record's sidecar lock;
    holding that lock from here makes every renewal fail, as an unreachable store would."""
    url = f"file://{tmp_path}/h"
    events: "queue.Queue[lease.HealthEvent]" = queue.Queue()
    l = lease.acquire(url, ttl=3)
    l.on_health(events.put)
    first = next_health(events)
    assert first.health == "healthy" and first.reason is None and 0 < first.remaining <= 3
    assert l.health == "healthy"
    with open(tmp_path / ".h.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        late = next_health(events)
        assert late.health == "late"
        unknown = next_health(events)
        # Unknown when kill-after (ttl/3) + margin (ttl/10) is left: 1.3 s of 3 s.
        assert unknown.health == "unknown" and unknown.remaining <= 1.3
        assert l.ensure_held() > 0  # still held: ensure_held keeps its meaning
        fcntl.flock(f, fcntl.LOCK_UN)
    assert next_health(events).health == "healthy"
    l.release()


def test_health_ends_lost_with_its_reason(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/h"
    events: "queue.Queue[lease.HealthEvent]" = queue.Queue()
    l = lease.acquire(url, ttl=3)
    l.on_health(events.put)
    with open(tmp_path / ".h.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        seen = [next_health(events) for _ in range(4)]
        assert [e.health for e in seen] == ["healthy", "late", "unknown", "lost"], seen
        assert seen[-1].reason == "expired" and seen[-1].remaining == 0
        assert l.health == "lost"
    with pytest.raises(lease.LeaseLost):
        l.release()


def test_metrics_count_what_happened_and_reach_prometheus_client(tmp_path: Path) -> None:
    import uuid

    import prometheus_client
    from lease.prometheus import LeaseCollector

    name = f"observe-{uuid.uuid4().hex[:8]}"
    url = f"file://{tmp_path}/{name}"
    for _ in range(3):
        with lease.acquire(url, ttl=5):
            pass
    snapshot = {f["name"]: f for f in lease.metrics()}
    assert snapshot["lease_acquisitions_total"]["type"] == "counter"

    def value(name: str, **labels: str) -> float:
        for s in snapshot[name]["samples"]:
            if s["labels"] == labels:
                return s.get("value", s.get("count"))
        return 0.0

    assert value("lease_acquisitions_total", lease=name, outcome="acquired") == 3
    assert value("lease_hold_seconds", lease=name) == 3
    assert value("lease_store_requests_total", store="file", kind="update", status="200") >= 3
    registry = prometheus_client.CollectorRegistry()
    registry.register(LeaseCollector())
    text = prometheus_client.generate_latest(registry).decode()
    assert f'lease_acquisitions_total{{lease="{name}",outcome="acquired"}} 3.0' in text, text
    assert f'lease_hold_seconds_count{{lease="{name}"}} 3.0' in text, text
    assert "# EOF" in lease.metrics_text()


def test_status_lists_each_tenure_with_how_it_ended(tmp_path: Path, lease_bin: str) -> None:
    import subprocess

    url = f"file://{tmp_path}/s"
    with lease.acquire(url, ttl=5, label="first") as first:
        pass
    second = lease.acquire(url, ttl=5, label="second")
    subprocess.run([lease_bin, "break", url, "--yes"], check=True, capture_output=True)
    with pytest.raises(lease.LeaseLost):
        second.release()  # acknowledges the break
    with lease.acquire(url, ttl=5, label="third"):
        s = lease.status(url)
    ends = [(t.holder.label, t.end) for t in s.history]
    assert ends == [("second", "broken"), ("first", "released")], s.history
    assert s.history[1].epoch == first.epoch and s.history[0].by is not None
    assert s.to_json()["history"][0]["end"] == "broken"
