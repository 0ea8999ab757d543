"""Each widget passes its controls' values to a tested function, and redraws when a control moves."""

import ipywidgets as widgets
import matplotlib.pyplot as plt
import pytest
import torch

import attention_helpers as ah
import attention_helpers.viz.widgets as ah_widgets


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _controls(panel: widgets.VBox) -> list:
    controls, image = panel.children
    assert isinstance(image, widgets.Image) and image.value[:8] == b"\x89PNG\r\n\x1a\n"
    return list(controls.children)


def _record(monkeypatch, name: str) -> list:
    """Replace widgets.<name> by a recorder that still draws, and return the list of its calls."""
    calls = []
    original = getattr(ah_widgets, name)

    def recorder(*args, **kwargs):
        calls.append((args, kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(ah_widgets, name, recorder)
    return calls


def test_rotate_widget_turns_the_camera(monkeypatch):
    calls = _record(monkeypatch, "plot_embeddings_3d")
    elev, azim = _controls(ah.rotate_embeddings_widget(ah.toy_embeddings(), ah.WORDS))
    azim.value = 45
    elev.value = 10
    assert [(c[1]["elev"], c[1]["azim"]) for c in calls] == [(30, -60), (30, 45), (10, 45)]


def test_query_widget_plots_the_chosen_words_dot_products(monkeypatch):
    calls = _record(monkeypatch, "plot_scores")
    inputs = ah.toy_embeddings()
    (dropdown,) = _controls(ah.query_scores_widget(inputs, ah.WORDS))
    assert dropdown.label == "journey"
    dropdown.value = 4
    assert dropdown.label == "one"
    scores = [c[0][0] for c in calls]
    assert torch.allclose(scores[0], inputs @ inputs[1]) and torch.allclose(scores[1], inputs @ inputs[4])
    assert "'one'" in calls[1][1]["title"]


def test_temperature_widget_shows_softmax_of_scaled_scores(monkeypatch):
    calls = _record(monkeypatch, "plot_scores")
    scores = torch.tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865])
    (slider,) = _controls(ah.temperature_widget(scores, ah.WORDS))
    slider.value = 0.1
    first, sharp = calls[0][0][0], calls[1][0][0]
    assert torch.allclose(first, torch.softmax(scores, dim=-1))
    assert torch.allclose(sharp, torch.softmax(scores / 0.1, dim=-1))
    assert sharp.max() > first.max()  # a low temperature sharpens


def test_scaling_widget_passes_d_k(monkeypatch):
    calls = _record(monkeypatch, "plot_scaling")
    (slider,) = _controls(ah.scaling_widget(seed=3))
    slider.value = 512
    assert [(c[0][0], c[1]["seed"]) for c in calls] == [(64, 3), (512, 3)]


def test_dropout_widget_passes_p(monkeypatch):
    calls = _record(monkeypatch, "plot_dropout")
    (slider,) = _controls(ah.dropout_widget(size=4, seed=5))
    slider.value = 0.2
    assert [c[0][0] for c in calls] == [0.5, pytest.approx(0.2)]
    assert all(c[1] == {"size": 4, "seed": 5} for c in calls)


def test_heads_widget_shows_the_chosen_head(monkeypatch):
    calls = _record(monkeypatch, "plot_attention")
    weights = torch.softmax(torch.randn(3, 6, 6), dim=-1)
    (slider,) = _controls(ah.heads_widget(weights, ah.WORDS))
    assert (slider.min, slider.max) == (0, 2)
    slider.value = 2
    assert torch.equal(calls[0][0][0], weights[0]) and torch.equal(calls[1][0][0], weights[2])


def test_moving_a_control_redraws_the_image_and_leaves_no_figure_open():
    panel = ah.temperature_widget(torch.tensor([0.9544, 1.4950, 1.4754]), ah.WORDS[:3])
    (slider,), image = _controls(panel), panel.children[1]
    first = image.value
    slider.value = 0.1
    assert image.value[:8] == b"\x89PNG\r\n\x1a\n" and image.value != first
    assert plt.get_fignums() == []  # nothing left for the inline backend to show under the cell
    assert image.width == str(int.from_bytes(image.value[16:20], "big"))  # PNG width, from its IHDR header


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: ah.rotate_embeddings_widget(torch.zeros(6, 3), ah.WORDS[:5]),
            r"5 labels but there are 6 vectors",
        ),
        (lambda: ah.query_scores_widget(torch.zeros(6), ah.WORDS), r"inputs .*\(6,\)"),
        (lambda: ah.temperature_widget(torch.zeros(6, 6), ah.WORDS), r"scores .*\(6, 6\)"),
        (lambda: ah.heads_widget(torch.zeros(6, 6), ah.WORDS), r"attn_weights .*\(6, 6\)"),
        (lambda: ah.heads_widget(torch.zeros(2, 5, 5), ah.WORDS), r"6 labels but there are 5 query tokens"),
    ],
)
def test_widgets_reject_bad_input_before_drawing(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_a_widget_reads_as_a_sentence_without_a_kernel_and_the_same_in_every_run():
    """Viewers without a kernel (GitHub, Colab before running, the website) show the text/plain form."""
    first = ah.temperature_widget(torch.tensor([0.5, 1.5, 1.0]), ah.WORDS[:3])
    second = ah.temperature_widget(torch.tensor([0.5, 1.5, 1.0]), ah.WORDS[:3])
    bundles = [first._repr_mimebundle_(), second._repr_mimebundle_()]
    texts = [bundle["text/plain"] for bundle in bundles]
    assert texts[0] == texts[1] == ah_widgets.PANEL_TEXT  # not cut short with "…", no ids or values
    assert "live kernel" in texts[0] and "VBox" not in texts[0]
    assert all("application/vnd.jupyter.widget-view+json" in bundle for bundle in bundles)  # still a live widget
    assert isinstance(first, widgets.VBox)
    assert (
        bundles[0]["application/vnd.jupyter.widget-view+json"]["model_id"]
        != (bundles[1]["application/vnd.jupyter.widget-view+json"]["model_id"])
    )


def test_heads_widget_draws_every_head_on_one_colour_scale(monkeypatch):
    calls = _record(monkeypatch, "plot_attention")
    weights = torch.softmax(torch.randn(3, 4, 4) * 3, dim=-1)
    (slider,) = _controls(ah.heads_widget(weights, ah.WORDS[:4]))
    slider.value = 1
    expected = (0.0, float(weights.max()))
    assert [(c[1]["vmin"], c[1]["vmax"]) for c in calls] == [expected, expected]


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def test_stored_output_carries_a_picture_of_the_first_view_with_a_note_under_it(monkeypatch):
    """GitHub, Colab before running, JupyterLab before running and the website show the image/png."""
    import base64

    notes = []
    original = ah_widgets.figure_png
    monkeypatch.setattr(ah_widgets, "figure_png", lambda fig, note=None: notes.append(note) or original(fig, note))
    panel = ah.rotate_embeddings_widget(ah.toy_embeddings(), ah.WORDS)
    (_elevation, azim), image = _controls(panel), panel.children[1]
    first_view = base64.b64decode(panel._repr_mimebundle_()["image/png"])
    (width, height), (live_width, live_height) = _png_size(first_view), _png_size(image.value)
    assert height > live_height and width >= live_width  # the live figure, and a line of text under it
    assert notes == [
        None,
        "The first view of an interactive figure: run the notebook to move its controls "
        "(elevation = 30, azimuth = -60).",
    ]
    azim.value = 45
    assert base64.b64decode(panel._repr_mimebundle_()["image/png"]) == first_view  # the stored picture stays
    assert image.value != first_view


def test_the_note_names_a_menu_by_its_label_and_a_slider_by_its_value():
    (dropdown,) = _controls(ah.query_scores_widget(ah.toy_embeddings(), ah.WORDS))
    assert ah_widgets.control_text("query_index", dropdown) == "query = journey"
    slider = widgets.FloatLogSlider(value=1.0, base=10, min=-1, max=1, description="temperature")
    assert ah_widgets.control_text("temperature", slider) == "temperature = 1"
