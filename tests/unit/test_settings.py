"""The settings' classes hold what ``ft_notebook.yaml`` says, and say nothing of their own.

A default written on a field of ``_settings.py`` is a second copy of the YAML's: it
goes on holding the old value when the YAML changes, and it hides a setting that
``load_config`` forgot to read. So no field may have one, and every field of a
section is one key of that section of the YAML.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import yaml

import ft_notebook
from ft_notebook import _settings
from ft_notebook.config import load_config

DEFAULTS = yaml.safe_load((Path(ft_notebook.__file__).parent / "ft_notebook.yaml").read_text())


def _settings_classes() -> list[type]:
    return [
        cls
        for _, cls in inspect.getmembers(_settings, inspect.isclass)
        if dataclasses.is_dataclass(cls) and cls.__module__ == _settings.__name__
    ]


def _defaulted_fields(classes: list[type]) -> list[str]:
    """``Class.field`` for each field of ``classes`` that has a default or a factory."""
    return [
        f"{cls.__name__}.{f.name}"
        for cls in classes
        for f in dataclasses.fields(cls)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    ]


def test_no_settings_field_declares_a_default() -> None:
    classes = _settings_classes()
    assert {c.__name__ for c in classes} >= {"FTConfig", "ClusterConfig", "ServeConfig"}
    assert _defaulted_fields(classes) == [], (
        "fields of ft_notebook/_settings.py with a default: remove it, the value belongs "
        "in ft_notebook.yaml (with its schema entry) and load_config reads it from there"
    )


def test_the_check_finds_a_default_it_is_shown() -> None:
    @dataclasses.dataclass(frozen=True)
    class Sneaky:
        read: float
        hung_after_s: float = 2.0
        gpus: tuple[str, ...] = dataclasses.field(default_factory=tuple)

    assert _defaulted_fields([Sneaky]) == ["Sneaky.hung_after_s", "Sneaky.gpus"]


def test_every_field_of_a_section_is_a_key_of_that_section_of_the_yaml() -> None:
    # hung_after_s <-> hung-after: the key hyphenated, "_s" for a duration in seconds
    cfg = load_config()
    yaml_section = DEFAULTS["ft-notebook"]
    for section in ("events", "cluster", "train", "serve", "server"):
        fields = {
            f.name.removesuffix("_s").replace("_", "-")
            for f in dataclasses.fields(getattr(cfg, section))
        }
        assert fields == set(yaml_section[section]), (
            f"ft-notebook.{section}: only fields {sorted(fields - set(yaml_section[section]))}, "
            f"only in the YAML {sorted(set(yaml_section[section]) - fields)}"
        )
