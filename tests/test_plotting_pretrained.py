"""Figures and the layer/head widget for a pretrained encoder's attention."""

import matplotlib.pyplot as plt
import pytest
import torch

import attention_helpers as ah
import attention_helpers.viz.pretrained as ah_plots

TOKENS = ["[CLS]", "a", "cat", "sat", ".", "[SEP]"]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture
def weights():
    return torch.softmax(torch.randn(3, 4, 6, 6), dim=-1)  # (num_layers, num_heads, num_tokens, num_tokens)


def test_one_head_is_drawn_with_the_tokens_as_ticks(weights):
    ax = ah.plot_layer_head(weights, TOKENS, layer=2, head=1)
    assert ax.get_title() == "Layer 2, head 1"
    assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS
    assert [t.get_text() for t in ax.get_yticklabels()] == TOKENS
    assert torch.equal(torch.as_tensor(ax.images[0].get_array()), weights[2, 1])
    assert ax.images[0].colorbar.ax.get_ylabel() == "attention weight"


def test_attention_received_averages_heads_and_queries(weights):
    ax = ah.plot_attention_received(weights, TOKENS)
    received = torch.as_tensor(ax.images[0].get_array())
    assert received.shape == (3, 6)
    torch.testing.assert_close(received[1, 4], weights[1, :, :, 4].mean())
    torch.testing.assert_close(received.sum(dim=1), torch.ones(3))  # each query's weights sum to 1
    assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS
    assert ax.get_xlabel() and ax.get_ylabel() == "layer" and ax.get_title()


def test_similarity_heatmap_writes_every_value():
    vectors = torch.nn.functional.normalize(torch.randn(4, 8), dim=-1)
    similarities = vectors @ vectors.T
    ax = ah.plot_similarities(similarities, ["a", "b", "c", "d"])
    assert [t.get_text() for t in ax.texts] == [f"{v:.2f}" for v in similarities.flatten().tolist()]
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    assert ax.images[0].colorbar.ax.get_ylabel() == "cosine similarity"


def test_bad_input_is_named(weights):
    with pytest.raises(ValueError, match=r"layer must be from 0 to 2 \(num_layers=3\), got 3"):
        ah.plot_layer_head(weights, TOKENS, layer=3, head=0)
    with pytest.raises(ValueError, match="5 labels but there are 6 tokens"):
        ah.plot_attention_received(weights, TOKENS[:5])
    with pytest.raises(ValueError, match="4 dimensions"):
        ah.plot_layer_head(weights[0], TOKENS, 0, 0)
    with pytest.raises(ValueError, match="must be square"):
        ah.plot_similarities(torch.ones(2, 3), ["a", "b"])


def test_widget_passes_layer_and_head_and_redraws(weights, monkeypatch):
    calls = []
    original = ah_plots.plot_layer_head

    def recorder(*args, **kwargs):
        calls.append(args[2:])
        return original(*args, **kwargs)

    monkeypatch.setattr(ah_plots, "plot_layer_head", recorder)
    panel = ah.layer_head_widget(weights, TOKENS)
    controls, image = panel.children
    layer, head = controls.children
    assert (layer.max, head.max) == (2, 3)
    first = image.value
    layer.value, head.value = 2, 3
    assert calls == [(0, 0), (2, 0), (2, 3)]
    assert image.value[:8] == b"\x89PNG\r\n\x1a\n" and image.value != first


def test_every_layer_and_head_is_drawn_on_one_zero_to_one_scale(weights):
    """Two heads' figures can be compared only if the same colour means the same weight in both."""
    sharp = torch.zeros_like(weights)
    sharp[..., 0] = 1.0  # every query on the first token
    flat = torch.full_like(weights, 1.0 / weights.shape[-1])
    for matrices in (weights, sharp, flat):
        for layer, head in ((0, 0), (weights.shape[0] - 1, weights.shape[1] - 1)):
            ax = ah.plot_layer_head(matrices, TOKENS, layer=layer, head=head)
            assert ax.images[0].get_clim() == (0.0, 1.0)
            plt.close(ax.figure)
