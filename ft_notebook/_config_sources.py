"""Dask's configuration sources, read without importing Dask.

ft_notebook is configured the way Dask is (YAML files, ``DASK_...`` environment
variables, ``dask.config.set``), but ``import dask`` costs about 0.1 s: more than a
notebook restore may take in all. Where Dask is not loaded, this module reads the
same sources by Dask's rules (``dask/config.py``: ``_get_paths``, ``collect_yaml``,
``collect_env``, ``update``, ``canonical_name``), so both give the same settings; a
unit test holds the two side by side. Where Dask is loaded, ``dask.config`` is the
truth, ``dask.config.set`` included.

Not mirrored: Dask's renames of its own deprecated keys, which never touch
``ft-notebook``. One difference in timing: Dask reads files and environment when it
is imported (and on ``dask.config.refresh()``), this module whenever the settings are
read; so a ``DASK_FT_NOTEBOOK__...`` variable set in a running process is seen by
``reload_config()`` only while Dask is not loaded (after that, refresh Dask's config).
"""

from __future__ import annotations

import ast
import base64
import json
import os
import site
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

Priority = Literal["old", "new"]
_HARDCODED = {"none": None, "null": None, "false": False, "true": True}
_SUFFIXES = (".json", ".yaml", ".yml")


def search_paths(env: Mapping[str, str] | None = None) -> list[str]:
    """Where Dask looks for YAML files, lowest priority first (``_get_paths``)."""
    env = os.environ if env is None else env
    paths = [
        env.get("DASK_ROOT_CONFIG", "/etc/dask"),
        os.path.join(sys.prefix, "etc", "dask"),
        *[os.path.join(prefix, "etc", "dask") for prefix in site.PREFIXES],
        os.path.join(os.path.expanduser("~"), ".config", "dask"),
    ]
    if "DASK_CONFIG" in env:
        paths.append(env["DASK_CONFIG"])
    # a path listed twice counts where it comes last
    return list(reversed(list(dict.fromkeys(reversed(paths)))))


def collect(defaults: Mapping[str, Any], env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The configuration Dask would hold after registering ``defaults``: the
    defaults, under the YAML files, under the environment."""
    env = os.environ if env is None else env
    config: dict[str, Any] = {}
    update(config, defaults, priority="old")
    collected: dict[str, Any] = {}
    for layer in [*_yaml_files(search_paths(env)), _from_env(env)][::-1]:
        update(collected, layer, priority="old")  # going backwards: older loses
    return update(config, collected)


def update(
    old: dict[str, Any], new: Mapping[str, Any], priority: Priority = "new"
) -> dict[str, Any]:
    """Merge ``new`` into ``old`` in place, nested dicts key by key."""
    for key, value in new.items():
        key = canonical_name(key, old)
        if isinstance(value, Mapping):
            if key not in old or old[key] is None or not isinstance(old[key], dict):
                old[key] = {}
            update(old[key], value, priority=priority)
        elif priority == "new" or key not in old:
            old[key] = value
    return old


def get(config: Mapping[str, Any], key: str) -> Any:
    """``config[a][b]`` for ``key`` "a.b", where '-' and '_' in names are the same;
    KeyError (or TypeError) as ``dask.config.get`` raises them."""
    result: Any = config
    for part in key.split("."):
        result = result[canonical_name(part, result)]
    return result


def canonical_name(key: str, config: Any) -> str:
    """``key`` as ``config`` spells it: the '-' or '_' form that is there already."""
    try:
        if key in config:
            return key
    except TypeError:
        return key
    other = key.replace("_", "-") if "_" in key else key.replace("-", "_")
    return other if other in config else key


def interpret_value(value: str) -> Any:
    """An environment variable's value: a Python literal, YAML's null/true/false, or
    the string itself."""
    try:
        return ast.literal_eval(value)
    except (SyntaxError, ValueError):
        pass
    return _HARDCODED.get(value.lower(), value)


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    """``DASK_A__B_C=1`` as ``{"a": {"b-c": 1}}``, plus what a parent process passed
    in ``DASK_INTERNAL_INHERIT_CONFIG`` (Dask's workers get their config that way)."""
    flat: dict[str, Any] = {}
    if "DASK_INTERNAL_INHERIT_CONFIG" in env:
        flat = json.loads(base64.urlsafe_b64decode(env["DASK_INTERNAL_INHERIT_CONFIG"].encode()))
    for name, value in env.items():
        if name.startswith("DASK_"):
            flat[name[5:].lower().replace("__", ".")] = interpret_value(value)
    result: dict[str, Any] = {}
    for dotted, value in flat.items():
        _assign(result, dotted.split("."), value)
    return result


def _assign(config: dict[str, Any], keys: list[str], value: Any) -> None:
    key = canonical_name(keys[0], config)
    if len(keys) == 1:
        config[key] = value
        return
    if key not in config:
        config[key] = {}
    _assign(config[key], keys[1:], value)


def _yaml_files(paths: list[str]) -> Iterator[dict[str, Any]]:
    files: list[str] = []
    for path in paths:
        if not os.path.exists(path):
            continue
        if not os.path.isdir(path):
            files.append(path)
            continue
        try:
            names = os.listdir(path)
        except OSError:  # Dask ignores folders it may not read
            continue
        files += sorted(
            os.path.join(path, n) for n in names if os.path.splitext(n)[1].lower() in _SUFFIXES
        )
    for file in files:
        loaded = load_yaml(Path(file))
        if loaded is not None:
            yield loaded


def load_yaml(path: Path) -> dict[str, Any] | None:
    """A config file's top-level dict; None if unreadable or empty, as Dask has it."""
    import yaml

    try:
        text = path.read_text()
    except OSError:
        return None
    try:
        loaded = yaml.safe_load(text)
    except Exception as e:
        raise ValueError(
            f"A dask config file at {str(path)!r} is malformed, original error message:\n\n{e}"
        ) from None
    if loaded is not None and not isinstance(loaded, dict):
        raise ValueError(
            f"A dask config file at {str(path)!r} is malformed - config files must have a "
            f"dict as the top level object, got a {type(loaded).__name__} instead"
        )
    return loaded
