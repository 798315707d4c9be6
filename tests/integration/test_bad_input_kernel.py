"""The magics' bad inputs in a real kernel (issue 36 item 7, issue 38's magic friction):
an argument mistake is a UsageError with the usage, raised before the cell runs; any
other FTError keeps its type and message, without the library's traceback; a failing
``%%ft checkpoint`` cell shows the user's own line."""

from __future__ import annotations

from ft_notebook.testing import KernelSession

MAGIC_MISTAKES = [
    # (line, what the UsageError says)
    ("%%ft checkpoint --name ../x\nran = True", "The snapshot name '../x' cannot be used"),
    ("%%ft checkpoint --name latest\nran = True", "'latest' always means the newest"),
    ("%ft save ../x", "The snapshot name '../x' cannot be used"),
    ("%ft cluster attach garbage://x", "Dask knows no protocol 'garbage'"),
    ("%ft cluster attach /no/such.json", "the scheduler file /no/such.json does not exist"),
    ("%ft cluster status --name ../x", "The cluster name '../x' cannot be used"),
    ("%ft dashboard ../run", "The run name '../run' cannot be used"),
    ("%ft plan --mtbf 0s --cost 2s", "mtbf must be a positive number"),
]


def test_argument_mistakes_are_usage_errors_raised_before_the_cell_runs(
    notebook: KernelSession,
) -> None:
    for line, message in MAGIC_MISTAKES:
        result = notebook.execute(line)
        assert (result.status, result.error_name) == ("error", "UsageError"), (line, result)
        assert message in (result.error_value or ""), (line, result.error_value)
        assert "usage" in result.error_value.lower() or "%ft" in result.error_value, line
        assert "Traceback" not in result.traceback, (line, result.traceback)
        assert "unsafe" not in (result.error_value or "").lower(), line
    # no cell body ran
    assert notebook.execute("print('ran' in dir())").check().stdout.strip() == "False"


def test_an_attach_target_in_the_usage_names_what_attach_takes(notebook: KernelSession) -> None:
    result = notebook.execute("%ft cluster attach garbage://x")
    assert "%ft cluster attach TARGET" in result.error_value
    assert "distributed" not in result.traceback  # no trace of Dask's insides


def test_an_ft_error_keeps_its_type_and_message_without_a_traceback(
    notebook: KernelSession,
) -> None:
    notebook.execute("x = 1\n%ft save").check()
    missing = notebook.execute("%ft restore nothere")
    assert missing.error_name == "SnapshotError", missing
    assert "There is no snapshot 'nothere'" in missing.error_value
    assert "ft_notebook/" not in missing.traceback, missing.traceback
    assert missing.traceback.count("\n") < 3, missing.traceback


def test_a_comment_after_a_magic_is_not_taken_as_arguments(notebook: KernelSession) -> None:
    result = notebook.execute("%ft chaos byzantine 3 --attack sign-flip # the README's comment")
    # parsed: it goes on to look for the cluster (none runs here), not "unrecognized"
    assert result.error_name == "ClusterError", result
    assert "No cluster named 'default'" in result.error_value
    assert "unrecognized arguments" not in result.error_value


def test_a_failing_checkpoint_cell_shows_the_users_line(notebook: KernelSession) -> None:
    result = notebook.execute("%%ft checkpoint\nfirst = 1\nsecond = [1][2]\n")
    assert result.error_name == "IndexError", result
    shown = result.traceback
    assert "second = [1][2]" in shown, shown
    assert "line 3" in shown, shown  # the line of the cell as the user sees it
    assert "Could not get source" not in shown
    assert "ft_notebook/session" not in shown, shown
    assert "_shell.py" not in shown, shown
    # the transaction rolled the cell back
    assert notebook.execute("print('first' in dir())").check().stdout.strip() == "False"
