"""Attention across processes with ``torch.distributed`` (lesson 13): data-parallel training and ring attention.

- :func:`run` starts ``world_size`` processes in a gloo process group and returns what each rank's function
  returned; the functions it runs live in modules (:mod:`.examples`), since the new processes import them.
- :func:`ring_attention` computes attention over a sequence split across the ranks, passing key/value blocks
  around a ring and merging lesson 11's partial results; :func:`ring_schedule` says who holds which block when.
- :mod:`.data_parallel` trains lesson 10's GPT with ``DistributedDataParallel``; ``python -m
  torch.distributed.run --nproc-per-node N -m attention_helpers.distributed.train_gpt`` runs it from a shell.

Not imported by ``import attention_helpers``: ``import attention_helpers.distributed`` loads it.
"""

from .data_parallel import data_parallel_gradients, train_data_parallel, train_one_process
from .launch import RankError, cpu_count, run
from .ring import ring_attention, ring_schedule, shard_lengths

__all__ = [
    "RankError",
    "cpu_count",
    "data_parallel_gradients",
    "ring_attention",
    "ring_schedule",
    "run",
    "shard_lengths",
    "train_data_parallel",
    "train_one_process",
]
