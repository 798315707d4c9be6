"""ft_notebook.yaml as a Python literal: generated, do not edit.

Importing this compiled module costs nothing next to parsing the YAML (and
importing PyYAML), 25 ms of every ``%load_ext ft_notebook``. After editing
ft_notebook.yaml, regenerate it (a unit test fails until then)::

    .venv/bin/python -m ft_notebook.config > ft_notebook/_defaults.py
"""

DEFAULTS = {
    "ft-notebook": {
        "data-dir": None,
        "events": {
            "transport": "auto",
        },
        "cluster": {
            "heartbeat-interval": "500ms",
            "hung-after": "2s",
            "idle-timeout": "30 minutes",
            "interface": None,
            "workers": "auto",
            "gpus": "auto",
            "port": 0,
            "dashboard-port": None,
            "start-timeout": "120s",
            "connect-timeout": "15s",
            "worker-start": "forkserver",
        },
        "train": {
            "checkpoint-every": 50,
            "mtbf": "6h",
            "mtbf-from-journal": True,
            "store-keep": 3,
            "min-workers": 1,
            "warmup-timeout": "300s",
            "fast-recovery": True,
            "survivor-groups-max-world": 16,
            "rendezvous-timeout": "30s",
            "collective-timeout": "600s",
            "stall-factor": 30,
            "stall-min": "10s",
            "first-steps-floor": "300s",
            "nonfinite-limit": 3,
            "ordered-sums": True,
            "deterministic-chunks": 8,
            "device": "auto",
            "amp": False,
            "on-violation": "stall",
        },
        "serve": {
            "health-interval": "200ms",
            "health-timeout": "500ms",
            "deadline": "10s",
            "retries": 2,
            "retry-budget": 0.2,
            "hedge-budget": 0.05,
            "hedge-after-min": "5ms",
            "breaker-failures": 3,
            "breaker-open": "1s",
            "max-queue": 256,
            "warmup-timeout": "300s",
            "max-request-bytes": "auto",
            "hedge-max-bytes": "1 MiB",
            "fallback-rate": 1000,
            "sandbox": True,
        },
        "server": {
            "chaos-actions": False,
        },
    },
}
