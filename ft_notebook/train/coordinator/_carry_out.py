"""The coordinator's hands: the actions its decisions take, carried out.

:func:`carry_out` does what a decision (:mod:`.decide`) asked, in order, through the
scheduler (:class:`~._link.SchedulerLink`): events published, calls to the ranks
and the control plane made in the background. What comes back (a rank's answer, a
timer, the workers' rows) goes to ``feed`` as a new input, so every fact of the run
still enters by one door. Nothing here decides anything: an answer is passed on as
it came.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from ft_notebook.events import publish, run_topic
from ft_notebook.train.coordinator._actions import (
    Action,
    After,
    AskStates,
    EvictWorker,
    ForgetKeys,
    Hold,
    Launch,
    Log,
    Publish,
    PublishProgress,
    SendPlan,
    StartActor,
)
from ft_notebook.train.coordinator._inputs import (
    ActorStarted,
    Input,
    Launched,
    LaunchFailed,
    PlanAnswered,
    ProgressDue,
    RankStates,
)
from ft_notebook.train.coordinator._link import SchedulerLink
from ft_notebook.train.coordinator.decide import replaced_now
from ft_notebook.train.protocol import RankOp

logger = logging.getLogger("ft_notebook.train.coordinator._plugin")

#: Seconds a rank has to say where it is, when its run's step stands still.
_STATE_TIMEOUT_S = 5.0

Feed = Callable[[str, Input], None]


def carry_out(
    link: SchedulerLink,
    run: str,
    spec: bytes,
    incarnation: str,
    actions: tuple[Action, ...],
    feed: Feed,
) -> None:
    """Do ``actions`` of run ``run`` (whose pickled spec and incarnation the starts of
    its actors carry)."""
    for action in actions:
        if isinstance(action, Publish):
            _publish(link, run, action)
        elif isinstance(action, PublishProgress):
            rows = {str(r["name"]): r for r in link.control.rows()}
            feed(run, ProgressDue(time.time(), rows, force=action.force))
        elif isinstance(action, SendPlan):
            link.spawn(_send_plan(link, run, action, feed))
        elif isinstance(action, StartActor):
            link.spawn(_start_actor(link, run, spec, incarnation, action, feed))
        elif isinstance(action, Launch):
            link.spawn(_launch(link, run, feed))
        elif isinstance(action, AskStates):
            link.spawn(_ask_states(link, run, action, feed))
        elif isinstance(action, ForgetKeys):
            link.spawn(link.control.forget_rendezvous(action.prefix))
        elif isinstance(action, Hold):
            (link.control.release if action.release else link.control.hold)(f"run:{run}")
        elif isinstance(action, EvictWorker):
            link.spawn(link.control.evict(action.address))
        elif isinstance(action, After):
            _after(run, action, feed)
        elif isinstance(action, Log):
            logger.log(logging.getLevelName(action.level.upper()), action.message)
        else:  # a new kind of action must be carried out, not dropped
            raise TypeError(f"no way to carry out {action!r}")


def _publish(link: SchedulerLink, run: str, action: Publish) -> None:
    # A failure to publish is logged: the decision folded the event already, so the run
    # goes on and run.info() says what the coordinator decided.
    try:
        publish(action.payload, run_topic(run), run=run, via=link.scheduler, step=action.step)
    except Exception:
        logger.exception("could not publish %s of run %s", action.payload.kind, run)


def _after(run: str, action: After, feed: Feed) -> None:
    def fire() -> None:
        feed(run, replaced_now(action.input, time.time()))

    asyncio.get_running_loop().call_later(action.delay_s, fire)


async def _launch(link: SchedulerLink, run: str, feed: Feed) -> None:
    try:
        store = await link.control.rendezvous_store()
        workers = tuple(link.workers().items())
    except Exception as e:
        logger.exception("could not start run %s", run)
        feed(run, LaunchFailed(time.time(), str(e)))
        return
    feed(run, Launched(time.time(), store, workers))


async def _start_actor(
    link: SchedulerLink, run: str, spec: bytes, incarnation: str, a: StartActor, feed: Feed
) -> None:
    error = ""
    try:
        answer = await link.call(
            a.address,
            RankOp.START,
            spec=spec,
            run=run,
            name=a.name,
            first=a.first,
            incarnation=incarnation,
        )
        if answer not in ("started", "running"):  # None: a worker without the handler
            error = f"{RankOp.START.value} answered {answer!r}"
    except Exception as e:
        error = str(e) or type(e).__name__
    feed(run, ActorStarted(time.time(), a.name, a.address, error))


async def _send_plan(link: SchedulerLink, run: str, a: SendPlan, feed: Feed) -> None:
    try:
        answer = await link.call(a.address, RankOp.DELIVER, run=run, plan=a.plan.to_wire())
    except Exception:  # the worker is going: the control plane reports the loss
        return
    if answer == "no-actor" and not a.plan.stop:
        feed(run, PlanAnswered(time.time(), a.name, a.address, a.plan.gen))


async def _ask_states(link: SchedulerLink, run: str, a: AskStates, feed: Feed) -> None:
    async def ask(address: str) -> Any:
        answer = await asyncio.wait_for(link.call(address, RankOp.STATE, run=run), _STATE_TIMEOUT_S)
        return json.loads(answer)

    states: dict[str, Any] = {}
    for name, address in a.addresses:
        with contextlib.suppress(Exception):
            states[name] = await ask(address)
    feed(run, RankStates(time.time(), a.gen, states))
