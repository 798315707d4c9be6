"""How events travel: journal first, then live through Dask and the in-process bus.

The journal is the source of truth and the only place sequence numbers are made.
Live delivery is fast but may reorder events of two publishers or, for a subscriber
that has just arrived, miss some; a :class:`Subscription` therefore treats a live
event as a hint: the next number in line is delivered at once, anything else sends
it back to the journal to catch up. That is what makes delivery exactly once and in
order without coordinating publishers.
"""

from __future__ import annotations

import inspect
import logging
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from ft_notebook._journal import Journal
from ft_notebook.config import get_config
from ft_notebook.events import Event
from ft_notebook.exceptions import EventError

logger = logging.getLogger(__name__)

Handler = Callable[[Event], None]

# Live messages wrap the journal record: Dask adds its own "worker" key (an address)
# to dict messages that workers log, which would overwrite the envelope's field.
_WRAPPER_KEY = "ft-notebook-event"
_IN_FLIGHT: set[Any] = set()


def publish(topic: str, make: Callable[[int], Event], *, via: Any) -> Event:
    record = Journal.for_topic(topic).append(lambda seq: make(seq).to_dict())
    event = Event.from_dict(record)
    target = _resolve_via(via)
    if target is not None:
        try:
            sent = target.log_event(topic, {_WRAPPER_KEY: record})
            if inspect.isawaitable(sent):  # an asynchronous Client
                import asyncio

                task = asyncio.ensure_future(sent)
                _IN_FLIGHT.add(task)  # the loop keeps only a weak reference
                task.add_done_callback(_IN_FLIGHT.discard)
        except Exception as e:  # the journal has it; live delivery is best effort
            logger.warning("event %s #%d journaled but not sent live: %s", topic, event.seq, e)
    _LOCAL_BUS.deliver(topic, event)
    return event


def history(topic: str, since: int, via: Any) -> list[Event]:
    records, _ = Journal.for_topic(topic).read()
    by_seq = {r["seq"]: r for r in records}
    if via is not None:  # publishers on other machines journal elsewhere
        for _, msg in via.get_events(topic):
            record = msg.get(_WRAPPER_KEY) if isinstance(msg, dict) else None
            if isinstance(record, dict) and "seq" in record:
                by_seq.setdefault(record["seq"], record)
    return [Event.from_dict(by_seq[s]) for s in sorted(by_seq) if s > since]


def subscribe(
    topic: str, callback: Callable[[Event], object], *, since: int, via: Any
) -> Subscription:
    sub = Subscription(topic, callback, since)
    if via is None:
        detach = _LOCAL_BUS.attach(topic, sub.on_live)
    else:
        detach = _fanout(via).attach(topic, sub.on_live)
    sub.start(detach)
    return sub


class Subscription:
    """Delivers a topic's events to one callback, each once and in sequence order."""

    def __init__(self, topic: str, callback: Callable[[Event], object], since: int) -> None:
        self.topic = topic
        self.last_seq = since
        self._callback = callback
        self._journal = Journal.for_topic(topic)
        self._offset = 0
        self._lock = threading.RLock()
        self._replayed = False
        self._early: list[Event] = []
        self._detach: Callable[[], None] | None = None
        self.closed = False

    def start(self, detach: Callable[[], None]) -> None:
        """Replay the journal; the live feed was attached before, so nothing falls between."""
        with self._lock:
            self._detach = detach
            self._catch_up()
            self._replayed = True
            early, self._early = self._early, []
            for event in sorted(early, key=lambda e: e.seq):
                self._on_live_locked(event)

    def on_live(self, event: Event) -> None:
        with self._lock:
            if self.closed:
                return
            if not self._replayed:
                self._early.append(event)
            else:
                self._on_live_locked(event)

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            detach, self._detach = self._detach, None
        if detach is not None:
            detach()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _on_live_locked(self, event: Event) -> None:
        if event.seq == self.last_seq + 1:
            self._emit(event)
        elif event.seq > self.last_seq:
            self._catch_up()
            if event.seq > self.last_seq:  # not journaled here: a publisher elsewhere
                self._emit(event)

    def _catch_up(self) -> None:
        records, self._offset = self._journal.read(self._offset)
        for record in records:
            if record.get("seq", 0) > self.last_seq:
                self._emit(Event.from_dict(record))

    def _emit(self, event: Event) -> None:
        self.last_seq = event.seq
        try:
            self._callback(event)
        except Exception:
            logger.exception(
                "event callback %r failed on %s #%d", self._callback, event.topic, event.seq
            )


class _LocalBus:
    """Live delivery inside one process, for code that runs with no cluster."""

    def __init__(self) -> None:
        self._handlers: dict[str, list[Handler]] = defaultdict(list)
        self._lock = threading.Lock()

    def attach(self, topic: str, handler: Handler) -> Callable[[], None]:
        with self._lock:
            self._handlers[topic].append(handler)

        def detach() -> None:
            with self._lock:
                self._handlers[topic].remove(handler)

        return detach

    def deliver(self, topic: str, event: Event) -> None:
        with self._lock:
            handlers = list(self._handlers.get(topic, ()))
        for handler in handlers:
            handler(event)


_LOCAL_BUS = _LocalBus()


class _DaskFanout:
    """One Dask topic subscription per client and topic, shared by many handlers.

    ``Client.subscribe_topic`` keeps one handler per topic, and its request travels
    without a reply, so :meth:`attach` waits until the scheduler lists the client as
    a subscriber: from then on every ``log_event`` reaches us.
    """

    def __init__(self, client: Any) -> None:
        if getattr(client, "asynchronous", False):
            raise EventError(
                "Subscribing needs a synchronous dask Client; this one is asynchronous. "
                "Inside the scheduler, read the journal with history() instead."
            )
        self._client = client
        self._handlers: dict[str, list[Handler]] = defaultdict(list)
        self._lock = threading.Lock()

    def attach(self, topic: str, handler: Handler) -> Callable[[], None]:
        with self._lock:
            first = not self._handlers[topic]
            self._handlers[topic].append(handler)
        if first:
            self._client.subscribe_topic(topic, lambda ev: self._dispatch(topic, ev))
            self._await_subscribed(topic)

        def detach() -> None:
            with self._lock:
                self._handlers[topic].remove(handler)
                last = not self._handlers[topic]
                if last:
                    del self._handlers[topic]
                idle = not self._handlers
            if last and self._client.status == "running":
                self._client.unsubscribe_topic(topic)
            if idle:  # let the client go: nothing here needs it any more
                with _FANOUTS_LOCK:
                    if _FANOUTS.get(self._client.id) is self:
                        del _FANOUTS[self._client.id]

        return detach

    def _dispatch(self, topic: str, raw: tuple[float, Any]) -> None:
        try:
            event = Event.from_dict(raw[1][_WRAPPER_KEY])
        except (EventError, TypeError, IndexError, KeyError) as e:
            logger.warning("ignoring a foreign message on %s: %s", topic, e)
            return
        with self._lock:
            handlers = list(self._handlers.get(topic, ()))
        for handler in handlers:
            handler(event)

    def _await_subscribed(self, topic: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        delay = 0.005
        while not self._client.run_on_scheduler(
            _is_subscribed, topic=topic, client_id=self._client.id
        ):
            if time.monotonic() > deadline:
                raise EventError(
                    f"The scheduler did not register the subscription to {topic} within "
                    f"{timeout:.0f} s. Check that the cluster is alive (client.status: "
                    f"{self._client.status!r})."
                )
            time.sleep(delay)  # waiting on a remote state change; backs off to 0.1 s
            delay = min(delay * 2, 0.1)


def _is_subscribed(dask_scheduler: Any, topic: str, client_id: str) -> bool:
    broker = getattr(dask_scheduler, "_broker", None)
    topics = getattr(broker, "_topics", None)
    if topics is None:  # a Dask version without the broker: cannot confirm
        return True
    return topic in topics and client_id in topics[topic].subscribers


_FANOUTS: dict[str, _DaskFanout] = {}
_FANOUTS_LOCK = threading.Lock()


def _fanout(client: Any) -> _DaskFanout:
    with _FANOUTS_LOCK:
        fanout = _FANOUTS.get(client.id)
        if fanout is None or fanout._client is not client:
            fanout = _FANOUTS[client.id] = _DaskFanout(client)
        return fanout


def _resolve_via(via: Any) -> Any:
    if via is not None:
        return via
    transport = get_config().events.transport
    if transport == "local":
        return None
    found = _ambient_dask()
    if found is None and transport == "dask":
        raise EventError(
            "ft-notebook.events.transport is 'dask' but this process has no Dask "
            "worker or default client. Start a cluster first, pass via=client, or set "
            "the transport to 'auto'."
        )
    return found


def _ambient_dask() -> Any:
    """The Dask worker or default client of this process, without importing Dask."""
    if "distributed" not in sys.modules:
        return None
    import distributed

    try:
        return distributed.get_worker()
    except ValueError:
        pass
    try:
        return distributed.default_client()
    except ValueError:
        return None
