"""No class of the package declares another's methods under ``if TYPE_CHECKING:``.

Such stubs are how a mixin says "my owner has these": the store's ``Saving`` mixin
declared the store's ``url`` and ``_publish`` that way until the store held a
``Saver`` built with what it needs. A stub is checked by nothing at run time and
hides which object a method belongs to, so the whole package is held to this, not
only the store (``tests/unit/train/test_coordinator_parts.py`` checked ``train/``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import ft_notebook

PACKAGE = Path(ft_notebook.__file__).parent


def _is_type_checking(test: ast.expr) -> bool:
    # `if TYPE_CHECKING:` and `if typing.TYPE_CHECKING:`
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def stubbed_methods(source: str, filename: str = "<source>") -> list[str]:
    """``Class.method`` for each function defined under ``if TYPE_CHECKING:`` in a
    class body (nested classes too) of the module ``source``."""
    found = []
    for cls in ast.walk(ast.parse(source, filename)):
        if not isinstance(cls, ast.ClassDef):
            continue
        for stmt in cls.body:
            if isinstance(stmt, ast.If) and _is_type_checking(stmt.test):
                found += [
                    f"{cls.name}.{f.name}"
                    for f in ast.walk(stmt)
                    if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                ]
    return found


def test_no_class_in_the_package_declares_methods_under_type_checking() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    names = {p.relative_to(PACKAGE).as_posix() for p in modules}
    # the walk reaches every subpackage, the store's writer among them
    assert {"store/__init__.py", "store/_saving.py", "cluster/_control.py"} <= names
    stubbed = {
        p.relative_to(PACKAGE).as_posix(): found
        for p in modules
        if (found := stubbed_methods(p.read_text(), str(p)))
    }
    assert stubbed == {}, (
        f"methods declared under `if TYPE_CHECKING:` in a class body: {stubbed}. Give the "
        f"class the object that has them (in its constructor) instead, as CheckpointStore "
        f"gives its Saver the locations, the retention and its publish"
    )


def test_the_check_finds_a_stub_however_type_checking_is_spelt() -> None:
    source = """
import typing
from typing import TYPE_CHECKING

class Mixin:
    if TYPE_CHECKING:
        @property
        def url(self) -> str: ...

        async def _publish(self) -> None: ...

    def save(self) -> None:
        if TYPE_CHECKING:  # in a method, not the class body: an ordinary guard
            def helper() -> None: ...

class Outer:
    class Inner:
        if typing.TYPE_CHECKING:
            def owner_method(self) -> None: ...

if TYPE_CHECKING:  # at module level: imports and aliases belong here
    def module_function() -> None: ...
"""
    assert stubbed_methods(source) == ["Mixin.url", "Mixin._publish", "Inner.owner_method"]
