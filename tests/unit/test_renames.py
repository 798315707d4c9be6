"""The record of renamed notebooks (`ft_notebook._renames`): what the server writes
and a restore follows back, and what it makes of a damaged or planted file."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ft_notebook import _renames
from ft_notebook.exceptions import UnsafeName

pytestmark = pytest.mark.unit


def test_renames_are_followed_back_newest_first(tmp_path: Path) -> None:
    _renames.record(tmp_path, "draft-1", "analysis-2")
    _renames.record(tmp_path, "analysis-2", "final-3")
    assert _renames.renamed_from(tmp_path, "final-3") == ["analysis-2", "draft-1"]
    assert _renames.renamed_from(tmp_path, "analysis-2") == ["draft-1"]
    assert _renames.renamed_from(tmp_path, "draft-1") == []
    mode = stat.S_IMODE((tmp_path / _renames.FILE).stat().st_mode)
    assert mode == 0o600


def test_a_name_used_again_points_at_its_latest_origin_and_cycles_end(tmp_path: Path) -> None:
    _renames.record(tmp_path, "a-1", "b-2")
    _renames.record(tmp_path, "c-3", "b-2")  # another notebook renamed to the same name
    assert _renames.renamed_from(tmp_path, "b-2") == ["c-3"]
    _renames.record(tmp_path, "b-2", "a-1")  # renamed back
    assert _renames.renamed_from(tmp_path, "a-1") == ["b-2", "c-3"]
    _renames.record(tmp_path, "a-1", "c-3")  # round and round
    assert _renames.renamed_from(tmp_path, "c-3") == ["a-1", "b-2"]


def test_a_name_another_notebook_took_later_is_not_followed(tmp_path: Path) -> None:
    """Its snapshots are that notebook's: a restore must not take them, nor retention
    drop them, for the notebook that left the name before."""
    _renames.record(tmp_path, "draft-1", "final-2")
    _renames.record(tmp_path, "scratch-3", "draft-1")  # renamed to the free name later
    assert _renames.renamed_from(tmp_path, "final-2") == ["draft-1"]
    assert _renames.renamed_from(tmp_path, "draft-1") == ["scratch-3"]
    ((key, left),) = _renames.history(tmp_path, "final-2")
    ((_, taken),) = _renames.history(tmp_path, "draft-1")
    assert key == "draft-1"
    assert left < taken


def test_two_servers_recording_at_once_lose_no_rename(tmp_path: Path) -> None:
    """Two Jupyter servers of one user share the record: each read-change-write holds
    the file's lock, or the later writer drops the other's renames."""
    code = (
        "import sys; from pathlib import Path; from ft_notebook import _renames\n"
        "folder, name = Path(sys.argv[1]), sys.argv[2]\n"
        "for i in range(40):\n"
        "    _renames.record(folder, f'old-{name}-{i}', f'new-{name}-{i}')\n"
    )
    servers = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), name]) for name in "ab"]
    assert [s.wait(timeout=60) for s in servers] == [0, 0]
    recorded = [_renames.renamed_from(tmp_path, f"new-{n}-{i}") for n in "ab" for i in range(40)]
    assert all(recorded)
    assert _renames.renamed_from(tmp_path, "new-b-39") == ["old-b-39"]


def test_moves_are_recorded_only_from_keys_with_snapshots_or_renamed_into(
    tmp_path: Path,
) -> None:
    """What the server records for a moved folder: the test of each old key is made
    under the record's lock, so a rename into it recorded just before counts."""
    _renames.record(tmp_path, "a-1", "b-2")
    moves = [("b-2", "c-3"), ("x-4", "y-5"), ("s-6", "t-7"), ("s-8", "s-8")]
    done = _renames.record_moves(tmp_path, moves, having={"s-6", "s-8"})
    assert done == [("b-2", "c-3"), ("s-6", "t-7")]
    assert _renames.renamed_from(tmp_path, "c-3") == ["b-2", "a-1"]
    assert _renames.renamed_from(tmp_path, "y-5") == []


def test_only_the_newest_renames_are_kept(tmp_path: Path) -> None:
    for i in range(_renames.MOST + 10):
        _renames.record(tmp_path, f"old-{i}", f"new-{i}")
    doc = json.loads((tmp_path / _renames.FILE).read_text())
    assert len(doc["renames"]) == _renames.MOST
    assert _renames.renamed_from(tmp_path, "new-9") == []
    assert _renames.renamed_from(tmp_path, f"new-{_renames.MOST + 9}") == [
        f"old-{_renames.MOST + 9}"
    ]


def test_unsafe_keys_are_refused_when_written_and_skipped_when_read(tmp_path: Path) -> None:
    with pytest.raises(UnsafeName):
        _renames.record(tmp_path, "../secrets", "nb-1")
    planted = [
        {"to": "nb-1", "from": "../../etc", "time": 1.0},
        {"to": "nb-1", "from": ".hidden", "time": 2.0},
        {"to": "nb-1", "from": ["list"], "time": 3.0},
        {"to": "nb-1", "from": "fine-1", "time": "not a time"},
        "not an entry",
        {"to": "nb-2", "from": "good-1", "time": 4.0},
        # an infinite time would make every later rename into good-1 look older
        {"to": "nb-3", "from": "nb-2", "time": float("inf")},
        {"to": "nb-4", "from": "nb-2", "time": "NaN"},
    ]
    (tmp_path / _renames.FILE).write_text(json.dumps({"renames": planted}))
    assert _renames.renamed_from(tmp_path, "nb-1") == []
    assert _renames.renamed_from(tmp_path, "nb-2") == ["good-1"]
    assert _renames.renamed_from(tmp_path, "nb-3") == []
    assert _renames.renamed_from(tmp_path, "nb-4") == []


@pytest.mark.parametrize("text", ["{not json", "[]", '{"renames": 3}', ""])
def test_a_damaged_file_counts_as_no_renames_and_is_rewritten(tmp_path: Path, text: str) -> None:
    (tmp_path / _renames.FILE).write_text(text)
    assert _renames.renamed_from(tmp_path, "nb-1") == []
    _renames.record(tmp_path, "old-1", "nb-1")
    assert _renames.renamed_from(tmp_path, "nb-1") == ["old-1"]
