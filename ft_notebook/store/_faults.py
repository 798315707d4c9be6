"""Named points of the commit protocol, where tests and chaos tools inject faults.

The writer calls :func:`stage` as it passes each point, in this order for a save:
``blobs-written``, ``blobs-synced``, ``blobs-renamed``, ``blobs-dir-synced`` (local
files only for the last three), ``step-dir-created``, ``manifest-written``,
``manifest-synced``, ``manifest-committed``, ``step-dir-synced``; and when retention
or :meth:`delete` removes a checkpoint: ``checkpoint-uncommitted`` (its manifest is
gone: it no longer exists), ``checkpoint-removed``, ``blob-removed``. A hook that
kills the process at a chosen stage is how the chaos tests prove that a crash at any
point leaves either the old or the new checkpoint, never a broken one. Without a hook
a stage costs one global read.
"""

from __future__ import annotations

from collections.abc import Callable

SAVE_STAGES = (
    "blobs-written",
    "blobs-synced",
    "blobs-renamed",
    "blobs-dir-synced",
    "step-dir-created",
    "manifest-written",
    "manifest-synced",
    "manifest-committed",
    "step-dir-synced",
)
#: The first stage at which a save's checkpoint exists for readers.
COMMITTED_AT = "manifest-committed"
DELETE_STAGES = ("checkpoint-uncommitted", "checkpoint-removed", "blob-removed")

StageHook = Callable[[str], None]
_hook: StageHook | None = None


def set_stage_hook(hook: StageHook | None) -> StageHook | None:
    """Call ``hook(stage)`` at every stage from now on (None: stop); return the previous one."""
    global _hook
    previous, _hook = _hook, hook
    return previous


def stage(name: str) -> None:
    hook = _hook
    if hook is not None:
        hook(name)
