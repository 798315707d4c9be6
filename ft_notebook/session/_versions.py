"""Versions a snapshot's pickles depend on, read without importing anything.

A pickle of a numpy array or a torch module is read back by the versions of those
libraries that load it; a snapshot names the versions it was taken with, and a
restore compares them before loading any pickle.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Iterable

_PICKLE_SENSITIVE = ("numpy", "torch", "pandas", "cloudpickle")


def versions(modules: Iterable[str] | None = None) -> dict[str, str]:
    """Versions a snapshot's pickles depend on: Python, and libraries in use.

    Without ``modules``, the libraries this process has imported; read from the
    installed metadata, so a restore can compare before importing anything.
    """
    found = {"python": f"{sys.version_info.major}.{sys.version_info.minor}"}
    names = [m for m in _PICKLE_SENSITIVE if m in sys.modules] if modules is None else modules
    for module in names:
        if module != "python":
            found[module] = installed_version(module)
    return found


def installed_version(module: str) -> str:
    """``importlib.metadata.version(module)``, or "not installed".

    Its first call costs a restore 5 ms (it imports the email parser and indexes every
    path entry); the ``<name>-<version>.dist-info`` folder beside the package, where
    pip puts it, is read first. A unit test holds the two equal.
    """
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin and spec.submodule_search_locations:
        site = os.path.dirname(os.path.dirname(spec.origin))
        prefix = module.replace("-", "_").lower() + "-"
        try:
            folders = [n for n in os.listdir(site) if n.lower().startswith(prefix)]
        except OSError:
            folders = []
        infos = [n for n in folders if n.endswith(".dist-info")]
        if len(infos) == 1:
            version = _metadata_version(os.path.join(site, infos[0], "METADATA"))
            if version is not None:
                return version
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _metadata_version(path: str) -> str | None:
    """The ``Version:`` header of a METADATA file (the headers end at a blank line)."""
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    break
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None
