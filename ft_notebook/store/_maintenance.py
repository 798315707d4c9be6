"""Retention and blob collection: what may be deleted, and when.

Retention of a run keeps, newest first, every checkpoint until ``keep`` of them have
verified, and deletes the older ones, pinned ones excepted. A checkpoint that does not
verify does not count towards ``keep``, so a newer save that failed or was damaged
never costs the last good one. Folders without a manifest (writers that died) are
cleared under the run's lock, where no live writer can be inside one.

A blob is collected only when no manifest of any run names it, and only while no
writer is between writing blobs and committing its manifest (:meth:`Location.collecting`);
when a writer is, collection waits for a later pass instead of for the writer.
Deleting a checkpoint removes its manifest first, so it stops existing at once and a
crash halfway through leaves only garbage, never a broken checkpoint.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ft_notebook.exceptions import StoreError
from ft_notebook.store._location import Location
from ft_notebook.store._manifest import Manifest, referenced
from ft_notebook.store._reader import Damaged, read_files, read_manifest

logger = logging.getLogger(__name__)

IsGood = Callable[[int, Manifest], bool]


class Retention:
    """Retention and collection after each commit, remembering what verified.

    A checkpoint this process wrote, or read and verified, is not read again to count
    towards ``keep``; one written elsewhere is verified once.
    """

    def __init__(self, keep: int | None) -> None:
        self.keep = keep
        self._lock = threading.Lock()  # the writer thread and the caller's both get here
        self._good: set[tuple[str, str, int, str]] = set()  # (url, run, step, manifest digest)
        self._swept: set[str] = set()

    def mark_good(self, url: str, run: str, step: int, digest: str) -> None:
        with self._lock:
            self._good.add((url, run, step, digest))

    def forget(self, url: str, run: str, step: int) -> None:
        with self._lock:
            self._good = {g for g in self._good if g[:3] != (url, run, step)}

    def after_commit(self, loc: Location, run: str) -> None:
        """A failure here is logged, not raised: the new checkpoint is committed, and
        the next save tries again."""
        try:
            removed = retain(loc, run, self.keep, lambda s, m: self._is_good(loc, run, s, m))
            for step in removed:
                self.forget(loc.url, run, step)
            with self._lock:
                first = loc.url not in self._swept
                self._swept.add(loc.url)
            if removed or first:
                collect(loc)  # the first pass also clears what crashed writers left
        except (OSError, StoreError) as e:
            logger.warning(
                "retention of run %r at %s failed; retried after the next save: %s", run, loc.url, e
            )

    def _is_good(self, loc: Location, run: str, step: int, manifest: Manifest) -> bool:
        key = (loc.url, run, step, manifest.digest)
        with self._lock:
            if key in self._good:
                return True
        try:
            read_files(loc, manifest, keep=False)
        except Damaged:
            return False
        with self._lock:
            self._good.add(key)
        return True


def retain(loc: Location, run: str, keep: int | None, is_good: IsGood) -> list[int]:
    """Apply retention to ``run`` at ``loc``; return the steps whose folders it removed."""
    doomed: dict[int, bool] = {}  # step -> committed (False: a folder left by a dead writer)
    good = 0
    for step in sorted(loc.steps(run), reverse=True):
        try:
            manifest = read_manifest(loc, run, step)
        except FileNotFoundError:
            doomed[step] = False
            continue
        except Damaged:
            if keep is not None and good >= keep:
                doomed[step] = True
            continue  # newer than the kept ones: left for load's report and the user
        if keep is None:
            continue  # nothing is deleted, so nothing needs verifying
        if good >= keep:
            if not manifest.pinned:
                doomed[step] = True
        elif is_good(step, manifest):
            good += 1
    if not doomed:
        return []
    removed = []
    with loc.run_lock(run):
        for step, committed in doomed.items():
            if committed:
                loc.remove_manifest(run, step)
            elif _has_manifest(loc, run, step):
                continue  # its writer committed between our scan and our lock
            loc.remove_step_dir(run, step)
            removed.append(step)
    return removed


def _has_manifest(loc: Location, run: str, step: int) -> bool:
    try:
        loc.read_manifest(run, step)
    except FileNotFoundError:
        return False
    return True


def delete(loc: Location, run: str, step: int) -> bool:
    """Remove ``run``/``step`` at ``loc``; False if it had no manifest there."""
    if step not in loc.steps(run):
        return False
    with loc.run_lock(run):
        found = loc.remove_manifest(run, step)
        loc.remove_step_dir(run, step)
    return found


def collect(loc: Location) -> int:
    """Remove blobs no manifest names; return how many. Does nothing, at once, while a
    writer is between its blobs and its commit."""
    with loc.collecting() as free:
        if not free:
            return 0
        names: set[str] = set()
        for run in loc.runs():
            for step in loc.steps(run):
                try:
                    names |= referenced(loc.read_manifest(run, step))
                except FileNotFoundError:
                    continue
        removed = 0
        for name in loc.blob_names():
            if name not in names and loc.collectable(name):
                loc.remove_blob(name)
                removed += 1
        return removed


def newest(loc: Location, run: str) -> int | None:
    """The newest step of ``run`` with a valid manifest at ``loc`` (data not read), or
    None if there is none or the location does not answer."""
    try:
        steps = sorted(loc.steps(run), reverse=True)
    except OSError:
        return None
    for step in steps:
        try:
            read_manifest(loc, run, step)
        except (OSError, Damaged):
            continue
        return step
    return None
