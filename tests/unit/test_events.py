from __future__ import annotations

import json
import multiprocessing
import threading
from pathlib import Path
from typing import Any

import pytest

from ft_notebook._journal import Journal, journal_path
from ft_notebook.events import (
    Event,
    Health,
    HealthChanged,
    RecoveryCompleted,
    RunState,
    RunStateChanged,
    SnapshotCommitted,
    WorkerLost,
    history,
    publish,
    run_topic,
    subscribe,
)
from ft_notebook.exceptions import EventError, UnsafeName


def test_event_round_trips_through_json_with_typed_payload() -> None:
    event = publish(
        RunStateChanged(state=RunState.RECOVERING, previous=RunState.RUNNING, reason="w1 lost"),
        run_topic("rt"),
        run="rt",
        generation=3,
        step=41,
    )
    again = Event.from_dict(json.loads(json.dumps(event.to_dict())))
    assert again == event
    payload = again.payload()
    assert payload == RunStateChanged(RunState.RECOVERING, RunState.RUNNING, "w1 lost")
    assert isinstance(payload, RunStateChanged)
    assert isinstance(payload.state, RunState)


def test_tuples_and_optional_enums_come_back_typed(unique_name: str) -> None:
    topic = run_topic(unique_name)
    publish(SnapshotCommitted(name="s", nbytes=10, variables=2, lost=("gen", "lock")), topic)
    publish(HealthChanged(health=Health.DEGRADED), topic)
    snap, health = (e.payload() for e in history(topic))
    assert snap == SnapshotCommitted(name="s", nbytes=10, variables=2, lost=("gen", "lock"))
    assert health == HealthChanged(health=Health.DEGRADED, previous=None)


def test_unknown_fields_from_a_newer_version_are_kept() -> None:
    raw = {
        "seq": 7,
        "topic": "ft-notebook.run.x",
        "kind": "worker-lost",
        "time": 1.5,
        "worker": "w0",
        "priority": "high",  # a field this version does not know
        "data": {"name": "w0", "address": "tcp://a", "cause": "killed", "exit_code": -9},
    }
    event = Event.from_dict(raw)
    assert event.to_dict() == raw
    assert event.payload() == WorkerLost(name="w0", address="tcp://a", cause="killed")


def test_unknown_kind_has_no_payload_but_round_trips() -> None:
    raw = {"seq": 1, "topic": "t", "kind": "replica-teleported", "time": 0.0, "data": {"a": 1}}
    event = Event.from_dict(raw)
    assert event.payload() is None
    assert event.to_dict() == raw


def test_event_missing_required_fields_is_an_event_error() -> None:
    with pytest.raises(EventError, match=r"lacks the fields \['seq'"):
        Event.from_dict({"topic": "t", "kind": "k", "time": 0.0, "data": {}})


def test_sequence_numbers_count_up_per_topic(unique_name: str) -> None:
    a, b = run_topic(unique_name + "a"), run_topic(unique_name + "b")
    seqs = [publish(WorkerLost("w", "x"), t).seq for t in (a, a, b, a, b)]
    assert seqs == [1, 2, 1, 3, 2]
    assert [e.seq for e in history(a)] == [1, 2, 3]
    assert [e.seq for e in history(a, since=2)] == [3]


def test_history_by_run_or_topic_but_not_both() -> None:
    with pytest.raises(TypeError):
        history()
    with pytest.raises(TypeError):
        history("t", run="r")


def test_topic_names_never_become_paths_unchecked() -> None:
    with pytest.raises(UnsafeName, match="run name"):
        run_topic("../../etc")
    with pytest.raises(UnsafeName):
        journal_path("a/b")


def test_a_torn_last_line_is_skipped_and_numbering_goes_on(unique_name: str) -> None:
    topic = run_topic(unique_name)
    publish(WorkerLost("w", "x"), topic)
    path = journal_path(topic)
    with path.open("ab") as f:  # a writer killed in the middle of its line
        f.write(b'{"seq":2,"topic":"t","ki')
    records, offset = Journal(path).read()
    assert [r["seq"] for r in records] == [1]
    assert offset < path.stat().st_size  # the torn tail is left for a later read
    assert publish(WorkerLost("w", "x"), topic).seq == 2
    assert [e.seq for e in history(topic)] == [1, 2]


def test_non_json_data_is_refused_before_anything_is_written(unique_name: str) -> None:
    topic = run_topic(unique_name)
    with pytest.raises(EventError, match="JSON cannot carry"):
        publish(RecoveryCompleted("kill", float("nan"), 0, 3, 2), topic)
    assert history(topic) == []


def test_journal_is_private(unique_name: str) -> None:
    topic = run_topic(unique_name)
    publish(WorkerLost("w", "x"), topic)
    path = journal_path(topic)
    assert path.stat().st_mode & 0o077 == 0
    assert path.parent.parent.stat().st_mode & 0o077 == 0


def test_late_subscriber_sees_history_then_live_tail_once_in_order(unique_name: str) -> None:
    topic = run_topic(unique_name)
    for _ in range(5):
        publish(WorkerLost("w", "x"), topic)
    seen: list[int] = []
    with subscribe(topic, lambda e: seen.append(e.seq), since=2):
        for _ in range(3):
            publish(WorkerLost("w", "x"), topic)
    publish(WorkerLost("w", "x"), topic)  # after close: not delivered
    assert seen == [3, 4, 5, 6, 7, 8]


def test_subscriber_joining_mid_stream_of_concurrent_publishers(unique_name: str) -> None:
    topic = run_topic(unique_name)
    per_thread, threads = 150, 4
    started = threading.Barrier(threads + 1)

    def publisher() -> None:
        started.wait()
        for _ in range(per_thread):
            publish(WorkerLost("w", "x"), topic)

    workers = [threading.Thread(target=publisher) for _ in range(threads)]
    for w in workers:
        w.start()
    started.wait()
    seen: list[int] = []
    sub = subscribe(topic, lambda e: seen.append(e.seq))
    for w in workers:
        w.join()
    sub.close()
    assert seen == list(range(1, per_thread * threads + 1))


def test_a_failing_callback_does_not_break_the_stream(unique_name: str) -> None:
    topic = run_topic(unique_name)
    seen: list[int] = []

    def flaky(event: Event) -> None:
        seen.append(event.seq)
        if event.seq == 1:
            raise RuntimeError("consumer bug")

    with subscribe(topic, flaky):
        publish(WorkerLost("w", "x"), topic)
        publish(WorkerLost("w", "x"), topic)
    assert seen == [1, 2]


def _publish_many(topic: str, n: int, start: Any) -> None:
    start.wait()
    for _ in range(n):
        publish(WorkerLost("w", "x"), topic)


def test_processes_share_one_gap_free_numbering(unique_name: str, ft_data_dir: Path) -> None:
    topic = run_topic(unique_name)
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(3)
    procs = [ctx.Process(target=_publish_many, args=(topic, 200, start)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert [e.seq for e in history(topic)] == list(range(1, 601))


def test_a_plain_dict_is_published_as_your_own_event(unique_name: str) -> None:
    """`events.publish({'hello': 1}, topic)` raised (issue 38): a dict of JSON values
    is journalled as kind "published" and read back as it was."""
    topic = run_topic(unique_name)
    sent = publish({"hello": 1, "tags": ["a"]}, topic, step=7)
    assert (sent.kind, dict(sent.data), sent.step) == ("published", {"hello": 1, "tags": ["a"]}, 7)
    [read] = history(topic)
    assert (read.seq, read.kind, dict(read.data)) == (
        sent.seq,
        "published",
        {"hello": 1, "tags": ["a"]},
    )
    assert read.payload() is None
    with pytest.raises(EventError, match="JSON cannot carry"):
        publish({"model": object()}, topic)
    with pytest.raises(EventError, match=r"a typed payload .* or a dict of JSON values, got str"):
        publish("hello", topic)  # type: ignore[arg-type]
    assert len(history(topic)) == 1
