"""The rank actor is made of parts, each passed what it needs (issue 17). That no class
declares another's methods as ``TYPE_CHECKING`` stubs is checked for the whole package
(``tests/unit/store/test_no_owner_stubs.py``), and the bound on a module's size for
all of ``train/`` (``test_coordinator_parts.py``)."""

from __future__ import annotations

import json


def test_a_rank_describes_its_phase_as_plain_json() -> None:
    from ft_notebook.train.protocol import Phase
    from ft_notebook.train.rank._actor import RankActor

    actor = RankActor(b"", "r", "w1", True, "inc", worker=None)
    actor.reporter.set_phase(Phase.REDUCE)
    described = json.loads(json.dumps(actor.describe()))
    assert described["phase"] == "reduce"
    assert (described["step"], described["gen"], described["alive"]) == (-1, 0, False)
