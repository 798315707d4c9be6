"""A committed snapshot is announced on the session topic, which every notebook
shares: the announcement names its notebook, so that a view can pick its own."""

from __future__ import annotations

from pathlib import Path

from ft_notebook.events import SnapshotCommitted, history, session_topic
from ft_notebook.session import NotebookSession
from ft_notebook.store import CheckpointStore


def test_each_notebooks_snapshots_are_announced_under_its_key(
    isolated_data_dir: Path, unique_name: str
) -> None:
    store = CheckpointStore(isolated_data_dir / "snapshots", keep=None, publish_events=False)
    mine = NotebookSession(store, f"{unique_name}-mine")
    theirs = NotebookSession(store, f"{unique_name}-theirs")
    mine.snapshot({"x": 1}, 1)
    theirs.snapshot({"y": [1, 2], "z": "z"}, 1, name="kept")
    mine.snapshot({"x": 2}, 2, background=True)  # announced by the writer thread
    mine.wait()
    events = history(session_topic())
    announced = [s for s in (e.payload() for e in events) if isinstance(s, SnapshotCommitted)]
    assert len(announced) == len(events)
    assert [(s.notebook, s.name, s.variables) for s in announced] == [
        (f"{unique_name}-mine", "latest", 1),
        (f"{unique_name}-theirs", "kept", 2),
        (f"{unique_name}-mine", "latest", 1),
    ]
