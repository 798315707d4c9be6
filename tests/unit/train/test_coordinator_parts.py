"""The run coordinator's parts (issue 17): every report kind has a handler, no class
of ft_notebook.train borrows another's methods through ``TYPE_CHECKING`` stubs, and
no module of it grows past the bound."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ft_notebook.train
from ft_notebook.train._coordinator import RunCoordinator
from ft_notebook.train._protocol import ReportKind
from ft_notebook.train._reports import check_covers

pytestmark = pytest.mark.unit

TRAIN = Path(ft_notebook.train.__file__).parent


def test_every_report_kind_has_a_handler() -> None:
    table = RunCoordinator().reports.table
    assert set(table) == set(ReportKind)
    assert all(callable(handler) for handler in table.values())


def test_a_table_without_a_kind_is_refused() -> None:
    table = dict(RunCoordinator().reports.table)
    del table[ReportKind.EVAL]
    with pytest.raises(TypeError, match=r"no handler for the report kinds \['eval'\]"):
        check_covers(table)


def _stubbed_methods(path: Path) -> list[str]:
    """``Class.method`` for each function defined under ``if TYPE_CHECKING:`` in a
    class body of the module at ``path``."""
    found = []
    for cls in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(cls, ast.ClassDef):
            continue
        for stmt in cls.body:
            test = stmt.test if isinstance(stmt, ast.If) else None
            named = isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
            attr = isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
            if isinstance(stmt, ast.If) and (named or attr):
                found += [
                    f"{cls.name}.{f.name}"
                    for f in ast.walk(stmt)
                    if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                ]
    return found


@pytest.mark.parametrize(
    "module",
    [p.name for p in sorted(TRAIN.glob("*.py"))],
)
def test_no_class_declares_methods_of_another_under_type_checking(module: str) -> None:
    assert _stubbed_methods(TRAIN / module) == [], (
        f"{module} declares methods under `if TYPE_CHECKING:` in a class body: give the "
        f"class the object that has them (in its constructor) instead"
    )


#: Issue 17's bound on a module of the training package (and of the one fold).
_MOST_LINES = 400


@pytest.mark.parametrize(
    "path",
    [*sorted(TRAIN.glob("*.py")), TRAIN.parent / "runfold.py"],
    ids=lambda p: p.name,
)
def test_no_training_module_outgrows_the_bound(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= _MOST_LINES, (
        f"{path.name} has {lines} lines (at most {_MOST_LINES}): split it by responsibility, "
        f"as _handle.py was taken out of _run.py"
    )
