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

from .._checks import check_instance, check_labels, check_positive_int, check_probability, shape_str
from ..functional import random_dot_products, softmax_with_temperature

# The diagrams (the repository's images/, which viz/images links to) ship inside the package as package data, so
# they are found after any install, not only in a clone.
IMAGES_DIR = Path(__file__).resolve().parent / "images"


def _as_2d(name: str, values, columns: int | None = None) -> torch.Tensor:
    check_instance(name, values, torch.Tensor, "a torch.Tensor")
    if values.dim() != 2:
        raise ValueError(f"{name} must have 2 dimensions, got shape {shape_str(values.shape)}")
    if columns is not None and values.shape[1] != columns:
        raise ValueError(f"{name} must have shape (num_words, {columns}), got {shape_str(values.shape)}")
    return values.detach().float().cpu()


def _twin_side(points: torch.Tensor, i: int, near: float = 0.1) -> int:
    """0 for a point with no near twin; of two points closer than ``near``, 1 for the first and -1 for the second."""
    distances = (points - points[i]).norm(dim=1)
    if bool((distances[:i] < near).any()):
        return -1
    return 1 if bool((distances[i + 1 :] < near).any()) else 0


def _name_point_3d(ax, xyz, text: str, side: int, gap: float, **text_kwargs) -> None:
    """Write ``text`` beside a 3D point, ``gap`` points away from it on screen, whatever the camera angle:
    on its right (``side`` 0), above right (1) or below left (-1, the second of two near twins)."""
    from matplotlib.transforms import offset_copy

    places = {0: (gap, 0, "left", "center"), 1: (gap, gap, "left", "bottom"), -1: (-gap, -gap, "right", "top")}
    dx, dy, ha, va = places[side]
    shifted = offset_copy(ax.transData, fig=ax.figure, x=dx, y=dy, units="points")
    ax.text(*xyz, text, ha=ha, va=va, transform=shifted, **text_kwargs)


_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">", "p")


def plot_embeddings_3d(
    vectors: torch.Tensor,
    labels: Sequence[str],
    ax=None,
    title: str = "Word embeddings in 3D",
    elev: float | None = None,
    azim: float | None = None,
):
    """Scatter ``(num_words, 3)`` vectors in 3D, each point named by its word; all three axes labelled.

    Every word gets its own colour and marker, listed in a legend, so that near twins ("journey" and "starts")
    can be told apart. ``elev`` and ``azim`` (degrees) turn the camera (Matplotlib's 30 and -60 when None).
    """
    points = _as_2d("vectors", vectors, columns=3)
    check_labels("labels", labels, points.shape[0], "vectors")
    if ax is None:
        ax = plt.figure(figsize=(6.5, 5)).add_subplot(projection="3d")
    for i, ((x, y, z), word) in enumerate(zip(points.tolist(), labels, strict=True)):
        ax.scatter(x, y, z, s=45, marker=_MARKERS[i % len(_MARKERS)], color=f"C{i % 10}", label=word)
        _name_point_3d(ax, (x, y, z), word, _twin_side(points, i), gap=6, fontsize=10, color=f"C{i % 10}")
    ax.set(xlabel="dimension 1", ylabel="dimension 2", zlabel="dimension 3")
    ax.set_title(title, pad=24)
    ax.legend(loc="upper left", bbox_to_anchor=(1.12, 1.0), fontsize=9, title="word")  # clear of the z label
    ax.view_init(elev=elev, azim=azim)
    if elev is not None and abs(elev) > 45:  # seen steeply from above or below, the box's corners reach the title
        ax.set_box_aspect(None, zoom=0.85)
    return ax


def plot_dot_product_2d(a: torch.Tensor, b: torch.Tensor, ax=None, a_label: str = "a", b_label: str = "b"):
    """Two 2-D vectors as arrows from the origin, with their lengths and the angle between them.

    The title gives ``a · b = |a| |b| cos θ`` with the numbers filled in, so the sign of the dot
    product can be read off the angle: positive below 90°, zero at 90°, negative above.
    """
    for name, vector in ((a_label, a), (b_label, b)):
        check_instance(name, vector, torch.Tensor, "a torch.Tensor of shape (2,)")
        if vector.shape != (2,):
            raise ValueError(f"{name} must have shape (2,), got {shape_str(vector.shape)}")
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    len_a, len_b = float(a.norm()), float(b.norm())
    if len_a == 0 or len_b == 0:
        raise ValueError("a and b must not be zero vectors: the angle between them is undefined")
    dot = float(a @ b)
    angle = math.degrees(math.acos(max(-1.0, min(1.0, dot / (len_a * len_b)))))
    if ax is None:
        ax = plt.figure(figsize=(4.2, 4.2)).add_subplot()
    reach = 1.35 * max(len_a, len_b)
    _draw_named_arrows(ax, a, b, a_label, b_label, reach)
    _draw_angle(ax, a, b, 0.3 * min(len_a, len_b), f"θ = {angle:.0f}°")
    ax.set(xlim=(-reach, reach), ylim=(-reach, reach), aspect="equal", xlabel="dimension 1", ylabel="dimension 2")
    ax.axhline(0.0, color="black", lw=0.5)
    ax.axvline(0.0, color="black", lw=0.5)
    ax.set_title(f"{a_label} · {b_label} = {len_a:.2f} × {len_b:.2f} × cos {angle:.0f}° = {dot:+.2f}", fontsize=10)
    return ax


def _draw_named_arrows(ax, a: torch.Tensor, b: torch.Tensor, a_label: str, b_label: str, reach: float) -> None:
    """Arrows from the origin to ``a`` and ``b``, each named with its length beside its tip."""
    len_a, len_b = float(a.norm()), float(b.norm())
    # each name sits beside its arrow's tip, on the side away from the other arrow (clear of the angle's label);
    # arrows along one line get opposite sides, so that their names do not overlap
    side_a = -1 if float(a[0] * b[1] - a[1] * b[0]) > 1e-9 * len_a * len_b else 1  # -1: b turns left of a
    # a drawn thinner and on top, so that it stays visible along a longer b pointing the same way
    arrows = ((a, a_label, len_a, "C0", side_a, 2.0, 1.0, 3), (b, b_label, len_b, "C1", -side_a, 3.5, 0.7, 2))
    for vector, label, length, color, side, width, alpha, zorder in arrows:
        x, y = vector.tolist()
        arrow = {"arrowstyle": "-|>", "color": color, "lw": width, "alpha": alpha}
        ax.annotate("", xy=(x, y), xytext=(0, 0), arrowprops=arrow, zorder=zorder)
        normal_x, normal_y = -y / length, x / length
        name_xy = (x + side * 0.18 * reach * normal_x, y + side * 0.18 * reach * normal_y)
        ax.text(*name_xy, f"{label}\n|{label}| = {length:.2f}", color=color, ha="center", va="center")


def _draw_angle(ax, a: torch.Tensor, b: torch.Tensor, radius: float, text: str) -> None:
    """An arc of ``radius`` from a's direction to b's, the short way round, with ``text`` beyond its middle."""
    start = math.atan2(float(a[1]), float(a[0]))
    turn = math.atan2(float(b[1]), float(b[0])) - start
    turn = (turn + math.pi) % (2 * math.pi) - math.pi
    steps = [start + turn * t / 40 for t in range(41)]
    ax.plot([radius * math.cos(t) for t in steps], [radius * math.sin(t) for t in steps], color="gray", lw=1)
    middle = start + turn / 2 - (0.5 if abs(turn) < 0.3 else 0.0)  # off the arrows when they are (nearly) parallel
    bbox = {"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1}  # readable across the axis lines
    text_xy = (2.6 * radius * math.cos(middle), 2.6 * radius * math.sin(middle))
    ax.text(*text_xy, text, color="dimgray", ha="center", va="center", bbox=bbox, zorder=4)


def plot_context_vector(
    vectors: torch.Tensor,
    weights: torch.Tensor,
    labels: Sequence[str],
    query_label: str,
    ax=None,
    elev: float | None = None,
    azim: float | None = None,
):
    """A context vector as a weighted average: ``(num_words, 3)`` word vectors drawn in 3D with each point's
    size proportional to its ``(num_words,)`` attention weight (written next to it), the context vector
    ``weights @ vectors`` (a star) and the plain mean of the vectors, equal weights (a cross).
    """
    points = _as_2d("vectors", vectors, columns=3)
    check_instance("weights", weights, torch.Tensor, "a torch.Tensor of shape (num_words,)")
    if weights.shape != (points.shape[0],):
        raise ValueError(
            f"weights must have shape ({points.shape[0]},), one per row of vectors, got {shape_str(weights.shape)}"
        )
    check_labels("labels", labels, points.shape[0], "vectors")
    shares = weights.detach().double().cpu()
    if bool((shares < 0).any()) or abs(float(shares.sum()) - 1.0) > 1e-4:
        raise ValueError(f"weights must be non-negative and sum to 1, got sum {float(shares.sum()):.4f}")
    shares = shares.float()
    context_vec = shares @ points  # (3,)
    mean = points.mean(dim=0)  # (3,)
    if ax is None:
        ax = plt.figure(figsize=(7, 5.5)).add_subplot(projection="3d")
    # sizes: area proportional to the weight, small enough that near twins stay apart and the star stays in view
    for i, ((x, y, z), word, share) in enumerate(zip(points.tolist(), labels, shares.tolist(), strict=True)):
        ax.scatter(x, y, z, s=600 * share, color=f"C{i % 10}", alpha=0.7, marker=_MARKERS[i % len(_MARKERS)])
        gap = 0.5 * math.sqrt(600 * share) + 3  # the marker's radius (points) and a little room
        # zorder: above every point (Matplotlib stacks 3D points by depth from zorder 1 up)
        text_style = dict(fontsize=9, color=f"C{i % 10}", zorder=len(points) + 10)
        _name_point_3d(ax, (x, y, z), f"{word} ({share:.2f})", _twin_side(points, i), gap=gap, **text_style)
    star = {"s": 260, "marker": "*", "color": "crimson", "edgecolors": "white", "linewidths": 0.8}
    ax.scatter(*context_vec.tolist(), **star, label=f"context vector of {query_label!r}")
    ax.scatter(*mean.tolist(), s=80, marker="x", linewidths=2, color="black", label="plain mean (equal weights)")
    ax.set(xlabel="dimension 1", ylabel="dimension 2", zlabel="dimension 3")
    ax.set_title(f"The context vector of {query_label!r}: a weighted average (point size = weight)")
    ax.legend(loc="upper left", fontsize=9)
    ax.view_init(elev=elev, azim=azim)
    if elev is not None and abs(elev) > 45:  # seen steeply from above or below, the box's corners reach the title
        ax.set_box_aspect(None, zoom=0.85)
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
    check_instance("values", values, torch.Tensor, "a torch.Tensor")
    if values.dim() != 1:
        raise ValueError(f"values must have shape (num_words,), got {shape_str(values.shape)}")
    check_labels("labels", labels, values.shape[0], "values")
    heights = values.detach().float().cpu().tolist()
    if ax is None:
        ax = plt.figure(figsize=(1.5 + 0.9 * len(heights), 3.2)).add_subplot()
    bars = ax.bar(range(len(heights)), heights, color="#4c72b0")
    ax.bar_label(bars, labels=[f"{h:.2f}" for h in heights], fontsize=9)
    ax.set_xticks(range(len(heights)), labels=list(labels))
    ax.set(xlabel="word", ylabel=ylabel, title=title)
    bottom, top = ylim if ylim is not None else ax.get_ylim()
    # room above the tallest bar (and below the lowest) for its value, clear of the frame
    span = top - bottom
    if max(heights, default=0.0) > top - 0.12 * span:
        top += 0.12 * span
    if min(heights, default=0.0) < bottom + 0.12 * span and bottom < 0:
        bottom -= 0.12 * span
    ax.set_ylim(bottom, top)
    ax.axhline(0.0, color="black", lw=0.8)
    return ax


def plot_scaling(d_k: int, num_keys: int = 6, seed: int = 0):
    """Why attention divides by ``sqrt(d_k)``, for random queries and keys with ``d_k`` entries.

    Left: the spread of raw dot products ``q · k`` (standard deviation about ``sqrt(d_k)``) next to the scaled ones
    (about 1). Right: one query's softmax weights over ``num_keys`` random keys, raw and scaled: the raw weights pile
    onto one key as ``d_k`` grows. Draws from its own generator seeded with ``seed``. Returns the figure.
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
    ax_spread.set(xlabel="score", ylabel="number of query/key pairs")
    ax_spread.set_title(f"Spread of {raw.numel()} random dot products, d_k = {d_k}")
    ax_spread.legend(fontsize=8)

    positions = torch.arange(num_keys)
    ax_weights.bar((positions - 0.2).tolist(), raw_weights.tolist(), width=0.4, label="softmax(q · k)")
    ax_weights.bar((positions + 0.2).tolist(), scaled_weights.tolist(), width=0.4, label="softmax(q · k / √d_k)")
    ax_weights.set_xticks(positions.tolist(), labels=[f"key {j}" for j in range(num_keys)])
    ax_weights.set(ylim=(0, 1), xlabel="key", ylabel="attention weight")
    ax_weights.set_title(f"One query's weights: largest {raw_weights.max():.2f} raw, {scaled_weights.max():.2f} scaled")
    ax_weights.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _annotate(ax, matrix: torch.Tensor, dark_from: float, dark_is_high: bool, decimals: int = 2) -> None:
    """Write each entry of ``matrix`` in its cell, white on dark cells (from ``dark_from`` up if ``dark_is_high``,
    as in ``Blues``, else down, as in ``viridis``) and black on light ones."""
    for i in range(matrix.shape[0]):
        for j in range(matrix.shape[1]):
            value = float(matrix[i, j])
            dark = value >= dark_from if dark_is_high else value <= dark_from
            color = "white" if dark else "black"
            ax.text(j, i, f"{value:.{decimals}f}", ha="center", va="center", fontsize=8, color=color)


def plot_dropout(p: float, size: int = 6, seed: int = 123, ax=None):
    """Heatmap of ``nn.Dropout(p)`` (training mode) applied to a ``(size, size)`` matrix of ones.

    Dropped entries are 0; the survivors are scaled to ``1 / (1 - p)`` so that the expected value of every
    entry stays 1. The title counts the survivors and gives the mean. The draw repeats for a ``seed`` and
    leaves the caller's random state alone.
    """
    check_probability("p", p)
    check_positive_int("size", size)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        dropped = torch.nn.Dropout(p).train()(torch.ones(size, size))
    if ax is None:
        ax = plt.figure(figsize=(1 + 0.75 * size, 0.9 + 0.65 * size)).add_subplot()
    from matplotlib.colors import BoundaryNorm, ListedColormap

    # One colour for every survivor, whatever its value (written in the cell): white = dropped, blue = kept.
    kept_colours = ListedColormap(["white", "#2c6fad"])
    ax.imshow(dropped.numpy(), cmap=kept_colours, norm=BoundaryNorm([-1.0, 0.5, float("inf")], 2))
    _annotate(ax, dropped, dark_from=0.5, dark_is_high=True)
    ax.set(xticks=range(size), yticks=range(size), xlabel="column", ylabel="row")
    kept = int((dropped != 0).sum())
    ax.set_title(f"Dropout p = {p:.2f}: {kept} of {size * size} kept (blue), mean {float(dropped.mean()):.2f}")
    return ax


def _is_mask(matrix: torch.Tensor) -> bool:
    """True for a matrix of zeros and ones only (a mask), which gets two colours rather than a colour scale."""
    return bool(((matrix == 0) | (matrix == 1)).all())


def _heatmap(
    ax,
    matrix: torch.Tensor,
    row_labels,
    col_labels,
    title: str,
    annotate: bool,
    vmin: float,
    vmax: float,
    mask: bool = False,
):
    """Draw a ``(num_queries, num_keys)`` heatmap with the words as ticks (two colours for a ``mask``);
    return its image."""
    if mask:
        from matplotlib.colors import ListedColormap

        image = ax.imshow(matrix.numpy(), cmap=ListedColormap(["#2b2b6b", "#f5e663"]), vmin=0.0, vmax=1.0)
    else:
        image = ax.imshow(matrix.numpy(), cmap="viridis", vmin=vmin, vmax=max(vmin + 1e-12, vmax))
    ax.set_xticks(range(matrix.shape[1]), labels=list(col_labels), rotation=45, ha="right")
    ax.set_yticks(range(matrix.shape[0]), labels=list(row_labels))
    ax.set_title(title)
    if annotate:
        # viridis is dark at the low end: white text there, black on the bright high values
        _annotate(ax, matrix, dark_from=vmin + 0.6 * (vmax - vmin), dark_is_high=False, decimals=0 if mask else 2)
    return image


def _check_weights_matrix(weights) -> torch.Tensor:
    check_instance("weights", weights, torch.Tensor, "a torch.Tensor")
    if weights.dtype == torch.bool:
        weights = weights.float()
    return _as_2d("weights", weights)


def plot_attention(
    weights: torch.Tensor,
    row_labels: Sequence[str],
    col_labels: Sequence[str] | None = None,
    ax=None,
    title: str = "Attention weights",
    annotate: bool = True,
    value_label: str | None = None,
    vmin: float | None = None,
    vmax: float | None = None,
):
    """Heatmap of a ``(num_queries, num_keys)`` attention matrix with the words as tick labels.

    Rows are the queries (the token doing the attending), columns the keys (the tokens attended to).
    The colour bar is labelled ``value_label`` (``"score"`` for raw scores; default ``"weight"``, or ``"mask"``
    for a matrix of zeros and ones only, which gets two colours). ``vmin`` and ``vmax`` fix the colour scale
    (0 and 1 to compare heads); by default it runs from ``min(0, smallest)`` to the largest value.
    """
    matrix = _check_weights_matrix(weights)
    col_labels = row_labels if col_labels is None else col_labels
    check_labels("row_labels", row_labels, matrix.shape[0], "rows in weights")
    check_labels("col_labels", col_labels, matrix.shape[1], "columns in weights")
    if ax is None:
        ax = plt.figure(figsize=(1 + 0.8 * matrix.shape[1], 0.8 + 0.7 * matrix.shape[0])).add_subplot()
    # weights are never negative, so the scale starts at 0; raw scores may be, and then it starts lower
    vmin = min(0.0, float(matrix.min())) if vmin is None else float(vmin)
    vmax = float(matrix.max()) if vmax is None else float(vmax)
    mask = _is_mask(matrix)
    image = _heatmap(ax, matrix, row_labels, col_labels, title, annotate, vmin, vmax, mask=mask)
    ax.set(xlabel="key (attended to)", ylabel="query (attending)")
    if value_label is None:
        value_label = "mask" if mask else "weight"
    colorbar = ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label=value_label)
    if mask:
        colorbar.set_ticks([0.25, 0.75], labels=["0", "1"])
    return ax


def plot_attention_heads(
    weights: torch.Tensor, labels: Sequence[str], ncols: int = 4, title: str = "Attention weights per head"
):
    """A grid of heatmaps, one per head, from ``(num_heads, num_tokens, num_tokens)`` weights
    (take one batch element of a ``(batch, num_heads, ...)`` tensor first), on one colour scale with one
    colour bar and one pair of axis labels for the whole grid. Returns the figure."""
    check_instance("weights", weights, torch.Tensor, "a torch.Tensor")
    if weights.dim() != 3:
        raise ValueError(f"weights must have shape (num_heads, num_tokens, num_tokens), got {shape_str(weights.shape)}")
    check_positive_int("ncols", ncols)
    num_heads = weights.shape[0]
    if num_heads == 0:
        raise ValueError(
            f"weights has no heads: shape {shape_str(weights.shape)} (num_heads, num_tokens, num_tokens) "
            "with num_heads = 0; pass at least one head"
        )
    check_labels("labels", labels, weights.shape[1], "query tokens in weights")
    check_labels("labels", labels, weights.shape[2], "key tokens in weights")
    matrices = weights.detach().float().cpu()
    vmin, vmax = min(0.0, float(matrices.min())), float(matrices.max())
    ncols = min(ncols, num_heads)
    nrows = -(-num_heads // ncols)
    figsize = (3.2 * ncols + 0.8, 3.0 * nrows + 0.4)
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, squeeze=False, layout="constrained")
    image = None
    for head, ax in enumerate(axes.flat):
        if head < num_heads:
            image = _heatmap(ax, matrices[head], labels, labels, f"head {head}", False, vmin, vmax)
        else:
            ax.axis("off")
    fig.colorbar(image, ax=axes.ravel().tolist(), label="weight", shrink=0.9)
    fig.supxlabel("key (attended to)")
    fig.supylabel("query (attending)")
    fig.suptitle(title, fontsize="large")
    fig.get_layout_engine().set(h_pad=0.07)  # room between the figure's title and the heads' titles
    return fig


def diagram_path(name: str) -> Path:
    """Path of the diagram ``<name>.png`` in the package's ``viz/images/`` (the repository's ``images/``, drawn by
    ``tools/make_diagrams.py``)."""
    path = IMAGES_DIR / f"{name}.png"
    if not path.is_file():
        available = sorted(p.stem for p in IMAGES_DIR.glob("*.png"))
        raise FileNotFoundError(f"no diagram {name!r} at {path} (available: {available})")
    return path


def show_diagram(name: str, width: int | None = None):
    """Display the diagram ``<name>.png`` (see :func:`diagram_path`) in a notebook (an ``IPython.display.Image``).

    By default at its own pixel width (legible down to 1000 pixels); ``width`` (pixels) overrides it. From a code
    cell rather than a Markdown image link, the PNG is stored in the cell's output, so GitHub and Colab show it
    before anything runs.
    """
    from IPython.display import Image

    if width is not None:
        check_positive_int("width", width)
    return Image(filename=str(diagram_path(name)), width=width)


def plot_attention_steps(scores: torch.Tensor, vectors: torch.Tensor, labels: Sequence[str], query_label: str):
    """One query's attention in three numbered panels: (1) its ``(num_words,)`` scores, (2) the softmax of the
    scores, on a fixed 0-1 scale with the even share ``1 / num_words`` marked, (3) the weighted sum
    ``weights @ vectors`` of the ``(num_words, d)`` vectors, one stacked bar per dimension: each word's share
    ``weight * vector`` is one segment, and the bar's height (written on top) is the context vector's entry.
    Returns the figure.
    """
    if not isinstance(scores, torch.Tensor) or scores.dim() != 1:
        shape = shape_str(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__
        raise ValueError(f"scores must be a tensor of shape (num_words,), got {shape}")
    points = _as_2d("vectors", vectors)
    if points.shape[0] != scores.shape[0]:
        raise ValueError(
            f"vectors must have one row per score: scores {shape_str(scores.shape)}, vectors {shape_str(points.shape)}"
        )
    check_labels("labels", labels, scores.shape[0], "scores")
    scores = scores.detach().float().cpu()
    weights = torch.softmax(scores, dim=-1)
    parts = weights[:, None] * points  # (num_words, d): each word's share of every dimension
    fig, axes = plt.subplots(1, 3, figsize=(16, 3.9), layout="constrained")
    plot_scores(scores, labels, ax=axes[0], title=f"1. scores: query {query_label!r} · each word")
    plot_scores(weights, labels, ax=axes[1], title="2. softmax: weights that sum to 1", ylabel="weight", ylim=(0, 1))
    axes[1].axhline(1 / len(labels), color="gray", ls="--", lw=1, label=f"even share 1/{len(labels)}")
    axes[1].legend(loc="upper right", fontsize=9)
    ax = axes[2]
    bottom = torch.zeros(points.shape[1])
    for i, word in enumerate(labels):
        ax.bar(range(points.shape[1]), parts[i].tolist(), bottom=bottom.tolist(), color=f"C{i % 10}", label=word)
        bottom += parts[i]
    for d, total in enumerate(bottom.tolist()):
        ax.text(d, total, f"{total:.2f}", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(range(points.shape[1]), labels=[f"dimension {d + 1}" for d in range(points.shape[1])])
    ax.set_ylim(0, 1.15 * max(float(bottom.max()), 1e-6))
    ax.set(
        xlabel="dimension", ylabel="weight × word vector", title=f"3. weighted sum: context vector of {query_label!r}"
    )
    ax.legend(fontsize=8, ncols=2, loc="upper left")
    return fig


def plot_query_and_keys_2d(query: torch.Tensor, keys: torch.Tensor, labels: Sequence[str], query_label: str, ax=None):
    """A ``(2,)`` query and ``(num_words, 2)`` keys as arrows from the origin, each key named with its score
    ``query · key``: the key that reaches farthest along the query's direction gets the largest score."""
    check_instance("query", query, torch.Tensor, "a torch.Tensor of shape (2,)")
    if query.shape != (2,):
        raise ValueError(f"query must have shape (2,), got {shape_str(query.shape)}")
    query = query.detach().float().cpu()
    keys = _as_2d("keys", keys, columns=2)
    check_labels("labels", labels, keys.shape[0], "keys")
    scores = keys @ query  # (num_words,)
    if ax is None:
        ax = plt.figure(figsize=(7, 6)).add_subplot()
    arrow = {"arrowstyle": "-|>", "lw": 1.5, "shrinkA": 0, "shrinkB": 0}
    ax.annotate("", xy=query.tolist(), xytext=(0, 0), arrowprops={**arrow, "color": "crimson", "lw": 3})
    ax.text(*query.tolist(), f"  query of {query_label!r}", color="crimson", va="center")
    points = torch.cat([keys, query[None], torch.zeros(1, 2)])
    low, high = points.min(dim=0).values, points.max(dim=0).values
    label_x = float(high[0]) + 0.1 * float(high[0] - low[0]) + 0.05
    for rank, j in enumerate(scores.argsort().tolist()):  # lowest score first: names stacked bottom to top
        tip, color = keys[j].tolist(), f"C{j % 10}"
        ax.annotate("", xy=tip, xytext=(0, 0), arrowprops={**arrow, "color": color})
        label_y = float(low[1]) + float(high[1] - low[1]) * (0.05 + 0.7 * rank / max(len(labels) - 1, 1))
        ax.plot([tip[0], label_x], [tip[1], label_y], ":", color=color, lw=1)  # from the key's tip to its name
        ax.text(label_x, label_y, f" key of {labels[j]!r}: q · k = {scores[j]:.2f}", color=color, va="center")
    width = label_x - float(low[0])
    ax.set_xlim(float(low[0]) - 0.05 * width, label_x + 1.7 * width)
    ax.set_ylim(float(low[1]) - 0.1 * float(high[1] - low[1]) - 0.05, 1.1 * float(high[1]) + 0.05)
    ax.set_aspect("equal")
    ax.set(xlabel="dimension 1", ylabel="dimension 2", title=f"The query of {query_label!r} and every key")
    return ax


def plot_score_gradients(d_k_values: Sequence[int], unscaled: Sequence[float], scaled: Sequence[float], ax=None):
    """The typical gradient at the scores, one point per query/key width in ``d_k_values``, for
    ``softmax(q · k)`` (``unscaled``) and ``softmax(q · k / sqrt(d_k))`` (``scaled``), on log-log axes."""
    if not len(d_k_values) == len(unscaled) == len(scaled) > 0:
        raise ValueError(
            "d_k_values, unscaled and scaled must have the same non-zero length, got "
            f"{len(d_k_values)}, {len(unscaled)} and {len(scaled)}"
        )
    if ax is None:
        ax = plt.figure(figsize=(6.5, 4)).add_subplot()
    ax.plot(d_k_values, unscaled, "o-", label="softmax(q · k)")
    ax.plot(d_k_values, scaled, "s-", label="softmax(q · k / √d_k)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(d_k_values), labels=[str(d) for d in d_k_values])
    ax.set(xlabel="d_k (width of queries and keys)", ylabel="median gradient norm at the scores")
    ax.set_title("Without scaling, the gradient vanishes as d_k grows")
    ax.legend()
    return ax


def plot_heads_side_by_side(
    weights: torch.Tensor,
    labels: Sequence[str],
    titles: Sequence[str] | None = None,
    title: str = "Attention weights per head",
    annotate: bool = True,
):
    """One heatmap per head, in one row, from ``(num_heads, num_tokens, num_tokens)`` attention weights, on a
    fixed 0-1 colour scale (an even share looks as pale as it is) with the words as ticks and each head's
    weights written in its cells. ``titles`` names each head (default ``"head <n>"``). Returns the figure."""
    check_instance("weights", weights, torch.Tensor, "a torch.Tensor")
    if weights.dim() != 3 or weights.shape[0] == 0:
        raise ValueError(
            f"weights must have shape (num_heads, num_tokens, num_tokens) with num_heads >= 1, "
            f"got {shape_str(weights.shape)}"
        )
    num_heads = weights.shape[0]
    check_labels("labels", labels, weights.shape[1], "query tokens in weights")
    check_labels("labels", labels, weights.shape[2], "key tokens in weights")
    titles = [f"head {head}" for head in range(num_heads)] if titles is None else list(titles)
    check_labels("titles", titles, num_heads, "heads in weights")
    matrices = weights.detach().float().cpu()
    fig, axes = plt.subplots(1, num_heads, figsize=(4.6 * num_heads + 0.8, 4.6), squeeze=False, layout="constrained")
    image = None
    for ax, matrix, head_title in zip(axes[0], matrices, titles, strict=True):
        image = _heatmap(ax, matrix, labels, labels, head_title, annotate, 0.0, 1.0)
    fig.colorbar(image, ax=axes.ravel().tolist(), label="attention weight (fixed 0-1 scale)", shrink=0.9)
    fig.supxlabel("key (attended to)")
    fig.supylabel("query (attending)")
    fig.suptitle(title, fontsize="large")
    return fig


def plot_dropout_average(
    draws: torch.Tensor, weights: torch.Tensor, labels: Sequence[str], query: int, key: int, p: float
):
    """Two panels on dropout applied ``num_draws`` times to ``(num_tokens, num_tokens)`` attention ``weights``;
    ``draws`` is ``(num_draws, num_tokens, num_tokens)``, the outputs of ``nn.Dropout(p)`` in training mode.

    Left: the running average of one dropped weight (row ``query``, column ``key``) as more masks are averaged,
    with and without the ``1 / (1 - p)`` scaling, against the original weight. Right: the row sums of one mask
    and of the average of all masks, against 1. Returns the figure."""
    if not isinstance(draws, torch.Tensor) or draws.dim() != 3:
        raise ValueError(
            f"draws must be a (num_draws, num_tokens, num_tokens) tensor, got {getattr(draws, 'shape', draws)!r}"
        )
    matrix = _check_weights_matrix(weights)
    if draws.shape[1:] != matrix.shape:
        raise ValueError(
            f"draws {shape_str(draws.shape)} must be (num_draws, *weights.shape) with weights {shape_str(matrix.shape)}"
        )
    check_labels("labels", labels, matrix.shape[0], "rows in weights")
    check_probability("p", p)
    for name, index in (("query", query), ("key", key)):
        if not isinstance(index, int) or not 0 <= index < matrix.shape[0]:
            raise ValueError(f"{name} must be a row index from 0 to {matrix.shape[0] - 1}, got {index!r}")
    draws = draws.detach().float().cpu()
    counts = torch.arange(1, draws.shape[0] + 1)
    running = draws[:, query, key].cumsum(dim=0) / counts
    original = float(matrix[query, key])
    fig, (ax_mean, ax_rows) = plt.subplots(1, 2, figsize=(12, 4.2), layout="constrained")
    ax_mean.plot(counts.numpy(), running.numpy(), label="dropout with 1/(1-p) scaling")
    ax_mean.plot(counts.numpy(), (running * (1 - p)).numpy(), label="dropout without scaling")
    ax_mean.axhline(original, color="black", linestyle="--", label=f"original weight {original:.4f}")
    ax_mean.axhline((1 - p) * original, color="gray", linestyle=":", label="(1 - p) × original")
    ax_mean.set(xscale="log", xlabel="number of masks averaged", ylabel="average of the dropped weight")
    ax_mean.set_title(f'"{labels[query]}" → "{labels[key]}": running average, p = {p:.2f}')
    ax_mean.legend(fontsize=8)
    positions = torch.arange(matrix.shape[0]).double()
    one_mask, average = draws[0].sum(dim=-1), draws.mean(dim=0).sum(dim=-1)
    ax_rows.bar((positions - 0.2).numpy(), one_mask.numpy(), width=0.4, label="one mask")
    ax_rows.bar((positions + 0.2).numpy(), average.numpy(), width=0.4, label=f"average of {len(draws)} masks")
    ax_rows.axhline(1.0, color="black", linestyle="--", label="without dropout: 1")
    ax_rows.set_xticks(range(matrix.shape[0]), labels=list(labels))
    ax_rows.set(
        xlabel="query token (row of the weights)", ylabel="sum of the row's weights", title="Row sums after dropout"
    )
    ax_rows.legend(fontsize=8)
    return fig


def plot_positional_encoding(pe: torch.Tensor, num_shown: int = 40):
    """Three panels on a sinusoidal positional-encoding table ``pe``, ``(num_positions, d_model)``, whose even
    dimensions hold sines and odd ones cosines: the sines and the cosines of the first ``num_shown`` positions
    (at most 32 of the pairs, fast to slow, on a fixed -1 to 1 scale), and the dot products ``PE[i] · PE[j]``,
    which depend only on the distance ``|i - j|``. Returns the figure."""
    pe = _as_2d("pe", pe).detach().double().cpu()
    check_positive_int("num_shown", num_shown)
    num_shown = min(num_shown, pe.shape[0])
    d_model = pe.shape[1]
    if d_model < 2:
        raise ValueError(f"pe must have at least 2 columns (one sine and one cosine), got shape {shape_str(pe.shape)}")
    shown = pe[:num_shown]
    pairs = torch.arange(0, d_model // 2, max(1, d_model // 64))  # at most 32 pairs, from fast to slow
    fig, axes = plt.subplots(1, 3, figsize=(15, 5), layout="constrained")
    for ax, columns, kind in (
        (axes[0], shown[:, 0::2][:, pairs], "sines: dimension 2i"),
        (axes[1], shown[:, 1::2][:, pairs], "cosines: dimension 2i + 1"),
    ):
        image = ax.imshow(columns.numpy(), cmap="RdBu", vmin=-1, vmax=1, interpolation="nearest", aspect="auto")
        ticks = range(0, len(pairs), max(1, len(pairs) // 4))
        ax.set_xticks(ticks, [str(pairs[t].item()) for t in ticks])
        ax.set(xlabel="pair index i", ylabel="position in the sequence", title=kind)
    fig.colorbar(image, ax=axes[:2].tolist(), label="value", shrink=0.8)
    paired = shown[:, : 2 * (d_model // 2)]  # an odd d_model's lone last sine has no cosine to turn with
    dots = axes[2].imshow((paired @ paired.T).numpy(), cmap="viridis", interpolation="nearest")
    axes[2].set(xlabel="position j", ylabel="position i", title="PE[i] · PE[j]: depends on |i - j| only")
    fig.colorbar(dots, ax=axes[2], label="dot product", shrink=0.8)
    fig.suptitle(f"Sinusoidal positional encoding, first {num_shown} positions, {len(pairs)} of {d_model // 2} pairs")
    return fig


def plot_dot_product_panels(a: torch.Tensor, others: dict[str, torch.Tensor]):
    """One panel per entry of ``others`` (a name -> a 2-D vector ``(2,)``): ``a`` and that vector as arrows,
    titled with the name over ``plot_dot_product_2d``'s ``a · b = |a| |b| cos θ``. Returns the figure."""
    if not isinstance(others, dict) or not others:
        raise ValueError(f"others must be a non-empty dict of name -> vector of shape (2,), got {others!r}")
    fig, axes = plt.subplots(1, len(others), figsize=(4 * len(others), 4.4), squeeze=False)
    for ax, (name, b) in zip(axes[0], others.items(), strict=True):
        plot_dot_product_2d(a, b, ax=ax)
        ax.set_title(f"{name}\n{ax.get_title()}", fontsize=10)
    fig.tight_layout()
    return fig


def plot_temperatures(scores: torch.Tensor, labels: Sequence[str], temperatures: Sequence[float], query_label: str):
    """One query's attention weights ``softmax(scores / T)``, ``scores`` of shape ``(num_words,)``, as bars on a
    0-1 scale: one panel per temperature ``T`` in ``temperatures``, top to bottom. Returns the figure."""
    if not isinstance(scores, torch.Tensor) or scores.dim() != 1:
        raise ValueError(f"scores must be a tensor of shape (num_words,), got {getattr(scores, 'shape', scores)!r}")
    if not temperatures or not all(float(t) > 0 for t in temperatures):
        raise ValueError(f"temperatures must be a non-empty list of positive numbers, got {temperatures!r}")
    fig, axes = plt.subplots(len(temperatures), 1, figsize=(7, 2.9 * len(temperatures)), squeeze=False)
    for ax, temperature in zip(axes[:, 0], temperatures, strict=True):
        weights = softmax_with_temperature(scores, float(temperature))
        plot_scores(weights, labels, ax=ax, title=f"T = {temperature:g}", ylabel="attention weight", ylim=(0, 1))
    fig.suptitle(f"Weights for the query {query_label!r}: softmax(scores / T)")
    fig.tight_layout()
    return fig
