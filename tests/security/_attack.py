"""Another Unix user's process, and the ports of a cluster it may try.

The attacker is forked from the test and drops to the other user's uid before it
touches the network. (It is forked, not started: the interpreter lives under /root,
which another user cannot enter.)
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int


class Attacker:
    """``attack(report, released, *args)`` run by ``user`` in a forked process.

    ``report(value)`` sends a JSON value back (read with :meth:`next_report`);
    ``released()`` blocks until the test calls :meth:`release` (or exits).
    """

    def __init__(self, user: User, attack: Callable[..., Any], *args: Any) -> None:
        self.user, self.attack, self.args = user, attack, args
        self.pid = 0
        self._buffer = b""

    def __enter__(self) -> Attacker:
        reports_r, reports_w = os.pipe()
        release_r, release_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the attacker: never returns into pytest
            os.close(reports_r)
            os.close(release_w)
            self._run_as_user(reports_w, release_r)
        os.close(reports_w)
        os.close(release_r)
        self.pid, self._reports, self._release = pid, reports_r, release_w
        return self

    def _run_as_user(self, reports_w: int, release_r: int) -> None:
        code = 1
        try:
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # a flood needs fds
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            os.setgroups([])
            os.setgid(self.user.gid)
            os.setuid(self.user.uid)
            assert os.geteuid() == self.user.uid

            def report(value: Any) -> None:
                os.write(reports_w, json.dumps(value).encode() + b"\n")

            def released() -> None:
                os.read(release_r, 1)

            report(self.attack(report, released, *self.args))
            code = 0
        except BaseException:
            with contextlib.suppress(Exception):
                os.write(reports_w, json.dumps({"error": traceback.format_exc()}).encode() + b"\n")
        finally:
            os._exit(code)

    def next_report(self, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._reports], [], [], left)[0]:
                raise TimeoutError(f"the attacker said nothing within {timeout} s")
            chunk = os.read(self._reports, 65536)
            if not chunk:
                raise RuntimeError("the attacker exited without a report")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        value = json.loads(line)
        if isinstance(value, dict) and "error" in value:
            raise RuntimeError(f"the attacker failed:\n{value['error']}")
        return value

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._release, b"x")

    def __exit__(self, *exc: object) -> None:
        self.release()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if os.waitpid(self.pid, os.WNOHANG)[0]:
                break
            select.select([], [], [], 0.05)
        else:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self._reports)
        os.close(self._release)


def listening(pids: dict[int, str]) -> dict[tuple[str, int], str]:
    """Every TCP port the processes ``pids`` (pid -> role) listen on: (ip, port) -> role."""
    ports = {}
    for pid, role in pids.items():
        with contextlib.suppress(psutil.NoSuchProcess):
            for c in psutil.Process(pid).net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    ports[(c.laddr.ip, c.laddr.port)] = role
    return ports


def reachable(ip: str) -> str:
    """Where a local client reaches a socket listening on ``ip``."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(ip, ip)
