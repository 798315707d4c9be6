"""What the store already holds of a run's name, checked before the run starts.

A new run must not meet an earlier run's checkpoints, and a resume must go on with
the data settings its checkpoint was taken with. Both read only manifests, from the
kernel; when the store cannot be reached from here, the workers' reads decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ft_notebook.exceptions import TrainingError


def refuse_old_checkpoints(name: str, url: str) -> None:
    """A new run must not meet the checkpoints of an earlier run of its name: a resume
    or a rollback would load them, and retention would drop its own as older."""
    from ft_notebook.store import CheckpointStore

    try:
        with CheckpointStore(url, keep=None, publish_events=False) as store:
            committed = store.list(name)  # the manifests: not GBs of weights
    except Exception:  # not reachable from here: the workers will tell
        return
    if committed:
        newest = committed[-1]
        raise TrainingError(
            f"{url} already has checkpoints of a run named {name!r} (the newest at step "
            f"{newest.step}). Pass resume=True to continue that run, choose another name=, "
            f"or delete its checkpoints first."
        )


def refuse_another_order(name: str, url: str, seed: int, batch_size: int, size: int) -> None:
    """A resume goes on from the checkpoint's step, and the step gives the samples
    still to come only with the seed, batch size and dataset length it was taken
    with: with others, some samples would be skipped and others used twice."""
    from ft_notebook.store import CheckpointStore

    try:
        with CheckpointStore(url, keep=None, publish_events=False) as store:
            committed = store.list(name)  # the manifests: not GBs of weights
    except Exception:  # not reachable from here: the ranks check what they read
        return
    if committed:
        newest = committed[-1]
        check_order(name, newest.step, newest.metadata, seed, batch_size, size)


def check_order(
    name: str, step: int, saved: Mapping[str, Any], seed: int, batch_size: int, size: int
) -> None:
    """Raise TrainingError if the checkpoint of ``step`` (its metadata ``saved``) was
    taken with other data settings than these (see :func:`refuse_another_order`); the
    ranks check the checkpoint they resume from too."""
    from ft_notebook.train.spec import steps_per_epoch

    epoch, index = divmod(step, steps_per_epoch(size, batch_size))
    position = index * batch_size
    now = {"seed": seed, "batch_size": batch_size, "samples": size}
    # older checkpoints lack the batch size and length: their cursor tells a change too
    changed = [f"{n} {saved[n]} then, {v} now" for n, v in now.items() if saved.get(n, v) != v]
    if (saved.get("epoch"), saved.get("position")) != (epoch, position):
        changed.append(
            f"its step {step} was epoch {saved.get('epoch')} at sample "
            f"{saved.get('position')}, and would be epoch {epoch} at sample {position} now"
        )
    if changed:
        raise TrainingError(
            f"The newest checkpoint of run {name!r} (step {step}) was taken with "
            f"other data settings ({'; '.join(changed)}): resuming from it would skip "
            f"some samples and use others twice. Resume with the seed, batch_size and "
            f"dataset it was taken with, or start a new run under another name=."
        )
