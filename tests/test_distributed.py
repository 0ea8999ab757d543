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
from torch.nn.parallel import DistributedDataParallel

from attention_helpers import distributed
from attention_helpers.distributed import data_parallel, examples
from attention_helpers.text import next_token_batch

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


@pytest.mark.slow
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


# --- ring attention in low precision, and its gradients ------------------------------------------------------------

GRAD_SHAPES = [(2, 3, 11, 8), (1, 2, 7, 6)]  # odd lengths: shards of unequal length for P = 2, 3, 4


def full_qkv_and_grad(shape):
    """The whole sequence's q, k, v (values half as wide) and an upstream gradient for the output."""
    q, k, v = examples.full_qkv(5, *shape)
    return q, k, v, torch.randn(v.shape, generator=torch.Generator().manual_seed(6))


def ring_forward_backward(rank, world_size, dtype):
    """This rank's output and dQ, dK, dV for every shape, causal and not, in ``dtype``."""
    results = {}
    for shape in GRAD_SHAPES:
        for causal in (False, True):
            shards = [t.tensor_split(world_size, dim=2)[rank].to(dtype) for t in full_qkv_and_grad(shape)]
            q, k, v = (t.clone().requires_grad_() for t in shards[:3])
            out = distributed.ring_attention(q, k, v, causal=causal)
            out.backward(shards[3])
            results[shape, causal] = (out.detach(), q.grad, k.grad, v.grad)
    return results


def sdpa_forward_backward(shape, causal, dtype):
    """The reference: PyTorch's SDPA on the whole sequence, in float32 from the same (rounded) inputs."""
    q, k, v, grad = (t.to(dtype).float() for t in full_qkv_and_grad(shape))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    out.backward(grad)
    return out.detach(), q.grad, k.grad, v.grad


def ring_errors(per_rank, dtype):
    """The largest difference from SDPA of the output, dQ, dK and dV over every case, checking dtypes on the way."""
    worst = [0.0] * 4
    for key in per_rank[0]:
        for i, reference in enumerate(sdpa_forward_backward(*key, dtype)):
            pieces = [outs[key][i] for outs in per_rank]
            assert all(p.dtype == dtype for p in pieces), (key, i, [p.dtype for p in pieces], dtype)
            worst[i] = max(worst[i], (torch.cat(pieces, dim=2).float() - reference).abs().max().item())
    return worst


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_ring_attention_gradients_equal_sdpa(world_size):
    """dQ, dK and dV of the ring (its backward pass is a second ring) equal SDPA's, for 1 to 4 ranks."""
    per_rank = distributed.run(ring_forward_backward, world_size, torch.float32, oversubscribe=True)
    out_error, *grad_errors = ring_errors(per_rank, torch.float32)
    assert out_error < 1e-5 and max(grad_errors) < 1e-5, (world_size, out_error, grad_errors)


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float16, 2e-3), (torch.bfloat16, 2e-2)])
def test_ring_attention_in_low_precision_keeps_the_dtype(dtype, tolerance):
    """float16 and bfloat16 shards give outputs and gradients of their own dtype, within its rounding of SDPA's
    float32 result on the same inputs (the ring accumulates in float32 and rounds once)."""
    per_rank = distributed.run(ring_forward_backward, 3, dtype, oversubscribe=True)
    errors = ring_errors(per_rank, dtype)
    assert max(errors) < tolerance, (dtype, errors)


def grad_on_rank_0_only(rank, world_size):
    q, k, v = (t.tensor_split(world_size, dim=2)[rank] for t in examples.full_qkv(0, 1, 2, 6, 4))
    try:
        distributed.ring_attention(q.requires_grad_(rank == 0), k, v)
    except ValueError as error:
        return str(error)


def test_inputs_requiring_grad_on_some_ranks_only_are_refused_on_every_rank():
    errors = distributed.run(grad_on_rank_0_only, 2)
    assert errors[0] == errors[1] and "require grad" in errors[0] and "every rank" in errors[0], errors


# --- data-parallel gradients ---------------------------------------------------------------------------------------


def torch_ddp_gradients(rank, world_size, seed, batch_size):
    """PyTorch's DistributedDataParallel on the same model and this rank's contiguous slice of the same batch."""
    data, vocab_size = data_parallel.training_ids()
    model = DistributedDataParallel(data_parallel.new_model(seed, vocab_size))
    generator = torch.Generator().manual_seed(seed)
    inputs, targets = next_token_batch(data, batch_size, data_parallel.CONTEXT_LENGTH, generator)
    per_rank = batch_size // world_size
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    logits = model(inputs[mine])  # (per_rank, 32, vocab_size)
    F.cross_entropy(logits.flatten(0, 1), targets[mine].flatten()).backward()
    return {name: param.grad.clone() for name, param in model.module.named_parameters()}


def both_gradients(rank, world_size, seed, batch_size):
    return {
        "package": distributed.data_parallel_gradients(rank, world_size, seed, batch_size),
        "torch_ddp": torch_ddp_gradients(rank, world_size, seed, batch_size),
    }


def one_process_gradients(seed, batch_size):
    """The whole global batch in one process: the gradient of its mean loss."""
    data, vocab_size = data_parallel.training_ids()
    model = data_parallel.new_model(seed, vocab_size)
    generator = torch.Generator().manual_seed(seed)
    inputs, targets = next_token_batch(data, batch_size, data_parallel.CONTEXT_LENGTH, generator)
    F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten()).backward()
    return {name: param.grad for name, param in model.named_parameters()}


def test_data_parallel_gradients_equal_one_process_and_torch_ddp():
    """Before any optimiser step (AdamW would hide a constant factor), every one of 3 ranks holds the gradient that
    one process computes on the whole batch, and the one PyTorch's DDP computes in the same setting."""
    seed, batch_size = 2, 12
    per_rank = distributed.run(both_gradients, 3, seed, batch_size, oversubscribe=True)
    reference = one_process_gradients(seed, batch_size)
    for rank, grads in enumerate(per_rank):
        assert grads["package"].keys() == reference.keys()
        for name, expected in reference.items():
            torch.testing.assert_close(
                grads["package"][name], expected, atol=1e-6, rtol=1e-4, msg=f"rank {rank} {name}"
            )
            torch.testing.assert_close(grads["package"][name], grads["torch_ddp"][name], atol=1e-7, rtol=1e-5)


# --- the launcher names the rank that failed ---------------------------------------------------------------------


def fails_on_rank_2(rank, world_size):
    if rank == 2:
        raise KeyError("planted on rank 2")
    dist.all_reduce(torch.ones(1))  # ranks 0 and 1 then fail too, because rank 2 left
    return rank


def leaves_then_fails_on_rank_1(rank, world_size):
    """Rank 1 leaves the group first, so that the others' failures reach the launcher before its own."""
    if rank == 1:
        dist.destroy_process_group()
        time.sleep(0.3)
        raise ArithmeticError("planted on rank 1, after its partners failed")
    dist.all_reduce(torch.ones(1))
    return rank


def fails_on_ranks_1_then_2(rank, world_size):
    """Two real failures: rank 1's comes first, rank 2's a moment later."""
    if rank == 1:
        raise ValueError("planted on rank 1")
    if rank == 2:
        time.sleep(0.3)
        raise ValueError("planted on rank 2")
    dist.all_reduce(torch.ones(1))
    return rank


def dies_on_rank_2(rank, world_size):
    if rank == 2:
        os._exit(3)
    dist.all_reduce(torch.ones(1))
    return rank


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (fails_on_rank_2, r"rank 2 of 3 failed: KeyError: 'planted on rank 2'"),
        (leaves_then_fails_on_rank_1, r"rank 1 of 3 failed: ArithmeticError: planted on rank 1"),
        (fails_on_ranks_1_then_2, r"rank 1 of 3 failed: ValueError: planted on rank 1"),
        (dies_on_rank_2, r"rank 2 of 3 died with exit code 3 before returning"),
    ],
    ids=["rank 2 raises", "its report comes last", "two ranks raise", "rank 2 dies"],
)
def test_the_launcher_reports_the_rank_that_failed_first(fn, message):
    with pytest.raises(distributed.RankError, match=message) as raised:
        distributed.run(fn, 3, timeout=10, oversubscribe=True)
    assert raised.value.args[0].count("traceback:") <= 1, "one rank's traceback, the cause's"
    assert multiprocessing.active_children() == []
