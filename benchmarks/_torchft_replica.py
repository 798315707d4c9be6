"""One torchft replica for ``bench_torchft.py`` (runs in the torchft venv).

A replica group of one process: its own TCPStore, a ``ProcessGroupGloo`` with a 1 s
timeout, torchft's ``Manager`` (heartbeats every 100 ms) against the Lighthouse,
``OptimizerWrapper`` as in torchft's own examples, and one flat ``manager.allreduce``
of the gradients per step (torchft's DDP comm hook fails an assertion on the dummy
work it is handed after a failed collective: it took the replicas down here).
It trains the drill MLP (32-128-128-4, AdamW lr 1e-3) on the drill data, its third of
each global batch, and writes one JSON line per step: the time, the manager's step
after it, whether it committed, and how many replicas took part.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import timedelta

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--replica", type=int, required=True)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--lighthouse", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch", type=int, default=96)
    p.add_argument("--samples", type=int, default=12288)
    p.add_argument("--delay", type=float, default=0.0)
    args = p.parse_args()
    torch.set_num_threads(1)

    import torch.distributed as dist
    from torchft import Manager, ProcessGroupGloo
    from torchft.optim import OptimizerWrapper

    g = torch.Generator().manual_seed(7)  # the drill problem's data
    x = torch.randn(args.samples, 32, generator=g)
    y = torch.randint(0, 4, (args.samples,), generator=g)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 4),
    )
    inner = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def state_dict() -> dict[str, object]:
        return {"model": model.state_dict(), "optim": inner.state_dict()}

    def load_state_dict(state: dict[str, object]) -> None:
        model.load_state_dict(state["model"])  # type: ignore[arg-type]
        inner.load_state_dict(state["optim"])  # type: ignore[arg-type]

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    manager = Manager(
        pg=ProcessGroupGloo(timeout=timedelta(seconds=1)),
        min_replica_size=1,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"replica_{args.replica}",
        store_addr="127.0.0.1",
        store_port=store.port,
        rank=0,
        world_size=1,
        lighthouse_addr=args.lighthouse,
        timeout=timedelta(seconds=1),
        quorum_timeout=timedelta(seconds=5),
        connect_timeout=timedelta(seconds=5),
        heartbeat_interval=timedelta(milliseconds=100),
    )
    params = list(model.parameters())
    optimizer = OptimizerWrapper(manager, inner)
    share = args.batch // args.replicas
    steps_per_epoch = args.samples // args.batch
    with open(args.out, "a") as out:
        out.write(json.dumps({"ready": time.time(), "pid": os.getpid()}) + "\n")
        out.flush()
        while manager.current_step() < args.steps:
            optimizer.zero_grad()  # starts the quorum
            step = manager.current_step()
            epoch, k = divmod(step, steps_per_epoch)
            order = torch.randperm(args.samples, generator=torch.Generator().manual_seed(epoch))
            batch = order[k * args.batch : (k + 1) * args.batch]
            mine = batch[args.replica * share : (args.replica + 1) * share]
            if args.delay:
                time.sleep(args.delay)  # the data's fetch time, as in the ft arm
            loss = torch.nn.functional.cross_entropy(model(x[mine]), y[mine])
            loss.backward()
            # one flat all-reduce (AVG over the participants), as ft.fit does; torchft's
            # DDP hook asserts on the dummy work it gets after a failed collective
            flat = torch.cat([q.grad.reshape(-1) for q in params])  # type: ignore[union-attr]
            manager.allreduce(flat).wait()
            offset = 0
            for q in params:
                q.grad.copy_(flat[offset : offset + q.numel()].view_as(q))  # type: ignore[union-attr]
                offset += q.numel()
            optimizer.step()  # commits only if every participant's step went through
            after = manager.current_step()
            record = {
                "t": time.time(),
                "step": after,
                "committed": after > step,
                "participants": manager.num_participants(),
            }
            out.write(json.dumps(record) + "\n")
            out.flush()
    manager.shutdown(wait=False)


if __name__ == "__main__":
    main()
