"""The Python examples of python/README.md and of the top-level README.md run as written, with
their s3://my-bucket URLs pointed at a temp dir."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import List

import pytest

HERE = Path(__file__).resolve().parent.parent
READMES = {"python/README.md": HERE / "README.md", "README.md": HERE.parent / "README.md"}


def blocks(readme: str) -> List[str]:
    return re.findall(r"```python\n(.*?)```", READMES[readme].read_text(), flags=re.S)


def test_readmes_have_examples() -> None:
    assert len(blocks("python/README.md")) >= 5
    assert len(blocks("README.md")) >= 1


@pytest.mark.parametrize(
    "readme,index", [(r, i) for r in READMES for i in range(len(blocks(r)))]
)
def test_readme_example_runs(readme: str, index: int, tmp_path: Path) -> None:
    code = re.sub(r'"s3://my-bucket/([a-z/]+)"', lambda m: f'"file://{tmp_path}/{m.group(1)}"', blocks(readme)[index])
    assert "my-bucket" not in code
    if '"postgresql://localhost/app"' in code:
        code = code.replace('"postgresql://localhost/app"', repr(pg_schema_dsn()))
    exec(compile(code, f"{readme} example {index}", "exec"), {"__name__": "readme"})


def pg_schema_dsn() -> str:
    """The test PostgreSQL server (LEASE_TEST_PG), in a fresh schema, for the lease.pg example."""
    dsn = os.environ.get("LEASE_TEST_PG")
    if not dsn:
        if os.environ.get("CI") == "true":
            raise RuntimeError("LEASE_TEST_PG is not set (CI=true: the PostgreSQL tests must run)")
        pytest.skip("LEASE_TEST_PG is not set (scripts/postgres.sh start)")
    import psycopg

    schema = f"readme_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in dsn else "?"
    return f"{dsn}{sep}options=-csearch_path%3D{schema}"
