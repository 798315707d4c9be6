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
            "dashboard-port": 0,
            "start-timeout": "120s",
            "connect-timeout": "15s",
        },
        "train": {
            "stall-factor": 30,
            "stall-min": "10s",
            "first-steps-floor": "300s",
            "nonfinite-limit": 3,
            "float64-sums": True,
        },
        "server": {
            "chaos-actions": False,
        },
    },
}
