"""Training a small transformer encoder on a toy task: data, model, training loop and evaluation.

The tasks map a sequence of digits to a sequence of digits of the same length, one answer per position,
so a per-token classifier on top of an encoder can learn them:

- ``"reverse"``: ``[3, 1, 4, 1] -> [1, 4, 1, 3]`` (output position ``i`` copies input position
  ``num_tokens - 1 - i``: the attention pattern to learn is the anti-diagonal);
- ``"sort"``: ``[3, 1, 4, 1] -> [1, 1, 3, 4]`` (where to look depends on the digits, not on the position).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import (
    check_bool,
    check_index,
    check_instance,
    check_int,
    check_model,
    check_positive_int,
    check_positive_real,
    check_tensor,
    check_token_ids,
    shape_str,
)
from .decoding import eval_mode
from .encoder import Encoder, EncoderConfig, PositionalEncoding


def reverse_targets(inputs: torch.Tensor) -> torch.Tensor:
    """The reverse task's answers: ``(batch, num_tokens)`` digits -> the same digits in reverse order."""
    check_token_ids("inputs", inputs, None)
    return inputs.flip(-1)


def sort_targets(inputs: torch.Tensor) -> torch.Tensor:
    """The sort task's answers: ``(batch, num_tokens)`` digits -> each row sorted in increasing order."""
    check_token_ids("inputs", inputs, None)
    return inputs.sort(dim=-1).values


TASKS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"reverse": reverse_targets, "sort": sort_targets}


@dataclass
class TaskData:
    """Train and held-out sequences of one task; no held-out input sequence occurs in the training set.

    ``train_inputs``, ``train_targets``: ``(num_train, num_tokens)`` int64;
    ``heldout_inputs``, ``heldout_targets``: ``(num_heldout, num_tokens)`` int64.
    """

    task: str
    vocab_size: int
    train_inputs: torch.Tensor
    train_targets: torch.Tensor
    heldout_inputs: torch.Tensor
    heldout_targets: torch.Tensor

    @property
    def num_tokens(self) -> int:
        return self.train_inputs.shape[1]


def _task_function(task) -> Callable[[torch.Tensor], torch.Tensor]:
    """The name of one of :data:`TASKS`, or a function of the caller's -> the function."""
    if isinstance(task, str):
        if task not in TASKS:
            raise ValueError(f"task must be one of {sorted(TASKS)} or a function, got {task!r}")
        return TASKS[task]
    if callable(task):
        return task
    raise TypeError(f"task must be one of {sorted(TASKS)} or a function, got {type(task).__name__}")


def _distinct_sequences(wanted: int, num_tokens: int, vocab_size: int, seed: int) -> torch.Tensor:
    """``(wanted, num_tokens)`` int64 digits, no two rows equal, drawn by rejection from a seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    sequences = torch.empty(0, num_tokens, dtype=torch.int64)
    seen: set[tuple[int, ...]] = set()
    while len(sequences) < wanted:
        # Draw a few more than needed, keep the first occurrence of each new sequence, in the order drawn.
        draw = torch.randint(0, vocab_size, (wanted - len(sequences) + 16, num_tokens), generator=generator)
        fresh = []  # row indices in draw
        for index, key in enumerate(map(tuple, draw.tolist())):
            if key not in seen:
                seen.add(key)
                fresh.append(index)
        sequences = torch.cat([sequences, draw[fresh]])[:wanted]
    return sequences


def make_task(
    task: str | Callable[[torch.Tensor], torch.Tensor] = "reverse",
    num_train: int = 10_000,
    num_heldout: int = 1_000,
    num_tokens: int = 8,
    vocab_size: int = 10,
    seed: int = 0,
) -> TaskData:
    """Draw ``num_train + num_heldout`` distinct random sequences of ``num_tokens`` digits in
    ``[0, vocab_size)``, compute their targets and split them into a training set and a held-out set.

    ``task`` is the name of one of :data:`TASKS` or a function of your own that maps ``(batch, num_tokens)``
    digits to ``(batch, num_tokens)`` answers in ``[0, vocab_size)``. No two sequences are equal, so held-out
    accuracy measures whether the model learned the rule, not whether it memorised examples.
    """
    targets_of = _task_function(task)
    check_positive_int("num_train", num_train)
    check_positive_int("num_heldout", num_heldout)
    check_positive_int("num_tokens", num_tokens)
    check_positive_int("vocab_size", vocab_size)
    check_int("seed", seed)
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be at least 2 (one digit gives one possible sequence), got {vocab_size}")
    wanted = num_train + num_heldout
    possible = vocab_size**num_tokens
    if wanted > possible // 2:  # drawing nearly every sequence by rejection would take too long
        raise ValueError(
            f"num_train + num_heldout = {wanted} sequences are asked for, but there are only {possible} different "
            f"sequences of num_tokens={num_tokens} digits with vocab_size={vocab_size}; ask for at most half of them"
        )
    sequences = _distinct_sequences(wanted, num_tokens, vocab_size, seed)
    targets = targets_of(sequences)
    name = task if isinstance(task, str) else getattr(task, "__name__", "custom")
    check_token_ids(f"the targets that task {name!r} returned", targets, vocab_size)
    if targets.shape != sequences.shape:
        raise ValueError(
            f"task {name!r} must return targets of the inputs' shape {shape_str(sequences.shape)} "
            f"(one answer per position), got {shape_str(targets.shape)}"
        )
    targets = targets.long()
    train_rows, heldout_rows = slice(0, num_train), slice(num_train, None)
    return TaskData(
        name, vocab_size, sequences[train_rows], targets[train_rows], sequences[heldout_rows], targets[heldout_rows]
    )


class TokenClassifier(nn.Module):
    """Token embedding + sinusoidal positions + the series' :class:`~attention_helpers.encoder.Encoder`
    + one linear layer that scores every class at every position.

    Args:
        vocab_size: number of token ids (also the number of classes to predict at each position).
        d_model, num_heads, num_layers, ffn_hidden, dropout: the encoder's sizes (lesson 07).
        context_length: the longest sequence the positional table covers.
        positional: add the positional encoding (``False`` shows what attention does without it).
        norm_first: pre-LN layers (with a final LayerNorm, as pre-LN models have) instead of post-LN.

    The parts are created in the order embedding, encoder, lm_head, so the same ``torch.manual_seed``
    gives the same weights as building those three modules by hand in that order.

    Input ``(batch, num_tokens)`` token ids; output logits ``(batch, num_tokens, vocab_size)``.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        num_heads: int,
        num_layers: int,
        ffn_hidden: int,
        dropout: float = 0.0,
        *,
        context_length: int = 64,
        positional: bool = True,
        norm_first: bool = False,
    ):
        super().__init__()
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("context_length", context_length)
        check_bool("positional", positional)
        sizes = dict(d_model=d_model, num_heads=num_heads, ffn_hidden=ffn_hidden, num_layers=num_layers)
        config = EncoderConfig(**sizes, dropout=dropout, norm_first=norm_first, final_norm=norm_first)
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.positional_encoding = PositionalEncoding(d_model, context_length) if positional else None
        self.encoder = Encoder(config)
        self.lm_head = nn.Linear(d_model, vocab_size)  # a score per token id at every position

    def forward(self, tokens: torch.Tensor, return_weights: bool = False):
        """``tokens`` ``(batch, num_tokens)`` -> logits ``(batch, num_tokens, vocab_size)``; with
        ``return_weights``, also the attention weights ``(num_layers, batch, num_heads, num_tokens, num_tokens)``."""
        check_token_ids("tokens", tokens, self.vocab_size)
        x = self.embedding(tokens)  # (batch, num_tokens, d_model)
        if self.positional_encoding is not None:
            x = self.positional_encoding(x)
        if return_weights:
            x, attn_weights = self.encoder(x, return_weights=True)
            return self.lm_head(x), attn_weights
        return self.lm_head(self.encoder(x))


@dataclass
class History:
    """What :func:`train` measured: ``loss`` and ``accuracy`` (per-token, on that step's training batch)
    after each of the ``num_steps`` steps, and the held-out accuracy at ``eval_steps``."""

    loss: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    eval_accuracy: list[float] = field(default_factory=list)


def warmup_cosine_lr(
    step: int, num_steps: int, peak_lr: float, warmup_steps: int, final_fraction: float = 0.1
) -> float:
    """The learning rate at ``step`` (0-based) of a run of ``num_steps``: it rises linearly to ``peak_lr`` over
    ``warmup_steps`` steps, then follows half a cosine down to ``final_fraction * peak_lr`` at the last step.
    Lessons 10 and 12 train with it. ``step`` runs from 0 to ``num_steps - 1``."""
    check_positive_int("num_steps", num_steps)
    check_positive_int("warmup_steps", warmup_steps)
    check_index("step", step, num_steps, "num_steps")
    check_positive_real("peak_lr", peak_lr)
    check_positive_real("final_fraction", final_fraction, minimum=0.0)
    if final_fraction > 1:
        raise ValueError(f"final_fraction must be from 0 to 1 (a fraction of peak_lr), got {final_fraction!r}")
    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    # From 0 at the first step after the warmup to 1 at the last step, where the rate reaches its floor.
    progress = (step - warmup_steps) / max(1, num_steps - 1 - warmup_steps)
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * progress)))


def token_accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of positions whose highest-scoring class is the target: logits ``(batch, num_tokens,
    num_classes)``, targets ``(batch, num_tokens)``."""
    check_tensor("logits", logits, (3,), "(batch, num_tokens, num_classes)", "num_tokens")
    check_token_ids("targets", targets, logits.shape[-1])
    if targets.shape != logits.shape[:-1]:
        raise ValueError(
            f"targets must have shape (batch, num_tokens) = {shape_str(logits.shape[:-1])}, one per position of "
            f"logits {shape_str(logits.shape)}, got {shape_str(targets.shape)}"
        )
    return (logits.argmax(dim=-1) == targets).float().mean().item()


@torch.no_grad()
def evaluate(model: TokenClassifier, inputs: torch.Tensor, targets: torch.Tensor, batch_size: int = 1024) -> float:
    """Per-token accuracy of ``model`` on ``inputs`` and ``targets`` (both ``(num_sequences, num_tokens)``),
    in eval mode (no dropout); the model's train/eval mode is restored afterwards."""
    check_model("model", model, "vocab_size", "a TokenClassifier (an nn.Module with vocab_size)")
    check_token_ids("inputs", inputs, model.vocab_size)
    check_token_ids("targets", targets, model.vocab_size)
    if inputs.shape != targets.shape:
        raise ValueError(
            f"inputs and targets must have the same shape (num_sequences, num_tokens), "
            f"got {shape_str(inputs.shape)} and {shape_str(targets.shape)}"
        )
    check_positive_int("batch_size", batch_size)
    correct = 0
    with eval_mode(model):  # an error inside the model leaves it in the mode it came in
        for start in range(0, len(inputs), batch_size):
            logits = model(inputs[start : start + batch_size])  # (batch, num_tokens, vocab_size)
            correct += (logits.argmax(dim=-1) == targets[start : start + batch_size]).sum().item()
    return correct / max(1, targets.numel())


def _check_training(model, data, num_steps, batch_size, lr, seed, eval_every, log_every) -> None:
    """:func:`train`'s arguments, each with an error that names it."""
    check_model("model", model, "vocab_size", "a TokenClassifier (an nn.Module with vocab_size)")
    check_instance("data", data, TaskData, "a TaskData (from make_task)")
    if data.vocab_size != model.vocab_size:
        raise ValueError(
            f"data has vocab_size={data.vocab_size} but the model was built with vocab_size={model.vocab_size}"
        )
    check_positive_int("num_steps", num_steps)
    check_positive_int("batch_size", batch_size)
    check_positive_real("lr", lr)
    check_int("seed", seed)
    check_positive_int("eval_every", eval_every, minimum=0)
    check_positive_int("log_every", log_every, minimum=0)


def _train_step(model: nn.Module, optimizer, inputs: torch.Tensor, targets: torch.Tensor) -> tuple[float, float]:
    """One optimisation step on a batch, ``(batch_size, num_tokens)`` inputs and targets: per-token
    cross-entropy, back-propagation, one update. Returns the batch's loss and per-token accuracy."""
    logits = model(inputs)  # (batch_size, num_tokens, vocab_size)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item(), token_accuracy(logits.detach(), targets)


def train(
    model: TokenClassifier,
    data: TaskData,
    *,
    num_steps: int = 300,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    eval_every: int = 0,
    log_every: int = 0,
    log: Callable[[str], None] = print,
) -> History:
    """Train ``model`` on ``data``'s training set with Adam and per-token cross-entropy.

    Dropout draws from torch's global generator, seeded with ``seed`` for the call and then restored, so the
    same weights and seed give the same history. Each step draws ``batch_size`` training sequences (with a
    generator seeded with ``seed``) and makes one Adam update on their per-token cross-entropy.

    Args:
        eval_every: every this many steps (and after the last), measure the held-out accuracy; 0: never.
        log_every: every this many steps, ``log`` one line with the step, loss and accuracy; 0: never.

    Returns:
        a :class:`History`. The model is left in train mode, with its trained weights.
    """
    _check_training(model, data, num_steps, batch_size, lr, seed, eval_every, log_every)
    history = History()
    num_train = len(data.train_inputs)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # dropout's masks
        for step in range(1, num_steps + 1):
            batch = torch.randint(0, num_train, (batch_size,), generator=generator)
            loss, accuracy = _train_step(model, optimizer, data.train_inputs[batch], data.train_targets[batch])
            history.loss.append(loss)
            history.accuracy.append(accuracy)
            if eval_every and (step % eval_every == 0 or step == num_steps):
                history.eval_steps.append(step)
                history.eval_accuracy.append(evaluate(model, data.heldout_inputs, data.heldout_targets))
            if log_every and step % log_every == 0:
                log(f"step {step:>4}: loss {history.loss[-1]:.3f}, batch accuracy {history.accuracy[-1]:.3f}")
    return history
