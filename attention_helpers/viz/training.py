"""Figures for lesson 08: the training curves, and every head's attention in every layer (each returns the figure)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch

from .._checks import check_instance, check_labels, shape_str
from ..training import History


def plot_history(history: History, title: str = "Training"):
    """Loss (left) and per-token accuracy (right) against the training step: on each step's training batch
    and, when the history has them, on the held-out set at ``history.eval_steps``."""
    check_instance("history", history, History, "a History (what train returns)")
    if not history.loss:
        raise ValueError("history is empty: train for at least one step first")
    steps = range(1, len(history.loss) + 1)
    fig, (loss_ax, accuracy_ax) = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
    loss_ax.plot(steps, history.loss, color="#4c72b0")
    loss_ax.set_yscale("log")  # the last steps' small losses would be flat at zero on a linear scale
    loss_ax.set(xlabel="training step", ylabel="cross-entropy loss (log scale)", title="Loss on each training batch")

    accuracy_ax.plot(steps, history.accuracy, color="#4c72b0", label="training batch")
    if history.eval_steps:
        accuracy_ax.plot(history.eval_steps, history.eval_accuracy, "o-", color="#dd8452", label="held-out set")
    accuracy_ax.set(ylim=(0, 1.02), xlabel="training step", ylabel="per-token accuracy", title="Accuracy")
    accuracy_ax.legend(loc="lower right")
    fig.suptitle(title)
    return fig


def plot_attention_layers(
    weights: torch.Tensor,
    labels: Sequence[str],
    title: str = "Attention weights per layer and head",
    col_labels: Sequence[str] | None = None,
):
    """A grid of heatmaps, one row per layer and one column per head, from ``(num_layers, num_heads,
    num_tokens, num_tokens)`` weights (one sequence of the ``(num_layers, batch, num_heads, ...)`` weights
    that ``Encoder`` returns, e.g. ``weights[:, 0]``, or their mean over the batch).

    ``labels`` name the query rows (and the key columns, unless ``col_labels`` is given). All maps share
    one colour scale from 0 to 1, so that figures drawn before and after training compare directly.
    """
    check_instance("weights", weights, torch.Tensor, "a torch.Tensor")
    if weights.dim() != 4:
        raise ValueError(
            f"weights must have shape (num_layers, num_heads, num_tokens, num_tokens), got {shape_str(weights.shape)}"
        )
    num_layers, num_heads, num_queries, num_keys = weights.shape
    col_labels = labels if col_labels is None else col_labels
    check_labels("labels", labels, num_queries, "query rows in weights")
    check_labels("col_labels", col_labels, num_keys, "key columns in weights")
    matrices = weights.detach().float().cpu()
    width = 0.25 * num_keys * num_heads + 1.6 * num_heads + 0.8
    height = 0.25 * num_queries * num_layers + 1.2 * num_layers
    fig, axes = plt.subplots(num_layers, num_heads, figsize=(width, height), squeeze=False, layout="constrained")
    for layer in range(num_layers):
        for head in range(num_heads):
            ax = axes[layer, head]
            image = ax.imshow(matrices[layer, head].numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
            ax.set_xticks(range(num_keys), labels=list(col_labels))
            ax.set_yticks(range(num_queries), labels=list(labels))
            ax.set(xlabel="key (attended to)", ylabel="query (attending)", title=f"layer {layer}, head {head}")
    fig.colorbar(image, ax=axes, label="attention weight", shrink=0.8)
    fig.suptitle(title)
    return fig
