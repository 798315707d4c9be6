"""Suite-wide settings; the fixtures come from ft_notebook's own pytest plugin."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

_KIND_BY_FOLDER = {
    "unit": "unit",
    "integration": "integration",
    "chaos": "chaos",
    "browser": "browser",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by the folder it lives in, so `-m unit` etc. select by kind."""
    for item in items:
        folder = Path(item.path).relative_to(Path(__file__).parent).parts[0]
        kind = _KIND_BY_FOLDER.get(folder)
        if kind is not None:
            item.add_marker(kind)
