"""attention_helpers.distributed: run() in new gloo processes, ring attention against PyTorch's SDPA, and
data-parallel training against one process. Starting processes costs seconds, so each launch checks several things."""

import multiprocessing
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from attention_helpers import distributed
from attention_helpers.distributed import examples

ROOT = Path(__file__).resolve().parent.parent
# (batch, heads, num_tokens, head_dim): odd lengths, a length not divisible by 2, 3 or 4, and one shard of 1 token
SHAPES = [(2, 3, 11, 8), (1, 2, 7, 6), (1, 1, 4, 4)]


def ring_cases(rank, world_size):
    """This rank's ring output for every shape, causal and not (values half as wide as keys)."""
    return {
        (shape, causal): examples.ring_shard(rank, world_size, 7, shape, causal)
        for shape in SHAPES
        if shape[2] >= world_size
        for causal in (False, True)
    }


def expected(shape, causal):
    q, k, v = examples.full_qkv(7, *shape)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def assert_ring_equals_sdpa(per_rank):
    assert per_rank[0], "no case ran"
    for key in per_rank[0]:
        shards = [outs[key] for outs in per_rank]
        lengths = [s.shape[2] for s in shards]
        assert lengths == [len(c) for c in torch.arange(key[0][2]).tensor_split(len(per_rank))], lengths
        difference = (torch.cat(shards, dim=2) - expected(*key)).abs().max().item()
        assert difference < 1e-5, (key, len(per_rank), difference)


def bad_shards(rank, world_size):
    """Every rank's error for four mistakes made by rank 1 only, each in a fresh ring_attention call."""
    q, k, v = (t.tensor_split(world_size, dim=2)[rank] for t in examples.full_qkv(0, 1, 2, 9, 4))
    mistakes = {
        "head_dim": (q, k, v) if rank == 0 else (q[..., :3], k[..., :3], v),
        "dtype": (q, k, v) if rank == 0 else (q.double(), k.double(), v.double()),
        "rank": (q, k, v) if rank == 0 else (q[0], k[0], v[0]),
        "lengths": (q, k, v) if rank == 0 else (q[:, :, :1], k[:, :, :1], v[:, :, :1]),
    }
    errors = {}
    for mistake, tensors in mistakes.items():
        try:
            distributed.ring_attention(*tensors)
        except (TypeError, ValueError) as error:
            errors[mistake] = f"{type(error).__name__}: {error}"
    return errors


def two_rank_checks(rank, world_size):
    return {"collectives": examples.collectives(rank, world_size), "ring": ring_cases(rank, world_size)} | {
        "errors": bad_shards(rank, world_size)
    }


def test_two_ranks_collectives_ring_and_bad_input_on_every_rank():
    per_rank = distributed.run(two_rank_checks, 2)
    first, second = (r["collectives"] for r in per_rank)
    for seen in (first, second):
        assert torch.equal(seen["all_reduce"], first["mine"] + second["mine"])
        assert torch.equal(seen["broadcast"], first["mine"])
    assert torch.equal(first["received"], second["mine"]) and torch.equal(second["received"], first["mine"])
    assert_ring_equals_sdpa([r["ring"] for r in per_rank])
    errors = [r["errors"] for r in per_rank]
    assert errors[0] == errors[1], "every rank must raise the same error"
    assert set(errors[0]) == {"head_dim", "dtype", "rank", "lengths"}, errors[0]
    assert errors[0]["head_dim"].startswith("ValueError") and "rank 1" in errors[0]["head_dim"]
    assert errors[0]["dtype"].startswith("TypeError") and "torch.float64" in errors[0]["dtype"]
    assert "rank 1's shard is wrong" in errors[0]["rank"] and "(2, 4, 4)" in errors[0]["rank"]
    assert "tensor_split" in errors[0]["lengths"] and "[5, 1]" in errors[0]["lengths"]


@pytest.mark.parametrize("world_size", [1, 3, 4])
def test_ring_attention_equals_sdpa(world_size):
    """P = 1 is plain attention; 3 and 4 ranks share this machine's cores (oversubscribe): results only."""
    assert_ring_equals_sdpa(distributed.run(ring_cases, world_size, oversubscribe=True))


def test_ring_schedule_and_shard_lengths():
    held, computed = distributed.ring_schedule(4, causal=True)
    assert held[:, 0].tolist() == [0, 1, 2, 3], "hop 0: every rank holds its own block"
    for rank in range(4):
        assert sorted(held[rank].tolist()) == [0, 1, 2, 3], "every rank sees every block once"
        assert computed[rank].sum() == rank + 1, "causal: rank r computes blocks 0..r"
    assert held[1, 1] == 0, "rank 1 receives from rank 0"
    assert distributed.ring_schedule(3)[1].all()
    for n, p in ((11, 4), (8, 3), (5, 5)):
        assert distributed.shard_lengths(n, p) == [len(c) for c in torch.arange(n).tensor_split(p)]


def fails_on_rank_1(rank, world_size):
    if rank == 1:
        raise ValueError("planted failure")
    dist.all_reduce(torch.ones(1))  # rank 0 waits here for a partner that never comes; run() stops it
    return rank


def waits_forever_on_rank_0(rank, world_size):
    if rank == 0:
        dist.recv(torch.empty(1), src=1)  # rank 1 never sends: gloo's timeout must end this
    else:
        time.sleep(8)  # alive, but busy elsewhere (a rank that returned would close the connection at once)
    return rank


def test_a_failing_rank_is_named_and_no_process_is_left():
    with pytest.raises(distributed.RankError, match=r"rank 1 of 2 failed: ValueError: planted failure"):
        distributed.run(fails_on_rank_1, 2)
    assert multiprocessing.active_children() == []
    with pytest.raises(distributed.RankError, match=r"rank 0 of 2 failed: .*[Tt]imed out"):
        distributed.run(waits_forever_on_rank_0, 2, timeout=3)
    assert multiprocessing.active_children() == []


def test_bad_calls_fail_at_once():
    for world_size, error in ((0, ValueError), (distributed.cpu_count() + 1, ValueError), (1.5, TypeError)):
        with pytest.raises(error, match="world_size"):
            distributed.run(examples.collectives, world_size)
    with pytest.raises(TypeError, match="fn must be a function"):
        distributed.run("collectives", 1)
    with pytest.raises(ValueError, match="timeout"):
        distributed.run(examples.collectives, 1, timeout=0)
    q = torch.randn(1, 1, 4, 8)
    with pytest.raises(RuntimeError, match="inside a process group"):
        distributed.ring_attention(q, q, q)


def torchrun_losses(num_processes, steps, seed):
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(num_processes)]
    command += ["--standalone", "-m", "attention_helpers.distributed.train_gpt"]
    command += ["--steps", str(steps), "--seed", str(seed)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = re.findall(r"^step (\d+) loss ([\d.]+)$", done.stdout, re.M)
    assert [int(step) for step, _ in lines] == list(range(steps)), done.stdout
    return [float(loss) for _, loss in lines]


def test_torchrun_data_parallel_losses_equal_one_process():
    """One process on the whole batch is the reference; torchrun with 1 and 2 processes must print its losses."""
    steps, seed = 4, 3
    reference = distributed.train_one_process(steps, seed)
    assert reference[-1] < reference[0], "the model must learn something in the steps compared"
    for num_processes in (1, 2):
        losses = torchrun_losses(num_processes, steps, seed)
        assert max(abs(a - b) for a, b in zip(losses, reference, strict=True)) < 1e-5, (num_processes, losses)


def test_batch_must_split_evenly():
    with pytest.raises(ValueError, match="multiple of the world size 3"):
        distributed.data_parallel.check_batch_size(16, 3)
