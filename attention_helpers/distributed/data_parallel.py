"""Data-parallel training of lesson 10's GPT: every rank trains a whole copy of the model on its slice of the batch.

Every rank draws the same global batch (same seed), keeps its ``torch.tensor_split`` slice, and computes its loss
and gradients. ``DistributedDataParallel`` then averages the gradients over the ranks (an all-reduce), so every
copy takes the same optimiser step: the gradient of the mean loss over the whole batch, as one process would. The
model is small (2 blocks of 4 heads, ``d_model`` 64, 32 characters of context) so that a step takes milliseconds.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .._checks import check_positive_int
from ..gpt import GPT, GPTConfig
from ..text import CharTokenizer, language_model_loss, next_token_batch, shakespeare_text

CONTEXT_LENGTH, D_MODEL, NUM_HEADS, NUM_LAYERS = 32, 64, 4, 2
LEARNING_RATE = 3e-3


def training_ids() -> tuple[torch.Tensor, int]:
    """Lesson 10's text as character ids ``(num_characters,)``, and the vocabulary size."""
    text = shakespeare_text()
    tokenizer = CharTokenizer(text)
    return tokenizer.encode(text), tokenizer.vocab_size


def new_model(seed: int, vocab_size: int) -> GPT:
    """The GPT this module trains, its weights drawn from ``seed`` (the same on every rank)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return GPT(
            GPTConfig(
                vocab_size=vocab_size,
                context_length=CONTEXT_LENGTH,
                d_model=D_MODEL,
                num_heads=NUM_HEADS,
                num_layers=NUM_LAYERS,
                dropout=0.0,
            )
        )


def check_batch_size(batch_size: int, world_size: int) -> None:
    """Equal slices, so that the mean of the ranks' mean losses is the mean over the whole batch."""
    check_positive_int("batch_size", batch_size)
    if batch_size % world_size:
        raise ValueError(
            f"batch_size={batch_size} must be a multiple of the world size {world_size}: every rank trains on an "
            "equal slice of the global batch"
        )


def train_one_process(steps: int, seed: int, batch_size: int = 16) -> list[float]:
    """The reference: ``steps`` AdamW steps on the whole global batch in this process; the loss of each step."""
    check_positive_int("steps", steps)
    check_batch_size(batch_size, 1)
    data, vocab_size = training_ids()
    model = new_model(seed, vocab_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        inputs, targets = next_token_batch(data, batch_size, CONTEXT_LENGTH, generator)  # (batch_size, 32) each
        loss = language_model_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def train_data_parallel(rank: int, world_size: int, steps: int, seed: int, batch_size: int = 16, log=None):
    """The same training on this rank's slice of each global batch, gradients averaged by DDP.

    Called on every rank of a process group. Returns the loss of the whole global batch at each step (the mean of
    the ranks' losses, all-reduced), equal on every rank; ``log(step, loss)`` is called with it if given.
    """
    check_positive_int("steps", steps)
    check_batch_size(batch_size, world_size)
    data, vocab_size = training_ids()
    model = DistributedDataParallel(new_model(seed, vocab_size))  # broadcasts rank 0's weights, hooks the grads
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    generator = torch.Generator().manual_seed(seed)  # every rank draws the same global batch
    losses = []
    for step in range(steps):
        optimizer.zero_grad()
        loss = _slice_backward(model, data, generator, batch_size, rank, world_size)
        optimizer.step()
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss)  # sum of the ranks' mean losses
        losses.append(global_loss.item() / world_size)
        if log is not None:
            log(step, losses[-1])
    return losses


def data_parallel_gradients(rank: int, world_size: int, seed: int, batch_size: int = 16) -> dict[str, torch.Tensor]:
    """The gradients this rank holds after :func:`train_data_parallel`'s first ``backward``, before any optimiser
    step: ``{parameter name: gradient}``. Every rank holds the same, the gradient of the mean loss over the whole
    global batch, which one process computes from the whole batch at once."""
    check_batch_size(batch_size, world_size)
    data, vocab_size = training_ids()
    model = DistributedDataParallel(new_model(seed, vocab_size))
    _slice_backward(model, data, torch.Generator().manual_seed(seed), batch_size, rank, world_size)
    return {name: param.grad.clone() for name, param in model.module.named_parameters()}


def _slice_backward(model, data, generator, batch_size: int, rank: int, world_size: int) -> torch.Tensor:
    """Draw the next global batch (the same on every rank), run this rank's ``tensor_split`` slice of it through
    ``model`` (a DDP model) and ``backward``; return the slice's mean loss."""
    inputs, targets = next_token_batch(data, batch_size, CONTEXT_LENGTH, generator)  # (batch_size, 32) each
    my_inputs = inputs.tensor_split(world_size)[rank]  # (batch_size / world_size, 32)
    my_targets = targets.tensor_split(world_size)[rank]
    loss = language_model_loss(model(my_inputs), my_targets)
    loss.backward()  # DDP all-reduces the gradients here, bucket by bucket, and divides them by world_size
    return loss
