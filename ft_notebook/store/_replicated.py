"""Reading a store's locations together: each that answers, the first copy that
verifies, and what they hold between them (runs, committed checkpoints).

A store commits every checkpoint to each of its locations (its URL, then its
replicas), so a reader may take any copy: a location that cannot be reached is passed
over while another answers, and a copy that does not verify is passed over for the
next location's. What to do when no copy serves (an older step, an event, an error)
stays the store's decision; these functions only report what they found and why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

from ft_notebook.exceptions import StoreError
from ft_notebook.store._location import Location
from ft_notebook.store._manifest import Manifest
from ft_notebook.store._reader import Damaged, describe, load_from, read_files, read_manifest
from ft_notebook.store._types import Checkpoint, CheckpointInfo

logger = logging.getLogger(__name__)
T = TypeVar("T")


def each(
    locations: Sequence[Location], what: str, fn: Callable[[Location], T]
) -> list[tuple[Location, T]]:
    """``fn`` of every location that answers; StoreError if none does."""
    out, failed = [], []
    for loc in locations:
        try:
            out.append((loc, fn(loc)))
        except OSError as e:
            failed.append(f"{loc.url}: {e}")
    if failed and not out:
        raise StoreError(
            f"Cannot {what}: {'; '.join(failed)}. Check that the location is reachable "
            f"and readable for you, then try again."
        )
    if failed:
        logger.warning("cannot %s at %s; using the other locations", what, "; ".join(failed))
    return out


def steps_newest_first(locations: Sequence[Location], run: str) -> list[int]:
    """The steps of ``run`` that have a folder at any location that answers."""
    listed = each(locations, f"list run {run!r}", lambda loc: loc.steps(run))
    return sorted({s for _, steps in listed for s in steps}, reverse=True)


def first_verifying(
    locations: Sequence[Location], run: str, step: int, allow_pickle: bool
) -> tuple[Checkpoint | None, list[str]]:
    """The first copy of ``run``/``step`` that verifies, and why the ones before it
    did not; (None, []) if no location has it."""
    reasons: list[str] = []
    for loc in locations:
        try:
            found = load_from(loc, run, step, allow_pickle=allow_pickle)
        except FileNotFoundError:
            continue
        except Damaged as e:
            reasons.append(f"{loc.url}: {e}" if len(locations) > 1 else str(e))
            continue
        if reasons:
            logger.warning(
                "run %r step %d read from %s: %s", run, step, loc.url, "; ".join(reasons)
            )
        return found, reasons
    return None, reasons


def intact_copy(
    locations: Sequence[Location], run: str, step: int
) -> tuple[tuple[Location, Manifest] | None, list[str]]:
    """The first location whose copy of ``run``/``step`` verifies (every file read and
    checked against the manifest, nothing decoded), with its manifest, and why the
    copies before it did not; (None, []) if no location has it."""
    reasons: list[str] = []
    for loc in locations:
        try:
            manifest = read_manifest(loc, run, step)
            read_files(loc, manifest, keep=False)
        except FileNotFoundError:
            continue
        except Damaged as e:
            reasons.append(f"at {loc.url}: {e}")
            continue
        return (loc, manifest), reasons
    return None, reasons


def committed(locations: Sequence[Location], run: str) -> list[CheckpointInfo]:
    """The checkpoints of ``run`` with a valid manifest at some location that answers,
    oldest first, each described from the first such location (data not read)."""
    found: dict[int, CheckpointInfo] = {}
    for loc, steps in each(locations, f"list run {run!r}", lambda loc: loc.steps(run)):
        for step in set(steps) - set(found):
            try:
                found[step] = describe(read_manifest(loc, run, step), loc.url)
            except (FileNotFoundError, Damaged):
                continue
    return [found[s] for s in sorted(found)]


def run_names(locations: Sequence[Location]) -> list[str]:
    """The runs that have a folder at any location that answers, sorted."""
    listed = each(locations, "list runs", lambda loc: loc.runs())
    return sorted({r for _, runs in listed for r in runs})
