"""The labextension's TypeScript models are the Python models, generated."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from pathlib import Path

import pytest

from ft_notebook.server import _models
from ft_notebook.server._typescript import MODELS, _ts, typescript

MODELS_TS = Path(__file__).parents[3] / "labextension" / "src" / "models.ts"


def test_models_ts_is_what_the_python_models_generate() -> None:
    assert MODELS_TS.read_text() == typescript(), (
        "labextension/src/models.ts differs from the Python models: run "
        "`.venv/bin/python -m ft_notebook.server._typescript > labextension/src/models.ts`"
    )


def test_every_model_of_the_api_is_generated() -> None:
    defined = {
        cls
        for _name, cls in inspect.getmembers(_models, inspect.isclass)
        if dataclasses.is_dataclass(cls) and cls.__module__ == _models.__name__
    }
    assert defined <= set(MODELS)


def test_a_field_changed_in_python_changes_the_typescript() -> None:
    @dataclasses.dataclass
    class Probe:
        count: int
        names: tuple[str, ...]
        maybe: float | None
        either: tuple[int | str, ...]

    hints = typing.get_type_hints(Probe)
    assert [_ts(hints[f.name]) for f in dataclasses.fields(Probe)] == [
        "number",
        "string[]",
        "number | null",
        "(number | string)[]",
    ]


def test_a_type_without_a_typescript_form_is_refused() -> None:
    with pytest.raises(TypeError, match="No TypeScript type"):
        _ts(complex)
