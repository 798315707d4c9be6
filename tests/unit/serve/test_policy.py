"""The router's rules, each alone: breaker, budgets, latency window, replica names."""

from __future__ import annotations

import pytest

from ft_notebook.exceptions import ServeError
from ft_notebook.serve._chaos import parse_target
from ft_notebook.serve._policy import Breaker, Budget, CircuitBreaker, Latencies


def test_a_breaker_opens_after_the_failures_in_a_row_and_a_success_resets_the_count() -> None:
    b = CircuitBreaker(failures=3, open_s=1.0)
    assert not b.failed("x")
    assert not b.failed("x")
    b.succeeded()
    assert not b.failed("x")
    assert not b.failed("x")
    assert b.state is Breaker.CLOSED
    assert b.allows()
    assert b.failed("third in a row")
    assert b.state is Breaker.OPEN
    assert b.reason == "third in a row"
    assert not b.allows(now=b.opened_at + 0.5)


def test_an_open_breaker_lets_one_probe_through_after_its_time_and_the_probe_decides() -> None:
    b = CircuitBreaker(failures=1, open_s=1.0)
    b.failed("down")
    assert b.allows(now=b.opened_at + 1.0)
    assert b.state is Breaker.HALF_OPEN
    assert not b.in_rotation()
    b.started()
    assert not b.allows(now=b.opened_at + 1.0)  # one probe at a time
    assert b.failed("still down")  # a failed probe opens it again, for another open_s
    assert b.state is Breaker.OPEN
    assert b.allows(now=b.opened_at + 1.0)
    b.started()
    b.succeeded()
    assert b.state is Breaker.CLOSED
    assert b.in_rotation()
    assert b.allows()


def test_a_failure_at_once_opens_the_breaker_whatever_the_count() -> None:
    b = CircuitBreaker(failures=5, open_s=1.0)
    assert b.failed("connection reset", at_once=True)
    assert b.state is Breaker.OPEN
    assert not b.failed("again", at_once=True)  # already open: not newly opened


def test_a_budget_allows_its_fraction_of_any_stretch_of_requests_plus_its_burst() -> None:
    budget = Budget(0.05, burst=1)
    spent = 0
    for _ in range(1000):
        budget.request()
        spent += budget.take()
    assert spent == 50
    quiet = Budget(0.05, burst=1)
    for _ in range(5000):  # a long stretch without spending saves no more than the burst
        quiet.request()
    stretch = 0
    for _ in range(200):
        quiet.request()
        stretch += quiet.take()
        stretch += quiet.take()  # asking twice per request gets no more
    assert 10 <= stretch <= 11  # at most 0.05 x 200 + 1
    burst = Budget(0.2, burst=10)
    assert sum(burst.take() for _ in range(20)) == 10  # before any request: the burst


def test_latency_quantiles_are_of_the_newest_window() -> None:
    window = Latencies(size=100)
    assert window.quantile(0.5) is None
    for ms in range(1000):
        window.add(ms / 1000)
    assert len(window) == 100
    assert window.quantile(0.0) == pytest.approx(0.9)
    assert window.quantile(0.95) == pytest.approx(0.995)


@pytest.mark.parametrize(
    ("target", "expected"),
    [("replica:mlp/0", ("mlp", 0)), ("mlp/12", ("mlp", 12)), ("replica:a/b/3", ("a/b", 3))],
)
def test_replica_targets_name_a_service_and_an_index(target: str, expected: tuple) -> None:
    assert parse_target(target) == expected


@pytest.mark.parametrize("target", ["replica:mlp", "mlp/x", "/3", ""])
def test_a_target_without_service_and_index_is_a_clear_error(target: str) -> None:
    with pytest.raises(ServeError, match="replica:SERVICE/INDEX"):
        parse_target(target)


def test_the_tier_follows_the_replicas_serving_against_those_wanted() -> None:
    from ft_notebook.events import Health
    from ft_notebook.serve._policy import tier_of

    assert [tier_of(n, 3) for n in (0, 1, 2, 3, 4)] == [
        Health.FALLBACK,
        Health.DEGRADED,
        Health.DEGRADED,
        Health.HEALTHY,
        Health.HEALTHY,
    ]
