"""Messages between the coordinator and the ranks are typed: a kind or a way of
making a group that this version does not know is refused, never guessed at, and so
is a report whose fields are not those of its kind (issue 33: one frozen dataclass
per report kind, built by the rank and read by the coordinator)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import msgpack
import pytest

from ft_notebook.train.protocol import (
    REPORT_TOPIC,
    How,
    Plan,
    Report,
    ReportKind,
    UnknownMessage,
)
from ft_notebook.train.report_kinds import (
    PAYLOADS,
    CheckpointData,
    CheckpointFailedData,
    DoneData,
    ErrorData,
    EvalData,
    NonfiniteData,
    PeerFailedData,
    PreparedData,
    ProgressData,
    ReadyData,
    ReportData,
    ResumedData,
    RollbackData,
    StateRepairedData,
    SyncedData,
    payload_of,
)


def test_plans_and_reports_come_back_as_their_kinds_through_msgpack() -> None:
    plan = Plan("r", 3, ("0", "1"), ("127.0.0.1", 5), how=How.SURVIVE, base=2, lost="2")
    wire = msgpack.unpackb(msgpack.packb(plan.to_wire()))
    assert wire["how"] == "survive"
    back = Plan.from_wire(wire)
    assert back == plan
    assert back.how is How.SURVIVE
    report = Report("r", "0", ReportKind.STATE_REPAIRED, 3, 7, 1.0, {"workers": ["1"]})
    again = Report.from_wire(msgpack.unpackb(msgpack.packb(report.to_wire())))
    assert again == report
    assert again.kind is ReportKind.STATE_REPAIRED


def test_a_kind_this_version_does_not_know_is_refused_by_name() -> None:
    with pytest.raises(UnknownMessage, match=r"'telemetry'.*known: ready"):
        Report.from_wire({"run": "r", "name": "0", "kind": "telemetry"})
    wire = Plan("r", 1, ("0",), ("h", 1)).to_wire()
    with pytest.raises(UnknownMessage, match="'teleport'"):
        Plan.from_wire({**wire, "how": "teleport"})


def test_a_report_reaches_the_event_log_as_plain_values() -> None:
    """Dask's Worker.log_event accepts only exact str, int, float, list and dict
    values: a How member in a report's data made every "synced" report be dropped
    (and with it the fast recovery path), with one debug line."""
    report = Report("r", "0", ReportKind.SYNCED, 2, 5, 1.0, {"how": How.SURVIVE, "world": 2})
    wire = report.to_wire()
    assert type(wire["kind"]) is str
    assert type(wire["data"]["how"]) is str
    assert wire["data"] == {"how": "survive", "world": 2}


def test_a_report_the_event_log_refuses_is_an_error_not_a_debug_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The synced reports lost to a refused enum were logged at debug level only."""
    from ft_notebook.train.rank._report import RankReporter

    class Refusing:
        def log_event(self, topic: str, msg: object) -> None:
            raise TypeError("msg must be of type str, int, float, list or dict")

    reporter = RankReporter("r", "0", "inc", Refusing(), lambda: (1, 0))
    with caplog.at_level("DEBUG", logger="ft_notebook"):
        reporter.report(SyncedData(world=2, rank=0, how=How.SURVIVE))
    assert [r.levelname for r in caplog.records if "refused" in r.getMessage()] == ["ERROR"]


# ---- one frozen dataclass per report kind

#: A report of every kind, each field told (none left to its default where it has one).
SAMPLES: list[ReportData] = [
    ReadyData(device="cuda:0"),
    SyncedData(world=2, rank=1, how=How.SURVIVE, verified=True),
    PreparedData(prepared_gen=4),
    ResumedData(synced_step=10),
    ProgressData(
        loss="nan",
        steps_per_s=2.5,
        samples_per_s=80.0,
        world=2,
        epoch=1,
        lagging=True,
        suspects={"w1": 3},
        mean_steps=1,
    ),
    EvalData(eval_step=8, eval={"acc": 0.5, "ppl": "inf"}, eval_error="partly"),
    CheckpointData(checkpoint_step=8, stall_s=0.01, plan={"every_steps": 4, "waste": 0.1}),
    CheckpointFailedData(error="disk full", retry_at=16),
    NonfiniteData(at_step=3, streak=2, loss="inf"),
    RollbackData(from_step=9, to_step=4, skipped=(6, 7, 8)),
    StateRepairedData(workers=("a", "b"), source="c", at_step=3, when="a rollback"),
    PeerFailedData(error="reset", plan=5, absent=("b",)),
    DoneData(checkpoint=72, nonfinite_total=2, epoch=3, loss=0.25, suspects={"a": 1}),
    ErrorData(error="ValueError: x", traceback="Traceback ..."),
]


def test_every_report_kind_has_its_frozen_payload_class() -> None:
    assert set(PAYLOADS) == set(ReportKind)
    for kind, cls in PAYLOADS.items():
        assert cls.KIND is kind
    assert [type(p) for p in SAMPLES] == [PAYLOADS[k] for k in ReportKind]  # one sample each
    for sample in SAMPLES:
        first = dataclasses.fields(sample)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(sample, first, None)


class _EventLog:
    """A worker's ``log_event``: what a rank sends, as Dask's would take it."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def log_event(self, topic: str, msg: dict[str, Any]) -> None:
        assert topic == REPORT_TOPIC
        _assert_plain(msg)
        self.sent.append(msg)


def _assert_plain(x: Any) -> None:
    """Only the exact types the scheduler's event log takes (no enum, no tuple)."""
    if isinstance(x, dict):
        assert all(type(k) is str for k in x), x
        for v in x.values():
            _assert_plain(v)
    elif isinstance(x, list):
        for v in x:
            _assert_plain(v)
    else:
        assert x is None or type(x) in (str, int, float, bool), (type(x), x)


def _sent(payload: ReportData, incarnation: str = "inc") -> dict[str, Any]:
    from ft_notebook.train.rank._report import RankReporter

    log = _EventLog()
    RankReporter("r", "0", incarnation, log, lambda: (2, 7)).report(payload)
    [msg] = log.sent
    return msg


@pytest.mark.parametrize("lists", [True, False], ids=["lists", "tuples"])
@pytest.mark.parametrize("sent", SAMPLES, ids=lambda p: p.KIND.value)
def test_a_report_comes_back_as_its_kind_s_class_through_msgpack(
    sent: ReportData, lists: bool
) -> None:
    """The scheduler's event log hands lists back as tuples (``use_list=False``)."""
    wire = msgpack.unpackb(msgpack.packb(_sent(sent)), use_list=lists)
    report = Report.from_wire(wire)
    assert (report.kind, report.gen, report.step, report.incarnation) == (sent.KIND, 2, 7, "inc")
    got = payload_of(report)
    assert got == sent
    assert type(got).of(report) == sent


def test_fields_a_rank_may_leave_out_take_their_defaults() -> None:
    assert NonfiniteData.from_data({"at_step": 3}) == NonfiniteData(at_step=3, streak=1)
    assert PeerFailedData.from_data({"plan": 2}) == PeerFailedData(plan=2, error="", absent=None)
    progress = ProgressData.from_data({})
    assert (progress.loss, progress.lagging, progress.suspects, progress.mean_steps) == (
        None,
        None,
        {},
        0,
    )


def test_keys_this_version_does_not_know_are_ignored() -> None:
    """A newer rank may tell more; the coordinator reads what it knows."""
    wire = _sent(RollbackData(from_step=9, to_step=4))
    wire["data"]["reason"] = "a newer rank's field"
    report = Report.from_wire(wire)
    assert RollbackData.of(report) == RollbackData(from_step=9, to_step=4, skipped=())


@pytest.mark.parametrize(
    ("kind", "data", "field"),
    [
        ("rollback", {"to_step": 4}, "from_step"),  # missing
        ("state-repaired", {"source": "c"}, "at_step"),
        ("peer-failed", {"plan": "3"}, "plan"),  # a string for an int
        ("progress", {"world": True}, "world"),  # a bool is no int
        ("progress", {"epoch": 1.5}, "epoch"),  # nor a float
        ("synced", {"world": 2, "rank": 0, "how": "teleport"}, "how"),
        ("rollback", {"from_step": 9, "to_step": 4, "skipped": [6, "7"]}, "skipped"),
        ("state-repaired", {"source": "c", "at_step": 1, "workers": "ab"}, "workers"),
        ("progress", {"suspects": {"a": "many"}}, "suspects"),
        ("eval", {"eval_step": 1, "eval": [0.5]}, "eval"),
        ("done", {"checkpoint": "72"}, "checkpoint"),
    ],
)
def test_a_field_missing_or_of_another_type_is_refused_naming_kind_and_field(
    kind: str, data: dict[str, Any], field: str
) -> None:
    report = Report("r", "0", kind, 1, 2, 3.0, data)
    with pytest.raises(UnknownMessage, match=rf"the '{kind}' report.*'{field}'"):
        payload_of(report)


def test_a_report_s_data_that_is_not_a_dict_is_refused() -> None:
    with pytest.raises(UnknownMessage, match="'done' report's data is a list"):
        payload_of(Report("r", "0", "done", data=[1, 2]))  # type: ignore[arg-type]


def test_a_report_read_as_another_kind_is_the_reader_s_bug() -> None:
    with pytest.raises(TypeError, match="'progress' report read as DoneData"):
        DoneData.of(Report("r", "0", "progress"))


def test_a_rank_cannot_send_a_field_misnamed_or_of_another_type(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from ft_notebook.train.rank._report import RankReporter

    with pytest.raises(TypeError, match="streek"):
        NonfiniteData(at_step=3, streek=2)  # type: ignore[call-arg]
    log = _EventLog()
    reporter = RankReporter("r", "0", "inc", log, lambda: (1, 0))
    with caplog.at_level("ERROR", logger="ft_notebook"):
        reporter.report(NonfiniteData(at_step="3"))  # type: ignore[arg-type]
    assert log.sent == []  # refused where it is sent, not by the coordinator
    [refused] = [r for r in caplog.records if "refused" in r.getMessage()]
    assert refused.exc_info is not None
    assert "the 'nonfinite' report's 'at_step' is '3', not int" in str(refused.exc_info[1])


def test_the_coordinator_refuses_a_malformed_report_and_a_late_one_of_another_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Refused at the door with the kind and field in the log; its handler never runs.
    A report of an earlier submission of the run's name is ignored."""
    from ft_notebook.testing.books import running
    from ft_notebook.train.coordinator._plugin import RunCoordinator

    coordinator = RunCoordinator()
    coordinator.runs["r"], _ = running(1, name="r", prepared=False)
    incarnation = coordinator.runs["r"].incarnation
    malformed = _sent(PreparedData(prepared_gen=4), incarnation)
    malformed["data"]["prepared_gen"] = "4"
    with caplog.at_level(logging.ERROR, logger="ft_notebook"):
        coordinator.log_event(REPORT_TOPIC, malformed)
    assert coordinator.runs["r"].gens.prepared == {}
    # one line that says why, not a handler's traceback
    assert [r.getMessage() for r in caplog.records] == [
        "a rank's report was refused: the 'prepared' report's 'prepared_gen' is '4', not int"
    ]
    coordinator.log_event(REPORT_TOPIC, _sent(PreparedData(prepared_gen=4), "earlier"))
    assert coordinator.runs["r"].gens.prepared == {}
    coordinator.log_event(REPORT_TOPIC, _sent(PreparedData(prepared_gen=4), incarnation))
    assert coordinator.runs["r"].gens.prepared == {4: {"0"}}
