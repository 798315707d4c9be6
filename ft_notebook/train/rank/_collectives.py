"""One rank's collectives on its current generation's group.

:class:`Collectives` owns which :class:`~._groups.Generation` the rank is in now
(``gen``, set by the rank actor as it forms or leaves one) and issues every
all-reduce and broadcast of the rank on that generation's group, waiting through the
rank's :class:`~._groups.Waker`: a newer plan interrupts the wait
(:class:`~._groups.Interrupted`), a failed or unstartable collective raises
:class:`~._groups.PeerFailed`. The sends and receives of :mod:`._ordered_sum` go
through it too. All ranks of a generation must issue the same
collectives in the same order; the parts that call these are written so that they do.
"""

from __future__ import annotations

from typing import Any

from ft_notebook.train.rank._groups import Generation, PeerFailed, Waker


class Collectives:
    def __init__(self, waker: Waker) -> None:
        self.waker = waker
        self.gen: Generation | None = None  # None between generations

    def current(self) -> Generation:
        """The generation the rank is in; only called while it is in one."""
        assert self.gen is not None, "a collective outside a generation"
        return self.gen

    def allreduce(self, tensor: Any, op: str, what: str) -> None:
        """Reduce ``tensor`` in place over the group with ``op`` (``"SUM"``, ``"MAX"``,
        ``"MIN"``); ``what`` names it in errors."""
        import torch.distributed as dist

        opts = dist.AllreduceOptions()
        opts.reduceOp = getattr(dist.ReduceOp, op)
        try:
            work = self.current().group.allreduce([tensor], opts)
        except Exception as e:  # e.g. NCCL connecting lazily to a dead peer
            raise PeerFailed(f"{what} could not start: {e}") from e
        self.waker.wait(work, what)

    def broadcast(self, tensor: Any, src: int, what: str) -> None:
        """Give every rank ``src``'s ``tensor`` (in place)."""
        import torch.distributed as dist

        opts = dist.BroadcastOptions()
        opts.rootRank, opts.rootTensor = src, 0
        try:
            work = self.current().group.broadcast([tensor], opts)
        except Exception as e:
            raise PeerFailed(f"{what} could not start: {e}") from e
        self.waker.wait(work, what)

    def send(self, tensor: Any, dst: int, tag: int, what: str) -> Any:
        """Start sending ``tensor`` to rank ``dst`` under ``tag``; wait with :meth:`finish`."""
        try:
            return self.current().group.send([tensor], dst, tag)
        except Exception as e:
            raise PeerFailed(f"{what} could not start: {e}") from e

    def recv(self, tensor: Any, src: int, tag: int, what: str) -> Any:
        """Start receiving into ``tensor`` from rank ``src`` under ``tag``."""
        try:
            return self.current().group.recv([tensor], src, tag)
        except Exception as e:
            raise PeerFailed(f"{what} could not start: {e}") from e

    def finish(self, works: list[Any], what: str) -> None:
        """Wait for every one of ``works`` (sends and receives)."""
        self.waker.wait_all(works, what)
