"""The run coordinator's parts (issue 17): every report kind has a handler, no class
of ft_notebook.train grows past the bound (that none borrows another's methods
through ``TYPE_CHECKING`` stubs is checked package-wide, in
``tests/unit/store/test_no_owner_stubs.py``)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import ft_notebook.train
from ft_notebook.train.coordinator._reports import HANDLERS, check_covers
from ft_notebook.train.protocol import ReportKind

pytestmark = pytest.mark.unit

TRAIN = Path(ft_notebook.train.__file__).parent


def test_every_report_kind_has_a_handler() -> None:
    assert set(HANDLERS) == set(ReportKind)
    assert all(callable(handler) for handler in HANDLERS.values())


def test_a_table_without_a_kind_is_refused() -> None:
    table = dict(HANDLERS)
    del table[ReportKind.EVAL]
    with pytest.raises(TypeError, match=r"no handler for the report kinds \['eval'\]"):
        check_covers(table)


def test_every_input_has_a_rule_and_every_action_is_carried_out() -> None:
    """A new input with no rule, or a new action the plugin cannot carry out, fails
    here rather than at the first run that meets it."""
    import typing

    from ft_notebook.train.coordinator import _carry_out, decide
    from ft_notebook.train.coordinator._actions import Action
    from ft_notebook.train.coordinator._inputs import Input

    assert set(decide._RULES) == set(typing.get_args(Input))
    source = Path(_carry_out.__file__).read_text()
    missing = [
        a.__name__
        for a in typing.get_args(Action)
        if f"isinstance(action, {a.__name__})" not in source
    ]
    assert missing == []


#: Issue 17's bound on a module of the training package (and of the one fold).
_MOST_LINES = 400


@pytest.mark.parametrize(
    "path",
    [*sorted(TRAIN.rglob("*.py")), TRAIN.parent / "runfold.py"],
    ids=lambda p: str(p.relative_to(TRAIN.parent)),
)
def test_no_training_module_outgrows_the_bound(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= _MOST_LINES, (
        f"{path.name} has {lines} lines (at most {_MOST_LINES}): split it by responsibility, "
        f"as kernel/_handle.py was taken out of kernel/_fit.py"
    )


def test_the_coordinator_loads_no_code_of_the_ranks_or_the_kernel() -> None:
    """Issue 33: importing the coordinator loaded 37 of train's 40 modules, torch with
    them, because it pickled the ranks' functions to call them. It calls them by name
    now (train/protocol.py), so a scheduler loads only its own room and what the rooms
    share."""
    code = (
        "import sys\n"
        "import ft_notebook.train.coordinator\n"
        "print(sorted(m for m in sys.modules if m.startswith('ft_notebook.train')))\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    loaded = ast.literal_eval(out[0])
    assert [m for m in loaded if ".rank" in m or ".kernel" in m] == []
    assert "ft_notebook.train.coordinator._plugin" in loaded
    assert out[1] == "False"


#: Issue 33: each field of a run's book and who writes it (the module whose
#: ``dataclasses.replace`` sets it); ``step`` had four writers, each with its own rule.
_WRITERS = {
    "_status": {"view", "step", "last_advance"},
    "_generations": {"plan", "world", "parts", "synced", "verified", "prepared"},
    "_reports": {"highest_step"},
    "_end": {"finished_at", "spec", "errors"},
    "_progress_reports": {"epoch", "loss", "history", "history_every", "steps_per_s"}
    | {"step_times", "suspects", "mean_steps"},
    "_publisher": {"published"},
    "_membership": {"store"},
    "_stall": {"asked"},
    "_members": {"actors", "ready", "seen", "arrivals", "admitting", "target_world"}
    | {"resumed_from", "evicted", "retired", "absent"},
    "_pending": {"cause", "lost", "made"},
    "_recoveries": {"joins", "regrouping", "count", "failures"},
    "_notes": {"notes", "nonfinite", "lagging", "checkpoint_costs", "checkpoint_plan"}
    | {"failing"},
}
#: Parts of the book that several rules put back whole, each made by its one writer.
_PARTS = {"members", "gens", "recovery", "progress", "noted", "pending"}


def test_every_field_of_a_run_s_book_has_one_writer() -> None:
    from ft_notebook.train.coordinator import _book

    fields = set()
    for cls in (_book.RunBook, _book.Members, _book.Generations, _book.Pending):
        fields |= set(cls.__dataclass_fields__)
    for cls in (_book.Regrouping, _book.Recoveries, _book.Progress, _book.Notes):
        fields |= set(cls.__dataclass_fields__)
    writers: dict[str, set[str]] = {}
    for path in sorted((TRAIN / "coordinator").glob("_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "replace":
                for keyword in node.keywords:
                    if keyword.arg is not None:
                        writers.setdefault(keyword.arg, set()).add(path.stem)
    owned = {f: {m} for m, fs in _WRITERS.items() for f in fs}
    assert {f: w for f, w in writers.items() if f not in _PARTS} == {
        f: owned[f] for f in writers if f not in _PARTS
    }
    # the only fields never replaced are set once, when the book is made
    assert fields - set(writers) - _PARTS <= {
        "name",
        "incarnation",
        "options",
        "started_at",
        "detected_at",
        "workers_before",
        "highest_step_at_loss",
        "since",
        "step",
        "highest_step",
    } | {"checkpoint_plan", "nonfinite"} | {"cause", "lost"}
