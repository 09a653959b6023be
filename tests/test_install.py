"""The install lines that the README and the messages give work from a clone: dmlops is on no package index."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def test_every_extra_the_readme_installs_is_in_pyproject():
    readme = (ROOT / "README.md").read_text()
    named = [extra for extras in re.findall(r'pip install (?:-e )?"\.\[([\w,]+)\]"', readme)
             for extra in extras.split(",")]
    assert {"fast", "cuda", "dask", "test"} <= set(named)
    assert set(named) <= EXTRAS
    assert all(f"`{extra}`" in readme for extra in EXTRAS), "the README says what each extra adds"


def test_no_line_installs_dmlops_from_an_index():
    texts = [(ROOT / "README.md").read_text()] + [path.read_text() for path in (ROOT / "src").rglob("*.py")]
    assert not any(re.search(r"pip install ['\"]?dmlops\[", text) for text in texts)
