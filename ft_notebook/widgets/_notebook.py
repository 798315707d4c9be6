"""Which notebook a dashboard lives in, so that it shows that notebook's snapshots only.

Every notebook publishes its snapshots to the one session topic; a dashboard must pick
those of its own kernel's notebook. The key they are published under is the one the
kernel's snapshot machinery (``ShellSnapshots.key``, made at ``%load_ext ft_notebook``)
holds. Widgets may not import the magics or the session (they sit above widgets in the
import layers), so the shell, which holds both, is asked: the object behind its ``%ft``
magic. Nothing else is guessed: a kernel that takes no snapshots has none to show.
"""

from __future__ import annotations

from typing import Any


def kernel_notebook() -> str | None:
    """The key of the notebook this kernel takes snapshots of; None outside IPython or
    before ``%load_ext ft_notebook`` (no ``%ft`` magic, so no snapshots of its own)."""
    try:
        from IPython import get_ipython
    except ImportError:  # a plain Python process: no notebook
        return None
    shell: Any = get_ipython()
    if shell is None:
        return None
    magics = getattr(shell.find_line_magic("ft"), "__self__", None)  # FTMagics
    snapshots = getattr(magics, "snapshots", None)  # ShellSnapshots
    key = getattr(snapshots, "key", None)
    return key if isinstance(key, str) and key else None
