"""Draw the diagrams in images/ (`make diagrams`): one function per diagram, each writing one PNG."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

IMAGES = Path(__file__).resolve().parent.parent / "images"
COLORS = {"input": "#dbe9f6", "proj": "#fde2c8", "qkv": "#e3f1dc", "op": "#efe3f6", "out": "#fff2b3"}


def _box(ax, x, y, text, kind, w=1.6, h=0.8):
    ax.add_patch(
        FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.05", fc=COLORS[kind], ec="#444444", lw=1.2)
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=11)


def _arrow(ax, start, end, label=None):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, lw=1.2, color="#444444"))
    if label:
        ax.text(
            (start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + 0.18, label, ha="center", fontsize=9, color="#444444"
        )


def attention_pipeline(path: Path) -> None:
    """inputs -> Q, K, V -> scores -> weights -> context vectors."""
    fig, ax = plt.subplots(figsize=(12, 4.2))
    ax.set_xlim(0, 13.6)
    ax.set_ylim(0, 4.4)
    ax.axis("off")
    _box(ax, 1.25, 2.2, "inputs X\n(num_tokens, d_in)", "input", w=2.3, h=1.0)
    for y, name in ((3.6, "Q = X W_query"), (2.2, "K = X W_key"), (0.8, "V = X W_value")):
        _box(ax, 4.35, y, name + "\n(num_tokens, d_out)", "qkv", w=2.5)
        _arrow(ax, (2.45, 2.2), (3.05, y))
    _box(ax, 7.3, 2.9, "scores\nQ Kᵀ / √d_k", "op", w=1.9, h=1.0)
    _arrow(ax, (5.65, 3.6), (6.3, 3.1))
    _arrow(ax, (5.65, 2.2), (6.3, 2.7))
    _box(ax, 9.6, 2.9, "weights\nsoftmax(rows)", "op", w=1.9, h=1.0)
    _arrow(ax, (8.3, 2.9), (8.6, 2.9))
    _box(ax, 12.1, 1.9, "context vectors\nweights @ V\n(num_tokens, d_out)", "out", w=2.5, h=1.2)
    _arrow(ax, (10.6, 2.7), (10.8, 2.3))
    _arrow(ax, (5.65, 0.8), (10.8, 1.6))
    ax.set_title(
        "Self-attention in one picture: each token's output is a weighted mix of the value vectors it may see",
        fontsize=12,
    )
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


DIAGRAMS = {"attention_pipeline": attention_pipeline}

if __name__ == "__main__":
    for name, draw in DIAGRAMS.items():
        draw(IMAGES / f"{name}.png")
        print(f"wrote images/{name}.png")
