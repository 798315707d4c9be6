"""%ft cluster and %ft chaos in a real kernel, on a real private cluster."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ft_notebook.testing import KernelSession, poll_for

pytestmark = pytest.mark.slow


@pytest.fixture
def nb(tmp_path: Path) -> Iterator[KernelSession]:
    session = KernelSession(tmp_path / "kernel.log", cwd=tmp_path, env=dict(os.environ)).start()
    session.execute("%load_ext ft_notebook").check()
    try:
        yield session
    finally:
        session.execute("%ft cluster down --name magic", timeout=120)
        session.shutdown()


def test_cluster_up_chaos_kill_and_down_from_magics(nb: KernelSession) -> None:
    up = nb.execute("%ft cluster up --name magic --workers 2", timeout=180).check()
    assert "ft: cluster 'magic' at tls://127.0.0.1:" in up.stdout
    pids = nb.execute(
        "import os\nc = _\nprint(sorted(c.run(os.getpid).values()))", silent=False
    ).check()
    before = pids.stdout.strip()
    killed = nb.execute("%ft chaos kill random --name magic").check()
    assert "sent SIGKILL to worker" in killed.stdout

    def replaced() -> bool:
        out = nb.execute("print(sorted(c.run(os.getpid).values()))").stdout.strip()
        return out != before and out.count(",") == 1  # two workers again, one new

    poll_for(replaced, timeout=60, what="the nanny to restart the killed worker")
    status = nb.execute("%ft cluster status --name magic").check()
    assert status.stdout.count("running") >= 2, status.stdout
    bad = nb.execute("%ft chaos explode random")
    assert (bad.status, bad.error_name) == ("error", "UsageError")

    # a service on the same TLS cluster: replicas as chaos targets
    nb.execute(
        "import ft_notebook as ft, torch\n"
        "from ft_notebook.testing.serving import small_mlp\n"
        "svc = ft.serve(small_mlp, 2, name='m', cluster=c, example=torch.zeros(1, 32))",
        timeout=120,
    ).check()
    slowed = nb.execute("%ft chaos slow replica:m/0 --ms 50 --fraction 0.5 --name magic").check()
    assert "replica m/0 (worker" in slowed.stdout
    assert "50 ms longer on 50% of its calls" in slowed.stdout
    resumed = nb.execute("%ft chaos resume replica:m/0 --name magic").check()
    assert "sent SIGCONT" in resumed.stdout
    assert "replica m/0 no longer slowed" in resumed.stdout
    killed = nb.execute("%ft chaos kill replica:m/1 --name magic").check()
    assert "sent SIGKILL to worker" in killed.stdout
    answers = nb.execute(
        "a = [svc.call(torch.ones(1, 32)) for _ in range(30)]\n"
        "print(sorted({x.tier.value for x in a}), svc.router.counts['failed'])"
    ).check()
    assert answers.stdout.strip().endswith(" 0"), answers.stdout  # nothing failed
    isolated = nb.execute("%ft chaos isolate cpu0 --name magic").check()
    assert "worker 'cpu0' can no longer meet its peers in a new group" in isolated.stdout
    probe = (
        "from ft_notebook.train.rank._partition import isolated\n"
        "print(any(c.run(isolated).values()))"
    )
    assert nb.execute(probe).check().stdout.strip() == "True"
    resumed = nb.execute("%ft chaos resume cpu0 --name magic").check()
    assert "worker 'cpu0' meets its peers in new groups again" in resumed.stdout
    assert nb.execute(probe).check().stdout.strip() == "False"
    for wrong in (
        "%ft chaos isolate replica:m/0",  # a replica is not in a training group
        "%ft chaos slow 0 --ms 5",
        "%ft chaos slow replica:m/0",
        "%ft chaos kill m/",
        "%ft chaos byzantine 0 --attack label-flip",  # a data attack: no worker makes it
        "%ft chaos byzantine 0 --z 1.5",  # --z is ALIE's
    ):
        refused = nb.execute(wrong + " --name magic")
        assert refused.status == "error", wrong
        assert refused.error_name in ("UsageError", "ServeError", "ClusterError"), wrong
    down = nb.execute("%ft cluster down --name magic", timeout=120).check()
    assert "stopped" in down.stdout
