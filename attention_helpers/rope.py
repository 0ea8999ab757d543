"""Rotary position embedding (RoPE, Su et al. 2021, arXiv 2104.09864): positions enter attention by rotating the
queries and keys; ``MultiHeadAttention(..., rope=True)`` (and ``GPTConfig(..., positions="rope")``) applies it.
"""

from __future__ import annotations

import torch

from ._checks import check_positions, check_positive_real, check_tensor, shape_str


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(x1, x2) -> (-x2, x1)`` on the two halves of the last dimension: a quarter turn of every pair."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope_rotate(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0) -> torch.Tensor:
    """Rotate queries or keys ``x`` ``(..., num_tokens, head_dim)`` by their ``positions`` (broadcast to
    ``x.shape[:-1]``; default ``0, 1, ...``): the pair of dimensions ``i`` and ``i + head_dim / 2`` (Hugging Face's
    ``rotate_half``; the paper pairs ``2i, 2i + 1``) turns by ``m * base^(-2i / head_dim)`` at position ``m``, so a
    query at ``m`` dotted with a key at ``n`` depends on ``m - n`` only."""
    check_tensor("x", x, 2, "(..., num_tokens, head_dim)", "num_tokens")
    head_dim = x.shape[-1]
    if head_dim < 2 or head_dim % 2 != 0:
        raise ValueError(
            f"x must have shape (..., num_tokens, head_dim) with an even head_dim >= 2 (RoPE rotates pairs of "
            f"dimensions), got shape {shape_str(x.shape)} (head_dim={head_dim})"
        )
    check_positive_real("base", base)
    if positions is None:
        positions = torch.arange(x.shape[-2], device=x.device)
    else:
        check_positions(positions, x)
    return rotate(x, positions, base)


def rotate(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """:func:`rope_rotate` without its checks, for a module that made ``positions`` itself (once per layer and
    generated token: the checks, which read the positions' values, would cost more than the rotation)."""
    head_dim = x.shape[-1]
    # Angles in float64, then cast: large positions times fast frequencies lose digits in float32.
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64, device=x.device) / head_dim)
    angles = positions.to(torch.float64)[..., None] * inv_freq  # (..., num_tokens, head_dim / 2)
    angles = torch.cat((angles, angles), dim=-1)  # pair i and pair i + head_dim / 2 share an angle
    return x * angles.cos().to(x.dtype) + _rotate_half(x) * angles.sin().to(x.dtype)
