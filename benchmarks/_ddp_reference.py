"""Plain DDP reference of ``bench_train.py``'s throughput arm (run under torchrun).

The same model (``ft_notebook.testing.training.mlp``), data (the tensors of
``regression_problem``, indexed like a TensorDataset), per-epoch permutation (the
seeded order ``ft_notebook.train.epoch_order`` computes), optimizer (Adam, lr 1e-2)
and global batch, split in contiguous halves between the two ranks; gloo on CPU, one
thread per process. With ``--device cuda``: NCCL, rank ``r`` on GPU ``r``, each batch
copied to the GPU as ``ft.fit`` does, the loss read back after every step (as a loop
that logs it would; ``ft.fit`` reads it for its non-finite check), and with
``--amp`` the forward pass under bf16 autocast. Rank 0 writes the wall time after
every step to ``--out``::

    torchrun --standalone --nproc_per_node=2 benchmarks/_ddp_reference.py \\
        --size 5120 --batch 512 --features 512 --hidden 2048 --epochs 20 --out t.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ft_notebook.testing.training import mlp, regression_problem


def epoch_order(seed: int, epoch: int, size: int) -> np.ndarray:
    # the same permutation as ft_notebook.train.epoch_order
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch])))
    return rng.permutation(size)


def main() -> None:
    parser = argparse.ArgumentParser()
    for flag in ("--size", "--batch", "--features", "--hidden", "--epochs"):
        parser.add_argument(flag, type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--amp", action="store_true")
    args = parser.parse_args()

    torch.set_num_threads(1)
    cuda = args.device.startswith("cuda")
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    problem = regression_problem(
        size=args.size, batch=args.batch, features=args.features, hidden=args.hidden
    )
    x, y = problem["data"].tensors
    torch.manual_seed(args.seed)  # as ft's Trainer: the same initial weights everywhere
    model = mlp(args.features, args.hidden).to(device)
    model = DistributedDataParallel(model, device_ids=[rank] if cuda else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    per_rank = args.batch // world
    lo, hi = rank * per_rank, (rank + 1) * per_rank
    steps_per_epoch = -(-args.size // args.batch)

    dist.barrier()
    times = [time.time()]
    for epoch in range(args.epochs):
        order = epoch_order(args.seed, epoch, args.size)
        for k in range(steps_per_epoch):
            batch = order[k * args.batch : (k + 1) * args.batch]
            idx = torch.from_numpy(batch[lo:hi])
            xb, yb = x[idx].to(device, non_blocking=True), y[idx].to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.amp and cuda):
                loss = torch.nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            optimizer.step()
            if cuda:
                float(loss)  # the step is done on the GPU before its time is taken
            times.append(time.time())
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump({"times": times, "loss": float(loss.detach())}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
