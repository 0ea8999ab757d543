import matplotlib.pyplot as plt
import pytest
import torch

import attention_helpers as ah


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_3d_plot_labels_all_three_axes_and_names_every_point():
    ax = ah.plot_embeddings_3d(ah.toy_embeddings(), ah.WORDS)
    labels = [ax.get_xlabel(), ax.get_ylabel(), ax.get_zlabel()]
    assert all(labels) and len(set(labels)) == 3  # seed 001 set the x label twice and never the z label
    assert ax.get_title()
    assert [t.get_text().strip() for t in ax.texts] == list(ah.WORDS)


def test_attention_heatmap_uses_the_words_as_ticks():
    weights = torch.softmax(torch.randn(6, 6), dim=-1)
    ax = ah.plot_attention(weights, ah.WORDS, title="weights")
    assert [t.get_text() for t in ax.get_xticklabels()] == list(ah.WORDS)
    assert [t.get_text() for t in ax.get_yticklabels()] == list(ah.WORDS)
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title() == "weights"
    assert len(ax.texts) == 36  # one annotation per cell
    assert ax.images[0].get_array().shape == (6, 6)


def test_heads_grid_has_one_titled_heatmap_per_head():
    weights = torch.softmax(torch.randn(5, 6, 6), dim=-1)
    fig = ah.plot_attention_heads(weights, ah.WORDS, ncols=3)
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in heatmaps] == [f"head {h}" for h in range(5)]


def test_diagrams_are_found_in_images():
    path = ah.diagram_path("attention_pipeline")
    assert path.parent.name == "images" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert ah.show_diagram("attention_pipeline").data[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(FileNotFoundError, match="attention_pipeline"):
        ah.diagram_path("no_such_diagram")


def test_3d_plot_camera_follows_elev_and_azim():
    ax = ah.plot_embeddings_3d(ah.toy_embeddings(), ah.WORDS, elev=10, azim=45)
    assert (ax.elev, ax.azim) == (10, 45)


def test_score_bars_show_each_value_over_its_word():
    values = torch.tensor([0.5, -1.25, 2.0])
    ax = ah.plot_scores(values, ["a", "b", "c"], title="t", ylabel="weight")
    assert [bar.get_height() for bar in ax.patches] == [0.5, -1.25, 2.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    assert ax.get_title() == "t" and ax.get_ylabel() == "weight" and ax.get_xlabel()
    with pytest.raises(ValueError, match="2 labels but there are 3 values"):
        ah.plot_scores(values, ["a", "b"])


def test_scaling_figure_spreads_raw_products_by_sqrt_d_k():
    fig = ah.plot_scaling(256, seed=0)
    spread, weights = fig.axes
    raw_label, scaled_label = [t.get_text() for t in spread.get_legend().get_texts()]
    raw_std = float(raw_label.split("std ")[1].rstrip(")"))
    scaled_std = float(scaled_label.split("std ")[1].rstrip(")"))
    assert 14 < raw_std < 18 and 0.9 < scaled_std < 1.1  # sqrt(256) = 16
    assert all(ax.get_xlabel() and ax.get_ylabel() and ax.get_title() for ax in fig.axes)
    heights = [bar.get_height() for bar in weights.patches]
    assert sum(heights[:6]) == pytest.approx(1) and sum(heights[6:]) == pytest.approx(1)
    assert max(heights[:6]) > max(heights[6:])  # unscaled weights concentrate on one key


def test_dropout_heatmap_is_seeded_dropout_and_keeps_global_rng():
    before = torch.get_rng_state()
    ax = ah.plot_dropout(0.5, size=6, seed=123)
    assert torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(123)
    expected = torch.nn.Dropout(0.5)(torch.ones(6, 6))
    shown = torch.tensor(ax.images[0].get_array())
    assert torch.equal(shown, expected)
    assert f"{int((expected != 0).sum())} of 36 kept" in ax.get_title()
    assert set(shown.unique().tolist()) <= {0.0, 2.0}  # survivors scaled by 1 / (1 - p)


def test_3d_labels_of_nearly_equal_points_go_on_opposite_sides():
    ax = ah.plot_embeddings_3d(ah.toy_embeddings(), ah.WORDS)
    sides = {t.get_text().strip(): t.get_horizontalalignment() for t in ax.texts}
    assert sides["journey"] == "left" and sides["starts"] == "right"  # 0.03 apart in the running example
    assert sides["step"] == "left"


def test_heatmap_scale_starts_at_zero_for_weights_and_below_for_negative_scores():
    weights = torch.softmax(torch.randn(6, 6), dim=-1)
    assert ah.plot_attention(weights, ah.WORDS).images[0].get_clim()[0] == 0.0
    scores = torch.tensor([[-1.0, 1.0], [1.0, -1.0]])
    assert ah.plot_attention(scores, ["a", "b"]).images[0].get_clim() == (-1.0, 1.0)


def test_diagrams_are_shown_at_their_own_width_unless_told():
    native = ah.show_diagram("multihead_split_concat")
    assert native.width is None  # the notebook shows the PNG's own pixels, drawn legible at that size
    assert ah.show_diagram("multihead_split_concat", width=500).width == 500
    with pytest.raises(ValueError, match="width"):
        ah.show_diagram("multihead_split_concat", width=0)
