"""The ``%ft`` / ``%%ft`` front door: parse, call the API, render; no logic here.

Every subcommand has its own argument parser, so ``%ft save --help`` shows its usage,
and a wrong argument raises a UsageError that shows it too, never a traceback. Names
are checked as arguments, so ``%%ft checkpoint --name ../x`` is refused before its
cell runs. Any other :class:`FTError` keeps its type and message (a corrupt snapshot
is not a typing mistake), shown without the library's traceback; a ``#`` outside
quotes starts a comment, as in Python.
"""

from __future__ import annotations

import argparse
import shlex
import types
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from ft_notebook.exceptions import FTError, PlanError
from ft_notebook.magics import _render
from ft_notebook.magics._arguments import safe_name, snapshot_name
from ft_notebook.magics._cluster import add_parsers as add_cluster_parsers

if TYPE_CHECKING:
    from IPython.core.magic_arguments import MagicArgumentParser

    from ft_notebook.session import ShellSnapshots

Handler = Callable[[argparse.Namespace, "str | None"], Any]

_USAGE = """%ft SUBCOMMAND [options]      (%ft SUBCOMMAND --help for its options)

  %ft auto on|off             snapshot the namespace after every successful cell
  %%ft checkpoint             run the cell as a transaction: roll back if it raises
  %ft save [NAME]             snapshot now (a NAME keeps it beside the latest)
  %ft restore [NAME|latest]   bring a snapshot's variables back (--from NOTEBOOK)
  %ft list                    the snapshots of this notebook
  %ft status                  what ft_notebook is doing in this kernel
  %ft cluster up|down|status|attach   your private Dask cluster
  %ft chaos kill|hang|resume WORKER|random|replica:SVC/I   a failure drill
  %ft chaos slow replica:SVC/I --ms N [--fraction F]     a slow replica
  %ft chaos byzantine|nan WORKER [--attack A]             a worker sending bad gradients
  %ft dashboard [RUN]         live health of a training run, or of the cluster
  %ft plan --mtbf 6h --cost 2s [--restart 30s] [--rpo 10m] [--rto 30s]
                              how often to checkpoint (Young, Daly) and the targets
  %ft plan --run RUN [--rpo 10m] [--rto 30s]   ... from a run's measured costs, with
                              each of its recoveries' RTO and work lost beside it
"""


class _Parser:
    """A subcommand's arguments, made into its MagicArgumentParser on first use:
    making all of them took 4 ms of every ``%load_ext ft_notebook``."""

    def __init__(self, prog: str, description: str) -> None:
        self._prog, self._description = f"ft {prog}", description
        self._arguments: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self._built: MagicArgumentParser | None = None

    def add_argument(self, *args: Any, **kwargs: Any) -> None:
        assert self._built is None, "arguments are added before the parser is used"
        self._arguments.append((args, kwargs))

    def get(self) -> MagicArgumentParser:
        if self._built is None:
            from IPython.core.magic_arguments import MagicArgumentParser

            parser = MagicArgumentParser(
                prog=self._prog, description=self._description, add_help=False
            )
            for args, kwargs in self._arguments:
                parser.add_argument(*args, **kwargs)
            self._built = parser
        return self._built


def duration(text: str) -> float:
    """Seconds in "6h", "2s", "10m" (argparse shows "invalid duration value" on a
    ValueError)."""
    from ft_notebook.plan import parse_duration

    return parse_duration(text)


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if not n.isidentifier()]
    if bad:
        raise argparse.ArgumentTypeError(f"not variable names: {', '.join(bad)}")
    return names


@magics_class
class FTMagics(Magics):
    """``%ft``: checkpoints of the notebook's state, and the rest of ft_notebook."""

    def __init__(self, shell: Any, snapshots: ShellSnapshots) -> None:
        super().__init__(shell)
        self.snapshots = snapshots
        self._parsers: dict[str, tuple[_Parser, Handler, bool]] = {}
        p = self._add("auto", "Snapshot after every successful cell.", self._auto, cell=False)
        p.add_argument("state", choices=["on", "off"])
        p = self._add("checkpoint", "Run the cell as a transaction.", self._checkpoint, cell=True)
        p.add_argument("--name", type=snapshot_name, help="also keep the snapshot under this name")
        p.add_argument("--retries", type=int, default=0, help="run the cell again this often")
        p = self._add("save", "Snapshot the namespace now.", self._save, cell=False)
        p.add_argument(
            "name", nargs="?", type=snapshot_name, help="keep it under this name besides 'latest'"
        )
        p.add_argument("--vars", type=_names, help="comma-separated names (default: all)")
        p = self._add("restore", "Bring a snapshot's variables back.", self._restore, cell=False)
        p.add_argument("name", nargs="?", default="latest", type=safe_name("snapshot name"))
        p.add_argument("--vars", type=_names, help="comma-separated names (default: all)")
        p.add_argument(
            "--from",
            dest="source",
            metavar="NOTEBOOK",
            type=safe_name("notebook key"),
            help="another notebook's snapshots, e.g. this one's before a rename",
        )
        p.add_argument(
            "--no-global-state",
            dest="global_state",
            action="store_false",
            help="leave random generators and matplotlib settings as this kernel has them",
        )
        self._add("list", "The snapshots of this notebook.", self._list, cell=False)
        self._add("status", "What ft_notebook does in this kernel.", self._status, cell=False)
        add_cluster_parsers(lambda *a: self._add(*a, cell=False))
        p = self._add(
            "dashboard", "Live health of a run, or of the cluster.", self._dashboard, cell=False
        )
        p.add_argument(
            "run", nargs="?", type=safe_name("run name"), help="a run's name (default: the cluster)"
        )
        p = self._add(
            "plan", "How often to checkpoint, from failures and save cost.", self._plan, cell=False
        )
        p.add_argument("--mtbf", type=duration, help="mean time between failures")
        p.add_argument("--cost", type=duration, help="what one checkpoint costs")
        p.add_argument("--restart", type=duration, help="what a restart costs (default 0)")
        p.add_argument(
            "--run",
            type=safe_name("run name"),
            help="a training run: its measured save cost, MTBF and median recovery time "
            "where the options above are left out, and its recoveries beside the plan",
        )
        p.add_argument("--rpo", type=duration, help="the most work a failure may lose")
        p.add_argument("--rto", type=duration, help="the longest a recovery may take")

    def _add(self, name: str, description: str, handler: Handler, *, cell: bool) -> _Parser:
        parser = _Parser(name, description)
        self._parsers[name] = (parser, handler, cell)
        return parser

    @line_cell_magic
    def ft(self, line: str, cell: str | None = None) -> Any:
        __tracebackhide__ = True  # the user's cell and the error, not this dispatch
        try:
            words = shlex.split(line, comments=True)
        except ValueError as e:
            raise UsageError(f"{e}\n\n{_USAGE}") from None
        if not words or words[0] in ("-h", "--help", "help"):
            print(_USAGE)
            return None
        command, args = words[0], words[1:]
        entry = self._parsers.get(command)
        if entry is None:
            raise UsageError(f"unknown subcommand {command!r}\n\n{_USAGE}")
        lazy_parser, handler, wants_cell = entry
        parser = lazy_parser.get()
        if "-h" in args or "--help" in args:
            print(parser.format_help())
            return None
        if wants_cell and cell is None:
            raise UsageError(f"%%ft {command} is a cell magic: put it on the first line of a cell.")
        if not wants_cell and cell is not None:
            raise UsageError(f"%ft {command} is a line magic, not %%ft.\n\n{parser.format_usage()}")
        try:
            parsed = parser.parse_args(args)
        except UsageError as e:
            raise UsageError(f"{e}\n{parser.format_usage()}") from None
        try:
            return handler(parsed, cell)
        except FTError as e:  # says what happened and what to do: no traceback needed
            shown = [f"{type(e).__name__}: {e}"]
            e._render_traceback_ = lambda: shown  # type: ignore[attr-defined]
            raise

    def _auto(self, args: argparse.Namespace, cell: str | None) -> None:
        self.snapshots.auto = args.state == "on"
        print(f"ft: snapshot after every cell is {args.state}")

    def _checkpoint(self, args: argparse.Namespace, cell: str | None) -> None:
        __tracebackhide__ = True
        assert cell is not None
        if args.retries < 0:
            raise UsageError("--retries must be 0 or more")
        outcome = self.snapshots.transaction(cell, name=args.name, retries=args.retries)
        _render.transaction(outcome)
        if outcome.error is not None:
            # the cell fails as it would have, its effects undone, its traceback
            # starting at the cell's own line rather than in the transaction
            error = outcome.error
            raise error.with_traceback(_from_user_code(error.__traceback__))

    def _save(self, args: argparse.Namespace, cell: str | None) -> None:
        _render.saved(self.snapshots.save(args.name, args.vars))

    def _restore(self, args: argparse.Namespace, cell: str | None) -> None:
        report = self.snapshots.restore(
            args.name, args.vars, source=args.source, process_state=args.global_state
        )
        _render.restored(report)
        for name, how in sorted(report.changed_by_pickling.items()):
            print(f"    {name}: restored, but not as it was: {how}; run its cell again")
        if report.process:
            print(f"    put back as the snapshot had them: {', '.join(report.process)}")
        if report.auto_resumed:
            print("ft: snapshot after every cell is on again, as it was in the kernel that died")

    def _list(self, args: argparse.Namespace, cell: str | None) -> None:
        _render.listing(*self.snapshots.listing())

    def _status(self, args: argparse.Namespace, cell: str | None) -> None:
        _render.status(self.snapshots.status())

    def _plan(self, args: argparse.Namespace, cell: str | None) -> None:
        from ft_notebook.plan import plan

        if args.run is None:
            missing = [f"--{k}" for k in ("mtbf", "cost") if getattr(args, k) is None]
            if missing:
                usage = self._parsers["plan"][0].get().format_usage()
                raise UsageError(
                    f"%ft plan needs --mtbf and --cost (or --run RUN); missing: "
                    f"{', '.join(missing)}\n{usage}"
                )
            try:
                made = plan(args.mtbf, args.cost, args.restart or 0.0, rpo=args.rpo, rto=args.rto)
            except PlanError as e:  # the numbers typed on the line
                usage = self._parsers["plan"][0].get().format_usage()
                raise UsageError(f"{e}\n{usage}") from None
            print("ft: " + "\n    ".join(made.explain()))
            return
        _render_run_plan(args)

    def _dashboard(self, args: argparse.Namespace, cell: str | None) -> Any:
        from ft_notebook.widgets import dashboard

        if args.run is None:
            return dashboard()
        from ft_notebook.train import attach

        return attach(args.run).dashboard()


_PACKAGE = str(Path(__file__).resolve().parents[1])


def _from_user_code(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` without its leading frames in ft_notebook (the transaction that ran the
    cell): it starts at the cell."""
    first = tb
    while first is not None and first.tb_frame.f_code.co_filename.startswith(_PACKAGE):
        first = first.tb_next
    return first or tb


def _render_run_plan(args: argparse.Namespace, cluster: Any = None) -> None:
    """``%ft plan --run RUN``: the plan from what the run measured, and its recoveries
    (the run on ``cluster``, by default your own)."""
    import statistics

    from ft_notebook.plan import measured_beside, plan
    from ft_notebook.train import attach

    try:
        info = attach(args.run, cluster).info()
    except FTError as e:
        raise UsageError(f"%ft plan --run {args.run}: {e}") from None
    made_in_run = info.get("checkpoint_plan") or {}
    cost = args.cost if args.cost is not None else info.get("checkpoint_cost_s")
    mtbf = args.mtbf if args.mtbf is not None else made_in_run.get("mtbf_s")
    recoveries = list(info.get("recoveries") or ())
    restart = args.restart
    if restart is None:
        restart = statistics.median(float(r["rto_s"]) for r in recoveries) if recoveries else 0.0
    if not cost or not mtbf:
        raise UsageError(
            f"run {args.run!r} measured no save cost or MTBF (it was not "
            f"checkpoint_every='auto', or has not saved yet): give --cost and --mtbf"
        )
    made = plan(float(mtbf), float(cost), float(restart), rpo=args.rpo, rto=args.rto)
    rates = [float(p["steps_per_s"]) for p in info.get("history") or () if p.get("steps_per_s")]
    step_time = 1 / statistics.median(rates) if rates else None
    source = made_in_run.get("mtbf_source", "--mtbf") if args.mtbf is None else "--mtbf"
    print(f"ft: run {args.run!r}: MTBF from {source}; save cost measured by the run")
    print("    " + "\n    ".join(made.explain() + measured_beside(made, recoveries, step_time)))
