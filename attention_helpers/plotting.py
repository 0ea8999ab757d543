"""Figures for the notebooks: word vectors in 3D, attention heatmaps, and the project's diagrams.

Each function draws into a Matplotlib ``Axes`` (a new figure when ``ax`` is None) and returns it;
the notebook cell ends with ``plt.show()``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from ._checks import check_labels, check_positive_int, check_probability, shape_str
from .functional import random_dot_products, softmax_with_temperature

IMAGES_DIR = Path(__file__).resolve().parent.parent / "images"


def _as_2d(name: str, values) -> torch.Tensor:
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(values).__name__}")
    if values.dim() != 2:
        raise ValueError(f"{name} must have 2 dimensions, got shape {shape_str(values.shape)}")
    return values.detach().float().cpu()


def plot_embeddings_3d(
    vectors: torch.Tensor,
    labels: Sequence[str],
    ax=None,
    title: str = "Word embeddings in 3D",
    elev: float | None = None,
    azim: float | None = None,
):
    """Scatter ``(num_words, 3)`` vectors in 3D, each point named by its word; all three axes labelled.

    ``elev`` and ``azim`` (degrees) turn the camera: elevation above the x-y plane and rotation about
    the vertical axis (Matplotlib's defaults, 30 and -60, when None).
    """
    points = _as_2d("vectors", vectors)
    if points.shape[1] != 3:
        raise ValueError(f"vectors must have shape (num_words, 3), got {shape_str(points.shape)}")
    check_labels("labels", labels, points.shape[0], "vectors")
    if ax is None:
        ax = plt.figure(figsize=(6, 5)).add_subplot(projection="3d")
    for i, ((x, y, z), word) in enumerate(zip(points.tolist(), labels, strict=True)):
        ax.scatter(x, y, z, s=40)
        # a point almost on top of an earlier one gets its label on the left, so the two do not overlap
        crowded = i > 0 and bool((points[:i] - points[i]).norm(dim=1).min() < 0.1)
        ax.text(x, y, z, f"{word}  " if crowded else f"  {word}", fontsize=10, ha="right" if crowded else "left")
    ax.set_xlabel("dimension 1")
    ax.set_ylabel("dimension 2")
    ax.set_zlabel("dimension 3")
    ax.set_title(title)
    ax.view_init(elev=elev, azim=azim)
    return ax


def plot_scores(
    values: torch.Tensor,
    labels: Sequence[str],
    ax=None,
    title: str = "Attention scores",
    ylabel: str = "score",
    ylim: tuple[float, float] | None = None,
):
    """Bar chart of one value per word, ``(num_words,)``, with the words on the x axis and each bar's
    value written on it (two decimals). Used for one query's scores or its attention weights."""
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"values must be a torch.Tensor, got {type(values).__name__}")
    if values.dim() != 1:
        raise ValueError(f"values must have shape (num_words,), got {shape_str(values.shape)}")
    check_labels("labels", labels, values.shape[0], "values")
    heights = values.detach().float().cpu().tolist()
    if ax is None:
        ax = plt.figure(figsize=(1.5 + 0.9 * len(heights), 3.2)).add_subplot()
    bars = ax.bar(range(len(heights)), heights, color="#4c72b0")
    ax.bar_label(bars, labels=[f"{h:.2f}" for h in heights], fontsize=9)
    ax.set_xticks(range(len(heights)), labels=list(labels))
    ax.set_xlabel("word")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.axhline(0.0, color="black", lw=0.8)
    return ax


def plot_scaling(d_k: int, num_keys: int = 6, seed: int = 0):
    """Why attention divides by ``sqrt(d_k)``, for random queries and keys with ``d_k`` entries.

    Left: the spread of raw dot products ``q · k`` (standard deviation about ``sqrt(d_k)``) next to
    the scaled ones ``q · k / sqrt(d_k)`` (about 1). Right: one query's softmax weights over
    ``num_keys`` random keys, raw and scaled: the raw weights pile onto one key as ``d_k`` grows.
    Draws from a ``torch.Generator`` seeded with ``seed``, leaving the global random state alone.
    Returns the figure.
    """
    check_positive_int("num_keys", num_keys)
    generator = torch.Generator().manual_seed(seed)
    raw = random_dot_products(d_k, generator=generator)
    scaled = raw / math.sqrt(d_k)
    query = torch.randn(d_k, generator=generator)
    keys = torch.randn(num_keys, d_k, generator=generator)
    raw_weights = torch.softmax(keys @ query, dim=-1)
    scaled_weights = softmax_with_temperature(keys @ query, math.sqrt(d_k))  # the scaling is a temperature

    fig, (ax_spread, ax_weights) = plt.subplots(1, 2, figsize=(11, 3.6))
    limit = max(4.0, float(raw.abs().max()))
    bins = torch.linspace(-limit, limit, 61).tolist()
    ax_spread.hist(raw.tolist(), bins=bins, alpha=0.6, label=f"q · k  (std {raw.std():.2f})")
    ax_spread.hist(scaled.tolist(), bins=bins, alpha=0.6, label=f"q · k / √d_k  (std {scaled.std():.2f})")
    ax_spread.set_xlabel("score")
    ax_spread.set_ylabel("number of query/key pairs")
    ax_spread.set_title(f"Spread of {raw.numel()} random dot products, d_k = {d_k}")
    ax_spread.legend(fontsize=8)

    positions = torch.arange(num_keys)
    ax_weights.bar((positions - 0.2).tolist(), raw_weights.tolist(), width=0.4, label="softmax(q · k)")
    ax_weights.bar((positions + 0.2).tolist(), scaled_weights.tolist(), width=0.4, label="softmax(q · k / √d_k)")
    ax_weights.set_xticks(positions.tolist(), labels=[f"key {j}" for j in range(num_keys)])
    ax_weights.set_ylim(0, 1)
    ax_weights.set_xlabel("key")
    ax_weights.set_ylabel("attention weight")
    ax_weights.set_title(f"One query's weights: largest {raw_weights.max():.2f} raw, {scaled_weights.max():.2f} scaled")
    ax_weights.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_dropout(p: float, size: int = 6, seed: int = 123, ax=None):
    """Heatmap of ``nn.Dropout(p)`` (training mode) applied to a ``(size, size)`` matrix of ones.

    Dropped entries are 0; the survivors are scaled to ``1 / (1 - p)`` so that the expected value of
    every entry stays 1. The title counts the survivors and gives the matrix's mean. The draw is made
    with ``torch.manual_seed(seed)`` inside ``torch.random.fork_rng``, so it repeats for a seed and
    leaves the caller's random state alone.
    """
    check_probability("p", p)
    check_positive_int("size", size)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        dropped = torch.nn.Dropout(p).train()(torch.ones(size, size))
    if ax is None:
        ax = plt.figure(figsize=(1 + 0.75 * size, 0.9 + 0.65 * size)).add_subplot()
    ax.imshow(dropped.numpy(), cmap="Blues", vmin=0.0, vmax=max(2.0, 1.0 / (1.0 - p)))
    for i in range(size):
        for j in range(size):
            ax.text(j, i, f"{float(dropped[i, j]):.2f}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(size))
    ax.set_yticks(range(size))
    ax.set_xlabel("column")
    ax.set_ylabel("row")
    kept = int((dropped != 0).sum())
    ax.set_title(f"Dropout p = {p:.2f}: {kept} of {size * size} kept, mean {float(dropped.mean()):.2f}")
    return ax


def plot_attention(
    weights: torch.Tensor,
    row_labels: Sequence[str],
    col_labels: Sequence[str] | None = None,
    ax=None,
    title: str = "Attention weights",
    annotate: bool = True,
):
    """Heatmap of a ``(num_queries, num_keys)`` attention matrix with the words as tick labels.

    Rows are the queries (the token doing the attending), columns the keys (the tokens attended to).
    """
    matrix = _as_2d("weights", weights)
    col_labels = row_labels if col_labels is None else col_labels
    check_labels("row_labels", row_labels, matrix.shape[0], "rows in weights")
    check_labels("col_labels", col_labels, matrix.shape[1], "columns in weights")
    if ax is None:
        ax = plt.figure(figsize=(1 + 0.8 * matrix.shape[1], 0.8 + 0.7 * matrix.shape[0])).add_subplot()
    # weights are never negative, so the scale starts at 0; raw scores may be, and then it starts lower
    vmin = min(0.0, float(matrix.min()))
    image = ax.imshow(matrix.numpy(), cmap="viridis", vmin=vmin, vmax=max(vmin + 1e-12, float(matrix.max())))
    ax.set_xticks(range(matrix.shape[1]), labels=list(col_labels), rotation=45, ha="right")
    ax.set_yticks(range(matrix.shape[0]), labels=list(row_labels))
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title(title)
    if annotate:
        threshold = vmin + 0.6 * (float(matrix.max()) - vmin)
        for i in range(matrix.shape[0]):
            for j in range(matrix.shape[1]):
                value = float(matrix[i, j])
                ax.text(
                    j,
                    i,
                    f"{value:.2f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="black" if value > threshold else "white",
                )
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_attention_heads(
    weights: torch.Tensor, labels: Sequence[str], ncols: int = 4, title: str = "Attention weights per head"
):
    """A grid of heatmaps, one per head, from ``(num_heads, num_tokens, num_tokens)`` weights
    (take one batch element of a ``(batch, num_heads, ...)`` tensor first). Returns the figure."""
    if not isinstance(weights, torch.Tensor):
        raise TypeError(f"weights must be a torch.Tensor, got {type(weights).__name__}")
    if weights.dim() != 3:
        raise ValueError(f"weights must have shape (num_heads, num_tokens, num_tokens), got {shape_str(weights.shape)}")
    num_heads = weights.shape[0]
    ncols = min(ncols, num_heads)
    nrows = -(-num_heads // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.2 * ncols, 3.0 * nrows), squeeze=False)
    for head, ax in enumerate(axes.flat):
        if head < num_heads:
            plot_attention(weights[head], labels, ax=ax, title=f"head {head}", annotate=False)
        else:
            ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def diagram_path(name: str) -> Path:
    """Path of ``images/<name>.png`` in the repository (a clone or an editable install)."""
    path = IMAGES_DIR / f"{name}.png"
    if not path.is_file():
        available = sorted(p.stem for p in IMAGES_DIR.glob("*.png")) if IMAGES_DIR.is_dir() else []
        raise FileNotFoundError(
            f"no diagram {name!r} at {path}; diagrams are found next to the package in a clone of the "
            f"repository (available: {available})"
        )
    return path


def show_diagram(name: str, width: int | None = None):
    """Display ``images/<name>.png`` in a notebook (an ``IPython.display.Image``).

    By default the diagram is shown at its own pixel width, the size ``tools/make_diagrams.py`` draws
    its text for (a notebook column narrower than that shrinks it, and the diagrams keep their text
    legible down to 1000 pixels wide); ``width`` (pixels) overrides it.

    Diagrams are shown from a code cell rather than a Markdown image link so that they render
    everywhere: the PNG is stored in the cell's output (GitHub and Colab show it before anything
    runs), and re-running finds the file in the clone (JupyterLab locally; Colab's setup cell clones
    the repository).
    """
    from IPython.display import Image

    if width is not None:
        check_positive_int("width", width)
    return Image(filename=str(diagram_path(name)), width=width)
