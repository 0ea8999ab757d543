"""Figures for attention at scale (lesson 11): measured memory and time of three attention implementations,
and which blocks a causal tiled loop computes."""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from .._checks import check_positive_int
from ..efficient import tiled_attention_blocks


def plot_attention_cost(measured: dict, sizes, implementations=("explicit", "tiled", "fused")):
    """Two log-log panels, extra peak memory (MiB) and CPU time (s) against the number of tokens, one line per
    implementation, and a dashed line for one float32 score matrix (``tokens²`` numbers).

    ``measured[(implementation, num_tokens)]`` is a dict with ``"extra_peak_mib"`` and ``"cpu_s"`` (the rows of
    ``attention_helpers/results/attention_ram.json``); ``sizes`` the token counts to draw. Returns the figure."""
    sizes = sorted(sizes)
    missing = [(name, n) for name in implementations for n in sizes if (name, n) not in measured]
    if missing:
        raise ValueError(f"measured has no row for {missing[:3]} (implementation, num_tokens)")
    fig, (ax_ram, ax_time) = plt.subplots(1, 2, figsize=(11, 4))
    for name, marker in zip(implementations, "osD^v", strict=False):
        ax_ram.plot(sizes, [measured[name, n]["extra_peak_mib"] for n in sizes], marker=marker, label=name)
        ax_time.plot(sizes, [measured[name, n]["cpu_s"] for n in sizes], marker=marker, label=name)
    ax_ram.plot(sizes, [n * n * 4 / 2**20 for n in sizes], "k--", label="one score matrix (∝ tokens²)")
    for ax, what in ((ax_ram, "extra peak memory (MiB)"), (ax_time, "CPU time per call (s)")):
        ax.set(xscale="log", yscale="log", xlabel="tokens", ylabel=what)
        ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
        ax.set_xticks([], minor=True)
        ax.legend()
    ax_ram.set_title("Memory: the explicit path grows with tokens²")
    ax_time.set_title("Time: every implementation does tokens² work")
    fig.tight_layout()
    return fig


def plot_causal_blocks(num_tokens: int, block_size: int, ax=None):
    """Which ``(query block, key block)`` pairs a causal tiled loop computes for ``num_tokens`` tokens: skipped
    (entirely in the future), on the diagonal (masked inside) or in full, with the token diagonal drawn in red and
    the token ranges as tick labels (:func:`~attention_helpers.efficient.tiled_attention_blocks`). Each block is drawn
    as wide as the tokens it holds, so a last block shorter than ``block_size`` looks shorter. Returns the axes."""
    check_positive_int("num_tokens", num_tokens)
    check_positive_int("block_size", block_size)
    blocks = tiled_attention_blocks(num_tokens, num_tokens, block_size, causal=True)  # (query blocks, key blocks)
    num_blocks = blocks.shape[0]
    kind = torch.where(blocks, 2, 0) - torch.eye(num_blocks, dtype=torch.int64)  # 2 full, 1 diagonal, 0 skipped
    if ax is None:
        ax = plt.figure(figsize=(7.5, 4.4)).add_subplot()
    colours = ListedColormap(["#f0f0f0", "#9ecae1", "#2171b5"])  # skipped, diagonal, full
    edges = [*range(0, num_tokens, block_size), num_tokens]  # token positions where the blocks start and end
    ax.pcolormesh(edges, edges, kind.numpy(), cmap=colours, vmin=-0.5, vmax=2.5, edgecolors="white", linewidth=1)
    ax.set(xlim=(0, num_tokens), ylim=(num_tokens, 0), aspect="equal")  # query 0 at the top, as in a matrix
    ax.plot([0, num_tokens], [0, num_tokens], "r-", linewidth=1)  # the token-level diagonal: query = key
    labels = ("skipped", "diagonal: masked inside", "computed in full")
    legend = [Patch(color=colours(k), label=label) for k, label in enumerate(labels)]
    legend.append(plt.Line2D([], [], color="r", linewidth=1, label="query = key"))
    ax.legend(handles=legend, loc="upper left", bbox_to_anchor=(1.02, 1), title="what the loop does")
    token_ranges = [f"{start}-{end - 1}" for start, end in zip(edges[:-1], edges[1:], strict=True)]
    centres = [(start + end) / 2 for start, end in zip(edges[:-1], edges[1:], strict=True)]
    ax.set_xticks(centres, token_ranges, rotation=45, ha="right")
    ax.set_yticks(centres, token_ranges)
    ax.set(xlabel="key block (token positions)", ylabel="query block (token positions)")
    ax.set_title(f"Causal attention, {num_tokens} tokens in blocks of {block_size}")
    ax.figure.tight_layout()
    return ax
