"""Fixtures: a fresh lease URL on each store (a temporary directory, and the servers of
scripts/stores.sh: moto, fake-gcs-server, Azurite, MinIO when built), and the `lease` CLI for
`lease break`.

Store URLs come from the environment contract of scripts/stores.sh:
LEASE_TEST_S3_MOTO=s3://BUCKET?endpoint=…&region=…&path_style=true (and LEASE_TEST_S3_MINIO),
LEASE_TEST_GCS_FAKE=gs://BUCKET?endpoint=…, LEASE_TEST_AZURE_AZURITE=az://ACCOUNT/CONTAINER?….
The binding has no code of its own for any of them: the core's URL registry opens them all.
With CI=true a missing server fails its store's tests; elsewhere they are skipped, loudly.
"""

from __future__ import annotations

import concurrent.futures
import os
import sys
import uuid
from pathlib import Path
from typing import Callable, Iterator, List, TypeVar

import pytest

# The suite takes hundreds of distinct lease names in one process: past the metrics' label cap
# (core/src/metrics/mod.rs, 100 names by default) later names count under lease="_other", and
# test_observe.py's per-lease checks would depend on the order the tests ran in. The cap itself
# is pinned by core's metrics tests. Read once, at the process's first metric, so set it here.
os.environ.setdefault("LEASE_METRICS_LEASES", "1000000")

# Store kind -> the variable holding its base URL. MinIO only when it was built (slow).
SERVERS = [
    ("moto", "LEASE_TEST_S3_MOTO"),
    ("minio", "LEASE_TEST_S3_MINIO"),
    ("gcs", "LEASE_TEST_GCS_FAKE"),
    ("azure", "LEASE_TEST_AZURE_AZURITE"),
]


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def s3_url(base: str, key: str) -> str:
    """`s3://bucket?query` + key -> `s3://bucket/key?query` (the same for gs:// and az://)."""
    head, sep, query = base.partition("?")
    return f"{head.rstrip('/')}/{key}{sep}{query}"


def _missing(what: str) -> None:
    msg = f"{what} is not set: run python's tests through scripts/test-python.sh"
    if in_ci():
        pytest.fail(f"{msg} (CI=true: every store's tests must run)")
    sys.stderr.write(f"\n!!! SKIPPING STORE TEST: {msg}\n")
    pytest.skip(f"!!! {msg}")


def store_params() -> List[str]:
    params = ["file", "moto", "gcs", "azure"]
    if os.environ.get("LEASE_TEST_S3_MINIO"):
        params.append("minio")
    return params


def make_url(kind: str, tmp_path: Path, name: str) -> str:
    key = f"py-{name}-{uuid.uuid4().hex[:12]}"
    if kind == "file":
        return f"file://{tmp_path}/{key}"
    if kind == "memory":
        return f"memory://pytest/{key}"
    env = dict(SERVERS)[kind]
    base = os.environ.get(env)
    if not base:
        _missing(env)
    assert base is not None
    return s3_url(base, f"locks/{key}")


T = TypeVar("T")


def in_another_thread(f: Callable[[], T]) -> T:
    """``f()`` on a thread of its own (its result, or its exception raised here): a waiter
    for a lease this thread holds, which this thread itself may not wait for."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(f).result()


@pytest.fixture(params=store_params())
def store(request: pytest.FixtureRequest) -> str:
    """The store kind: 'file', 'moto', 'gcs', 'azure' (and 'minio' when configured)."""
    return str(request.param)


@pytest.fixture
def url(store: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A fresh lease URL on the store under test."""
    return make_url(store, tmp_path, request.node.originalname or "t")


@pytest.fixture
def new_url(store: str, tmp_path: Path) -> Iterator[object]:
    """A factory of further fresh URLs on the same store."""
    yield lambda name="x": make_url(store, tmp_path, name)


@pytest.fixture
def lease_bin() -> str:
    path = os.environ.get("LEASE_BIN")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("LEASE_BIN (the built `lease` CLI) is not set: run scripts/test-python.sh")
    return path
