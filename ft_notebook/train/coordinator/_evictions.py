"""Members that cannot meet their peers: capped re-forms, then the member leaves the run.

A collective or rendezvous that fails with no worker lost makes the coordinator form
the same members again (:mod:`._recoveries`). A member that can never meet its peers
(a host the others cannot reach, a NIC or GPU whose communicator never comes up)
would keep that loop going, with the whole run standing still. So after
:data:`REFORMS_CAP` failed forms at one step, :class:`Evictions` takes out a member
the evidence names: the one its peers saw absent from the failed rendezvous (each
rank marks its arrival in the store before it meets the others, and a failed
rendezvous reports whose marks it did not find), else a joiner that has not trained
yet (the others trained together before it came). With no such evidence (every
member arrived, and none is new) nobody is evicted: a guess would take healthy
workers out one by one, so the members are formed again until the run fails at its
stall threshold, saying why.

An eviction is a loss like any other (a recovery with its cause, the run DEGRADED).
The evicted rank actor is sent a stop plan now and again when the run ends, and the
worker is not admitted again by this run. :class:`Evictions` keeps
``record.members.evicted``, ``retired`` and ``absent`` (generation -> how often each
member was seen absent from its failed rendezvous).
"""

from __future__ import annotations

import collections
import logging

from ft_notebook.train.coordinator._generations import Generations
from ft_notebook.train.coordinator._link import SchedulerLink
from ft_notebook.train.coordinator._record import Record
from ft_notebook.train.protocol import Plan, Report
from ft_notebook.train.report_kinds import PeerFailedData

logger = logging.getLogger("ft_notebook.train.coordinator._plugin")

#: Failed forms of the same members at one step before one of them is evicted.
REFORMS_CAP = 3


class Evictions:
    """Who is absent from failed rendezvous, and the eviction once the cap is reached."""

    def __init__(self, link: SchedulerLink, plans: Generations) -> None:
        self.link = link
        self.plans = plans

    def on_not_met(self, record: Record, r: Report) -> None:
        """A rank's rendezvous failed: count the members whose arrival it did not see
        (by generation: the coordinator may have moved on when a late report comes)."""
        d = PeerFailedData.of(r)
        absent, gen = d.absent, d.plan
        if absent is None:  # not a rendezvous, or the rank could not look
            return
        if gen not in record.members.absent:
            for old in sorted(record.members.absent)[:-3]:  # only the newest failures matter
                del record.members.absent[old]
            record.members.absent[gen] = collections.Counter()
        record.members.absent[gen].update(str(m) for m in absent)

    def evict_one(self, record: Record, plan: Plan, failures: int, error: str) -> bool:
        """The members failed to form ``failures`` times at one step: evict the member
        the evidence names, unless that would leave fewer than ``min_workers``.
        Whether one went."""
        members = [m for m in plan.members if m in record.members.actors]
        if len(members) < 2 or len(members) - 1 < record.options.min_workers:
            return False
        named = self.culprit(record, plan, members)
        if named is None:
            return False
        name, why = named
        book = record.members
        address = book.actors.pop(name)
        book.ready.pop(name, None)
        book.admitting.pop(name, None)  # not a join: it never trained with the others
        book.arrivals.pop(name, None)
        cause = (
            f"could not meet its peers: {failures} forms of the same {len(plan.members)} "
            f"workers failed at step {record.step} ({why}; last error: {error or 'none given'})"
        )
        book.evicted[name] = cause
        book.retired[name] = address  # told to stop again when the run ends
        logger.warning("run %s: evicting %s: it %s", record.name, name, cause)
        stop = Plan(
            run=record.name,
            gen=plan.gen,
            members=(),
            store=plan.store,
            stop=f"evicted: it {cause}",
            incarnation=record.incarnation,
        )
        self.link.spawn(self.plans.deliver(record, name, address, stop))
        self.plans.lost(record, [name], cause)
        return True

    def culprit(self, record: Record, plan: Plan, members: list[str]) -> tuple[str, str] | None:
        """The member to evict and why it, or None when nothing names one."""
        votes = record.members.absent.get(plan.gen)
        if votes:
            name, count = max(
                ((m, votes[m]) for m in members if votes[m]),
                key=lambda mv: (mv[1], members.index(mv[0])),
                default=(None, 0),
            )
            if name is not None:
                return name, f"{count} members did not see it arrive at the rendezvous"
        joiners = [m for m in members if m in record.members.admitting]
        if joiners:
            return joiners[-1], "it joined and had not trained yet; the others had trained"
        return None
