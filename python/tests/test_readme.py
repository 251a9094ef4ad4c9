"""The README's Python examples run, with their s3://my-bucket URLs pointed at a temp dir."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def blocks() -> List[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples() -> None:
    assert len(blocks()) >= 5


@pytest.mark.parametrize("index", range(len(blocks())))
def test_readme_example_runs(index: int, tmp_path: Path) -> None:
    code = re.sub(r'"s3://my-bucket/([a-z/]+)"', lambda m: f'"file://{tmp_path}/{m.group(1).replace("/", "-")}"', blocks()[index])
    assert "my-bucket" not in code
    exec(compile(code, f"README.md example {index}", "exec"), {"__name__": "readme"})
