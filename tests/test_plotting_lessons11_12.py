"""The figures lessons 11 and 12 draw in one line: measured cost, causal blocks, cross-attention maps."""

import matplotlib.pyplot as plt
import pytest
import torch

import attention_helpers as ah


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_attention_cost_draws_one_line_per_implementation_and_the_quadratic_reference():
    sizes = [1024, 4096]
    measured = {
        (name, n): {"extra_peak_mib": factor * n, "cpu_s": factor * n / 1e4}
        for factor, name in enumerate(("explicit", "tiled", "fused"), start=1)
        for n in sizes
    }
    fig = ah.plot_attention_cost(measured, sizes)
    memory, time = fig.axes
    assert [line.get_label() for line in memory.lines][:3] == ["explicit", "tiled", "fused"]
    assert list(memory.lines[-1].get_ydata()) == [n * n * 4 / 2**20 for n in sizes]  # one float32 matrix, MiB
    assert list(time.lines[0].get_ydata()) == [measured["explicit", n]["cpu_s"] for n in sizes]
    assert all(ax.get_xlabel() and ax.get_ylabel() and ax.get_title() for ax in fig.axes)
    with pytest.raises(ValueError, match="measured has no row"):
        ah.plot_attention_cost(measured, [1024, 16384])


def test_causal_blocks_colour_skipped_diagonal_and_full_blocks_as_tiled_attention_runs_them():
    ax = ah.plot_causal_blocks(300, 64)
    mesh = ax.collections[0]
    kind = torch.as_tensor(mesh.get_array()).reshape(5, 5)
    blocks = ah.tiled_attention_blocks(300, 300, 64, causal=True)
    assert torch.equal(kind > 0, blocks)  # skipped exactly where the loop skips
    assert torch.equal(kind == 1, torch.eye(5, dtype=torch.bool))  # masked inside on the diagonal
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0-63", "64-127", "128-191", "192-255", "256-299"]
    corners = mesh.get_coordinates()  # (6, 6, 2): every block's corners in token positions
    assert corners[0, :, 0].tolist() == [0, 64, 128, 192, 256, 300]  # the last block holds 44 tokens, drawn so
    assert corners[:, 0, 1].tolist() == [0, 64, 128, 192, 256, 300]
    diagonal = ax.lines[0]
    assert list(diagonal.get_xdata()) == list(diagonal.get_ydata()) == [0, 300]  # query = key, corner to corner
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()


def test_cross_attention_maps_label_rows_with_output_and_columns_with_input_characters():
    maps = [torch.softmax(torch.randn(10, n), dim=-1) for n in (11, 18)]
    fig = ah.plot_cross_attention(maps, ["2000-05-15"] * 2, ["15 May 2000", "Friday 15 Jun 2085"], "t", True)
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert [t.get_text() for t in heatmaps[1].get_xticklabels()] == list("Friday 15 Jun 2085")
    assert [t.get_text() for t in heatmaps[0].get_yticklabels()] == list("2000-05-15")
    assert {ax.images[0].get_clim() for ax in heatmaps} == {(0.0, 1.0)}  # one shared scale
    with pytest.raises(ValueError, match="one entry per example"):
        ah.plot_cross_attention(maps, ["2000-05-15"], ["15 May 2000"], "t")


def test_cross_attention_heads_grid_has_one_titled_map_per_layer_and_head():
    weights = torch.softmax(torch.randn(2, 4, 10, 11), dim=-1)
    fig = ah.plot_cross_attention_heads(weights, "2000-05-15", "15 May 2000", "per head")
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in heatmaps] == [f"layer {i}, head {j}" for i in range(2) for j in range(4)]
    assert torch.equal(torch.as_tensor(heatmaps[5].images[0].get_array()), weights[1, 1])
    with pytest.raises(ValueError, match="source"):
        ah.plot_cross_attention_heads(weights, "2000-05-15", "15 May 200", "per head")


def test_field_shares_draw_one_annotated_map_per_layer_with_formats_and_fields_as_ticks():
    shares = torch.rand(2, 4, 3)
    formats, fields = ["a", "b", "c", "d"], ["year", "month", "day"]
    fig = ah.plot_field_shares(shares, formats, fields)
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in heatmaps] == ["decoder layer 0", "decoder layer 1"]
    assert torch.equal(torch.as_tensor(heatmaps[1].images[0].get_array()), shares[1])
    assert [t.get_text() for t in heatmaps[0].get_yticklabels()] == formats
    assert [t.get_text() for t in heatmaps[0].get_xticklabels()] == fields
    assert len(heatmaps[0].texts) == 12  # every share written in its cell
    with pytest.raises(ValueError, match="formats"):
        ah.plot_field_shares(shares, formats[:3], fields)


def test_exact_match_bars_have_one_bar_per_format_and_entry_at_its_rate():
    results = {"own": torch.tensor([1.0, 1.0, 0.9, 1.0]), "uniform": torch.tensor([0.0, 0.1, 0.0, 0.2])}
    ax = ah.plot_exact_match(results, ["a", "b", "c", "d"])
    heights = [patch.get_height() for patch in ax.patches]
    assert heights == pytest.approx(results["own"].tolist() + results["uniform"].tolist())
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["own", "uniform"]
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    with pytest.raises(ValueError, match="at least one"):
        ah.plot_exact_match({}, ["a"])
