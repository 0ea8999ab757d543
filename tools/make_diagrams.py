"""Draw the diagrams in images/ (`make diagrams`): one function per diagram, each writing one PNG."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Patch, Rectangle

ROOT = Path(__file__).resolve().parent.parent
# attention_helpers/viz/images is a symlink to images/: a wheel copies the files in (package data), so that
# ah.diagram_path finds them after any install, not only in a clone.
IMAGES = ROOT / "images"
COLORS = {"input": "#dbe9f6", "proj": "#fde2c8", "qkv": "#e3f1dc", "op": "#efe3f6", "out": "#fff2b3", "norm": "#f7c6c6"}
HEADS = ("#9ecae1", "#fdae6b")  # one colour per attention head
HIDDEN = "#e0e0e0"  # masked-out (future) cells
WORDS = ("Your", "journey", "starts", "with", "one", "step")
# Notebooks show a diagram at its own pixel width (ah.show_diagram), shrunk to the column when that is narrower;
# every text stays at least MIN_TEXT_PX pixels tall down to a LEGIBLE_AT_PX-wide column (tests/test_tools.py).
DPI = 110
LEGIBLE_AT_PX = 1000
MIN_TEXT_PX = 12


def _box(ax, x, y, text, kind, w=1.6, h=0.8):
    ax.add_patch(
        FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.05", fc=COLORS[kind], ec="#444444", lw=1.2)
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=11)


def _save(fig, path: Path) -> None:
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)


def _arrow(ax, start, end, label=None, fontsize=9):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, lw=1.2, color="#444444"))
    if label:
        ax.text(
            (start[0] + end[0]) / 2,
            (start[1] + end[1]) / 2 + 0.18,
            label,
            ha="center",
            fontsize=fontsize,
            color="#444444",
        )


def _inch_axes(width, height):
    """A figure whose data units are inches (axes fill the figure), so cells stay square and sizes are predictable."""
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")
    return fig, ax


def _grid(ax, left, top, fills, cell, texts=None, hatches=None, fontsize=10):
    """Draw a matrix as square cells from its top-left corner; fills[r][c] is a cell's colour, texts/hatches alike."""
    for r, row in enumerate(fills):
        for c, fill in enumerate(row):
            x, y = left + c * cell, top - (r + 1) * cell
            hatch = hatches[r][c] if hatches else None
            ax.add_patch(
                Rectangle((x, y), cell, cell, fc=fill, ec="#444444", lw=1.0, hatch=hatch, hatchcolor="#aaaaaa")
            )
            if texts and texts[r][c]:
                ax.text(x + cell / 2, y + cell / 2, texts[r][c], ha="center", va="center", fontsize=fontsize)


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
    _arrow(ax, (10.6, 2.9), (11.35, 2.58))  # onto the top edge of the context box, not its corner
    _arrow(ax, (5.65, 0.8), (10.8, 1.6))
    ax.set_title(
        "Self-attention in one picture: each token's output is a weighted mix of the value vectors it may see",
        fontsize=12,
    )
    _save(fig, path)


def qkv_projections(path: Path) -> None:
    """The six-word example: X (6, 3) @ W_query, W_key, W_value (3, 2) gives Q, K, V (6, 2), one row per word."""
    cell = 0.3
    fig, ax = _inch_axes(8.8, 7.15)
    x_rows = [[COLORS["input"]] * 3 for _ in WORDS]
    x_rows[1] = ["#a6c8e8"] * 3  # "journey", followed into Q, K and V
    _grid(ax, 1.3, 4.9, x_rows, cell)
    for r, word in enumerate(WORDS):
        ax.text(1.2, 4.9 - (r + 0.5) * cell, word, ha="right", va="center", fontsize=10)
    ax.text(1.75, 5.05, "X (inputs)", ha="center", va="bottom", fontsize=11)
    ax.text(1.75, 2.95, "(num_tokens, d_in)\n= (6, 3)", ha="center", va="top", fontsize=10)
    for name, weight, role, y in (
        ("Q", "W_query", "query", 6.1),
        ("K", "W_key", "key", 4.0),
        ("V", "W_value", "value", 1.9),
    ):
        _arrow(ax, (2.3, 4.0), (2.85, y))
        ax.text(3.0, y, "@", ha="center", va="center", fontsize=16)
        _grid(ax, 3.25, y + 1.5 * cell, [[COLORS["proj"]] * 2 for _ in range(3)], cell)
        ax.text(3.55, y + 1.5 * cell + 0.08, weight, ha="center", va="bottom", fontsize=11)
        ax.text(3.55, y - 1.5 * cell - 0.08, "(d_in, d_out)\n= (3, 2)", ha="center", va="top", fontsize=10)
        ax.text(4.2, y, "=", ha="center", va="center", fontsize=16)
        rows = [[COLORS["qkv"]] * 2 for _ in WORDS]
        rows[1] = ["#b5dca5"] * 2
        _grid(ax, 4.5, y + 3 * cell, rows, cell)
        ax.text(
            5.35,
            y,
            f"{name} = X @ {weight}\n(num_tokens, d_out) = (6, 2)\nrow i = the {role} vector of word i",
            ha="left",
            va="center",
            fontsize=11,
        )
    ax.text(
        0.2,
        0.75,
        'Highlighted: the row of "journey" in X gives the row of "journey" in Q, K and V.\n'
        "The same three parameter matrices are shared by every word (every row of X):\n"
        "their values are what training learns.",
        ha="left",
        va="top",
        fontsize=10.5,
    )
    ax.set_title("Queries, keys and values: three matrix products of the same inputs X", fontsize=13)
    _save(fig, path)


def masked_attention(path: Path) -> None:
    """Causal mask: scores with the future set to -inf, then a row-by-row softmax gives weights that are 0 there."""
    cell, top, n = 0.6, 4.25, len(WORDS)
    allowed = "#d5c3ea"
    fig, ax = _inch_axes(12.6, 5.85)
    fills = [[allowed if c <= r else HIDDEN for c in range(n)] for r in range(n)]
    hatches = [[None if c <= r else "///" for c in range(n)] for r in range(n)]
    for left, heading, hidden_text in (
        (1.5, "1. scores, future set to -inf", "-inf"),
        (7.7, "2. weights = softmax of each row", "0"),
    ):
        texts = [["" if c <= r else hidden_text for c in range(n)] for r in range(n)]
        _grid(ax, left, top, fills, cell, texts, hatches, fontsize=11.5)
        for i, word in enumerate(WORDS):
            ax.text(left - 0.1, top - (i + 0.5) * cell, word, ha="right", va="center", fontsize=11.5)
            ax.text(
                left + (i + 0.5) * cell,
                top + 0.08,
                word,
                rotation=45,
                rotation_mode="anchor",
                ha="left",
                va="bottom",
                fontsize=11.5,
            )
        ax.text(left + 1.8, top + 0.75, "keys (the words looked at)", ha="center", va="bottom", fontsize=11.5)
        ax.text(
            left - 1.0, top - 1.8, "queries (the words looking)", rotation=90, ha="center", va="center", fontsize=11.5
        )
        ax.text(left + 1.8, top + 1.2, heading, ha="center", va="bottom", fontsize=13, fontweight="bold")
    for r in range(n):
        ax.text(7.7 + n * cell + 0.12, top - (r + 0.5) * cell, "sum = 1", ha="left", va="center", fontsize=11.5)
    _arrow(ax, (5.3, top - 1.8), (6.45, top - 1.8))
    ax.text(5.875, top - 1.65, "softmax\nrow by row", ha="center", va="bottom", fontsize=11.5)
    ax.text(5.875, top - 1.95, "exp(-inf) = 0", ha="center", va="top", fontsize=11.5)
    ax.legend(
        handles=[
            Patch(fc=allowed, ec="#444444", label="may attend: the word itself or an earlier word"),
            Patch(fc=HIDDEN, ec="#444444", hatch="///", hatchcolor="#aaaaaa", label="future: hidden (a later word)"),
        ],
        loc="upper center",
        bbox_to_anchor=(6.3, top - 3.75),
        bbox_transform=ax.transData,
        ncol=2,
        fontsize=11.5,
        frameon=False,
    )
    ax.set_title("Causal attention: each word may only look at itself and the words before it", fontsize=14)
    _save(fig, path)


def multihead_split_concat(path: Path) -> None:
    """Multi-head attention: split d_out into heads, attend in each head, transpose back, concatenate, out_proj."""
    cell, tokens = 0.32, ("t1", "t2", "t3")
    font = 12.5  # the widest diagram: its text must stay legible when a notebook shrinks it to 1000 px
    fig, ax = _inch_axes(13.8, 7.1)
    top, middle, bottom = 6.5, 4.1, 1.7  # grid tops of the three rows
    by_head = [[HEADS[c // 2] for c in range(4)] for _ in tokens]  # head h owns columns 2h and 2h + 1
    texts = [[t] * 4 for t in tokens]
    head = [[[colour] * 2 for _ in tokens] for colour in HEADS]
    heads_left = (8.73, 9.83)  # each head's own (num_tokens, head_dim) matrix

    for row_top in (top, bottom):
        # (num_tokens, num_heads, head_dim): still one row per token, each row cut into heads
        _grid(ax, 5.63, row_top, head[0], cell, texts, fontsize=font)
        _grid(ax, 6.33, row_top, head[1], cell, texts, fontsize=font)
        ax.add_patch(Rectangle((5.56, row_top - 1.03), 1.48, 1.1, fill=False, ec="#888888", ls="--"))
        ax.text(6.3, row_top - 1.13, "(num_tokens,\nnum_heads, head_dim)", ha="center", va="top", fontsize=font)
        # (num_heads, num_tokens, head_dim): one matrix per head
        for h, left in enumerate(heads_left):
            _grid(ax, left, row_top, head[h], cell, texts, fontsize=font)
        _grid(ax, 2.96, row_top, by_head, cell, texts, fontsize=font)

    # top row: X -> Q -> split -> heads first
    _grid(ax, 0.52, top, [[COLORS["input"]] * 3 for _ in tokens], cell, texts, fontsize=font)
    ax.text(1.0, top - 1.06, "X\n(num_tokens, d_in)", ha="center", va="top", fontsize=font)
    ax.text(3.6, top - 1.06, "Q = X @ W_query\n(num_tokens, d_out)", ha="center", va="top", fontsize=font)
    for h, left in enumerate(heads_left):
        ax.text(left + cell, top + 0.08, f"head {h}", ha="center", va="bottom", fontsize=font)
    ax.text(10.75, top - 0.48, "(num_heads,\nnum_tokens, head_dim)", ha="left", va="center", fontsize=font)
    for start, end, label in (
        (1.6, 2.84, "@ W_query"),
        (4.36, 5.46, "split columns\n.view(...)"),
        (7.14, 8.61, "heads first\n.transpose(1, 2)"),
    ):
        _arrow(ax, (start, top - 0.48), (end, top - 0.48))
        ax.text((start + end) / 2, top - 0.36, label, ha="center", va="bottom", fontsize=font)

    # middle: attention, separately in each head
    for h, left in enumerate(heads_left):
        _grid(ax, left - 0.16, middle, [[HEADS[h]] * 3 for _ in tokens], cell)
        _arrow(ax, (left + cell, top - 1.04), (left + cell, middle + 0.08))
        _arrow(ax, (left + cell, middle - 1.04), (left + cell, bottom + 0.08))
    ax.text(
        10.75,
        middle - 0.48,
        "attention in each head:\nweights_h =\n  softmax(Q_h K_hᵀ / √head_dim)\ncontext_h = weights_h @ V_h",
        ha="left",
        va="center",
        fontsize=font,
    )

    # bottom row, right to left: context per head -> tokens first -> concatenate -> out_proj
    for h, left in enumerate(heads_left):
        ax.text(left + cell, bottom - 1.04, f"head {h}", ha="center", va="top", fontsize=font)
    context_label = "context vectors\n(num_heads,\nnum_tokens, head_dim)"
    ax.text(10.75, bottom - 0.48, context_label, ha="left", va="center", fontsize=font)
    _grid(ax, 0.36, bottom, [[COLORS["out"]] * 4 for _ in tokens], cell, texts, fontsize=font)
    ax.text(1.0, bottom - 1.06, "output\n(num_tokens, d_out)", ha="center", va="top", fontsize=font)
    ax.text(3.6, bottom - 1.06, "heads side by side\n(num_tokens, d_out)", ha="center", va="top", fontsize=font)
    for start, end, label in (
        (8.61, 7.14, "tokens first\n.transpose(1, 2)"),
        (5.46, 4.36, "concatenate\n.reshape(...)"),
        (2.84, 1.76, "out_proj"),
    ):
        _arrow(ax, (start, bottom - 0.48), (end, bottom - 0.48))
        ax.text((start + end) / 2, bottom - 0.36, label, ha="center", va="bottom", fontsize=font)

    note = {"boxstyle": "round,pad=0.4", "fc": "white", "ec": "#999999"}
    ax.text(
        0.3,
        middle + 0.6,
        "head_dim = d_out / num_heads; here d_out = 4, num_heads = 2, head_dim = 2\n"
        "(the batch dimension is left out; t1, t2, t3 mark the tokens).\n"
        "K = X @ W_key and V = X @ W_value are split into heads the same way.",
        ha="left",
        va="top",
        fontsize=font,
        bbox=note,
    )
    ax.text(
        6.3,  # centred over the (num_tokens, num_heads, head_dim) step it explains
        bottom + 0.55,
        "Transpose back BEFORE the reshape: reshaping\n"
        "(num_heads, num_tokens, head_dim) directly\n"
        "would mix tokens and heads.",
        ha="center",
        va="bottom",
        fontsize=font,
        bbox=note,
    )
    title = "Multi-head attention: split d_out into heads, attend in each head, concatenate back"
    ax.set_title(title, fontsize=font + 2)
    _save(fig, path)


def encoder_layer_ln_placement(path: Path) -> None:
    """One encoder layer, bottom to top, Post-LN beside Pre-LN: the same blocks, LayerNorm in different places."""
    fig, ax = _inch_axes(11.6, 10.9)
    attention = "multi-head\nself-attention"
    ffn = "feed-forward\nLinear(d_model → ffn_hidden)\nReLU\ndropout (inner)\nLinear(ffn_hidden → d_model)"
    heights = {attention: 0.65, ffn: 1.4, "+": 0.4, "dropout": 0.4, "LayerNorm": 0.45}  # others 0.5
    x_in, out = ("x  (num_tokens, d_model)", "input"), ("output  (num_tokens, d_model)", "out")
    ln, drop, add = ("LayerNorm", "norm"), ("dropout", "op"), ("+", "add")
    # each panel: left edge, heading, steps bottom to top, residuals (branch after step i, into the "+" at step j), note
    panels = (
        (
            0.3,
            "Post-LN\n(original Transformer, 2017)",
            [x_in, (attention, "op"), drop, add, ln, (ffn, "op"), drop, add, ln, out],
            ((0, 3), (4, 7)),
            "LayerNorm AFTER each add, on the main path:\nx = LayerNorm(x + dropout(sublayer(x)))\n"
            "The residual path goes through every LayerNorm.",
        ),
        (
            6.1,
            "Pre-LN\n(used by GPT-2 and most modern models)",
            [x_in, ln, (attention, "op"), drop, add, ln, (ffn, "op"), drop, add, out],
            ((0, 4), (4, 8)),
            "LayerNorm BEFORE each sub-layer, inside the branch:\nx = x + dropout(sublayer(LayerNorm(x)))\n"
            "The residual path skips every LayerNorm;\na pre-LN stack usually ends with one final LayerNorm.",
        ),
    )
    gap = 0.34
    for x0, heading, steps, residuals, note in panels:
        cx, y = x0 + 2.4, 1.3
        centers, tops = [], []
        for text, kind in steps:
            h = heights.get(text, 0.5)
            if tops:
                _arrow(ax, (cx, tops[-1]), (cx, y))
            if kind == "add":
                ax.add_patch(Circle((cx, y + h / 2), h / 2, fc="white", ec="#444444", lw=1.2))
                ax.text(cx, y + h / 2, "+", ha="center", va="center", fontsize=14)
            else:
                _box(ax, cx, y + h / 2, text, kind, w=3.0, h=h - 0.1)  # _box pads 0.05 on every side
            centers.append(y + h / 2)
            tops.append(y + h)
            y += h + gap
        for src, dst in residuals:
            branch = tops[src] + 0.09  # below the arrowhead of the main path
            ax.plot([cx, cx + 2.0, cx + 2.0], [branch, branch, centers[dst]], color="#444444", lw=1.2)
            ax.add_patch(Circle((cx, branch), 0.045, color="#444444"))
            _arrow(ax, (cx + 2.0, centers[dst]), (cx + 0.2, centers[dst]))
            ax.text(cx + 2.1, (branch + centers[dst]) / 2, "residual", rotation=90, ha="left", va="center", fontsize=11)
        ax.text(cx, tops[-1] + 0.2, heading, ha="center", va="bottom", fontsize=12, fontweight="bold")
        ax.text(
            x0,
            1.0,
            note,
            ha="left",
            va="top",
            fontsize=11,
            bbox={"boxstyle": "round,pad=0.4", "fc": "white", "ec": "#c96f6f"},
        )
    ax.set_title("Where LayerNorm goes in an encoder layer (read bottom to top; red = LayerNorm)", fontsize=13)
    _save(fig, path)


def cross_attention(path: Path) -> None:
    """The encoder-decoder of the original transformer: the decoder's queries read the encoder's output."""
    fig, ax = _inch_axes(11.0, 6.6)
    # encoder column (left), bottom to top
    _box(ax, 2.4, 0.8, "source tokens\n(num_source_tokens,)", "input", w=2.8, h=0.8)
    _box(ax, 2.4, 2.4, "encoder\n(self-attention, no mask)\n× num_layers", "op", w=2.8, h=1.2)
    _box(ax, 2.4, 4.3, "encoder output\n(num_source_tokens, d_model)", "out", w=2.8, h=0.9)
    _arrow(ax, (2.4, 1.25), (2.4, 1.75))
    _arrow(ax, (2.4, 3.05), (2.4, 3.8))
    # decoder column (right), bottom to top
    _box(ax, 7.8, 0.8, "target tokens so far\n(num_tokens,)", "input", w=2.8, h=0.8)
    _box(ax, 7.8, 2.0, "masked self-attention\n(causal)", "op", w=2.8, h=0.8)
    _box(ax, 7.8, 3.5, "cross-attention\nqueries from the decoder\nkeys, values from the encoder", "qkv", w=3.2, h=1.1)
    _box(ax, 7.8, 4.9, "feed-forward", "op", w=2.8, h=0.6)
    _box(ax, 7.8, 5.95, "next-token logits (num_tokens, vocab_size)", "out", w=4.2, h=0.6)
    _arrow(ax, (7.8, 1.25), (7.8, 1.55))
    _arrow(ax, (7.8, 2.45), (7.8, 2.9))
    ax.text(7.95, 2.67, "queries", ha="left", va="center", fontsize=11, color="#444444")
    _arrow(ax, (7.8, 4.1), (7.8, 4.55))
    _arrow(ax, (7.8, 5.25), (7.8, 5.6))
    _arrow(ax, (3.85, 4.3), (6.15, 3.6), "keys and values", fontsize=11)
    ax.text(
        0.3,
        6.0,
        "A decoder-only GPT (this lesson) is the right column\nwithout its cross-attention block.\n"
        "Residual connections and LayerNorms are not drawn.",
        ha="left",
        va="center",
        fontsize=10,
        bbox={"boxstyle": "round,pad=0.4", "fc": "white", "ec": "#888888"},
    )
    ax.set_title("Cross-attention: each target token asks a question of the whole source sentence", fontsize=13)
    _save(fig, path)


def three_attentions(path: Path) -> None:
    """An encoder-decoder's three attentions as grids: who attends (rows) to whom (columns), and what is hidden."""
    cell, top, font = 0.46, 4.3, 12
    source, target = ("s1", "s2", "s3", "s4", "s5"), ("t1", "t2", "t3", "t4")
    fig, ax = _inch_axes(12.4, 5.8)
    panels = (
        (0.9, "1. encoder self-attention", "source reads source, all of it", source, source, "op", False),
        (5.0, "2. decoder self-attention", "target reads target so far (causal)", target, target, "op", True),
        (8.7, "3. cross-attention", "target reads the whole source", target, source, "qkv", False),
    )
    for left, heading, caption, rows, cols, kind, causal in panels:
        fills = [[HIDDEN if causal and c > r else COLORS[kind] for c in range(len(cols))] for r in range(len(rows))]
        hatches = [["///" if causal and c > r else None for c in range(len(cols))] for r in range(len(rows))]
        _grid(ax, left, top, fills, cell, hatches=hatches)
        for i, word in enumerate(rows):
            ax.text(left - 0.08, top - (i + 0.5) * cell, word, ha="right", va="center", fontsize=font)
        for i, word in enumerate(cols):
            ax.text(left + (i + 0.5) * cell, top + 0.08, word, ha="center", va="bottom", fontsize=font)
        width = len(cols) * cell
        ax.text(left + width / 2, top + 0.55, "keys", ha="center", va="bottom", fontsize=font, color="#444444")
        ax.text(
            left - 0.55,
            top - len(rows) * cell / 2,
            "queries",
            rotation=90,
            ha="center",
            va="center",
            fontsize=font,
            color="#444444",
        )
        ax.text(left + width / 2, top + 1.0, heading, ha="center", va="bottom", fontsize=13, fontweight="bold")
        ax.text(left + width / 2, top - len(rows) * cell - 0.25, caption, ha="center", va="top", fontsize=font)
        row_len, col_len = ("src_len" if seq is source else "tgt_len" for seq in (rows, cols))
        shape = f"({len(rows)}, {len(cols)}): ({row_len}, {col_len})"
        ax.text(
            left + width / 2,
            top - len(rows) * cell - 0.65,
            shape,
            ha="center",
            va="top",
            fontsize=font,
            color="#444444",
        )
    ax.legend(
        handles=[
            Patch(fc=HIDDEN, ec="#444444", hatch="///", hatchcolor="#aaaaaa", label="hidden (a later target token)")
        ],
        loc="upper center",
        bbox_to_anchor=(6.2, 1.05),
        bbox_transform=ax.transData,
        fontsize=font,
        frameon=False,
    )
    ax.set_title("The three attentions of an encoder-decoder (s: source tokens, t: target tokens)", fontsize=14)
    _save(fig, path)


def why_attention(path: Path) -> None:
    """Top left: a recurrent encoder squeezes the sentence into one vector that the decoder reads.
    Top right: with attention, every output looks back at every input.
    Bottom: self-attention, where every word's new vector looks at every word of its own sentence."""
    fig, ax = _inch_axes(11.0, 8.6)
    step, box, wide, font = 0.8, 0.42, 0.62, 11
    state = "#c6dbef"
    fixed = "#fdae6b"
    up = 4.2  # the two top panels sit this far above the bottom one

    def words_row(left, y):
        for i, word in enumerate(WORDS):
            ax.text(left + i * step, y, word, ha="center", va="center", fontsize=font)

    def square(x, y, fill, text="", width=box):
        ax.add_patch(Rectangle((x - width / 2, y - box / 2), width, box, fc=fill, ec="#444444", lw=1.1))
        if text:
            ax.text(x, y, text, ha="center", va="center", fontsize=font)

    def look(start, end, strong=True):
        ax.add_patch(
            FancyArrowPatch(
                start,
                end,
                arrowstyle="-|>",
                mutation_scale=9 if strong else 6,
                lw=0.8 if strong else 0.5,
                color="#6a51a3",
                alpha=0.6 if strong else 0.25,
            )
        )

    # top left: the encoder reads one word at a time; only its last state reaches the decoder
    left = 0.6
    words_row(left, up + 0.5)
    for i in range(len(WORDS)):
        x = left + i * step
        square(x, up + 1.45, state)
        _arrow(ax, (x, up + 0.72), (x, up + 1.45 - box / 2 - 0.02))
        if i:
            _arrow(ax, (x - step + box / 2, up + 1.45), (x - box / 2, up + 1.45))
    last = left + (len(WORDS) - 1) * step
    square(last, up + 2.45, fixed)
    _arrow(ax, (last, up + 1.45 + box / 2), (last, up + 2.45 - box / 2))
    ax.text(
        last + box / 2 + 0.08,
        up + 2.45,
        "one fixed vector:\nall the decoder\nsees",
        ha="left",
        va="center",
        fontsize=font,
    )
    outputs = [left + (0.75 + 1.1 * i) * step for i in range(3)]
    for i, x in enumerate(outputs):
        square(x, up + 3.45, state, f"out {i + 1}", width=wide)
        if i:
            _arrow(ax, (outputs[i - 1] + wide / 2, up + 3.45), (x - wide / 2, up + 3.45))
    _arrow(ax, (last - box / 2, up + 2.45), (outputs[0] + 0.1, up + 3.45 - box / 2))
    ax.text(
        left + 2.5 * step, up + 2.1, "encoder (recurrent):\none word at a time", ha="center", va="center", fontsize=font
    )
    ax.text(left - 0.3, up + 3.45, "decoder", ha="right", va="center", fontsize=font)
    ax.text(left + 2.5 * step, up + 4.1, "1. Without attention: one vector for the sentence", ha="center", fontsize=12)

    # top right: every output of the decoder looks back at every input word
    left = 6.1
    words_row(left, up + 0.5)
    for i in range(len(WORDS)):
        square(left + i * step, up + 1.45, state)
        _arrow(ax, (left + i * step, up + 0.72), (left + i * step, up + 1.45 - box / 2 - 0.02))
    outputs = [left + (1.0 + 1.5 * i) * step for i in range(3)]
    for i, x in enumerate(outputs):
        for j in range(len(WORDS)):
            look((x, up + 3.45 - box / 2), (left + j * step, up + 1.45 + box / 2))
        square(x, up + 3.45, state, f"out {i + 1}", width=wide)
    ax.text(left + 2.5 * step, up + 4.1, "2. Attention: every output looks at every input", ha="center", fontsize=12)

    # bottom: self-attention; every word's new vector looks at every word of the same sentence
    left = 3.5
    words_row(left, 0.5)
    for i in range(len(WORDS)):
        square(left + i * step, 1.45, state)
        _arrow(ax, (left + i * step, 0.72), (left + i * step, 1.45 - box / 2 - 0.02))
    for i in range(len(WORDS)):
        x = left + i * step
        for j in range(len(WORDS)):
            look((x, 3.0 - box / 2), (left + j * step, 1.45 + box / 2), strong=i == 1)
    for i in range(len(WORDS)):
        square(left + i * step, 3.0, COLORS["out"], "new" if i == 1 else "")
    ax.text(left - 0.4, 1.45, "word vectors", ha="right", va="center", fontsize=font)
    ax.text(left - 0.4, 3.0, "new (context) vectors", ha="right", va="center", fontsize=font)
    ax.text(
        left + 2.5 * step,
        3.75,
        "3. Self-attention (this series): each word looks at every word of its own sentence",
        ha="center",
        fontsize=12,
    )
    _save(fig, path)


DIAGRAMS = {
    "attention_pipeline": attention_pipeline,
    "qkv_projections": qkv_projections,
    "masked_attention": masked_attention,
    "multihead_split_concat": multihead_split_concat,
    "encoder_layer_ln_placement": encoder_layer_ln_placement,
    "cross_attention": cross_attention,
    "three_attentions": three_attentions,
    "why_attention": why_attention,
}

if __name__ == "__main__":
    for name, draw in DIAGRAMS.items():
        draw(IMAGES / f"{name}.png")
        print(f"wrote {(IMAGES / f'{name}.png').relative_to(ROOT)}")
