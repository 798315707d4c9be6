"""What each kind of rank report carries: one frozen dataclass per :class:`ReportKind`.

A report crosses processes as a plain dict (the ``data`` of a
:class:`~ft_notebook.train.protocol.Report`): the scheduler's event log takes only
exact ``str``, ``int``, ``float``, ``bool``, ``None``, lists and dicts with ``str``
keys, and msgpack hands lists back as tuples. Both ends go through the kind's class
here, so a kind's fields, their types and the defaults for what a rank may leave out
are written once:

- a rank builds the class and sends it (``reporter.report(SyncedData(...))``): a field
  misnamed fails where it is sent, and :meth:`ReportData.to_data` refuses a value of
  another type there, as the coordinator would;
- the coordinator reads a report as its kind's class (``ProgressData.of(r)``), which
  takes a list or a tuple alike and ignores keys it does not know (a newer rank), and
  refuses a report with a field missing or of another type with
  :class:`~ft_notebook.train.protocol.UnknownMessage` naming the kind and the field:
  never guessed at.

A field a rank always sends has no default, even where the coordinator once fell back
on the report's own ``gen``, ``step`` or ``name``.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, TypeVar, Union

from ft_notebook.train.protocol import How, Report, ReportKind, UnknownMessage

_D = TypeVar("_D", bound="ReportData")


@dataclass(frozen=True, kw_only=True)
class ReportData:
    """The fields of one kind of report: a subclass per kind (see :data:`PAYLOADS`)."""

    KIND: ClassVar[ReportKind]

    @classmethod
    def of(cls: type[_D], report: Report) -> _D:
        """``report``'s fields; :class:`UnknownMessage` if it lacks one or has one of
        another type. A report of another kind is a bug of the reader: TypeError."""
        if report.kind is not cls.KIND:
            raise TypeError(f"a {report.kind.value!r} report read as {cls.__name__}")
        return cls.from_data(report.data)

    @classmethod
    def from_data(cls: type[_D], data: Any) -> _D:
        kind = cls.KIND.value
        if not isinstance(data, Mapping):
            raise UnknownMessage(f"the {kind!r} report's data is a {type(data).__name__}")
        hints, values = _hints(cls), {}
        for f in fields(cls):
            if f.name not in data:
                if f.default is MISSING and f.default_factory is MISSING:
                    raise UnknownMessage(
                        f"the {kind!r} report has no {f.name!r} (it has "
                        f"{sorted(map(str, data))}): a rank of another ft_notebook version?"
                    )
                continue
            try:
                values[f.name] = _typed(data[f.name], hints[f.name])
            except _Wrong:
                raise UnknownMessage(
                    f"the {kind!r} report's {f.name!r} is {data[f.name]!r}, "
                    f"not {_name(hints[f.name])}"
                ) from None
        return cls(**values)

    def to_data(self) -> dict[str, Any]:
        """The fields as plain values for the event log; :class:`UnknownMessage` if one
        is not of its type (the coordinator would refuse the report)."""
        data = {f.name: _plain(getattr(self, f.name)) for f in fields(self)}
        type(self).from_data(data)
        return data


@dataclass(frozen=True, kw_only=True)
class ReadyData(ReportData):
    """Warmed up: model, optimizer and data built (the report's ``step``: the
    checkpoint it resumed from, if any)."""

    KIND: ClassVar[ReportKind] = ReportKind.READY
    device: str = ""


@dataclass(frozen=True, kw_only=True)
class SyncedData(ReportData):
    """A member trains the report's generation from its ``step``."""

    KIND: ClassVar[ReportKind] = ReportKind.SYNCED
    world: int
    rank: int
    how: How
    verified: bool = False  # the members vouched for the state they went on from


@dataclass(frozen=True, kw_only=True)
class PreparedData(ReportData):
    """A member built the survivor groups of generation ``prepared_gen`` (the build
    may end after a newer generation was planned)."""

    KIND: ClassVar[ReportKind] = ReportKind.PREPARED
    prepared_gen: int


@dataclass(frozen=True, kw_only=True)
class ResumedData(ReportData):
    """Rank 0 committed the first step of a generation, which it went on from
    ``synced_step``."""

    KIND: ClassVar[ReportKind] = ReportKind.RESUMED
    synced_step: int


@dataclass(frozen=True, kw_only=True)
class _RobustWindow(ReportData):
    """A robust aggregator's steps since rank 0's last progress report."""

    #: worker -> the steps its gradient was suspect in
    suspects: dict[str, int] = field(default_factory=dict)
    #: on_violation="mean": the steps the rule could not hold for
    mean_steps: int = 0


@dataclass(frozen=True, kw_only=True)
class ProgressData(_RobustWindow):
    """Rank 0's progress, throttled (None: not told)."""

    KIND: ClassVar[ReportKind] = ReportKind.PROGRESS
    loss: float | str | None = None  # a string for NaN and infinity (protocol.plain)
    steps_per_s: float | None = None
    samples_per_s: float | None = None
    world: int | None = None
    epoch: int = 0
    #: failing saves, or saves queued behind a slow one
    lagging: bool | None = None


@dataclass(frozen=True, kw_only=True)
class EvalData(ReportData):
    """An evaluation of the weights of step ``eval_step`` ended: its values or its
    error."""

    KIND: ClassVar[ReportKind] = ReportKind.EVAL
    eval_step: int
    eval: dict[str, float | str] | None = None
    eval_error: str | None = None


@dataclass(frozen=True, kw_only=True)
class CheckpointData(ReportData):
    """A durable checkpoint committed."""

    KIND: ClassVar[ReportKind] = ReportKind.CHECKPOINT
    checkpoint_step: int
    stall_s: float | None = None  # what the save held training
    plan: dict[str, Any] | None = None  # checkpoint_every="auto": the plan made after it


@dataclass(frozen=True, kw_only=True)
class CheckpointFailedData(ReportData):
    KIND: ClassVar[ReportKind] = ReportKind.CHECKPOINT_FAILED
    error: str = ""
    retry_at: int = 0  # the step of the next try


@dataclass(frozen=True, kw_only=True)
class NonfiniteData(ReportData):
    """Step ``at_step`` was skipped for a NaN or Inf, the ``streak``-th in a row."""

    KIND: ClassVar[ReportKind] = ReportKind.NONFINITE
    at_step: int
    streak: int = 1
    loss: float | str | None = None


@dataclass(frozen=True, kw_only=True)
class RollbackData(ReportData):
    """Too many non-finite steps: back from ``from_step`` to ``to_step``."""

    KIND: ClassVar[ReportKind] = ReportKind.ROLLBACK
    from_step: int
    to_step: int
    skipped: tuple[int, ...] = ()  # marked to be skipped from now on


@dataclass(frozen=True, kw_only=True)
class StateRepairedData(ReportData):
    """``workers`` held another state than ``source`` vouched for and took its."""

    KIND: ClassVar[ReportKind] = ReportKind.STATE_REPAIRED
    workers: tuple[str, ...] = ()
    source: str
    at_step: int
    when: str = ""


@dataclass(frozen=True, kw_only=True)
class PeerFailedData(ReportData):
    """A collective or the rendezvous of generation ``plan`` failed."""

    KIND: ClassVar[ReportKind] = ReportKind.PEER_FAILED
    error: str = ""
    plan: int
    #: a failed rendezvous: the members whose arrival it did not see (None: not known)
    absent: tuple[str, ...] | None = None


@dataclass(frozen=True, kw_only=True)
class DoneData(_RobustWindow):
    """Rank 0 committed the last step (None: not told)."""

    KIND: ClassVar[ReportKind] = ReportKind.DONE
    checkpoint: int | None = None  # the final checkpoint's step; None: it failed
    nonfinite_total: int = 0
    epoch: int | None = None
    loss: float | str | None = None


@dataclass(frozen=True, kw_only=True)
class ErrorData(ReportData):
    KIND: ClassVar[ReportKind] = ReportKind.ERROR
    error: str = ""
    traceback: str = ""


#: The class of each kind of report.
PAYLOADS: dict[ReportKind, type[ReportData]] = {
    c.KIND: c
    for c in (
        ReadyData,
        SyncedData,
        PreparedData,
        ResumedData,
        ProgressData,
        EvalData,
        CheckpointData,
        CheckpointFailedData,
        NonfiniteData,
        RollbackData,
        StateRepairedData,
        PeerFailedData,
        DoneData,
        ErrorData,
    )
}
if set(PAYLOADS) != set(ReportKind):  # a new kind must say what it carries
    raise TypeError(f"no payload class for {[k.value for k in ReportKind if k not in PAYLOADS]}")


def payload_of(report: Report) -> ReportData:
    """``report``'s fields as its kind's class (:class:`UnknownMessage` if malformed)."""
    return PAYLOADS[report.kind].of(report)


class _Wrong(Exception):
    """A value not of its field's type."""


_HINTS: dict[type[ReportData], dict[str, Any]] = {}


def _hints(cls: type[ReportData]) -> dict[str, Any]:
    """The field types of ``cls``, resolved once (annotations are strings here)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _typed(value: Any, tp: Any) -> Any:
    """``value`` as of type ``tp`` (a tuple for a list), or :class:`_Wrong`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin is Union or origin is types.UnionType:
        for option in args:
            try:
                return _typed(value, option)
            except _Wrong:
                pass
        raise _Wrong
    if origin is tuple and isinstance(value, (list, tuple)):  # tuple[X, ...]
        return tuple(_typed(v, args[0]) for v in value)
    if origin is dict and isinstance(value, Mapping):
        return {_typed(k, args[0]): _typed(v, args[1]) for k, v in value.items()}
    if tp is type(None) and value is None:
        return None
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise _Wrong from None
    # a bool is neither an int nor a float here, nor is an int a bool
    if tp is bool and type(value) is bool:
        return value
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is str and isinstance(value, str) and not isinstance(value, enum.Enum):
        return str(value)
    raise _Wrong


def _plain(x: Any) -> Any:
    """``x`` with exact plain types, as the event log takes them."""
    if isinstance(x, enum.Enum):
        return _plain(x.value)
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, Mapping):
        return {_plain(k): _plain(v) for k, v in x.items()}
    for kind in (bool, int, float, str):  # a subclass (numpy's float64) as its base
        if isinstance(x, kind):
            return kind(x)
    return x


def _name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")
