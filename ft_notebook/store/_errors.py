"""The store's error messages: what happened, the values seen, and what to do next."""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence

from ft_notebook.exceptions import (
    CheckpointCorrupt,
    CheckpointExists,
    CheckpointNotFound,
    StoreError,
)


def write_failed(
    e: OSError, *, run: str, step: int, url: str, previous: int | None, committed_to: Sequence[str]
) -> StoreError:
    where = e.filename or url
    code = errno.errorcode.get(e.errno or 0, "?")
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = f"Free space at {url} (or raise your quota there), or use another location"
    elif e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = f"Make {url} writable for you (uid {os.getuid()}), or use another location"
    else:
        fix = f"Check that {url} is reachable and healthy"
    kept = (
        f"the newest checkpoint there, step {previous}, is intact"
        if previous is not None
        else "no earlier checkpoint of this run is there"
    )
    also = (
        f" It was committed to {', '.join(committed_to)}, which load() reads."
        if committed_to
        else ""
    )
    return StoreError(
        f"Could not save step {step} of run {run!r}: writing {where} failed with "
        f"[Errno {e.errno}] {e.strerror} ({code}). Nothing of step {step} was committed "
        f"at {url}; {kept}.{also} {fix}, then save again."
    )


def already_committed(run: str, step: int, url: str) -> StoreError:
    return CheckpointExists(
        f"Run {run!r} already has a committed checkpoint at step {step} in {url}; "
        f"checkpoints are never overwritten. Save under a new step, or delete({run!r}, "
        f"{step}) first."
    )


def no_run(run: str, urls: Sequence[str], runs: Sequence[str]) -> CheckpointNotFound:
    there = ", ".join(repr(r) for r in sorted(runs)[:20]) or "none"
    return CheckpointNotFound(
        f"Run {run!r} has no committed checkpoint at {' or '.join(urls)} (runs there: "
        f"{there}). Check the run name, or save a checkpoint first."
    )


def no_step(run: str, step: int, urls: Sequence[str], steps: Sequence[int]) -> CheckpointNotFound:
    shown = ", ".join(str(s) for s in sorted(steps)[-10:]) or "none"
    return CheckpointNotFound(
        f"Run {run!r} has no committed checkpoint at step {step} at {' or '.join(urls)} "
        f"(its newest committed steps: {shown}). Load one of those, or load(run) for "
        f"the newest that verifies."
    )


def step_corrupt(run: str, step: int, reasons: Sequence[str]) -> CheckpointCorrupt:
    return CheckpointCorrupt(
        f"Step {step} of run {run!r} does not verify anywhere: {'; '.join(reasons)}. "
        f"Load another step (see list({run!r})), or load({run!r}) for the newest that "
        f"verifies."
    )


def all_corrupt(run: str, skipped: Sequence[tuple[int, str]]) -> CheckpointCorrupt:
    shown = "; ".join(f"step {s}: {why}" for s, why in skipped[:5])
    more = f" (and {len(skipped) - 5} more)" if len(skipped) > 5 else ""
    return CheckpointCorrupt(
        f"No checkpoint of run {run!r} verifies: {shown}{more}. The data was damaged "
        f"after it was written; restore it from a replica or backup, or start the run "
        f"afresh."
    )
