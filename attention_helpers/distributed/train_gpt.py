"""Train lesson 10's GPT data-parallel from a shell; one ``step <i> loss <x>`` line per step, the global batch's loss.

    python -m torch.distributed.run --nproc-per-node 2 -m attention_helpers.distributed.train_gpt --steps 20
    torchrun --nproc-per-node 2 -m attention_helpers.distributed.train_gpt --steps 20 --seed 1
    python -m attention_helpers.distributed.train_gpt --steps 20          # one process, no launcher

``torchrun`` starts the processes and tells each its rank through environment variables (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``). With the same ``--seed`` and ``--batch-size``, 1, 2 or 4
processes print the same losses to within float rounding. Each rank uses one thread.
"""

from __future__ import annotations

import argparse
import datetime
import os

import torch
import torch.distributed as dist

from .data_parallel import train_data_parallel
from .launch import free_port


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="optimiser steps (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and the batches (default 0)")
    parser.add_argument("--batch-size", type=int, default=16, help="global batch, split over the ranks (16)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a collective waits (default 60)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    launched = "WORLD_SIZE" in os.environ  # torchrun set the rank and the meeting point
    init_method = "env://" if launched else f"tcp://127.0.0.1:{free_port()}"
    rank, world_size = (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])) if launched else (0, 1)
    timeout = datetime.timedelta(seconds=args.timeout)
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size, timeout=timeout)
    try:
        log = (lambda step, loss: print(f"step {step} loss {loss:.6f}", flush=True)) if rank == 0 else None
        return train_data_parallel(rank, world_size, args.steps, args.seed, args.batch_size, log)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
