"""One test per error kind (the mapping lives in python/src/error.rs), and bad input."""

from __future__ import annotations

import logging
import math
import os
import pickle
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any, Dict, Type

import pytest

import lease

from conftest import in_another_thread, make_url

CLASSES: Dict[str, Type[lease.LeaseError]] = {
    "held": lease.LeaseHeld,
    "timeout": lease.LeaseTimeout,
    "cancelled": lease.LeaseCancelled,
    "lost": lease.LeaseLost,
    "fenced": lease.Fenced,
    "conflict": lease.Conflict,
    "unavailable": lease.StoreUnavailable,
    "invalid": lease.InvalidArgument,
    "store": lease.StoreError,
    "corrupt": lease.CorruptRecord,
    "internal": lease.InternalError,
    "queue_full": lease.QueueFull,
    "unsupported": lease.UnsupportedRecord,
}


@pytest.mark.parametrize("kind", sorted(CLASSES))
def test_each_kind_maps_to_its_class(kind: str) -> None:
    e = lease._lease._error_for_kind(kind, f"a {kind} error", "memory://x/y", 7, "abcd")
    assert type(e) is CLASSES[kind]
    assert isinstance(e, lease.LeaseError)
    assert e.kind == kind and str(e) == f"a {kind} error"
    assert e.url == "memory://x/y" and e.epoch == 7
    assert e.holder is not None and e.holder.id == "abcd"
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is type(e) and back.url == e.url and back.holder == e.holder
    assert e.retryable == (kind in ("held", "timeout", "unavailable", "queue_full"))


def test_every_core_kind_has_its_own_class() -> None:
    # A kind the core adds must get its class here (and in python/src/error.rs), not fall
    # back to the bare LeaseError.
    kinds = lease._lease._error_kinds()
    assert sorted(kinds) == sorted(CLASSES)
    for kind in kinds:
        e = lease._lease._error_for_kind(kind, "x")
        assert type(e) is not lease.LeaseError, kind
        assert type(e).__name__ in lease.__all__, kind


def test_python_base_classes() -> None:
    assert issubclass(lease.LeaseTimeout, TimeoutError)
    assert issubclass(lease.InvalidArgument, ValueError)
    assert issubclass(lease.StoreUnavailable, lease.StoreError)
    e = lease._lease._error_for_kind("timeout", "waited")
    assert e.url is None and e.epoch is None and e.holder is None
    with pytest.raises(TimeoutError):
        raise e


# The kinds public calls produce today, provoked for real.


def test_held_for_real(tmp_path: Path) -> None:
    url = make_url("file", tmp_path, "held")
    with lease.acquire(url):
        with pytest.raises(lease.LeaseHeld):
            lease.acquire(url, wait=0)


def test_timeout_for_real(tmp_path: Path) -> None:
    url = make_url("file", tmp_path, "timeout")
    with lease.acquire(url):
        with pytest.raises(lease.LeaseTimeout):
            in_another_thread(lambda: lease.acquire(url, wait=0.1))


def test_lost_for_real(tmp_path: Path) -> None:
    url = make_url("file", tmp_path, "lost")
    l = lease.acquire(url)
    l.release()
    with pytest.raises(lease.LeaseLost, match="released"):
        l.ensure_held()


def test_a_missing_directory_is_created(tmp_path: Path) -> None:
    """As for bare names and fenced writes (what py-filelock users expect); reads create
    nothing (issue 16)."""
    missing = tmp_path / "no" / "such" / "dir"
    assert lease.fenced_get(f"file://{missing}/x") is None
    assert not missing.exists()
    with lease.acquire(f"file://{missing}/x", wait=0):
        assert (missing / "x").is_file()


def test_a_path_through_a_regular_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x")
    url = f"file://{tmp_path}/plain/sub/x"
    with pytest.raises(lease.LeaseError) as info:
        lease.acquire(url, wait=0)
    assert isinstance(info.value, (lease.StoreError, lease.InvalidArgument))
    assert "plain" in str(info.value)


def test_store_error_for_an_unreadable_directory(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # root reads everything; a file where a directory should be fails the same way.
        (tmp_path / "f").write_text("x")
        with pytest.raises(lease.StoreError, match="not a directory"):
            lease.acquire(f"file://{tmp_path}/f/x")
    else:
        d = tmp_path / "locked"
        d.mkdir(mode=0)
        with pytest.raises(lease.StoreError):
            lease.acquire(f"file://{d}/x")


def test_unavailable_for_an_unreachable_s3_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    # Port 9 (discard) on loopback: nothing listens, every connection is refused.
    url = "s3://nobucket/x?endpoint=http://127.0.0.1:9&region=us-east-1&path_style=true"
    with pytest.raises(lease.StoreUnavailable) as info:
        lease.status(url)
    assert info.value.retryable and info.value.url is not None


@pytest.mark.parametrize(
    "typo,fix",
    [("s3:/bucket/x", "s3://bucket/x"), ("gs:/b/x", "gs://b/x"), ("file:/tmp/x", "file:///tmp/x")],
)
def test_a_mistyped_url_is_refused_with_the_fix(
    typo: str, fix: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """It used to become a bare name: a lock on this machine only (issue 28)."""
    monkeypatch.setenv("LEASE_HOME", str(tmp_path))
    with pytest.raises(lease.InvalidArgument, match=f'did you mean "{fix}"'):
        lease.acquire(typo, wait=0)
    assert list(tmp_path.iterdir()) == []
    # Names with a colon that cannot be a scheme are still bare names.
    with lease.acquire("db:migrate", wait=0) as l:
        assert l.url.endswith("/db:migrate")


def test_a_raised_error_is_not_also_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The error is the report: it was also logged as `read failed` (issue 28)."""
    caplog.set_level(logging.INFO, logger="lease")
    with pytest.raises(lease.InvalidArgument, match="is a directory"):
        lease.acquire(f"file://{tmp_path}/", wait=0)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_holder_without_a_label_is_named_by_its_process(tmp_path: Path) -> None:
    """Not "held by holder (id …)" (issue 28)."""
    url = make_url("file", tmp_path, "nolabel")
    with lease.acquire(url):
        with pytest.raises(lease.LeaseHeld) as info:
            lease.acquire(url, wait=0)
    message = str(info.value)
    assert "a python process (id " in message and f"pid {os.getpid()}" in message, message


def test_invalid_for_a_bad_url() -> None:
    with pytest.raises(lease.InvalidArgument) as info:
        lease.acquire("ftp://bucket/x")
    assert isinstance(info.value, ValueError)
    assert "ftp://bucket/x" in str(info.value) and "unsupported scheme" in str(info.value)


# Bad input: TypeError for the wrong type, InvalidArgument for a bad value, clear messages.

BAD_TYPES: Any = [
    ({"ttl": None}, "ttl must be a number of seconds"),
    ({"ttl": b"30"}, "ttl must be a number of seconds (int or float), a timedelta or a str with a unit (\"30s\"), not bytes"),
    ({"ttl": True}, "not bool"),
    ({"ttl": [1]}, "not list"),
    ({"wait": object()}, "wait must be a number of seconds"),
    ({"label": 5}, "label must be a str or None, not int"),
    ({"data": b"x"}, "data must be a str or None, not bytes"),
    ({"on_lost": 3}, "on_lost must be callable"),
]


@pytest.mark.parametrize("kwargs,message", BAD_TYPES)
def test_wrong_types_raise_type_error(tmp_path: Path, kwargs: Any, message: str) -> None:
    with pytest.raises(TypeError) as info:
        lease.acquire(make_url("file", tmp_path, "t"), **kwargs)
    assert message in str(info.value)
    assert not isinstance(info.value, lease.LeaseError)


@pytest.mark.parametrize("url", [None, 42, b"file:///tmp/x", ["x"]])
def test_wrong_url_types_raise_type_error(url: Any) -> None:
    with pytest.raises(TypeError, match="lease URL must be a str|must be a str path"):
        lease.acquire(url)
    with pytest.raises(TypeError):
        lease.status(url)


BAD_VALUES: Any = [
    ({"ttl": -1}, "ttl=-1 seconds is negative"),
    ({"ttl": math.nan}, "not a finite number"),
    ({"ttl": math.inf}, "not a finite number"),
    ({"ttl": 10**30}, "out of range"),
    ({"ttl": 1e12}, "longer than 100 years"),
    ({"ttl": 0}, "ttl 0ms is out of range"),
    ({"ttl": 0.01}, "out of range"),
    ({"ttl": 365 * 24 * 3600}, "numbers are seconds in Python"),
    ({"ttl": "365d"}, "out of range"),
    ({"wait": -0.5}, "wait=-0.5 seconds is negative"),
    ({"wait": math.nan}, "not a finite number"),
    ({"label": "a\nb"}, "label must be at most"),
    ({"label": "x" * 300}, "label must be at most"),
    ({"data": "x" * 20000}, "at most"),
]


@pytest.mark.parametrize("kwargs,message", BAD_VALUES)
def test_bad_values_raise_invalid_argument(tmp_path: Path, kwargs: Any, message: str) -> None:
    with pytest.raises(lease.InvalidArgument) as info:
        lease.acquire(make_url("file", tmp_path, "v"), **kwargs)
    assert message in str(info.value), str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "url",
    ["", "ftp://b/x", "gs://B/x", "az://account", "s3://B/x", "s3://bucket", "file://relative/x",
     "memory://ns", "s3://bucket/a//b", "a\0b", "/"],
)
def test_bad_urls_raise_invalid_argument(url: str) -> None:
    with pytest.raises(lease.InvalidArgument):
        lease.acquire(url, wait=0)
    with pytest.raises(lease.InvalidArgument):
        lease.status(url)


def test_a_ttl_number_meant_as_milliseconds_is_refused(tmp_path: Path) -> None:
    """ttl=30000 (milliseconds, as in Node) would be 8h20m here: others would wait that long
    after a crash. A bare number above an hour is refused with the fix; a long ttl is still
    one unit away, up to the 24 h limit."""
    url = make_url("file", tmp_path, "ms")
    with pytest.raises(lease.InvalidArgument) as info:
        lease.acquire(url, ttl=30000)
    message = str(info.value)
    assert "numbers are seconds" in message and "ttl=30 for 30000 ms" in message, message
    assert 'ttl="500m"' in message, message
    for call in (
        lambda: lease.try_acquire(url, ttl=3600.5),
        lambda: lease.Election(url, ttl=7200),
    ):
        with pytest.raises(lease.InvalidArgument, match="with its unit"):
            call()
    for ttl in (3600, 3600.0, "2h", "30000s", timedelta(hours=2), "24h"):
        l = lease.try_acquire(url, ttl=ttl)
        assert l is not None, ttl
        l.release()
    with pytest.raises(lease.InvalidArgument, match="out of range"):
        lease.acquire(url, ttl="25h")


def test_bad_input_elsewhere(tmp_path: Path) -> None:
    url = make_url("file", tmp_path, "e")
    with pytest.raises(TypeError):
        lease.try_acquire(url, ttl=[1])  # type: ignore[arg-type]
    with pytest.raises(lease.InvalidArgument):
        lease.watch(url, poll=-1)
    with pytest.raises(TypeError):
        lease.Election(url, ttl=None)  # type: ignore[arg-type]
    with pytest.raises(lease.InvalidArgument):
        lease.Election(url, ttl=0.001)
    with lease.acquire(url) as l:
        with pytest.raises(lease.InvalidArgument, match="needs a unit"):
            l.ensure_held(min_remaining="5")
        with pytest.raises(TypeError):
            l.ensure_held(min_remaining=b"5")  # type: ignore[arg-type]
        with pytest.raises(lease.InvalidArgument):
            l.ensure_held(min_remaining=-5)
        with pytest.raises(TypeError):
            l.on_lost(None)  # type: ignore[arg-type]


def test_timedelta_durations(tmp_path: Path) -> None:
    import datetime

    with lease.acquire(make_url("file", tmp_path, "td"), ttl=datetime.timedelta(seconds=12)) as l:
        assert l.ttl == 12.0


def test_durations_as_text_need_a_unit(tmp_path: Path) -> None:
    url = make_url("file", tmp_path, "text")
    with lease.acquire(url, ttl="12s", wait="1m30s") as l:
        assert l.ttl == 12.0
    with lease.acquire(url, ttl="1.5s") as l:
        assert l.ttl == 1.5
    # 30000 meant milliseconds to some and seconds to others: the message says how to write it.
    with pytest.raises(lease.InvalidArgument, match="30000ms, 30000s"):
        lease.acquire(url, ttl="30000")
    with pytest.raises(lease.InvalidArgument, match="invalid duration"):
        lease.acquire(url, wait="soon")


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_store_ends_a_wait_with_store_unavailable() -> None:
    import time

    # Nothing listens there: every request is refused. No credential lookup leaves the machine.
    port = _closed_port()
    url = f"gs://bucket/job?endpoint=http://127.0.0.1:{port}&anonymous=true"
    start = time.monotonic()
    with pytest.raises(lease.StoreUnavailable) as e:
        lease.acquire(url, wait=2)
    took = time.monotonic() - start
    assert 1.9 <= took < 9, took
    assert "outcome of" not in str(e.value)
    # No wait: the store that does not answer ends it after unavailable_timeout.
    start = time.monotonic()
    with pytest.raises(lease.StoreUnavailable):
        lease.acquire(url, unavailable_timeout="2s")
    took = time.monotonic() - start
    assert 1.9 <= took < 9, took


def test_cli_reads_what_python_wrote(tmp_path: Path, lease_bin: str) -> None:
    url = make_url("file", tmp_path, "cli")
    with lease.acquire(url):
        out = subprocess.run([lease_bin, "run", "-n", url, "--", "true"], timeout=60)
        assert out.returncode == 75  # held by someone else


# Peers' keywords (py-filelock, redis-py): a TypeError that says what to write here.

ACQUIRERS: Any = [lease.acquire, lease.acquire_async, lease.try_acquire]


@pytest.mark.parametrize("call", ACQUIRERS, ids=lambda c: c.__name__)
def test_peers_keywords_say_what_to_use(tmp_path: Path, call: Any) -> None:
    url = make_url("file", tmp_path, "peers")
    cases = [
        ({"timeout": 5}, ["wait=", "try_acquire"] if call is lease.try_acquire else ["wait=", "ttl="]),
        ({"blocking": False}, ["try_acquire"]),
        ({"blocking_timeout": 5}, ["wait="]),
        ({"tll": 30}, ["did you mean ttl="]),
    ]
    for kwargs, says in cases:
        with pytest.raises(TypeError) as info:
            call(url, **kwargs)
        assert not isinstance(info.value, lease.LeaseError)
        message = str(info.value)
        assert f"unexpected keyword argument {next(iter(kwargs))!r}" in message, message
        for s in says:
            assert s in message, message
    # Nothing was acquired on the way.
    assert lease.status(url).state == "free"


def test_dir_lists_the_api_only() -> None:
    names = dir(lease)
    assert names == sorted(lease.__all__), set(names) ^ set(lease.__all__)
    for name in ("os", "atexit", "weakref", "datetime", "Optional", "Union", "Callable"):
        assert name not in names and not hasattr(lease, name), name
    import types

    assert not [n for n in names if isinstance(getattr(lease, n), types.ModuleType)]


def test_options_are_one_object_of_known_keywords() -> None:
    # What every acquiring call builds from its keywords (issue 27): keyword arguments only,
    # each name checked.
    options = lease._lease.Options(ttl=30, wait=0, label="x", queue=True, poll="100ms")
    assert isinstance(options, lease._lease.Options)
    with pytest.raises(TypeError, match="unexpected keyword argument 'tll'"):
        lease._lease.Options(ttl=30, tll=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="missing required keyword argument: 'ttl'"):
        lease._lease.Options(wait=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        lease._lease.Options(30)  # type: ignore[misc]
    with pytest.raises(TypeError, match="permits"):
        lease._lease.Options(ttl=30, permits="2")  # type: ignore[arg-type]
