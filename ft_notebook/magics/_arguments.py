"""Argument types the magics' parsers share: a mistake in one is a UsageError with
the subcommand's usage, raised before anything runs (argparse turns the
ArgumentTypeError into it)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ft_notebook._paths import checked_name
from ft_notebook.exceptions import FTError


def safe_name(what: str) -> Callable[[str], str]:
    """An argparse type: ``text`` if it can name a ``what`` (a path component)."""

    def check(text: str) -> str:
        try:
            return checked_name(text, what)
        except FTError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    check.__name__ = what  # argparse names the type in some messages
    return check


def snapshot_name(text: str) -> str:
    """A name a new snapshot can be kept under."""
    if text == "latest":
        raise argparse.ArgumentTypeError("'latest' always means the newest snapshot")
    return safe_name("snapshot name")(text)
