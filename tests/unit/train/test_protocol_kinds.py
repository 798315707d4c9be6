"""Messages between the coordinator and the ranks are typed: a kind or a way of
making a group that this version does not know is refused, never guessed at."""

from __future__ import annotations

import msgpack
import pytest

from ft_notebook.train.protocol import How, Plan, Report, ReportKind, UnknownMessage


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
        reporter.report(ReportKind.SYNCED, world=2)
    assert [r.levelname for r in caplog.records if "refused" in r.getMessage()] == ["ERROR"]
