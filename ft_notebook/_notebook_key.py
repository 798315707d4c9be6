"""The name a notebook's snapshots are stored under, from the notebook's file path.

The kernel knows its notebook's path from Jupyter (``JPY_SESSION_NAME``: the server's
working directory for the notebook joined with its name); the server extension
builds the same path from the notebook's API path, so both find the same snapshots.
"""

from __future__ import annotations

from pathlib import Path

import xxhash

from ft_notebook._paths import checked_name


def notebook_key(path: str | None) -> str:
    """The snapshot key of the notebook at ``path``: readable stem plus a hash of the
    whole path, so two ``analysis.ipynb`` in different folders never share one."""
    if not path:
        return "untitled"
    stem = "".join(c if c.isalnum() or c in "-_." else "-" for c in Path(path).stem)[:60]
    digest = xxhash.xxh3_64_hexdigest(str(path).encode())[:8]
    return checked_name(f"{stem or 'notebook'}-{digest}")
