"""Plain DDP reference of ``bench_scale.py`` (run under torchrun).

The same model (``ft_notebook.testing.training.scale_mlp``), data
(``scale_problem``'s tensors), per-epoch permutation (the seeded order
``ft_notebook.train.epoch_order`` computes), optimizer (AdamW, lr 1e-3) and global
batch, split in contiguous slices between the ranks; gloo on CPU, one thread per
process. Rank 0 writes the wall time after every step to ``--out``::

    torchrun --standalone --nproc_per_node=3 benchmarks/_ddp_scale.py \\
        --hidden 4096 --steps 30 --out t.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ft_notebook.testing.training import scale_problem


def epoch_order(seed: int, epoch: int, size: int) -> np.ndarray:
    # the same permutation as ft_notebook.train.epoch_order
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch])))
    return rng.permutation(size)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    problem = scale_problem(args.hidden)
    x, y = problem["data"].tensors
    batch, size = problem["batch_size"], len(x)
    torch.manual_seed(args.seed)  # as ft's Trainer: the same initial weights everywhere
    model = DistributedDataParallel(problem["model"]())
    optimizer = problem["optimizer"](model.parameters())
    lo, hi = rank * batch // world, (rank + 1) * batch // world
    steps_per_epoch = -(-size // batch)

    dist.barrier()
    times = [time.time()]
    for step in range(args.steps):
        epoch, k = divmod(step, steps_per_epoch)
        order = epoch_order(args.seed, epoch, size)[k * batch : (k + 1) * batch]
        idx = torch.from_numpy(order[lo:hi])
        optimizer.zero_grad(set_to_none=True)
        loss = problem["loss"](model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        times.append(time.time())
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump({"times": times, "loss": float(loss.detach())}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
