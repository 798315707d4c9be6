"""The collector pause of %load_ext and %ft restore, and the user's code inside it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from ft_notebook._gc import collector_as_before, collector_paused


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_paused_inside_on_after_even_on_error_and_when_nested() -> None:
    seen: list[bool] = []

    def fail_while_paused() -> None:
        with collector_paused():
            seen.append(gc.isenabled())
            with collector_paused():
                seen.append(gc.isenabled())
            seen.append(gc.isenabled())  # the inner block did not turn it back on early
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        fail_while_paused()
    assert seen == [False, False, False]
    assert gc.isenabled()


def test_user_code_inside_a_pause_runs_with_the_collector_on() -> None:
    with collector_paused():
        with collector_as_before():
            assert gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with collector_as_before():  # outside any pause it changes nothing
        assert gc.isenabled()


def test_a_collector_the_user_turned_off_stays_off() -> None:
    gc.disable()
    with collector_paused(), collector_as_before():
        assert not gc.isenabled()
    assert not gc.isenabled()
