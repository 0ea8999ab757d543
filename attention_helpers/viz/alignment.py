"""Figures for an encoder-decoder's cross-attention (lesson 12): which input character each output character
reads, for several examples side by side, or for every layer and head of one example."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch

from .._checks import check_labels, check_tensor
from .plotting import plot_attention


def plot_cross_attention(
    maps: Sequence[torch.Tensor], targets: Sequence[str], sources: Sequence[str], title: str, shared_scale=False
):
    """One heatmap per example: ``maps[i]`` ``(len(targets[i]), len(sources[i]))`` cross-attention weights, rows
    labelled with the output characters, columns with the input characters. ``shared_scale`` puts every map on one
    colour bar from 0 to 1 (otherwise each map has its own). Returns the figure."""
    if not len(maps) == len(targets) == len(sources) or not maps:
        raise ValueError(
            f"maps, targets and sources must hold one entry per example, got {len(maps)}, {len(targets)}, "
            f"{len(sources)}"
        )
    widths = [len(source) for source in sources]
    fig, axes = plt.subplots(1, len(maps), figsize=(16, 4.4), width_ratios=widths, layout="constrained", squeeze=False)
    for ax, weights, target, source in zip(axes[0], maps, targets, sources, strict=True):
        check_tensor("maps[i]", weights, (2,), "(tgt_len, src_len)")
        bounds = dict(vmin=0.0, vmax=1.0) if shared_scale else {}
        plot_attention(weights, list(target), list(source), ax=ax, title=repr(source), annotate=False, **bounds)
        ax.set(xlabel="input character (key)", ylabel="output character (query)")
        if shared_scale:
            ax.images[0].colorbar.remove()  # replaced by the one colour bar below
    if shared_scale:
        fig.colorbar(axes[0, -1].images[0], ax=axes[0].tolist(), label="weight", fraction=0.02, pad=0.01)
    fig.suptitle(title)
    return fig


def plot_cross_attention_heads(weights: torch.Tensor, target: str, source: str, title: str):
    """A grid with one heatmap per decoder layer (rows) and head (columns) from ``weights`` ``(num_layers,
    num_heads, len(target), len(source))`` of one example, all on one colour scale from 0 to 1. Returns the figure."""
    check_tensor("weights", weights, (4,), "(num_layers, num_heads, tgt_len, src_len)")
    check_labels("target", list(target), weights.shape[2], "output positions in weights")
    check_labels("source", list(source), weights.shape[3], "input positions in weights")
    num_layers, num_heads = weights.shape[:2]
    figsize = (2.6 + 0.26 * len(source) * num_heads, 0.6 + 2.9 * num_layers)
    fig, axes = plt.subplots(num_layers, num_heads, figsize=figsize, squeeze=False, layout="constrained")
    for (layer, head), ax in zip(((i, j) for i in range(num_layers) for j in range(num_heads)), axes.flat, strict=True):
        plot_attention(
            weights[layer, head],
            list(target),
            list(source),
            ax=ax,
            title=f"layer {layer}, head {head}",
            annotate=False,
            vmin=0.0,
            vmax=1.0,
        )
        ax.images[0].colorbar.remove()
        ax.set(xlabel="", ylabel="")
        ax.tick_params(axis="x", labelsize=7)
    fig.colorbar(axes[0, 0].images[0], ax=axes.ravel().tolist(), label="weight", shrink=0.9)
    fig.supxlabel("input character (key)")
    fig.supylabel("output character (query)")
    fig.suptitle(title)
    return fig


def plot_field_shares(shares: torch.Tensor, formats: Sequence[str], fields: Sequence[str]):
    """One annotated heatmap per decoder layer of ``shares`` ``(num_layers, len(formats), len(fields))``: the share
    of each output field's cross-attention that lands on the same field of the input, per input format, on one
    scale from 0 to 1. Returns the figure."""
    check_tensor("shares", shares, (3,), "(num_layers, num_formats, num_fields)")
    check_labels("formats", formats, shares.shape[1], "formats in shares")
    check_labels("fields", fields, shares.shape[2], "fields in shares")
    num_layers = shares.shape[0]
    fig, axes = plt.subplots(1, num_layers, figsize=(1.5 + 3.6 * num_layers, 3.4), squeeze=False, layout="constrained")
    for layer, ax in enumerate(axes[0]):
        plot_attention(
            shares[layer], list(formats), list(fields), ax=ax, title=f"decoder layer {layer}", vmin=0.0, vmax=1.0
        )
        ax.images[0].colorbar.remove()
        ax.set(xlabel="output field", ylabel="input format" if layer == 0 else "")
        ax.tick_params(axis="x", rotation=0)
    fig.colorbar(axes[0, 0].images[0], ax=axes[0].tolist(), label="share on the same input field")
    fig.suptitle("Where each output field's cross-attention lands (held-out inputs, mean over heads)")
    return fig


def plot_exact_match(results: dict, formats: Sequence[str]):
    """Grouped bars: for each input format, the exact-match rate of every entry of ``results`` (a name, such as
    ``"own weights"``, mapped to a ``(len(formats),)`` tensor of rates from 0 to 1). Returns the axes."""
    if not results:
        raise ValueError("results must map at least one name to a tensor of exact-match rates, one per format")
    for name, rates in results.items():
        check_tensor(f"results[{name!r}]", rates, (1,), "(num_formats,)")
        check_labels("formats", formats, rates.shape[0], f"rates in results[{name!r}]")
    ax = plt.figure(figsize=(11.5, 3.6)).add_subplot()
    width = 0.8 / len(results)
    for k, (name, rates) in enumerate(results.items()):
        positions = [f + (k - (len(results) - 1) / 2) * width for f in range(len(formats))]
        ax.bar(positions, rates.detach().float().cpu().tolist(), width, label=name)
    ax.set_xticks(range(len(formats)), list(formats))
    ax.set(ylim=(0, 1.05), xlabel="input format", ylabel="exact match (held-out)")
    ax.set_title("Decoding with the cross-attention weights replaced")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.figure.tight_layout()
    return ax
