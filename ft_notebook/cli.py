"""The ``ft-notebook`` console command: inspect configuration and event journals.

Later subcommands (``cluster up|down|status|list``) hang off the same parser.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict

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
    args = parser.parse_args(argv)
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


_COMMANDS = {"version": _version, "config": _config, "events": _events}

if __name__ == "__main__":
    raise SystemExit(main())
