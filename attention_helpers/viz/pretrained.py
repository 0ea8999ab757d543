"""Figures and a widget for a pretrained encoder: one head of one layer, the attention each token
receives layer by layer, and the cosine similarities of sentence embeddings (drawn as in ``plotting``).
"""

from __future__ import annotations

from collections.abc import Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch

from .._checks import check_index, check_labels, check_tensor, shape_str
from .plotting import plot_attention
from .widgets import widget_panel


def _check_all_weights(attn_weights, tokens: Sequence[str]) -> None:
    check_tensor("attn_weights", attn_weights, (4,), "(num_layers, num_heads, num_tokens, num_tokens)", "num_tokens")
    if attn_weights.shape[-1] != attn_weights.shape[-2]:
        raise ValueError(
            "attn_weights must have shape (num_layers, num_heads, num_tokens, num_tokens), "
            f"got {shape_str(attn_weights.shape)}"
        )
    check_labels("tokens", tokens, attn_weights.shape[-1], "tokens in attn_weights")


def plot_layer_head(
    attn_weights: torch.Tensor, tokens: Sequence[str], layer: int, head: int, ax=None, annotate: bool = False
):
    """Heatmap of one head of one layer from ``(num_layers, num_heads, num_tokens, num_tokens)`` weights,
    the tokens as tick labels (layers and heads counted from 0). The colour scale is 0 to 1 for every layer
    and head, so that two heads' figures can be compared."""
    _check_all_weights(attn_weights, tokens)
    check_index("layer", layer, attn_weights.shape[0], "num_layers")
    check_index("head", head, attn_weights.shape[1], "num_heads")
    if ax is None:
        ax = plt.figure(figsize=(7, 6)).add_subplot()
    title = f"Layer {layer}, head {head}"
    plot_attention(attn_weights[layer, head], tokens, ax=ax, title=title, annotate=annotate, vmin=0.0, vmax=1.0)
    ax.images[0].colorbar.set_label("attention weight")
    return ax


def plot_attention_received(attn_weights: torch.Tensor, tokens: Sequence[str], ax=None):
    """For each layer, the attention each token receives, averaged over heads and queries: a
    ``(num_layers, num_tokens)`` heatmap of ``attn_weights.mean(dim=(1, 2))`` (each row sums to 1).

    Tokens that take a large share without carrying meaning ([CLS], [SEP], punctuation) are attention sinks.
    """
    _check_all_weights(attn_weights, tokens)
    received = attn_weights.detach().float().cpu().mean(dim=(1, 2))  # (num_layers, num_keys)
    num_layers, num_tokens = received.shape
    if ax is None:
        ax = plt.figure(figsize=(1.5 + 0.55 * num_tokens, 1.5 + 0.45 * num_layers)).add_subplot()
    image = ax.imshow(received.numpy(), cmap="viridis", vmin=0.0, aspect="auto")
    ax.set_xticks(range(num_tokens), labels=list(tokens), rotation=45, ha="right")
    ax.set(yticks=range(num_layers), xlabel="token (attended to)", ylabel="layer")
    ax.set_title("Attention each token receives (mean over heads and queries)")
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04).set_label("mean attention weight")
    return ax


def plot_similarities(similarities: torch.Tensor, labels: Sequence[str], ax=None, title="Cosine similarity"):
    """Heatmap of a ``(num_sentences, num_sentences)`` similarity matrix, each cell written to 2 decimals."""
    check_tensor("similarities", similarities, (2,), "(num_sentences, num_sentences)")
    if similarities.shape[0] != similarities.shape[1]:
        raise ValueError(
            f"similarities must be square (num_sentences, num_sentences), got {shape_str(similarities.shape)}"
        )
    check_labels("labels", labels, similarities.shape[0], "sentences")
    matrix = similarities.detach().float().cpu()
    size = matrix.shape[0]
    if ax is None:
        ax = plt.figure(figsize=(2.5 + 0.9 * size, 1.5 + 0.8 * size)).add_subplot()
    image = ax.imshow(matrix.numpy(), cmap="magma", vmin=min(0.0, float(matrix.min())), vmax=1.0)
    ax.set_xticks(range(size), labels=list(labels), rotation=45, ha="right")
    ax.set_yticks(range(size), labels=list(labels))
    ax.set(xlabel="sentence", ylabel="sentence", title=title)
    for i in range(size):
        for j in range(size):
            value = float(matrix[i, j])
            color = "black" if value > 0.6 else "white"
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8, color=color)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04).set_label("cosine similarity")
    return ax


def layer_head_widget(attn_weights: torch.Tensor, tokens: Sequence[str]) -> widgets.VBox:
    """Sliders for the layer and the head over :func:`plot_layer_head` of
    ``(num_layers, num_heads, num_tokens, num_tokens)`` attention weights."""
    _check_all_weights(attn_weights, tokens)
    num_layers, num_heads = attn_weights.shape[:2]
    return widget_panel(
        lambda layer, head: plot_layer_head(attn_weights, tokens, layer, head),
        layer=widgets.IntSlider(value=0, min=0, max=num_layers - 1, description="layer"),
        head=widgets.IntSlider(value=0, min=0, max=num_heads - 1, description="head"),
    )
