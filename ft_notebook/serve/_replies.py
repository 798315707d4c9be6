"""What one attempt on a replica came to, as the router reads it: the reply, the raw
error, whether the replica leaves the rotation at once, and the error in words."""

from __future__ import annotations

import asyncio
from typing import Any

from ft_notebook._reasons import Reason, explain

#: Replies the router acts on as they are (an answer, the input's error, a sandbox
#: the request killed); any other status is the replica's failure.
_READ_AS_THEY_ARE = ("OK", "rejected", "poisoned")


class ReplicaFailed(Exception):
    """An attempt that got no reply: (the error, whether to eject the replica now)."""


def outcome(task: asyncio.Task[Any], key: str) -> tuple[dict[str, Any] | None, str, bool, Reason]:
    """The reply (None if none came), the raw error, whether the replica leaves the
    rotation at once, and the error in words (:func:`explain`) for the views."""
    if task.cancelled():
        why = "its replica was taken out of rotation"
        return None, why, False, Reason(f"{_subject(key)} was taken out of rotation")
    error = task.exception()
    if isinstance(error, ReplicaFailed):
        why = str(error.args[0])
        return None, why, bool(error.args[1]), explain(why, replica=key)
    if error is not None:
        return None, f"{type(error).__name__}: {error}", False, explain(error, replica=key)
    reply = task.result()[0]
    if reply["status"] in _READ_AS_THEY_ARE:
        return reply, "", False, Reason("")
    why = f"{reply['status']}: {reply.get('error', '')}"
    if reply["status"] == "not-ready":  # it never ran the request
        return None, why, True, Reason(f"{_subject(key)} was not ready on its worker", why)
    return None, why, False, explain(why, replica=key)


def _subject(key: str) -> str:
    return f"replica {key.rsplit('/', 1)[-1]}"
