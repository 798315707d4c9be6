"""The rank actor is made of parts, each passed what it needs (issue 17): no class
of the rank's modules declares another's methods or attributes as ``TYPE_CHECKING``
stubs, as the mixin it replaced did."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import ft_notebook.train as train_package

TRAIN = Path(train_package.__file__).parent
RANK_MODULES = (
    "_rank.py",
    "_rank_report.py",
    "_collectives.py",
    "_rank_generations.py",
    "_held_state.py",
    "_agreement.py",
    "_rank_checkpoints.py",
    "_steps.py",
)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _stubs(source: str) -> list[str]:
    """Names declared under ``if TYPE_CHECKING:`` in a class body, as class.name."""
    found = []
    for cls in ast.walk(ast.parse(source)):
        if not isinstance(cls, ast.ClassDef):
            continue
        for node in ast.walk(cls):
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                for stmt in ast.walk(node):
                    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        found.append(f"{cls.name}.{stmt.name}")
                    elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                        found.append(f"{cls.name}.{stmt.target.id}")
    return found


@pytest.mark.parametrize("module", RANK_MODULES)
def test_no_class_of_the_rank_declares_stubs_under_type_checking(module: str) -> None:
    assert _stubs((TRAIN / module).read_text()) == []


def test_the_check_finds_a_mixin_stub() -> None:
    mixin = (
        "class RankState:\n"
        "    step: int\n"
        "    if TYPE_CHECKING:\n"
        "        def log(self, message: str) -> None: ...\n"
        "        trainer: Any\n"
    )
    assert _stubs(mixin) == ["RankState.log", "RankState.trainer"]


def test_the_rank_modules_stay_small() -> None:
    lines = {m: len((TRAIN / m).read_text().splitlines()) for m in RANK_MODULES}
    assert all(n <= 400 for n in lines.values()), lines


def test_a_rank_describes_its_phase_as_plain_json() -> None:
    from ft_notebook.train._protocol import Phase
    from ft_notebook.train._rank import RankActor

    actor = RankActor(b"", "r", "w1", True, "inc", worker=None)
    actor.reporter.set_phase(Phase.REDUCE)
    described = json.loads(json.dumps(actor.describe()))
    assert described["phase"] == "reduce"
    assert (described["step"], described["gen"], described["alive"]) == (-1, 0, False)
