"""A GPT-style decoder: a causal language model that predicts the next token, and how to train it.

``GPT`` stacks pre-LN decoder blocks (causal :class:`~attention_helpers.decoding.GroupedQueryAttention` and a GELU
:class:`~attention_helpers.encoder.FeedForward`) between token + learned position embeddings and an output head
tied to the token embedding; :func:`~attention_helpers.decoding.generate` samples from it. ``BigramLanguageModel``
is the baseline a language model has to beat.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import (
    check_heads,
    check_positive_int,
    check_probability,
    check_tensor,
    check_token_ids,
    shape_str,
)
from .decoding import GroupedQueryAttention, KVCache, check_kv_cache
from .encoder import FeedForward, LayerNorm, dropout_if_training


class DecoderBlock(nn.Module):
    """One pre-LN decoder block: ``x = x + attention(norm1(x))``, then ``x = x + ffn(norm2(x))``.

    The attention is causal: token i mixes the values of tokens 0..i only. Input ``(batch, num_tokens, d_model)``;
    output the same shape. With ``past_key_values``, the block's attention reads and extends layer ``layer_idx``
    of the cache (:class:`~attention_helpers.decoding.KVCache`).
    """

    def __init__(self, d_model: int, num_heads: int, context_length: int, dropout: float, num_kv_heads=None):
        super().__init__()
        self.norm1 = LayerNorm(d_model)
        self.attention = GroupedQueryAttention(
            d_model, d_model, context_length, dropout, num_heads, num_kv_heads=num_kv_heads
        )
        self.dropout1 = nn.Dropout(dropout)
        self.norm2 = LayerNorm(d_model)
        self.ffn = FeedForward(d_model, 4 * d_model, dropout, activation="gelu")
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, past_key_values: KVCache | None = None, layer_idx: int = 0) -> torch.Tensor:
        """Check ``x`` (and the cache), then run :meth:`forward_unchecked`."""
        self.attention.check_inputs(x, past_key_values=past_key_values, layer_idx=layer_idx)
        return self.forward_unchecked(x, past_key_values, layer_idx)

    def forward_unchecked(self, x, past_key_values: KVCache | None = None, layer_idx: int = 0) -> torch.Tensor:
        """:meth:`forward` without its input checks: a GPT checks its input once for all its blocks."""
        attn_out = self.attention.forward_unchecked(self.norm1(x), past_key_values=past_key_values, layer_idx=layer_idx)
        x = x + dropout_if_training(self.dropout1, attn_out)
        return x + dropout_if_training(self.dropout2, self.ffn.forward_unchecked(self.norm2(x)))


class GPT(nn.Module):
    """A decoder-only transformer language model.

    Args:
        vocab_size: number of distinct tokens.
        context_length: the most tokens the model reads at once (size of the position table and causal masks).
        d_model: width of every token's vector.
        num_heads: attention heads per block; must divide ``d_model``.
        num_layers: number of decoder blocks.
        dropout: dropout on the embeddings, attention weights, feed-forward and residual branches.
        num_kv_heads: key/value heads per block (grouped-query attention); ``None``: one per query head.

    Input ``(batch, num_tokens)`` int64 (or int32) token ids with ``num_tokens <= context_length``; output
    ``(batch, num_tokens, vocab_size)`` logits: row i scores every candidate for token i + 1.

    The output head shares its weight with the token embedding (weight tying): the score of token t is the dot
    product of the final vector with t's embedding, which saves ``vocab_size * d_model`` parameters.
    """

    def __init__(
        self,
        vocab_size: int,
        context_length: int,
        d_model: int,
        num_heads: int,
        num_layers: int,
        dropout: float,
        *,
        num_kv_heads: int | None = None,
    ):
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("context_length", context_length), ("d_model", d_model)):
            check_positive_int(name, value)
        check_heads(d_model, num_heads, "d_model")
        check_positive_int("num_layers", num_layers)
        check_probability("dropout", dropout)
        self.vocab_size, self.context_length, self.d_model = vocab_size, context_length, d_model
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(context_length, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            [DecoderBlock(d_model, num_heads, context_length, dropout, num_kv_heads) for _ in range(num_layers)]
        )
        self.final_norm = LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.token_embedding.weight  # tied: one (vocab_size, d_model) matrix
        self.apply(_init_weights)

    def new_cache(self, batch: int, capacity: int | None = None) -> KVCache:
        """An empty :class:`~attention_helpers.decoding.KVCache` for ``batch`` sequences of up to ``capacity``
        tokens (default ``context_length``), with this model's layers, heads, dtype and device."""
        capacity = self.context_length if capacity is None else capacity
        check_positive_int("capacity", capacity)
        if capacity > self.context_length:
            raise ValueError(f"capacity={capacity} is more than the model reads: context_length={self.context_length}")
        attention, weight = self.blocks[0].attention, self.token_embedding.weight
        shape = (len(self.blocks), batch, attention.num_kv_heads, capacity, attention.head_dim)
        return KVCache(*shape, dtype=weight.dtype, device=weight.device)

    def forward(self, token_ids: torch.Tensor, past_key_values: KVCache | None = None):
        """``token_ids`` ``(batch, num_tokens)`` -> logits ``(batch, num_tokens, vocab_size)``.

        With ``past_key_values`` (a :class:`~attention_helpers.decoding.KVCache`, e.g. from :meth:`new_cache`),
        the tokens continue the ``num_tokens`` already cached: their positions start after them, they attend to
        the cached keys and values too, and their own are added. Returns ``(logits, past_key_values)`` then.
        """
        check_token_ids("token_ids", token_ids, self.vocab_size)
        start = past_key_values.num_tokens if isinstance(past_key_values, KVCache) else 0
        num_tokens = token_ids.shape[1]
        if start + num_tokens > self.context_length:
            cached = f"{start} cached tokens + " if start else ""
            raise ValueError(
                f"token_ids has num_tokens={num_tokens} ({cached}{num_tokens} new) but the model reads at most "
                f"context_length={self.context_length} tokens; keep only the last {self.context_length}"
            )
        if past_key_values is not None:
            weight = self.token_embedding.weight  # the cache must hold the model's dtype, on its device
            step = (len(token_ids), num_tokens, weight.dtype, weight.device)
            check_kv_cache(past_key_values, self.blocks[0].attention, *step, num_layers=len(self.blocks))
        return self.forward_unchecked(token_ids, past_key_values)

    def forward_unchecked(self, token_ids: torch.Tensor, past_key_values: KVCache | None = None):
        """:meth:`forward` without its input checks (``generate`` checks its prompt once, then calls this)."""
        start = 0 if past_key_values is None else past_key_values.num_tokens
        positions = torch.arange(start, start + token_ids.shape[1], device=token_ids.device)  # (num_tokens,)
        x = self.token_embedding(token_ids) + self.position_embedding(positions)  # (batch, num_tokens, d_model)
        x = dropout_if_training(self.dropout, x)
        for layer_idx, block in enumerate(self.blocks):
            x = block.forward_unchecked(x, past_key_values, layer_idx)
        logits = self.lm_head(self.final_norm(x))  # (batch, num_tokens, vocab_size)
        if past_key_values is None:
            return logits
        past_key_values.advance(token_ids.shape[1])
        return logits, past_key_values


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
    try:
        for first in range(0, num_windows, batch_size):
            logits = model(inputs[first : first + batch_size])
            total += language_model_loss(logits, targets[first : first + batch_size]).item() * len(logits)
    finally:
        model.train(was_training)
    return total / num_windows
