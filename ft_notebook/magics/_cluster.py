"""``%ft cluster`` and ``%ft chaos``: the private cluster from the notebook.

Thin calls into :mod:`ft_notebook.cluster`; the clients they open are kept per
cluster name, so ``%ft chaos kill random`` reuses the connection of ``%ft cluster up``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ft_notebook.magics._arguments import safe_name


def add_parsers(add: Any) -> None:
    """Register the subcommands through ``add(name, description, handler, cell=False)``."""
    handlers = ClusterCommands()
    p = add("cluster", "Start, stop, attach to or inspect your private cluster.", handlers.cluster)
    p.add_argument("action", choices=["up", "down", "status", "attach"])
    p.add_argument("address", nargs="?", help="for attach: a scheduler address or file")
    p.add_argument(
        "--name",
        default="default",
        type=safe_name("cluster name"),
        help="which of your clusters (default: default)",
    )
    p.add_argument("--workers", type=int, help="for up: CPU workers (default: fits the cores)")
    p.add_argument("--gpus", help="for up: 'auto', 'none', 'all' or indices such as 0,2")
    p = add(
        "chaos",
        "Kill, hang, slow down, isolate or resume a worker or a replica, for a drill.",
        handlers.chaos,
    )
    p.add_argument(
        "action", choices=["kill", "hang", "slow", "byzantine", "nan", "isolate", "resume"]
    )
    p.add_argument(
        "worker",
        metavar="TARGET",
        help="a worker name, 'random', or replica:SERVICE/INDEX (its worker; slow: itself)",
    )
    p.add_argument("--ms", type=float, help="for slow: milliseconds added to a call")
    p.add_argument(
        "--fraction", type=float, default=1.0, help="for slow: the share of calls slowed"
    )
    p.add_argument(
        "--attack",
        default="sign-flip",
        help="for byzantine: sign-flip, scaled, gaussian, bit-flip, alie or ipm "
        "(default: sign-flip); alie and ipm compute the honest gradients",
    )
    p.add_argument(
        "--z",
        type=float,
        help="for --attack alie: standard deviations moved (default: the paper's, "
        "0 on 4 workers; ByzFL uses 1.5)",
    )
    p.add_argument(
        "--name",
        default="default",
        type=safe_name("cluster name"),
        help="which of your clusters (default: default)",
    )


class ClusterCommands:
    def __init__(self) -> None:
        self._clients: dict[str, Any] = {}

    def cluster(self, args: argparse.Namespace, cell: str | None) -> Any:
        from ft_notebook.cluster import attach, down, format_table, status
        from ft_notebook.cluster import cluster as start

        if args.action == "down":
            client = self._clients.pop(args.name, None)
            if client is not None:
                client.close()
            stopped = down(args.name)
            print(f"ft: cluster {args.name!r} {'stopped' if stopped else 'was not running'}")
            return None
        if args.action == "attach":
            _check_attach_target(args.address)
            try:
                client = self._clients[args.name] = attach(args.address)
            except ValueError as e:  # what Dask makes of an address it cannot parse
                raise _usage(f"{e}\n\n{ATTACH_USAGE}") from None
        elif args.action == "up":
            client = self._clients[args.name] = start(
                name=args.name, workers=args.workers, gpus=args.gpus
            )
        else:
            client = self.client(args.name)
        print(f"ft: cluster {args.name!r} at {client.scheduler.address}")
        print(format_table(status(client)))
        return client if args.action in ("up", "attach") else None

    def chaos(self, args: argparse.Namespace, cell: str | None) -> None:
        from ft_notebook.cluster import chaos
        from ft_notebook.serve._chaos import PREFIX, replica_row, slow_replica

        replica = args.worker.startswith(PREFIX)
        if args.action == "slow" and (not replica or args.ms is None):
            raise _usage("%ft chaos slow needs a replica:SERVICE/INDEX and --ms N")
        if args.ms is not None and (args.ms < 0 or not 0 < args.fraction <= 1):
            raise _usage("--ms must be >= 0 and --fraction in (0, 1]")
        if args.action in ("byzantine", "nan"):
            return self._byzantine(args)
        if args.action == "isolate":
            return self._isolate(args)
        client = self.client(args.name)
        if args.action == "slow":
            row = slow_replica(client, args.worker, args.ms, args.fraction)
            print(
                f"ft: replica {row['replica']} (worker {row['worker']!r}) now takes "
                f"{args.ms:g} ms longer on {args.fraction:.0%} of its calls; "
                f"%ft chaos resume {args.worker} undoes it"
            )
            return
        worker = replica_row(client, args.worker)["worker"] if replica else args.worker
        act = {"kill": chaos.kill_worker, "hang": chaos.hang_worker, "resume": chaos.resume_worker}
        done = act[args.action](client, worker)
        print(f"ft: sent {done.signal} to worker {done.worker!r} (pid {done.pid}, {done.address})")
        if replica and args.action == "resume":  # after SIGCONT: a stopped worker answers nothing
            slow_replica(client, args.worker, 0)
            print(f"ft: replica {args.worker[len(PREFIX) :]} no longer slowed")
        if not replica and args.action == "resume":
            from ft_notebook.train._robust import good_again

            if good_again(client, done.worker):
                print(f"ft: worker {done.worker!r} sends its own gradients again")
            from ft_notebook.train.rank._partition import reconnect_worker

            if reconnect_worker(client, done.worker):
                print(f"ft: worker {done.worker!r} meets its peers in new groups again")

    def _isolate(self, args: argparse.Namespace) -> None:
        from ft_notebook.serve._chaos import PREFIX
        from ft_notebook.train.rank._partition import isolate_worker

        if args.worker.startswith(PREFIX):
            raise _usage("%ft chaos isolate cuts a training worker off its peers, not a replica")
        name = isolate_worker(self.client(args.name), args.worker)
        print(
            f"ft: worker {name!r} can no longer meet its peers in a new group (a run "
            f"evicts it after a few failed forms); %ft chaos resume {name} undoes it"
        )

    def _byzantine(self, args: argparse.Namespace) -> None:
        from ft_notebook.exceptions import AggregationError
        from ft_notebook.serve._chaos import PREFIX
        from ft_notebook.train._robust import CHAOS_ATTACKS, byzantine_worker

        if args.worker.startswith(PREFIX):
            raise _usage(f"%ft chaos {args.action} turns a training worker bad, not a replica")
        attack = "nan" if args.action == "nan" else args.attack
        if attack not in CHAOS_ATTACKS:
            raise _usage(f"--attack must be one of {', '.join(CHAOS_ATTACKS[:-1])}")
        if args.z is not None and attack != "alie":
            raise _usage("--z is for --attack alie")
        params = {} if args.z is None else {"z": args.z}
        try:
            name = byzantine_worker(self.client(args.name), args.worker, attack, **params)
        except AggregationError as e:
            raise _usage(str(e)) from None
        print(
            f"ft: worker {name!r} now sends {attack} instead of its gradients "
            f"(a robust aggregator= bounds it; the mean does not); "
            f"%ft chaos resume {name} makes it honest again"
        )

    def client(self, name: str) -> Any:
        client = self._clients.get(name)
        if client is None or client.status != "running":
            from ft_notebook.cluster import cluster as start

            client = self._clients[name] = start(name=name, start=False)
        return client


ATTACH_USAGE = """%ft cluster attach TARGET [--name NAME]
  TARGET: a scheduler address (tls://HOST:PORT, tcp://HOST:PORT), a scheduler file
  (JSON with an "address", as dask's --scheduler-file writes), or one of your
  clusters' names (%ft cluster status --name NAME)"""


def _check_attach_target(target: str | None) -> None:
    """Refuse, before connecting, a target that cannot name a scheduler: an unknown
    protocol, or a file that is not there."""
    if not target:
        raise _usage(f"%ft cluster attach needs a TARGET\n\n{ATTACH_USAGE}")
    if "://" in target:
        from distributed.comm.registry import backends, get_backend

        scheme = target.split("://", 1)[0]
        try:
            get_backend(scheme)  # also those a package registers (entry points)
        except ValueError:
            raise _usage(
                f"{target!r} is not a scheduler address: Dask knows no protocol "
                f"{scheme!r} (it knows {', '.join(sorted(backends))})\n\n{ATTACH_USAGE}"
            ) from None
    elif ("/" in target or target.endswith(".json")) and not Path(target).is_file():
        path = Path(target).expanduser().absolute()
        what = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise _usage(f"the scheduler file {path} {what}\n\n{ATTACH_USAGE}")


def _usage(message: str) -> Exception:
    from IPython.core.error import UsageError

    return UsageError(message)
