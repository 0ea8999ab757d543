"""A GPT-style decoder, a causal language model: pre-LN blocks (causal attention, a GELU feed-forward network)
between token embeddings (plus learned positions, or RoPE in the attention) and ``lm_head``, tied to the embedding.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from ._checks import (
    check_cache,
    check_choice,
    check_heads,
    check_instance,
    check_kv_heads,
    check_length,
    check_positive_int,
    check_probability,
    check_token_ids,
)
from .attention import MultiHeadAttention
from .decoding import KVCache
from .encoder import FeedForward, LayerNorm, dropout_if_training, residual

POSITIONS = ("learned", "rope")


@dataclass(frozen=True, kw_only=True)
class GPTConfig:
    """A :class:`GPT`'s sizes, given by name so that two swapped sizes cannot pass unnoticed; checked once, here.
    ``num_kv_heads``: grouped-query attention (``None``: one per query head); ``positions``: ``"learned"`` (GPT-2, a
    trained embedding added to the tokens') or ``"rope"`` (Llama: every block rotates its queries and keys)."""

    vocab_size: int
    context_length: int
    d_model: int
    num_heads: int
    num_layers: int
    dropout: float = 0.0
    num_kv_heads: int | None = None
    positions: str = "learned"

    def __post_init__(self):
        for name in ("vocab_size", "context_length", "d_model", "num_layers"):
            check_positive_int(name, getattr(self, name))
        check_heads(self.d_model, self.num_heads, "d_model")
        if self.num_kv_heads is not None:
            check_kv_heads(self.num_heads, self.num_kv_heads)
        check_probability("dropout", self.dropout)
        check_choice("positions", self.positions, POSITIONS)
        if self.positions == "rope" and self.d_model // self.num_heads % 2:
            raise ValueError(
                f'positions="rope" rotates pairs of dimensions: head_dim = d_model // num_heads = '
                f"{self.d_model // self.num_heads} must be even"
            )


class GPTBlock(nn.Module):
    """One pre-LN block: ``x + attention(norm1(x))``, then ``x + ffn(norm2(x))``; a ``cache`` extends ``layer_idx``."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        d_model = config.d_model
        dropout = config.dropout
        sizes = (d_model, d_model, config.context_length, dropout, config.num_heads)  # the book's argument order
        self.norm1 = LayerNorm(d_model)
        self.attention = MultiHeadAttention(*sizes, num_kv_heads=config.num_kv_heads, rope=config.positions == "rope")
        self.dropout1 = nn.Dropout(dropout)
        self.norm2 = LayerNorm(d_model)
        self.ffn = FeedForward(d_model, 4 * d_model, dropout, activation="gelu")
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, layer_idx: int = 0, *, checked: bool = False):
        attend = partial(self.attention, cache=cache, layer_idx=layer_idx, checked=checked)
        x = residual(x, attend, self.norm1, self.dropout1, norm_first=True)
        return residual(x, partial(self.ffn, checked=checked), self.norm2, self.dropout2, norm_first=True)


class GPT(nn.Module):
    """A decoder-only language model, ``GPT(GPTConfig(...))``; ``lm_head`` shares the token embedding's weight."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        check_instance("config", config, GPTConfig, "a GPTConfig (GPT(GPTConfig(vocab_size=..., ...)))")
        self.config = config
        self.vocab_size = config.vocab_size  # what generate and the training loops read
        self.context_length = config.context_length
        self.positions = config.positions
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        learned = config.positions == "learned"
        self.position_embedding = nn.Embedding(config.context_length, config.d_model) if learned else None
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(GPTBlock(config) for _ in range(config.num_layers))
        self.final_norm = LayerNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.lm_head.weight = self.token_embedding.weight  # tied: one (vocab_size, d_model) matrix
        self.apply(_init_weights)

    def new_cache(self, batch: int, capacity: int | None = None) -> KVCache:
        """A cache for ``batch`` sequences of up to ``capacity`` tokens (default ``context_length``)."""
        return KVCache.for_model(self, self.blocks[0].attention, len(self.blocks), batch, capacity, self.lm_head.weight)

    def forward(self, token_ids: torch.Tensor, cache: KVCache | None = None, *, checked: bool = False):
        """``token_ids`` ``(batch, num_tokens)`` -> logits ``(batch, num_tokens, vocab_size)``: row i scores token
        i + 1. With a ``cache``, the tokens continue the cached ones. ``checked=True``: the decoding loop checked."""
        if not checked:  # once here; the blocks are then trusted with what this call hands them
            check_token_ids("token_ids", token_ids, self.vocab_size)
            if cache is not None:
                check_cache(cache, self, self.blocks[0].attention, len(self.blocks), token_ids, self.lm_head.weight)
            else:
                check_length("token_ids", token_ids.shape[1], self.context_length)
        start = 0 if cache is None else cache.num_tokens  # the position of the first token
        x = self.token_embedding(token_ids)  # (batch, num_tokens, d_model)
        if self.position_embedding is not None:
            positions = torch.arange(start, start + token_ids.shape[1], device=token_ids.device)
            x = x + self.position_embedding(positions)
        x = dropout_if_training(self.dropout, x)
        for layer_idx, block in enumerate(self.blocks):
            x = block(x, cache, layer_idx, checked=True)
        return self.lm_head(self.final_norm(x))  # (batch, num_tokens, vocab_size)


def _init_weights(module: nn.Module) -> None:
    """GPT-2's initialisation: small normal weights (std 0.02), zero biases; LayerNorm keeps gamma 1, beta 0."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
