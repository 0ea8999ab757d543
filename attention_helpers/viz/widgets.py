"""Knobs for the notebooks (ipywidgets): each widget only passes its controls' values to a plotting
function from ``plotting`` or a computation from ``functional``, both tested on their own.

Every function returns a ``VBox`` of the controls above an ``Image`` that shows the figure, redrawn as
PNG bytes whenever a control moves. An ``Image`` rather than an ``Output`` area: the figure never reaches
the cell's output, so a batch run (nbval, papermill) stores the same output as a live kernel, and nbclient
has no output-capture messages to route (its ``Output`` handling can hang under load).

A widget needs a live kernel to show anything, so its cell output also carries an ``image/png``: the first
view, with a line under it saying that moving the controls needs a live kernel. GitHub, Colab before
running, JupyterLab before running (an untrusted notebook) and the website show that picture; a live
JupyterLab shows the widget. nbval compares the cell's ``text/plain`` and never PNG images.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch

from .._checks import check_labels, check_tensor
from ..functional import attention_scores_loop, softmax_with_temperature
from .plotting import plot_attention, plot_dropout, plot_embeddings_3d, plot_scaling, plot_scores

# At most 110 characters: ipywidgets cuts a longer text form short with "…".
PANEL_TEXT = "Interactive figure (needs a live kernel: run the notebook). The lesson also draws it as a plain figure."


# Under the static picture: the picture cannot move, and what would move it.
STATIC_NOTE = "The first view of an interactive figure: run the notebook to move its controls ({values})."


class WidgetPanel(widgets.VBox):
    """A ``VBox`` of controls over an ``Image``, whose text form says what it is instead of listing its children,
    and whose stored output carries a picture of its first view.

    Viewers without a kernel show the richest form they can: the ``image/png`` (``static_png``), else the
    ``text/plain`` form, a sentence that never changes between runs (not ``VBox(children=(HBox(...``), so strict
    nbval compares it.
    """

    static_png: bytes = b""

    def __repr__(self) -> str:
        return PANEL_TEXT

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is not None and self.static_png:
            bundle["image/png"] = base64.b64encode(self.static_png).decode("ascii")
        return bundle


def control_text(name: str, control: widgets.ValueWidget) -> str:
    """'temperature = 1' for the note under the static picture: a menu's label, a slider's value."""
    value = getattr(control, "label", None) or control.value
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{control.description or name} = {shown}"


def figure_png(figure, note: str | None = None) -> bytes:
    """The figure as PNG bytes at 100 dpi, cropped to what it draws; ``note`` as a line of text under it."""
    if note is not None:  # under everything drawn, axis labels included
        drawn = figure.get_tightbbox(figure.canvas.get_renderer())  # inches
        bottom = (drawn.y0 - 0.08) / figure.get_figheight()
        x = (drawn.x0 + drawn.x1) / 2 / figure.get_figwidth()
        figure.text(x, bottom, note, ha="center", va="top", fontsize=9, style="italic", color="0.3")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return buffer.getvalue()


def widget_panel(draw: Callable[..., object], **controls: widgets.ValueWidget) -> WidgetPanel:
    """Controls over an image of ``draw(**values)``, which returns the Matplotlib Axes or Figure it drew."""
    # A figure wider than the output area shrinks to fit it (no sideways scrollbar); a narrower one keeps its size.
    image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto"))
    panel_static = []

    def redraw(change=None) -> None:
        drawn = draw(**{name: control.value for name, control in controls.items()})
        figure = getattr(drawn, "figure", drawn)  # an Axes knows its figure; a Figure is its own
        png = figure_png(figure)
        if not panel_static:  # the first view: the same figure with the note under it
            values = ", ".join(control_text(name, control) for name, control in controls.items())
            panel_static.append(figure_png(figure, STATIC_NOTE.format(values=values)))
        plt.close(figure)  # so that the inline backend does not also show it under the cell
        image.width = str(int.from_bytes(png[16:20], "big"))  # the PNG's own width: shown 1:1, not stretched
        image.value = png

    for control in controls.values():
        control.style.description_width = "initial"  # the whole label, not "temperat..."
        control.observe(redraw, names="value")
    redraw()
    panel = WidgetPanel([widgets.HBox(list(controls.values())), image])
    panel.static_png = panel_static[0]
    return panel


def rotate_embeddings_widget(vectors: torch.Tensor, labels: Sequence[str]) -> widgets.VBox:
    """Sliders for the camera's elevation and azimuth over :func:`plot_embeddings_3d` of
    ``(num_words, 3)`` vectors."""
    check_tensor("vectors", vectors, (2,), "(num_words, 3)")
    check_labels("labels", labels, vectors.shape[0], "vectors")
    return widget_panel(
        lambda elev, azim: plot_embeddings_3d(vectors, labels, elev=elev, azim=azim, title="Turn the view"),
        # Straight from above or below (±90 degrees) the z axis shrinks to a point and its tick labels pile up.
        elev=widgets.IntSlider(value=30, min=-75, max=75, step=5, description="elevation"),
        azim=widgets.IntSlider(value=-60, min=-180, max=180, step=5, description="azimuth"),
    )


def query_scores_widget(inputs: torch.Tensor, labels: Sequence[str]) -> widgets.VBox:
    """Choose a query word; see its dot-product scores with every word of ``(num_words, d)`` inputs."""
    check_tensor("inputs", inputs, (2,), "(num_words, d)")
    check_labels("labels", labels, inputs.shape[0], "rows in inputs")

    def draw(query_index: int):
        scores = attention_scores_loop(inputs, inputs[query_index])
        return plot_scores(scores, labels, title=f"Dot products with the query {labels[query_index]!r}")

    options = [(word, i) for i, word in enumerate(labels)]
    dropdown = widgets.Dropdown(options=options, value=min(1, len(labels) - 1), description="query")
    return widget_panel(draw, query_index=dropdown)


def temperature_widget(scores: torch.Tensor, labels: Sequence[str]) -> widgets.VBox:
    """A temperature slider (0.1 to 10, log scale) over ``softmax(scores / temperature)`` of one
    query's ``(num_words,)`` scores."""
    check_tensor("scores", scores, (1,), "(num_words,)")
    check_labels("labels", labels, scores.shape[0], "scores")

    def draw(temperature: float):
        weights = softmax_with_temperature(scores, temperature)
        return plot_scores(weights, labels, title=f"softmax(scores / {temperature:.2f})", ylabel="weight", ylim=(0, 1))

    slider = widgets.FloatLogSlider(value=1.0, base=10, min=-1, max=1, step=0.05, description="temperature")
    return widget_panel(draw, temperature=slider)


def scaling_widget(seed: int = 0) -> widgets.VBox:
    """A d_k slider (1 to 1024) over :func:`plot_scaling`: raw vs scaled dot products and weights."""
    options = [2**i for i in range(11)]
    return widget_panel(
        lambda d_k: plot_scaling(d_k, seed=seed),
        d_k=widgets.SelectionSlider(options=options, value=64, description="d_k"),
    )


def dropout_widget(size: int = 6, seed: int = 123) -> widgets.VBox:
    """A dropout-probability slider (0 to 0.9) over :func:`plot_dropout` of a matrix of ones."""
    return widget_panel(
        lambda p: plot_dropout(p, size=size, seed=seed),
        p=widgets.FloatSlider(value=0.5, min=0.0, max=0.9, step=0.1, description="p"),
    )


def heads_widget(attn_weights: torch.Tensor, labels: Sequence[str]) -> widgets.VBox:
    """Choose a head; see its ``(num_tokens, num_tokens)`` slice of ``(num_heads, num_tokens, num_tokens)``
    attention weights as a heatmap with the words as ticks, every head on the same colour scale."""
    check_tensor("attn_weights", attn_weights, (3,), "(num_heads, num_tokens, num_tokens)", "num_tokens")
    check_labels("labels", labels, attn_weights.shape[1], "query tokens in attn_weights")
    vmin, vmax = min(0.0, float(attn_weights.min())), float(attn_weights.max())
    return widget_panel(
        lambda head: plot_attention(attn_weights[head], labels, title=f"Head {head}", vmin=vmin, vmax=vmax),
        head=widgets.IntSlider(value=0, min=0, max=attn_weights.shape[0] - 1, description="head"),
    )
