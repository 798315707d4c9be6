"""Find and kill every process a test session started, however it was detached.

Each session puts a marker in its own environment; every process it starts, and
every process those start (daemons that left the session included), inherits it.
At the end, whatever still carries the marker was left behind.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

import psutil

MARKER = "FT_NOTEBOOK_TEST_SESSION"

# Helpers that multiprocessing keeps for the life of its parent, by design.
_BENIGN = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def mark_session() -> str:
    """Give this process (and so all it starts) a fresh session marker."""
    token = uuid.uuid4().hex
    os.environ[MARKER] = token
    return token


@dataclass(frozen=True)
class Leftover:
    pid: int
    cmdline: str


def leftovers(token: str) -> list[Leftover]:
    """Live processes, other than this one, that carry ``token`` and are not benign."""
    found = []
    me = os.getpid()
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.info["pid"] == me:
            continue
        try:
            if proc.environ().get(MARKER) != token or proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        cmdline = " ".join(proc.info["cmdline"] or [])
        if any(b in cmdline for b in _BENIGN):
            continue
        found.append(Leftover(proc.info["pid"], cmdline))
    return found


def kill(procs: list[Leftover], timeout: float = 5.0) -> list[Leftover]:
    """SIGKILL ``procs``; return those still alive after ``timeout``."""
    handles = []
    for p in procs:
        try:
            handle = psutil.Process(p.pid)
            handle.kill()
            handles.append(handle)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(handles, timeout=timeout)
    return [p for p in procs if p.pid in {a.pid for a in alive}]
