"""The one writer of a run's :class:`~._book.Members`: each way a worker comes, warms
up, trains, leaves or is evicted is one function here, returning a new book of members.

The rules that decide *when* (:mod:`._membership`, :mod:`._generations`,
:mod:`._recoveries`, :mod:`._evictions`) call these; none writes a field of the member
book itself, so a field has one rule for each thing that can happen to it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ft_notebook.train.coordinator._book import Members, put, without


def launched(m: Members, chosen: tuple[tuple[str, str], ...]) -> Members:
    """Actors being started on the workers ``chosen`` (name, address) at launch."""
    return replace(
        m,
        target_world=len(chosen),
        actors={**m.actors, **dict(chosen)},
        seen=m.seen | {n for n, _ in chosen},
    )


def joined(m: Members, name: str, address: str, now: float) -> Members:
    """An actor being started on ``name``, a worker that joined at ``now``."""
    return replace(
        m,
        actors=put(m.actors, name, address),
        seen=m.seen | {name},
        arrivals=put(m.arrivals, name, now),
    )


def not_started(m: Members, name: str) -> Members:
    """The actor on ``name`` could not be started."""
    return replace(m, actors=without(m.actors, name))


def warm(m: Members, name: str, at: float, resumed_step: int) -> Members:
    """``name``'s rank warmed up at ``at``; before the first generation, at the
    checkpoint step it resumed from (0: none)."""
    m = replace(m, ready=put(m.ready, name, at))
    if resumed_step > 0:
        m = replace(m, resumed_from=max(m.resumed_from or 0, resumed_step))
    return m


def began(m: Members, ready: list[str]) -> Members:
    """The first generation: the workers it begins with (those that joined during the
    warm-up too: they are not joiners)."""
    return replace(m, target_world=len(ready), arrivals=without(m.arrivals, *ready))


def admitted(m: Members, waiting: list[str], gen: int, now: float) -> Members:
    """Warm joiners ``waiting`` admitted into generation ``gen``: joins to complete
    once they train."""
    admitting = dict(m.admitting)
    for name in waiting:
        admitting[name] = {
            "name": name,
            "arrived_at": m.arrivals.get(name, now),
            "ready_at": m.ready.get(name, now),
            "generation": gen,
        }
    return replace(m, admitting=admitting, arrivals=without(m.arrivals, *waiting))


def trained(m: Members, gen: int) -> tuple[Members, list[dict[str, Any]]]:
    """Generation ``gen`` committed its first step: the joiners admitted to it (or
    before) trained; returns them as joins to complete."""
    done = [dict(j) for j in m.admitting.values() if j["generation"] <= gen]
    names = [j["name"] for j in done]
    return replace(m, admitting=without(m.admitting, *names)), done


def left(m: Members, name: str) -> Members:
    """``name`` is gone (lost, hung, its actor gone, stuck in its step)."""
    return replace(m, actors=without(m.actors, name), ready=without(m.ready, name))


def evicted(m: Members, name: str, cause: str) -> Members:
    """``name`` taken out for not meeting its peers: gone, and not a join (it never
    trained with the others); its address kept to tell it to stop again at the end."""
    return replace(
        left(m, name),
        admitting=without(m.admitting, name),
        arrivals=without(m.arrivals, name),
        evicted=put(m.evicted, name, cause),
        retired=put(m.retired, name, m.actors[name]),
    )


def seen_absent(m: Members, gen: int, names: tuple[str, ...]) -> Members:
    """A failed rendezvous of generation ``gen`` did not see ``names`` arrive (only the
    newest failures matter: four generations are kept)."""
    absent = dict(m.absent)
    if gen not in absent:
        for old in sorted(absent)[:-3]:
            del absent[old]
    counts = dict(absent.get(gen, {}))
    for name in names:
        counts[str(name)] = counts.get(str(name), 0) + 1
    absent[gen] = counts
    return replace(m, absent=absent)
