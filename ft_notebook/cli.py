"""The ``ft-notebook`` console command: configuration, event journals, clusters.

``ft-notebook cluster up|down|status|list`` manages the user's private clusters
(see :mod:`ft_notebook.cluster`); later subcommands hang off the same parser.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from ft_notebook import __version__
from ft_notebook.exceptions import FTError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ft-notebook", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("version", help="print the installed version")
    sub.add_parser("config", help="print the effective configuration as JSON")
    events = sub.add_parser("events", help="print the journal of an event topic")
    events.add_argument("topic", help="e.g. ft-notebook.cluster or ft-notebook.run.NAME")
    events.add_argument("--since", type=int, default=0, help="only events after this seq")
    _add_cluster_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "cluster" and args.action != "list":
        args.name = _cluster_name(parser, args)
    try:
        return _COMMANDS[args.command](args)
    except FTError as e:
        print(f"ft-notebook: {e}", file=sys.stderr)
        return 2


def _version(args: argparse.Namespace) -> int:
    print(__version__)
    return 0


def _config(args: argparse.Namespace) -> int:
    from ft_notebook.config import load_config

    print(json.dumps(asdict(load_config()), indent=2, default=str))
    return 0


def _events(args: argparse.Namespace) -> int:
    from ft_notebook.events import history

    for event in history(args.topic, since=args.since):
        print(json.dumps(event.to_dict()))
    return 0


def _add_cluster_parser(sub: Any) -> None:
    cluster = sub.add_parser("cluster", help="start, stop and inspect your private clusters")
    actions = cluster.add_subparsers(dest="action", required=True)
    up = actions.add_parser("up", help="start your cluster (or find it running)")
    down = actions.add_parser("down", help="stop your cluster")
    status = actions.add_parser("status", help="its workers and their health")
    actions.add_parser("list", help="your running clusters")
    for p in (up, down, status):
        # `ft-notebook cluster down demo-training` is what people type; --name stays
        p.add_argument("name", nargs="?", help="cluster name (default: default)")
        p.add_argument("--name", dest="name_option", metavar="NAME", help="the same")
    up.add_argument("--workers", type=int, help="CPU workers (default: fits the cores)")
    up.add_argument("--gpus", help="'auto', 'none', 'all' or GPU indices/UUIDs, e.g. 0,2")
    up.add_argument("--idle-timeout", help="shut down after this long unused, e.g. 30m")


def _cluster_name(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    if args.name and args.name_option and args.name != args.name_option:
        parser.error(
            f"cluster {args.action}: two names, {args.name!r} and --name "
            f"{args.name_option!r}; give one (`ft-notebook cluster {args.action} NAME`)"
        )
    return str(args.name or args.name_option or "default")


def _cluster(args: argparse.Namespace) -> int:
    from ft_notebook.cluster import cluster, clusters, down, format_table, status

    if args.action == "list":
        rows = clusters()
        if not rows:
            print("no clusters running")
        for info in rows:
            gpus = ",".join(info.gpus) or "-"
            print(
                f"{info.name}  {info.address}  pid {info.pid}  {len(info.workers)} workers  "
                f"gpus {gpus}  up {_age(info.started)}  dashboard {info.dashboard or '-'}"
            )
        return 0
    if args.action == "down":
        stopped = down(args.name)
        print(f"cluster {args.name!r} {'stopped' if stopped else 'was not running'}")
        return 0
    if args.action == "up":
        client = cluster(
            name=args.name,
            workers=args.workers,
            gpus=args.gpus,
            idle_timeout=args.idle_timeout,
            set_as_default=False,
        )
    else:
        client = cluster(name=args.name, start=False, set_as_default=False)
    with client:
        info = next(c for c in clusters() if c.name == args.name)
        print(f"cluster {info.name!r} at {info.address} (pid {info.pid}), log {info.log}")
        if info.dashboard:
            print(f"dashboard {info.dashboard}")
        print(format_table(status(client)))
    return 0


def _age(started: float) -> str:
    import time

    seconds = max(0, int(time.time() - started))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


_COMMANDS = {"version": _version, "config": _config, "events": _events, "cluster": _cluster}

if __name__ == "__main__":
    raise SystemExit(main())
