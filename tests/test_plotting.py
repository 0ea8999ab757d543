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
