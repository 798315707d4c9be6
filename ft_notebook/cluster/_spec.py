"""What a detached cluster is asked to be, handed from the launcher to its daemon.

The launcher resolves everything (GPUs, worker names, threads, ports, certificates)
in the caller's process, where errors can still be raised to the user, and writes a
:class:`ClusterSpec` as JSON next to the cluster's certificates. The daemon only
carries it out. Nothing in the spec is secret: the key files are referred to by path.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ft_notebook.cluster._certs import CertPaths

if TYPE_CHECKING:
    from distributed.security import Security

#: Worker preload of our clusters: torch imported before the first task.
PRELOAD = "ft_notebook.cluster._preload"


@dataclass(frozen=True)
class WorkerSpec:
    name: str
    #: GPU UUID the worker is pinned to; None for a CPU worker.
    gpu: str | None = None

    def env(self) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": self.gpu or ""}


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    folder: str
    data_dir: str
    host: str
    port: int
    dashboard_port: int | None
    workers: tuple[WorkerSpec, ...]
    torch_threads: int
    memory_limit: int
    idle_timeout_s: float
    hung_after_s: float
    heartbeat_interval_s: float
    start_timeout_s: float
    certs: CertPaths
    preload: tuple[str, ...] = (PRELOAD,)
    #: how nannies start worker processes: "forkserver" (torch imported once) or "spawn"
    worker_start: str = "forkserver"

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(w.gpu for w in self.workers if w.gpu is not None)

    def security(self) -> Security:
        return cluster_security(self.certs)

    def dump(self, path: Path) -> None:
        raw = asdict(self)
        raw["certs"] = self.certs.as_dict()
        path.write_text(json.dumps(raw, indent=2))
        path.chmod(0o600)

    @classmethod
    def load(cls, path: Path) -> ClusterSpec:
        raw: dict[str, Any] = json.loads(path.read_text())
        certs = raw.pop("certs")
        raw["certs"] = CertPaths(Path(certs["ca"]), Path(certs["cert"]), Path(certs["key"]))
        raw["workers"] = tuple(WorkerSpec(**w) for w in raw["workers"])
        raw["preload"] = tuple(raw.get("preload", (PRELOAD,)))
        return cls(**raw)


def cluster_security(certs: CertPaths) -> Security:
    """TLS for every role of a cluster we started: its CA, one shared key pair."""
    from distributed.security import Security

    cert, key = str(certs.cert), str(certs.key)
    return Security(
        require_encryption=True,
        tls_ca_file=str(certs.ca),
        tls_client_cert=cert,
        tls_client_key=key,
        tls_scheduler_cert=cert,
        tls_scheduler_key=key,
        tls_worker_cert=cert,
        tls_worker_key=key,
    )
