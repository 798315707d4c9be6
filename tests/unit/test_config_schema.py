"""``ft_notebook-schema.yaml`` documents the settings that ``ft_notebook.yaml`` sets
and ``config.py`` checks: the three must not drift apart.

The schema is the contract users read (every key, its type and bounds, what it
does); ``config.py`` stays the validator at run time, for its error messages. So the
tests hold: the defaults pass the schema, each key has a default and a described
schema entry, and a value the schema refuses is refused by ``config.py`` too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import dask.config
import jsonschema
import pytest
import yaml

import ft_notebook
from ft_notebook.config import load_config, reload_config
from ft_notebook.exceptions import ConfigError

PACKAGE = Path(ft_notebook.__file__).parent
DEFAULTS = yaml.safe_load((PACKAGE / "ft_notebook.yaml").read_text())
SCHEMA = yaml.safe_load((PACKAGE / "ft_notebook-schema.yaml").read_text())

#: Values tried against every key: what the schema refuses of them, config.py must.
PROBES: tuple[Any, ...] = (
    -1,
    0,
    1,
    2.5,
    0.5,
    70000,
    True,
    None,
    "",
    "auto",
    "10s",
    "-5s",
    "soon",
    "cuda:1",
    "carrier-pigeon",
    [0, 1],
    {"a": 1},
)


@pytest.fixture(autouse=True)
def _fresh_config() -> Iterator[None]:
    yield
    reload_config()


def _yaml_keys(tree: Mapping[str, Any], prefix: str = "") -> set[str]:
    keys = set()
    for key, value in tree.items():
        path = f"{prefix}{key}"
        keys |= _yaml_keys(value, path + ".") if isinstance(value, dict) else {path}
    return keys


def _schema_entries(node: Mapping[str, Any], prefix: str = "") -> dict[str, Mapping[str, Any]]:
    """Every key the schema describes, sections and settings, by dotted name."""
    entries: dict[str, Mapping[str, Any]] = {}
    for key, sub in node.get("properties", {}).items():
        path = f"{prefix}{key}"
        entries[path] = sub
        entries.update(_schema_entries(sub, path + "."))
    return entries


ENTRIES = _schema_entries(SCHEMA["properties"]["ft-notebook"])
SETTINGS = sorted(k for k, v in ENTRIES.items() if "properties" not in v)


def test_the_shipped_defaults_pass_the_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.validate(DEFAULTS, SCHEMA, cls=jsonschema.Draft202012Validator)


def test_a_misspelt_key_is_refused_by_the_schema() -> None:
    wrong = {"ft-notebook": {"train": {"checkpoint-evry": 10}}}
    with pytest.raises(jsonschema.ValidationError, match="checkpoint-evry"):
        jsonschema.validate(wrong, SCHEMA, cls=jsonschema.Draft202012Validator)


def test_every_setting_has_a_default_and_a_described_schema_entry() -> None:
    defaults = _yaml_keys(DEFAULTS["ft-notebook"])
    assert defaults == set(SETTINGS), (
        f"only in ft_notebook.yaml: {sorted(defaults - set(SETTINGS))}; "
        f"only in ft_notebook-schema.yaml: {sorted(set(SETTINGS) - defaults)}"
    )
    undescribed = [k for k, v in ENTRIES.items() if not str(v.get("description", "")).strip()]
    assert undescribed == [], f"schema entries without a description: {undescribed}"


def test_config_accepts_the_defaults_and_reads_every_train_setting() -> None:
    train = load_config().train
    # each train key is a field of TrainConfig: its name hyphenated, "_s" for seconds
    fields = {k.removesuffix("_s").replace("_", "-") for k in vars(train)}
    assert fields == {k.removeprefix("train.") for k in SETTINGS if k.startswith("train.")}
    assert train.checkpoint_every == DEFAULTS["ft-notebook"]["train"]["checkpoint-every"]
    assert (train.rendezvous_timeout_s, train.collective_timeout_s) == (30.0, 600.0)


def _schema_accepts(key: str, value: Any) -> bool:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    tree: dict[str, Any] = {}
    node = tree
    *sections, leaf = ["ft-notebook", *key.split(".")]
    for section in sections:
        node = node.setdefault(section, {})
    node[leaf] = value
    return validator.is_valid(tree)


@pytest.mark.parametrize("key", SETTINGS)
def test_what_the_schema_refuses_config_refuses_too(key: str) -> None:
    refused = [v for v in PROBES if not _schema_accepts(key, v)]
    assert refused, f"the schema of {key} accepts anything: give it a type"
    for value in refused:
        with (
            dask.config.set({f"ft-notebook.{key}": value}),
            pytest.raises(ConfigError, match=f"ft-notebook\\.{key}"),
        ):
            load_config()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("train.checkpoint-every", 0),
        ("train.min-workers", 1.5),
        ("train.device", "tpu"),
        ("train.amp", "yes"),
        ("train.rendezvous-timeout", "-5s"),
        ("train.store-keep", 0),
        ("cluster.port", 70000),
    ],
)
def test_a_few_bad_values_are_refused_by_both(key: str, value: Any) -> None:
    assert not _schema_accepts(key, value)
    with dask.config.set({f"ft-notebook.{key}": value}), pytest.raises(ConfigError) as info:
        load_config()
    assert f"ft-notebook.{key}" in str(info.value)
    assert repr(value) in str(info.value)
