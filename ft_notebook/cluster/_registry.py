"""The registry of a user's clusters: one JSON file per cluster in the private folder.

``<data-dir>/clusters/<name>.json`` says where a cluster we started listens, which
process hosts it, when it started, its GPUs, its owner and its certificates;
``<data-dir>/clusters/<name>/`` holds those certificates, its log and its workers'
scratch space. This is how a new kernel, the console command or the JupyterLab panel
finds a cluster that outlived the process that started it.

Guarantees:
- an entry is written whole or not at all (a temporary file renamed over it), under
  an exclusive ``flock`` shared by every writer of the folder;
- reading never returns an entry whose process is gone: such an entry (or one whose
  pid now names another process, or that does not parse) is pruned on read;
- the registry lives in the user's 0700 data folder, so two users (two data
  folders) never see each other's clusters.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ft_notebook._paths import checked_name, private_dir
from ft_notebook.cluster._certs import CertPaths
from ft_notebook.exceptions import ClusterError, FTError

logger = logging.getLogger(__name__)

#: How far a process's start time may differ from the recorded one (clock rounding).
_START_SLACK_S = 1.0


@dataclass(frozen=True)
class ClusterInfo:
    """One registry entry: a cluster ft_notebook started and still runs."""

    name: str
    address: str
    #: The detached process that hosts the scheduler and the workers' nannies.
    pid: int
    #: That process's start time (``psutil.Process.create_time``), to tell pid reuse.
    pid_started: float
    #: Wall-clock time the cluster became ready.
    started: float
    owner_uid: int
    certs: CertPaths
    log: str
    dashboard: str | None = None
    scheduler_file: str | None = None
    #: Stable worker name -> pid of its worker process (refreshed as workers restart).
    workers: Mapping[str, int] = field(default_factory=dict)
    #: GPU UUIDs (or indices) the workers use, one worker each; empty on CPU.
    gpus: tuple[str, ...] = ()
    version: str = ""

    def __hash__(self) -> int:  # the mapping field would make the generated one fail
        return hash((self.name, self.address, self.pid, self.pid_started))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["certs"] = self.certs.as_dict()
        out["workers"] = dict(self.workers)
        out["gpus"] = list(self.gpus)
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ClusterInfo:
        certs = raw["certs"]
        return cls(
            name=str(raw["name"]),
            address=str(raw["address"]),
            pid=int(raw["pid"]),
            pid_started=float(raw["pid_started"]),
            started=float(raw["started"]),
            owner_uid=int(raw["owner_uid"]),
            certs=CertPaths(ca=Path(certs["ca"]), cert=Path(certs["cert"]), key=Path(certs["key"])),
            log=str(raw["log"]),
            dashboard=raw.get("dashboard"),
            scheduler_file=raw.get("scheduler_file"),
            workers={str(k): int(v) for k, v in (raw.get("workers") or {}).items()},
            gpus=tuple(str(g) for g in raw.get("gpus") or ()),
            version=str(raw.get("version", "")),
        )

    def alive(self) -> bool:
        """Whether the recorded process still runs, is ours and is the same process."""
        return process_matches(self.pid, self.pid_started)


def process_matches(pid: int, started: float) -> bool:
    import psutil

    try:
        proc = psutil.Process(pid)
        return (
            abs(proc.create_time() - started) < _START_SLACK_S
            and proc.uids().real == os.getuid()
            and proc.status() != psutil.STATUS_ZOMBIE
        )
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


class Registry:
    """The clusters of one data folder."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def default(cls) -> Registry:
        """The registry in the configured data folder, created 0700 if need be."""
        from ft_notebook.config import get_config

        return cls.at(get_config().data_dir)

    @classmethod
    def at(cls, data_dir: Path) -> Registry:
        folder = data_dir / "clusters"
        try:
            private_dir(data_dir)
            private_dir(folder)
        except FTError as e:  # its message names the owner or mode, and the fix
            raise ClusterError(
                f"The cluster registry folder {folder} cannot be used: {e} Clusters "
                f"keep their certificates there, so it must be yours and no one "
                f"else's (mode 0700); or point ft-notebook.data-dir at another folder."
            ) from e
        try:
            # A probe of its own per call: the Jupyter server opens the registry
            # from many threads at once, and a name shared by the process (its pid)
            # let one thread delete another's probe (issue 38).
            fd, probe = tempfile.mkstemp(prefix=".probe-", dir=folder)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise ClusterError(
                f"The cluster registry folder {folder} cannot be used: it is yours and "
                f"private, but a file cannot be created in it ({e}). Free space on its "
                f"file system, give yourself write permission (`chmod u+w {folder}`; "
                f"a read-only mount?), or point ft-notebook.data-dir at another folder."
            ) from e
        return cls(folder)

    def entry_path(self, name: str) -> Path:
        return self.root / f"{checked_name(name, 'cluster name')}.json"

    def cluster_dir(self, name: str) -> Path:
        return private_dir(self.root / checked_name(name, "cluster name"))

    # ---- locks

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.root / ".registry.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    @contextlib.contextmanager
    def starting(self, name: str, timeout: float) -> Iterator[None]:
        """Hold the start lock of ``name``: one process at a time finds or starts it."""
        path = self.root / f"{checked_name(name, 'cluster name')}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + timeout
            delay = 0.01
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise ClusterError(
                            f"Another process has been starting or stopping cluster "
                            f"{name!r} for over {timeout:.0f} s (lock {path}). Wait for "
                            f"it, or check `ft-notebook cluster list`."
                        ) from None
                    time.sleep(delay)  # another process holds it; back off to 0.2 s
                    delay = min(delay * 2, 0.2)
            yield
        finally:
            os.close(fd)

    # ---- entries

    def write(self, info: ClusterInfo) -> None:
        """Write ``info`` atomically: readers see the old entry or the new, never half."""
        path = self.entry_path(info.name)
        data = json.dumps(info.to_dict(), indent=2, sort_keys=True).encode()
        with self._locked():
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)

    def remove(self, name: str, *, pid: int | None = None) -> bool:
        """Remove the entry of ``name`` (only if it names ``pid``, when given)."""
        path = self.entry_path(name)
        with self._locked():
            if pid is not None:
                raw = _load(path)
                if raw is None or raw.get("pid") != pid:
                    return False
            try:
                path.unlink()
            except FileNotFoundError:
                return False
            return True

    def get(self, name: str) -> ClusterInfo | None:
        """The live entry of ``name``, or None; a dead one is pruned on the way."""
        return self._read(self.entry_path(name))

    def list(self) -> list[ClusterInfo]:
        """Every live cluster of this folder, by name; dead entries are pruned."""
        found = []
        for path in sorted(self.root.glob("*.json")):
            info = self._read(path)
            if info is not None:
                found.append(info)
        return found

    def _read(self, path: Path) -> ClusterInfo | None:
        raw = _load(path)
        if raw is None:
            return None
        try:
            info = ClusterInfo.from_dict(raw)
        except (KeyError, TypeError, ValueError) as e:
            self._prune(path, f"it does not parse ({e!r})")
            return None
        if path.stat().st_uid != os.getuid() or info.owner_uid != os.getuid():
            self._prune(path, f"it belongs to uid {info.owner_uid}, not {os.getuid()}")
            return None
        if not info.alive():
            self._prune(path, f"its process {info.pid} is gone", pid=info.pid)
            return None
        return info

    def _prune(self, path: Path, why: str, pid: int | None = None) -> None:
        with self._locked():
            raw = _load(path)
            if raw is None or (pid is not None and raw.get("pid") != pid):
                return  # rewritten meanwhile by a cluster that is starting
            logger.info("removing the stale cluster registry entry %s: %s", path, why)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _load(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None if missing; ``{}`` if damaged (so it is pruned)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        raw = json.loads(text)
    except ValueError:
        return {}
    return raw if isinstance(raw, dict) else {}
