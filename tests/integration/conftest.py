"""Fixtures shared by the integration tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ft_notebook.testing import KernelSession


@pytest.fixture
def notebook(tmp_path: Path) -> Iterator[KernelSession]:
    """A kernel with ft_notebook loaded that knows its notebook path, as Jupyter's
    kernels do."""
    env = dict(os.environ, JPY_SESSION_NAME=str(tmp_path / "analysis.ipynb"))
    session = KernelSession(tmp_path / "kernel.log", cwd=tmp_path, env=env).start()
    session.execute("%load_ext ft_notebook").check()
    try:
        yield session
    finally:
        session.shutdown()
