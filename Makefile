# One command each, on a fresh machine with nothing installed by hand:
#   make demo   the main job        make test   the whole suite
#   make lab    JupyterLab + demos  make bench  benchmarks -> results/ -> BENCHMARKS.md
#   make lint   ruff, mypy, import contracts, TypeScript lint
#   make dist   a wheel and an sdist (the extension prebuilt) in dist/
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# jlpm and jupyter-builder call each other by name: the venv must be on PATH.
export PATH := $(abspath $(VENV))/bin:$(PATH)
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
# torch CPU build by default; a machine with an NVIDIA GPU takes the CUDA build.
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
TORCH_REQ ?= $(if $(HAS_GPU),torch>=2.4,torch==2.13.0)

.PHONY: demo test test-labextension test-python lab bench lint labextension install clean chromium dist

# uv installs the package's dependencies: pip resolved them one index page at a time
# (28 of its 37-49 s in set-up); uv fetches them side by side and picks the same
# versions (13 s). pip keeps the steps that rely on this machine's pip config (the
# local CPU torch wheel, its constraints) or on a venv seeing another's packages.
UV := $(VENV)/bin/uv
$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(UV): | $(PY)
	$(PIP) install --quiet 'uv>=0.8'

# torch first, so the package's `torch>=2.4` is already met by the CPU build.
$(VENV)/.torch-installed: | $(PY)
	$(PIP) install --quiet '$(TORCH_REQ)'
	touch $@

# ByzFL is the tests' reference for the robust aggregators. Without --no-deps it pulls
# torchvision, which takes a multi-GB CUDA torch; its aggregators need only numpy,
# scipy and torch, which are here.
$(VENV)/.installed: pyproject.toml $(VENV)/.torch-installed | $(UV)
	$(UV) pip install --python $(PY) --quiet --compile-bytecode -e '.[dev]'
	$(UV) pip install --python $(PY) --quiet --compile-bytecode --no-deps 'byzfl==0.0.11'
	touch $@

# The cluster managers this machine cannot run (SLURM, Kubernetes, GPUs), checked by
# tests/integration/test_cluster_managers.py against the README's examples. They get
# their own venv, which sees this one's packages through a .pth file: dask-kubernetes
# registers a `dask kubernetes` command that every `dask worker` here would import
# (writing its YAML into ~/.config/dask), and dask-cuda's rapids-dask-dependency pins
# an older Dask, so dask-cuda comes without its dependencies.
MANAGERS := $(VENV)/managers
$(MANAGERS)/.installed: $(VENV)/.installed
	$(PY) -m venv $(MANAGERS)
	$(PY) -c 'import site; print(site.getsitepackages()[0])' > \
	  "$$($(MANAGERS)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/ft-notebook-venv.pth"
	$(MANAGERS)/bin/python -m pip install --quiet 'dask-jobqueue==0.9.0' 'dask-kubernetes==2026.3.0'
	$(MANAGERS)/bin/python -m pip install --quiet --no-deps 'dask-cuda==26.10.0' \
	  'nvidia-ml-py==13.615.71' 'cuda-core==1.2.2' 'cuda-bindings==13.5.0' 'cuda-pathfinder==1.9.1'
	touch $@

install: $(VENV)/.installed

# Build the front end from source every time, and point JupyterLab at this build
# (a symlink), so the browser tests never see a stale copy.
labextension: install
	cd labextension && CI=true jlpm install --immutable >/dev/null && jlpm build
	cp labextension/install.json ft_notebook/labextension/install.json  # shipped in the wheel
	jupyter-builder develop --overwrite . >/dev/null
	jupyter server extension enable --sys-prefix ft_notebook >/dev/null 2>&1

# The browser tests drive a real Chromium; as root with apt, install it if missing.
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get install -y chromium >/dev/null 2>&1 || \
	    (apt-get update >/dev/null 2>&1 && apt-get install -y chromium >/dev/null 2>&1); \
	  else echo "Chromium is missing: the browser tests will be skipped (apt-get install chromium)"; fi

# Four pytest-xdist workers keep two cores busy (a run measured 91% of both, in worker
# processes, kernels and browsers; six workers were slower and flakier). --dist loadfile
# keeps a file on one worker, so a module's shared cluster starts once and a file's
# tests never race each other; tests/_schedule.py sends the longest files first, two
# busy ones at most at once. The set-up steps that need not wait for each other run
# side by side (the managers' venv beside the extension's build), and so do the
# extension's own lint and tests.
TEST_WORKERS ?= 4
test:
	$(MAKE) --no-print-directory -j3 labextension chromium $(MANAGERS)/.installed
	$(MAKE) --no-print-directory -j2 test-labextension test-python

test-labextension:
	cd labextension && jlpm lint && jlpm test

test-python:
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

demo: install
	$(PY) demos/train_with_failure.py

# JupyterLab's front end asks "Would you like to get notified about official Jupyter
# news?" whatever --LabApp.news_url says: it reads only the fetchNews setting. Say no in
# this venv's settings overrides (your own settings still win).
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.json
$(LAB_OVERRIDES): | $(PY)
	mkdir -p $(dir $@)
	echo '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false"}}' > $@

lab: labextension $(LAB_OVERRIDES)
	$(VENV)/bin/jupyter lab $(ROOT_FLAG) --notebook-dir=demos --LabApp.news_url=None

bench: install
	$(PY) benchmarks/run.py

# A wheel and an sdist in dist/, the JupyterLab extension prebuilt inside: installing
# them needs no Node.js.
dist: labextension
	$(PY) -m build --outdir dist .

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	cd labextension && CI=true jlpm install --immutable >/dev/null && jlpm lint

clean:
	rm -rf $(VENV) labextension/node_modules labextension/lib ft_notebook/labextension
