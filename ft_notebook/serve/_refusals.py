"""What a caller is told when the router does not answer: each refusal as the error it
raises, with what happened, the values seen and the next step."""

from __future__ import annotations

from typing import Any

from ft_notebook.exceptions import (
    DeadlineExceeded,
    InputRejected,
    Overloaded,
    PoisonRequest,
    RequestTooLarge,
    ServiceClosed,
    ServiceUnavailable,
)
from ft_notebook.serve._policy import shown_bytes


def closed(name: str) -> ServiceClosed:
    return ServiceClosed(
        f"Service {name!r} was closed (or this handle detached): no call goes through it "
        f"any more. ft.service({name!r}) attaches to it if it still runs; ft.serve(...) "
        f"starts it again."
    )


def too_large(name: str, size: int, limit: int) -> RequestTooLarge:
    return RequestTooLarge(
        f"A request of {shown_bytes(size)} to service {name!r} is over its "
        f"max_request_bytes ({shown_bytes(limit)}): refused before it was sent, so no "
        f"replica ran out of memory on it. Send it in smaller batches, or raise the limit "
        f"(ft.serve(..., max_request_bytes=...), or ft-notebook.serve.max-request-bytes)."
    )


def overloaded(name: str, outstanding: int) -> Overloaded:
    return Overloaded(
        f"Service {name!r} has {outstanding} requests in flight from this process, its "
        f"max_queue: refused at once. Send fewer at a time, add replicas (svc.scale(n)), "
        f"or raise max_queue."
    )


def late(name: str, deadline_s: float, asked: list[str]) -> DeadlineExceeded:
    return DeadlineExceeded(
        f"Service {name!r}: no replica answered within the deadline of {deadline_s:g} s "
        f"(asked {asked}). Pass deadline_s= for slower models; svc.status() shows the "
        f"replicas."
    )


def rejected(name: str, size: int, replica: str, reply: dict[str, Any]) -> InputRejected:
    return InputRejected(
        f"The model of service {name!r} raised on this input of {shown_bytes(size)} "
        f"(replica {replica}): {reply['error']}. Not retried: fix the input.\n"
        f"{reply.get('traceback', '')}".rstrip()
    )


def poison(name: str, size: int, lost: list[str], errors: list[str]) -> PoisonRequest:
    return PoisonRequest(
        f"A request of {shown_bytes(size)} to service {name!r} lost two replicas, "
        f"{lost[0]} and {lost[1]} ({'; '.join(errors[-2:])}): it was not sent to a third. "
        f"The input may be what takes them down (too large for the model's memory, or a "
        f"crash on it); the other requests go on."
    )


def poison_alone(name: str, size: int, lost: list[str], reply: dict[str, Any]) -> PoisonRequest:
    took = f"lost replica {lost[0]}, and " if lost else "was slow, and hedged, "
    return PoisonRequest(
        f"A request of {shown_bytes(size)} to service {name!r} {took}{reply['error']}: the "
        f"input is what takes processes down (a crash on it, or more memory than the model "
        f"has). It was not sent again; no other replica ran it, and the other requests go "
        f"on."
    )


def unavailable(name: str, why: str) -> ServiceUnavailable:
    return ServiceUnavailable(
        f"No replica of service {name!r} can answer ({why}) and it has no fallback. "
        f"svc.status() shows the replicas; ft.serve(..., fallback=f) answers with f "
        f"meanwhile."
    )
