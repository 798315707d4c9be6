"""What each setting's value may be: one reader per kind of value, and its message.

:func:`ft_notebook.config.load_config` builds the settings with these readers; it
imports this module as ``read`` (``read.duration(section, "cluster.hung-after")``). A
reader takes the ``ft-notebook`` section and a key, and returns the value in the type
the settings hold (seconds as a float, a port as an int) or raises
:class:`~ft_notebook.exceptions.ConfigError` naming the key, the value seen and what
is allowed. The parsers of one value (:func:`parse_gpus`, :func:`is_device`,
:func:`parse_seconds`: Dask's durations without importing Dask) also serve arguments
given in code, such as ``ft.cluster(gpus=...)`` and ``ft.fit(device=...)``; import
the first two from :mod:`ft_notebook.config`, which re-exports them.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from ft_notebook import _config_sources
from ft_notebook.exceptions import ConfigError


def _unit_seconds() -> dict[str, float]:
    """The units dask.utils.parse_timedelta knows (it lower-cases what it is given)."""
    units: dict[str, float] = dict(s=1, ms=1e-3, us=1e-6, ns=1e-9, m=60, h=3600, d=86400)
    units["w"] = 7 * units["d"]
    for word in ("second", "minute", "hour", "day", "week"):
        units[word] = units[word + "s"] = units[word[0]]
    for prefix, short in (("milli", "ms"), ("micro", "us"), ("nano", "ns")):
        units[prefix + "second"] = units[prefix + "seconds"] = units[short]
    return units


_UNIT_SECONDS = _unit_seconds()

GPU_KEYWORDS = ("auto", "none", "all")

DEVICES = ("auto", "cpu", "cuda")
DEVICE_EXPECTED = "'auto', 'cpu', 'cuda' or 'cuda:<index>'"


def _get(section: Mapping[str, Any], key: str) -> Any:
    return _config_sources.get(section, key)


def choice(section: Mapping[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    value = _get(section, key)
    if value not in allowed:
        raise ConfigError(f"ft-notebook.{key}", value, allowed=allowed)
    return str(value)


def duration(section: Mapping[str, Any], key: str) -> float:
    value = _get(section, key)
    try:
        seconds = parse_seconds(value)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        seconds = None
    if seconds is None or seconds <= 0:
        raise ConfigError(
            f"ft-notebook.{key}", value, expected="a positive duration such as '500ms'"
        )
    return float(seconds)


def parse_seconds(value: Any) -> float | None:
    """``dask.utils.parse_timedelta(value)``, without importing Dask: "500ms", "2
    minutes", 3 (seconds) or a timedelta; raises what it raises for anything else."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    text = str(value) if isinstance(value, numbers.Number) else value
    text = text.replace(" ", "")
    if not text[0].isdigit():
        text = "1" + text
    unit_at = len(text)
    while unit_at > 0 and text[unit_at - 1].isalpha():
        unit_at -= 1
    unit = text[unit_at:] or "seconds"
    multiplier = _UNIT_SECONDS.get(unit.lower())
    if multiplier is None:
        raise KeyError(f"Invalid time unit: {unit}")
    return float(text[:unit_at]) * multiplier


def boolean(section: Mapping[str, Any], key: str) -> bool:
    value = _get(section, key)
    if isinstance(value, bool):
        return value
    raise ConfigError(f"ft-notebook.{key}", value, allowed=(True, False))


def optional_str(section: Mapping[str, Any], key: str) -> str | None:
    value = _get(section, key)
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"ft-notebook.{key}", value, expected="a string or null")


def parse_gpus(value: Any, *, key: str = "gpus") -> str | tuple[str, ...]:
    """Normalise a ``gpus`` setting: a keyword, or GPU indices / UUIDs as strings.

    Accepts ``"auto"``, ``"none"``, ``"all"``, an index (``1``), a comma-separated
    string (``"0,2"``) or a list of indices and UUIDs; an empty list means "none".
    """
    if value is None:
        return "auto"
    if isinstance(value, str):
        if value.strip().lower() in GPU_KEYWORDS:
            return value.strip().lower()
        value = [v for v in value.split(",") if v.strip()]
    elif isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, (list, tuple)):
        tokens = []
        for item in value:
            if isinstance(item, bool) or not isinstance(item, (int, str)):
                break
            token = str(item).strip()
            if not token or (isinstance(item, int) and item < 0):
                break
            tokens.append(token)
        else:
            return tuple(tokens) if tokens else "none"
    raise ConfigError(
        key,
        value,
        expected="'auto', 'none', 'all', a GPU index, or a list of indices or GPU UUIDs",
    )


def gpus(section: Mapping[str, Any], key: str) -> str | tuple[str, ...]:
    """A ``gpus`` setting, normalised by :func:`parse_gpus`."""
    return parse_gpus(_get(section, key), key=f"ft-notebook.{key}")


def positive_number(section: Mapping[str, Any], key: str) -> float:
    value = _get(section, key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    raise ConfigError(f"ft-notebook.{key}", value, expected="a positive number")


def rate(section: Mapping[str, Any], key: str) -> float:
    """A number >= 0 (0: no limit)."""
    value = _get(section, key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    raise ConfigError(f"ft-notebook.{key}", value, expected="a number >= 0 (0: no limit)")


def positive_int(section: Mapping[str, Any], key: str) -> int:
    value = _get(section, key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ConfigError(f"ft-notebook.{key}", value, expected="a whole number >= 1")


def keep(section: Mapping[str, Any], key: str) -> int | None:
    value = _get(section, key)
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise ConfigError(
        f"ft-notebook.{key}", value, expected="a whole number >= 1, or null to keep all"
    )


def is_device(value: Any) -> bool:
    """Whether ``value`` names a device a rank can train on: ``"auto"``, ``"cpu"``,
    ``"cuda"`` (the worker's GPU) or ``"cuda:<index>"`` (ranks use gloo on a CPU
    and NCCL on a CUDA device, and nothing else)."""
    if not isinstance(value, str):
        return False
    kind, _, index = value.partition(":")
    if not index:
        return value in DEVICES
    return kind == "cuda" and index.isdigit() and index.isascii()


def device(section: Mapping[str, Any], key: str) -> str:
    value = _get(section, key)
    if is_device(value):
        return str(value)
    raise ConfigError(f"ft-notebook.{key}", value, expected=DEVICE_EXPECTED)


def count(section: Mapping[str, Any], key: str) -> int:
    value = _get(section, key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ConfigError(f"ft-notebook.{key}", value, expected="a whole number >= 0")


def size(section: Mapping[str, Any], key: str) -> int:
    """A number of bytes: an int, or a string such as ``"256 MiB"``."""
    parsed = _bytes(_get(section, key))
    if parsed is None:
        raise ConfigError(f"ft-notebook.{key}", _get(section, key), expected="a size: '1 MiB'")
    return parsed


def size_or_auto(section: Mapping[str, Any], key: str) -> int | None:
    """:func:`size`, or ``"auto"`` (None): the reader works it out."""
    value = _get(section, key)
    if value == "auto":
        return None
    parsed = _bytes(value)
    if parsed is None:
        raise ConfigError(f"ft-notebook.{key}", value, expected="a size ('256 MiB') or 'auto'")
    return parsed


#: Byte units, as Dask reads them (its parser is not imported: reading the config
#: must stay cheap, and the kernel imports no Dask for %load_ext).
_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def _bytes(value: Any) -> int | None:
    """A positive number of bytes from an int or ``"<number> <unit>"`` (kB, MiB...)."""
    import re

    if isinstance(value, int) and not isinstance(value, bool):
        return value if value > 0 else None
    if not isinstance(value, str):
        return None
    match = re.fullmatch(r"\s*([0-9.]+)\s*(?:([kmgt])(i?)b?|(b?))\s*", value, re.IGNORECASE)
    if match is None:
        return None
    try:
        number = float(match[1])
    except ValueError:
        return None
    prefix = (match[2] or "").lower()
    unit = 1024 ** "bkmgt".index(prefix) if match[3] and prefix else _UNITS[prefix]
    parsed = int(number * unit)
    return parsed if parsed > 0 else None


def fraction(section: Mapping[str, Any], key: str) -> float:
    value = _get(section, key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1:
        return float(value)
    raise ConfigError(f"ft-notebook.{key}", value, expected="a fraction from 0 to 1")


def workers(section: Mapping[str, Any], key: str) -> int | None:
    value = _get(section, key)
    if value == "auto":
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ConfigError(f"ft-notebook.{key}", value, expected="'auto' or a whole number >= 1")


def port(section: Mapping[str, Any], key: str, *, allow_none: bool) -> int | None:
    value = _get(section, key)
    if value is None and allow_none:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 65535:
        return value
    expected = "a port number from 0 (any free port) to 65535"
    raise ConfigError(
        f"ft-notebook.{key}", value, expected=expected + (" or null" if allow_none else "")
    )


def data_dir(value: Any) -> Path:
    """The folder ``data-dir`` names, by default ``$XDG_DATA_HOME/ft-notebook``. It
    takes the value, not the section: a notebook restore reads this setting alone."""
    if value is None:
        base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
        return Path(base) / "ft-notebook"
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError("ft-notebook.data-dir", value, expected="a folder path or null")
    return Path(value).expanduser()
