"""Failures said in words: real exceptions (and the text they arrive as over the wire)
become one sentence each, with the raw text kept as the detail."""

from __future__ import annotations

import asyncio

import pytest
from distributed import KilledWorker
from distributed.comm.core import CommClosedError
from distributed.core import Status
from distributed.scheduler import WorkerState
from tornado.iostream import StreamClosedError

from ft_notebook._reasons import Reason, ReasonKind, explain

pytestmark = pytest.mark.unit


def _raised(error: BaseException) -> BaseException:
    """``error`` as it is caught: raised, with its traceback."""
    try:
        raise error
    except BaseException as caught:
        return caught


def _comm_closed() -> CommClosedError:
    """A CommClosedError as distributed raises it: from a closed tornado stream."""
    try:
        try:
            raise StreamClosedError("Stream is closed")
        except StreamClosedError as e:
            raise CommClosedError(
                "in <TLS (closed) ConnectionPool.ft_serve_predict local=tls://127.0.0.1:5 "
                f"remote=tls://127.0.0.1:6>: {e}"
            ) from e
    except CommClosedError as caught:
        return caught


@pytest.fixture
def killed() -> KilledWorker:
    worker = WorkerState(
        address="tcp://127.0.0.1:40000",
        status=Status.running,
        pid=1,
        name="2",
        nthreads=1,
        memory_limit=0,
        local_directory="/tmp",
        nanny=None,
        server_id="s",
    )
    error = _raised(KilledWorker("ft-serve-m/1", worker, 3))
    assert isinstance(error, KilledWorker)
    return error


def test_a_closed_comm_is_a_lost_worker_with_the_repr_as_detail() -> None:
    error = _comm_closed()
    reason = explain(error, replica="m/1")
    assert reason.text == "replica 1's worker was lost (connection closed)"
    assert reason.kind is ReasonKind.CONNECTION_CLOSED
    assert reason.detail.startswith("CommClosedError: in <TLS (closed) ConnectionPool")
    # the router sends the text, not the object: the same words either way
    assert explain(reason.detail, replica=1) == reason
    assert str(reason) == reason.text


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (ConnectionResetError(104, "Connection reset by peer"), "connection reset"),
        (ConnectionRefusedError(111, "Connection refused"), "connection refused"),
        (BrokenPipeError(32, "Broken pipe"), "connection broken"),
        (OSError("the comm was closed"), "connection closed"),
    ],
)
def test_connection_errors_say_how_the_connection_went(error: OSError, words: str) -> None:
    reason = explain(_raised(error), replica=0, worker="w3")
    assert reason.text == f"replica 0's worker w3 was lost ({words})"
    assert reason.kind is ReasonKind.CONNECTION_CLOSED


def test_a_timeout_is_no_answer_in_time_not_a_connection_error() -> None:
    async def slow() -> None:
        await asyncio.wait_for(asyncio.sleep(10), 0.001)

    with pytest.raises(asyncio.TimeoutError) as caught:
        asyncio.run(slow())
    reason = explain(caught.value, replica="svc/2")
    assert reason.text == "replica 2 did not answer in time"
    assert reason.kind is ReasonKind.TIMEOUT  # TimeoutError is an OSError too
    assert reason.detail == "TimeoutError"


def test_a_killed_worker_counts_the_deaths(killed: KilledWorker) -> None:
    reason = explain(killed, replica="m/1")
    assert (
        reason.text
        == "replica 1's workers kept dying while running it (Dask gave up: 4 workers died)"
    )
    assert reason.kind is ReasonKind.KILLED_WORKER
    assert "on 4 different workers" in reason.detail
    assert explain(f"KilledWorker: {killed}", replica="m/1").text == reason.text


def test_memory_and_model_errors_name_the_model() -> None:
    assert explain(_raised(MemoryError()), replica=1).text == "replica 1's model ran out of memory"
    raised = explain(_raised(ValueError("weights file truncated at byte 4096")), replica=1)
    assert (
        raised.text == "replica 1's model raised ValueError (weights file truncated at byte 4096)"
    )
    assert raised.kind is ReasonKind.MODEL_RAISED
    assert raised.detail == "ValueError: weights file truncated at byte 4096"


def test_a_build_failure_sent_with_its_traceback_quotes_one_line() -> None:
    try:
        raise RuntimeError("CUDA unavailable\nsecond line of the message")
    except RuntimeError as e:
        import traceback

        sent = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"  # as a replica sends it
    reason = explain(sent, replica="m/2", worker="w2", building=True)
    assert reason.text == (
        "replica 2's model raised RuntimeError (CUDA unavailable) while it was built on worker w2"
    )
    assert "Traceback (most recent call last)" in reason.detail
    long = explain(_raised(KeyError("k" * 200)), replica=0)
    assert len(long.text) < 120
    assert long.text.endswith("…)")
    assert "k" * 200 in long.detail


def test_the_control_planes_causes_become_sentences() -> None:
    lost = explain("process gone or connection closed", replica=1, worker="2")
    assert (
        lost.text == "replica 1's worker 2 was lost (its process is gone or its connection closed)"
    )
    assert lost.kind is ReasonKind.WORKER_LOST
    hung = explain("evicted: no heartbeat for 3.2 s (threshold 3.0 s)", replica=0, worker="1")
    assert hung.text == "replica 0's worker 1 hung (no heartbeat for 3.2 s) and was evicted"
    assert hung.detail == "evicted: no heartbeat for 3.2 s (threshold 3.0 s)"


def test_words_stay_words() -> None:
    assert explain("the model did not build within 30 s") == Reason(
        "the model did not build within 30 s"
    )
    assert explain(_raised(ValueError("x"))).text == "the replica's model raised ValueError (x)"
