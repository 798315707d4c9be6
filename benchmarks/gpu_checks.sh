#!/usr/bin/env bash
# The GPU checks of one device lease, in one go: the `gpu`/`gpu2` tests, then the
# single-GPU throughput benchmark (ft.fit against torchrun DDP, NCCL, bf16 autocast).
#
#     bash benchmarks/gpu_checks.sh        # in the repository root, on the GPU machine
#
# That machine's python3 has torch but no Dask: where `.whl/` holds wheels of what it
# lacks (the README's GPU section says which), they are installed under /tmp/site
# first. Logs, and the benchmark's raw results (benchmarks/results/train-cuda.json, to
# commit with the rendered BENCHMARKS.md), go to $OUT (default /tmp/ft-gpu-out).
set -u
OUT=${OUT:-/tmp/ft-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c 'import torch, dask; print("torch", torch.__version__, "cuda", torch.version.cuda,
    "nccl", torch.cuda.nccl.version(), "dask", dask.__version__, "gpus", torch.cuda.device_count())'

# The plugin is named because here the package is on PYTHONPATH, not installed (no
# entry point). Warnings are shown, not errors: this machine's package versions differ.
timeout "${TEST_LIMIT_S:-200}" python3 -m pytest -p ft_notebook.testing.plugin -p no:cacheprovider \
    -m "gpu or gpu2" -W default -v -rs \
    tests/unit/store/test_store_gpu.py tests/integration/test_cluster_gpu.py \
    tests/integration/test_train_gpu.py 2>&1 | tee "$OUT/pytest.log"
echo "pytest exit: ${PIPESTATUS[0]}"

# ft-f32 is left out by default (ARMS): 3 rounds of 4 arms may not fit the time limit.
started=$(mktemp)
timeout "${BENCH_LIMIT_S:-200}" python3 benchmarks/bench_train.py --only throughput \
    --workers 1 --device cuda --amp --pairs "${PAIRS:-3}" --arms "${ARMS:-ft,torchrun,ft-ckpt}" \
    --features 1024 --hidden 131072 --batch 4096 --steps-per-epoch 4 --steps 120 --warmup 30 \
    >"$OUT/bench.log" 2>&1
echo "bench exit: $?"
tail -20 "$OUT/bench.log"
if [ benchmarks/results/train-cuda.json -nt "$started" ]; then
    cp benchmarks/results/train-cuda.json "$OUT/"
    # the table as BENCHMARKS.md will show it (render.py needs only the standard library)
    python3 -c 'import json, sys; sys.path.insert(0, "benchmarks"); import render
doc = json.load(open("benchmarks/results/train-cuda.json"))
for t in doc["tables"]:
    print("\n".join(render.table(t, "benchmarks/results/train-cuda.json")))'
else
    echo "benchmarks/results/train-cuda.json not written by this run: the benchmark saved nothing"
fi
