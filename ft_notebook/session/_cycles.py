"""Variables that refer to each other, found so that they are stored together.

Each variable is its own pickle, and a reference to another variable is kept by
name, so that aliases survive and an unchanged variable costs nothing. Variables
that refer to each other in a cycle (``fig, ax = plt.subplots()``: the figure holds
its axes and the axes their figure; two plain objects pointing at each other)
cannot be loaded one after the other that way, so each such set (a strongly
connected component of the graph of references) is pickled as one tuple, in which
pickle's memo resolves the cycle; every member's entry names that pickle and its
place in it.
"""

from __future__ import annotations

from collections.abc import Mapping


def cycles(refs: Mapping[str, tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The sets of two or more names that reach each other through ``refs``
    (Tarjan's algorithm, without recursion), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[tuple[str, ...]] = []
    counter = 0
    for start in sorted(refs):
        if start in index:
            continue
        work = [(start, iter(refs.get(start, ())))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in refs:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(refs.get(child, ()))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(tuple(sorted(component)))
    return found
