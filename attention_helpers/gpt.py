"""A GPT-style decoder: a causal language model that predicts the next token, and text generation.

``GPT`` stacks pre-LN decoder blocks (causal :class:`~attention_helpers.attention.MultiHeadAttention` and a GELU
:class:`~attention_helpers.encoder.FeedForward`) between token + learned position embeddings and an output head
tied to the token embedding. ``generate`` samples from it one token at a time, with or without the attention
modules' KV cache; ``BigramLanguageModel`` is the baseline a language model has to beat.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import (
    check_heads,
    check_positive_int,
    check_probability,
    check_temperature,
    check_tensor,
    check_token_ids,
    shape_str,
)
from .attention import MultiHeadAttention
from .encoder import FeedForward


class DecoderBlock(nn.Module):
    """One pre-LN decoder block: ``x = x + attention(norm1(x))``, then ``x = x + ffn(norm2(x))``.

    The attention is causal: token i mixes the values of tokens 0..i only. The norms are PyTorch's fused
    ``nn.LayerNorm``, which lesson 07 showed computes the same as the package's written-out ``LayerNorm``
    and trains noticeably faster on a CPU.
    Input ``(batch, num_tokens, d_model)``; output the same shape.
    """

    def __init__(self, d_model: int, num_heads: int, context_length: int, drop_prob: float):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attention = MultiHeadAttention(d_model, d_model, context_length, drop_prob, num_heads)
        self.dropout1 = nn.Dropout(drop_prob)
        self.norm2 = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, 4 * d_model, drop_prob, activation="gelu")
        self.dropout2 = nn.Dropout(drop_prob)

    def forward(self, x: torch.Tensor, use_cache: bool = False) -> torch.Tensor:
        x = x + self.dropout1(self.attention(self.norm1(x), use_cache=use_cache))
        return x + self.dropout2(self.ffn(self.norm2(x)))


class GPT(nn.Module):
    """A decoder-only transformer language model.

    Args:
        vocab_size: number of distinct tokens.
        context_length: the most tokens the model reads at once (size of the position table and causal masks).
        d_model: width of every token's vector.
        num_heads: attention heads per block; must divide ``d_model``.
        num_layers: number of decoder blocks.
        drop_prob: dropout on the embeddings, attention weights, feed-forward and residual branches.

    Input ``(batch, num_tokens)`` int64 (or int32) token ids with ``num_tokens <= context_length``; output
    ``(batch, num_tokens, vocab_size)`` logits: row i scores every candidate for token i + 1.

    The output head shares its weight with the token embedding (weight tying): the score of token t is the dot
    product of the final vector with t's embedding, which saves ``vocab_size * d_model`` parameters.
    """

    def __init__(
        self, vocab_size: int, context_length: int, d_model: int, num_heads: int, num_layers: int, drop_prob: float
    ):
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("context_length", context_length), ("d_model", d_model)):
            check_positive_int(name, value)
        check_heads(d_model, num_heads, "d_model")
        check_positive_int("num_layers", num_layers)
        check_probability("drop_prob", drop_prob)
        self.vocab_size, self.context_length, self.d_model = vocab_size, context_length, d_model
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(context_length, d_model)
        self.dropout = nn.Dropout(drop_prob)
        self.blocks = nn.ModuleList(
            [DecoderBlock(d_model, num_heads, context_length, drop_prob) for _ in range(num_layers)]
        )
        self.final_norm = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.token_embedding.weight  # tied: one (vocab_size, d_model) matrix
        self.apply(_init_weights)

    @property
    def num_cached_tokens(self) -> int:
        return self.blocks[0].attention.num_cached_tokens

    def reset_cache(self) -> None:
        """Empty every block's KV cache."""
        for block in self.blocks:
            block.attention.reset_cache()

    def forward(self, token_ids: torch.Tensor, use_cache: bool = False) -> torch.Tensor:
        """``token_ids`` ``(batch, num_tokens)`` -> logits ``(batch, num_tokens, vocab_size)``.

        With ``use_cache=True`` the tokens continue those already cached: their positions start after them.
        """
        check_token_ids("token_ids", token_ids, self.vocab_size)
        start = self.num_cached_tokens if use_cache else 0
        num_tokens = token_ids.shape[1]
        if start + num_tokens > self.context_length:
            cached = f"{start} cached tokens + " if start else ""
            raise ValueError(
                f"token_ids has num_tokens={num_tokens} ({cached}{num_tokens} new) but the model reads at most "
                f"context_length={self.context_length} tokens; keep only the last {self.context_length}"
            )
        positions = torch.arange(start, start + num_tokens, device=token_ids.device)  # (num_tokens,)
        x = self.token_embedding(token_ids) + self.position_embedding(positions)  # (batch, num_tokens, d_model)
        x = self.dropout(x)
        for block in self.blocks:
            x = block(x, use_cache=use_cache)
        return self.lm_head(self.final_norm(x))  # (batch, num_tokens, vocab_size)


def _init_weights(module: nn.Module) -> None:
    """GPT-2's initialisation: small normal weights (std 0.02), zero biases; LayerNorm keeps gamma 1, beta 0."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


class BigramLanguageModel(nn.Module):
    """The baseline: predict the next token from the current one alone, with a ``(vocab_size, vocab_size)`` table.

    ``BigramLanguageModel.from_counts(ids, vocab_size)`` fills the table with the log of how often each pair
    follows in ``ids`` (plus one, so that no pair has probability zero): the best a model can do that sees
    one token only. Input ``(batch, num_tokens)`` int64 ids; output ``(batch, num_tokens, vocab_size)`` logits.
    """

    def __init__(self, vocab_size: int):
        super().__init__()
        check_positive_int("vocab_size", vocab_size)
        self.vocab_size = vocab_size
        self.logits = nn.Parameter(torch.zeros(vocab_size, vocab_size))  # row = current token, column = next

    @classmethod
    def from_counts(cls, token_ids: torch.Tensor, vocab_size: int) -> BigramLanguageModel:
        """Fit the table to a ``(num_tokens,)`` id sequence by counting which token follows which."""
        check_positive_int("vocab_size", vocab_size)
        check_token_ids("token_ids", token_ids, vocab_size, "(num_tokens,)")
        if len(token_ids) < 2:
            raise ValueError(
                f"token_ids must hold at least 2 tokens to count which follows which, got shape "
                f"{shape_str(token_ids.shape)} (is the text empty?)"
            )
        model = cls(vocab_size)
        counts = torch.ones(vocab_size, vocab_size)  # add-one smoothing
        counts.index_put_((token_ids[:-1], token_ids[1:]), torch.ones(len(token_ids) - 1), accumulate=True)
        with torch.no_grad():
            model.logits.copy_(torch.log(counts / counts.sum(dim=1, keepdim=True)))
        return model

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        check_token_ids("token_ids", token_ids, self.vocab_size)
        return self.logits[token_ids]


def language_model_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats per token) of ``logits`` ``(batch, num_tokens, vocab_size)`` against the next
    tokens ``targets`` ``(batch, num_tokens)``, int64 or int32 ids in ``[0, vocab_size)``."""
    check_tensor("logits", logits, (3,), "(batch, num_tokens, vocab_size)")
    check_token_ids("targets", targets, logits.shape[-1])
    if targets.shape != logits.shape[:2]:
        raise ValueError(
            f"logits (batch, num_tokens, vocab_size) and targets (batch, num_tokens) must match, got logits "
            f"{shape_str(logits.shape)} and targets {shape_str(targets.shape)}"
        )
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten().long())  # cross_entropy takes int64 only


def next_token_batch(
    data: torch.Tensor, batch_size: int, num_tokens: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut ``batch_size`` random windows from the ``(len,)`` id sequence ``data``.

    Returns ``inputs`` and ``targets``, each ``(batch_size, num_tokens)``: the targets are the inputs shifted
    one token to the left, so ``targets[b, i]`` is the token that follows ``inputs[b, :i + 1]``.
    """
    check_positive_int("batch_size", batch_size)
    check_positive_int("num_tokens", num_tokens)
    if data.dim() != 1 or len(data) <= num_tokens:
        raise ValueError(f"data must be 1-D and longer than num_tokens={num_tokens}, got shape {shape_str(data.shape)}")
    starts = torch.randint(len(data) - num_tokens, (batch_size,), generator=generator)
    inputs = torch.stack([data[s : s + num_tokens] for s in starts.tolist()])
    targets = torch.stack([data[s + 1 : s + num_tokens + 1] for s in starts.tolist()])
    return inputs, targets


@torch.no_grad()
def evaluate_loss(model: nn.Module, data: torch.Tensor, num_tokens: int, batch_size: int = 64) -> float:
    """Mean next-token loss (nats per token) over consecutive, non-overlapping windows of ``data``.

    Every window of ``num_tokens`` tokens (and its shifted targets) is scored once, so the result does not
    depend on a random draw. The model is put in eval mode for the measurement and restored afterwards.
    """
    check_positive_int("num_tokens", num_tokens)
    num_windows = (len(data) - 1) // num_tokens
    if num_windows < 1:
        raise ValueError(f"data of length {len(data)} is too short for one window of num_tokens={num_tokens}")
    inputs = data[: num_windows * num_tokens].view(num_windows, num_tokens)
    targets = data[1 : num_windows * num_tokens + 1].view(num_windows, num_tokens)
    was_training = model.training
    model.eval()
    total = 0.0
    for first in range(0, num_windows, batch_size):
        logits = model(inputs[first : first + batch_size])
        total += language_model_loss(logits, targets[first : first + batch_size]).item() * len(logits)
    model.train(was_training)
    return total / num_windows


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest logits of each row and set the others to ``-inf`` (probability zero).

    ``logits`` ``(..., vocab_size)``; returns a new tensor of the same shape. Ties with the k-th value are kept.
    """
    check_tensor("logits", logits, 1, "(..., vocab_size)")
    check_positive_int("k", k)
    k = min(k, logits.shape[-1])
    kth_largest = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1)
    return logits.masked_fill(logits < kth_largest, float("-inf"))


def sample_next_token(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Pick one token per row of ``logits`` ``(batch, vocab_size)``; returns ``(batch, 1)`` int64 ids.

    ``temperature=0`` picks the most likely token (greedy); otherwise the logits are divided by the
    temperature (a finite number of at least 0.01; below 1 sharpens, above 1 flattens), optionally cut to the
    ``top_k`` best, and sampled.
    """
    check_tensor("logits", logits, (2,), "(batch, vocab_size)")
    check_temperature(temperature, zero_is_greedy=True)
    if top_k is not None:
        check_positive_int("top_k", top_k)
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)


def _check_generate_args(model, token_ids, max_new_tokens, temperature, top_k) -> None:
    if not isinstance(model, GPT):
        raise TypeError(f"model must be an attention_helpers.GPT, got {type(model).__name__}")
    check_token_ids("token_ids", token_ids, model.vocab_size)
    if token_ids.shape[1] == 0:
        raise ValueError("token_ids must hold at least one token to continue from, got shape (batch, 0)")
    check_positive_int("max_new_tokens", max_new_tokens, minimum=0)
    check_temperature(temperature, zero_is_greedy=True)
    if top_k is not None:
        check_positive_int("top_k", top_k)


@torch.no_grad()
def generate(
    model: GPT,
    token_ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Continue ``token_ids`` ``(batch, num_tokens)`` by ``max_new_tokens`` tokens, one at a time.

    Returns ``(batch, num_tokens + max_new_tokens)`` int64 ids, the prompt first. ``temperature`` and ``top_k``
    are those of :func:`sample_next_token` (``temperature=0``: greedy); pass a seeded ``torch.Generator`` for
    a repeatable sample.

    Without the cache, every step runs the model on the whole sequence (its last ``context_length`` tokens)
    and keeps only the last row of logits. With ``use_cache=True`` the prompt is run once and every later
    step feeds only the newest token, reusing the keys and values cached in each attention module: the same
    tokens, far less work. Once the sequence outgrows ``context_length``, the window slides and every
    position changes, so both ways recompute the window at each step.

    The model runs in eval mode (no dropout) and is restored to its mode afterwards; its cache is emptied.
    """
    _check_generate_args(model, token_ids, max_new_tokens, temperature, top_k)
    token_ids = token_ids.long()  # int32 ids are accepted; the sampled ones are int64
    was_training = model.training
    model.eval()
    model.reset_cache()
    try:
        for step in range(max_new_tokens):
            if use_cache and step > 0 and token_ids.shape[1] <= model.context_length:
                logits = model(token_ids[:, -1:], use_cache=True)  # only the newest token is new
            else:
                model.reset_cache()
                logits = model(token_ids[:, -model.context_length :], use_cache=use_cache)
            next_id = sample_next_token(logits[:, -1, :], temperature, top_k, generator)  # (batch, 1)
            token_ids = torch.cat([token_ids, next_id], dim=1)
    finally:
        model.reset_cache()
        model.train(was_training)
    return token_ids
