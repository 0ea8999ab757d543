"""Figures for the notebooks: word vectors in 3D, attention heatmaps, and the project's diagrams.

Each function draws into a Matplotlib ``Axes`` (a new figure when ``ax`` is None) and returns it;
the notebook cell ends with ``plt.show()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from ._checks import shape_str

IMAGES_DIR = Path(__file__).resolve().parent.parent / "images"


def _as_2d(name: str, values) -> torch.Tensor:
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(values).__name__}")
    if values.dim() != 2:
        raise ValueError(f"{name} must have 2 dimensions, got shape {shape_str(values.shape)}")
    return values.detach().float().cpu()


def _check_labels(name: str, labels: Sequence[str], count: int, what: str) -> None:
    if len(labels) != count:
        raise ValueError(f"{name} has {len(labels)} labels but there are {count} {what}")


def plot_embeddings_3d(vectors: torch.Tensor, labels: Sequence[str], ax=None, title: str = "Word embeddings in 3D"):
    """Scatter ``(num_words, 3)`` vectors in 3D, each point named by its word; all three axes labelled.

    To turn the view, call ``ax.view_init(elev, azim)`` on the returned axes before ``plt.show()``.
    """
    points = _as_2d("vectors", vectors)
    if points.shape[1] != 3:
        raise ValueError(f"vectors must have shape (num_words, 3), got {shape_str(points.shape)}")
    _check_labels("labels", labels, points.shape[0], "vectors")
    if ax is None:
        ax = plt.figure(figsize=(6, 5)).add_subplot(projection="3d")
    for (x, y, z), word in zip(points.tolist(), labels, strict=True):
        ax.scatter(x, y, z, s=40)
        ax.text(x, y, z, f" {word}", fontsize=10)
    ax.set_xlabel("dimension 1")
    ax.set_ylabel("dimension 2")
    ax.set_zlabel("dimension 3")
    ax.set_title(title)
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
    _check_labels("row_labels", row_labels, matrix.shape[0], "rows in weights")
    _check_labels("col_labels", col_labels, matrix.shape[1], "columns in weights")
    if ax is None:
        ax = plt.figure(figsize=(1 + 0.8 * matrix.shape[1], 0.8 + 0.7 * matrix.shape[0])).add_subplot()
    image = ax.imshow(matrix.numpy(), cmap="viridis", vmin=0.0, vmax=max(1e-12, float(matrix.max())))
    ax.set_xticks(range(matrix.shape[1]), labels=list(col_labels), rotation=45, ha="right")
    ax.set_yticks(range(matrix.shape[0]), labels=list(row_labels))
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title(title)
    if annotate:
        threshold = 0.6 * float(matrix.max())
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


def show_diagram(name: str, width: int = 720):
    """Display ``images/<name>.png`` in a notebook (an ``IPython.display.Image``).

    Diagrams are shown from a code cell rather than a Markdown image link so that they render
    everywhere: the PNG is stored in the cell's output (GitHub and Colab show it before anything
    runs), and re-running finds the file in the clone (JupyterLab locally; Colab's setup cell clones
    the repository).
    """
    from IPython.display import Image

    return Image(filename=str(diagram_path(name)), width=width)
