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
    assert all(labels) and len(set(labels)) == 3  # a common mistake: the x label set twice, the z label never
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


def test_heads_grid_has_one_titled_heatmap_per_head_on_one_shared_scale():
    weights = torch.softmax(torch.randn(5, 6, 6), dim=-1)
    fig = ah.plot_attention_heads(weights, ah.WORDS, ncols=3)
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in heatmaps] == [f"head {h}" for h in range(5)]
    # one colour scale for all heads, and a single colour bar labelled "weight" for the grid
    assert {ax.images[0].get_clim() for ax in heatmaps} == {(0.0, float(weights.max()))}
    colorbars = {id(ax.images[0].colorbar) for ax in heatmaps if ax.images[0].colorbar is not None}
    assert len(colorbars) == 1
    assert len(fig.axes) == 2 * 3 + 1  # the 2 x 3 grid (one cell unused) and the colour bar
    assert heatmaps[-1].images[0].colorbar.ax.get_ylabel() == "weight"
    # the axis labels are said once for the grid, not under every head
    assert fig.supxlabel is not None and fig._supxlabel.get_text() and fig._supylabel.get_text()
    assert not any(ax.get_xlabel() or ax.get_ylabel() for ax in heatmaps)


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


def test_3d_plot_tells_nearly_equal_points_apart_by_marker_colour_and_legend():
    ax = ah.plot_embeddings_3d(ah.toy_embeddings(), ah.WORDS)
    points = ax.collections
    assert len(points) == 6
    journey, starts = points[1], points[2]
    journey_marker, starts_marker = (p.get_paths()[0].vertices for p in (journey, starts))
    assert journey_marker.shape != starts_marker.shape or not (journey_marker == starts_marker).all()
    assert tuple(journey.get_facecolor()[0]) != tuple(starts.get_facecolor()[0])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(ah.WORDS)


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


def _colorbar_label(ax):
    return ax.images[0].colorbar.ax.get_ylabel()


def test_heatmap_colour_bar_is_labelled_and_text_is_readable_on_dark_and_light_cells():
    weights = torch.softmax(torch.randn(6, 6) * 3, dim=-1)
    ax = ah.plot_attention(weights, ah.WORDS)
    assert _colorbar_label(ax) == "weight"
    assert _colorbar_label(ah.plot_attention(torch.randn(6, 6), ah.WORDS, value_label="score")) == "score"
    # viridis is dark at the bottom of the scale: white text on the smallest entry, black on the largest
    texts = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_color() for t in ax.texts}
    smallest = tuple(int(i) for i in torch.unravel_index(weights.argmin(), weights.shape))
    largest = tuple(int(i) for i in torch.unravel_index(weights.argmax(), weights.shape))
    assert texts[smallest] == "white" and texts[largest] == "black"


def test_a_zero_one_mask_gets_two_colours_not_a_continuous_scale():
    mask = torch.tril(torch.ones(4, 4))
    for shown in (mask, mask.bool()):
        ax = ah.plot_attention(shown, ["a", "b", "c", "d"], value_label="may attend")
        image = ax.images[0]
        assert image.get_cmap().N == 2
        assert [t.get_text() for t in image.colorbar.ax.get_yticklabels()] == ["0", "1"]
        assert _colorbar_label(ax) == "may attend"
    assert _colorbar_label(ah.plot_attention(mask, ["a", "b", "c", "d"])) == "mask"
    weights = torch.softmax(torch.randn(4, 4), dim=-1)
    assert ah.plot_attention(weights, ["a", "b", "c", "d"]).images[0].get_cmap().N > 2


def test_dropout_text_is_white_on_dark_cells_and_black_on_light_ones():
    ax = ah.plot_dropout(0.5, size=6, seed=123)
    shown = torch.tensor(ax.images[0].get_array())
    for text in ax.texts:
        column, row = (round(v) for v in text.get_position())
        kept = float(shown[row, column]) > 0  # kept entries (2.0) are the dark end of the Blues map
        assert text.get_color() == ("white" if kept else "black")


def test_dropout_heatmap_gives_every_survivor_one_colour_at_any_rate():
    colours = set()
    for p in (0.2, 0.5, 0.8):
        ax = ah.plot_dropout(p, size=6, seed=123)
        image = ax.images[0]
        shown = torch.tensor(image.get_array())
        rgba = image.to_rgba(image.get_array())
        colours |= {tuple(rgba[i, j]) for i, j in (shown != 0).nonzero().tolist()}
        assert all(tuple(rgba[i, j]) == (1.0, 1.0, 1.0, 1.0) for i, j in (shown == 0).nonzero().tolist())
    assert len(colours) == 1  # survivors of 1.25, 2.00 and 5.00 look alike: coloured = kept


def test_dot_product_arrows_show_both_lengths_the_angle_and_the_product():
    a, b = torch.tensor([1.0, 0.5]), torch.tensor([-1.0, 2.0])
    ax = ah.plot_dot_product_2d(a, b, a_label="a", b_label="b")
    arrows = [t for t in ax.texts if getattr(t, "arrow_patch", None) is not None]  # annotations drawn as arrows
    assert sorted(tuple(t.xy) for t in arrows) == sorted([tuple(a.tolist()), tuple(b.tolist())])
    assert all(tuple(t.xyann) == (0, 0) for t in arrows)  # both start at the origin
    angle = torch.rad2deg(torch.acos(torch.nn.functional.cosine_similarity(a, b, dim=0))).item()
    words = " ".join(t.get_text() for t in ax.texts)
    assert f"θ = {angle:.0f}°" in words  # 90 degrees: these two are at right angles
    assert f"|a| = {a.norm():.2f}" in words and f"|b| = {b.norm():.2f}" in words
    assert ax.get_title().endswith(f"= {torch.dot(a, b).item():+.2f}")
    assert ax.get_xlabel() and ax.get_ylabel()
    opposite = ah.plot_dot_product_2d(a, -2 * a)
    assert "θ = 180°" in " ".join(t.get_text() for t in opposite.texts)
    assert opposite.get_title().endswith(f"= {torch.dot(a, -2 * a).item():+.2f}")


def test_dot_product_names_sit_away_from_the_other_arrow_and_clear_of_each_other():
    """Each arrow's name lies on the far side of its arrow from the other arrow, so neither name crowds the angle
    between them; names of arrows along one line go on opposite sides."""

    def side(vector, point):  # +1: point left of the line through vector, -1: right
        return 1 if float(vector[0] * point[1] - vector[1] * point[0]) > 0 else -1

    def name_position(ax, label):
        (text,) = [t for t in ax.texts if t.get_text().startswith(f"{label}\n")]
        return text.get_position()

    a = torch.tensor([1.0, 0.5])
    for b in (torch.tensor([-1.0, 2.0]), torch.tensor([1.0, -2.0]), torch.tensor([0.5, 1.5])):
        ax = ah.plot_dot_product_2d(a, b)
        assert side(a, name_position(ax, "a")) == -side(a, b)
        assert side(b, name_position(ax, "b")) == -side(b, a)
        (angle_text,) = [t for t in ax.texts if t.get_text().startswith("θ")]
        assert angle_text.get_bbox_patch() is not None  # a backing, so axis lines do not cross the text
    collinear = ah.plot_dot_product_2d(a, 2 * a)
    assert side(a, name_position(collinear, "a")) == -side(a, name_position(collinear, "b"))


def test_context_vector_figure_marks_the_weighted_average_and_the_plain_mean():
    vectors = ah.toy_embeddings()
    weights = torch.softmax(vectors @ vectors[1], dim=-1)
    ax = ah.plot_context_vector(vectors, weights, ah.WORDS, query_label="journey")
    *points, context, mean = ax.collections
    position = [torch.tensor([float(c[0]) for c in p._offsets3d]) for p in (context, mean)]
    assert torch.allclose(position[0], weights @ vectors) and torch.allclose(position[1], vectors.mean(dim=0))
    sizes = torch.tensor([float(p.get_sizes()[0]) for p in points])
    assert torch.allclose(sizes / sizes.sum(), weights)  # each point's size is proportional to its weight
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["context vector of 'journey'", "plain mean (equal weights)"]
    assert all(
        f"{w} ({float(s):.2f})" in " ".join(t.get_text() for t in ax.texts)
        for w, s in zip(ah.WORDS, weights, strict=True)
    )
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_zlabel() and "journey" in ax.get_title()
    ax.figure.canvas.draw()  # Matplotlib gives the 3D points their stacking order (zorder) by depth at draw time
    assert min(t.get_zorder() for t in ax.texts) > max(c.get_zorder() for c in ax.collections)  # names on top
    with pytest.raises(ValueError, match="sum to 1"):
        ah.plot_context_vector(vectors, weights * 2, ah.WORDS, query_label="journey")


def test_diagrams_are_shown_at_their_own_width_unless_told():
    native = ah.show_diagram("multihead_split_concat")
    assert native.width is None  # the notebook shows the PNG's own pixels, drawn legible at that size
    assert ah.show_diagram("multihead_split_concat", width=500).width == 500
    with pytest.raises(ValueError, match="width"):
        ah.show_diagram("multihead_split_concat", width=0)


@pytest.mark.parametrize("ylim", [None, (0, 1)])
def test_the_tallest_bars_value_stays_inside_the_frame(ylim):
    """Each bar's value is written above it: the tallest one must not sit on (or over) the top spine."""
    values = torch.tensor([0.2, 1.0, 0.5]) if ylim else torch.tensor([0.9544, 1.4950, 1.4754])
    ax = ah.plot_scores(values, ["a", "b", "c"], ylim=ylim)
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    tallest = max(ax.texts, key=lambda t: float(t.get_text()))
    box = tallest.get_window_extent(renderer)
    assert box.y1 < frame.y1 - 2, (box.y1, frame.y1)
    if ylim:
        assert ax.get_ylim()[0] == 0
    plt.close(fig)


def test_attention_heatmap_colour_scale_can_be_fixed():
    weights = torch.tensor([[0.6, 0.4], [0.3, 0.7]])
    assert ah.plot_attention(weights, ["a", "b"]).images[0].get_clim() == pytest.approx((0.0, 0.7))
    assert ah.plot_attention(weights, ["a", "b"], vmin=0.0, vmax=1.0).images[0].get_clim() == (0.0, 1.0)
    plt.close("all")


def _name_boxes_on_screen(ax):
    """Screen boxes of a 3D axes' texts where draw() puts them: at the projection of their 3D position."""
    from matplotlib import cbook
    from matplotlib.text import Text
    from mpl_toolkits.mplot3d import proj3d

    ax.figure.canvas.draw()
    renderer = ax.figure.canvas.get_renderer()
    boxes = []
    for text in ax.texts:
        x, y, _ = proj3d.proj_transform(text._x, text._y, text._z, ax.get_proj())
        with cbook._setattr_cm(text, _x=x, _y=y):
            boxes.append(Text.get_window_extent(text, renderer))
    return boxes


@pytest.mark.parametrize("view", [(None, None), (20, -130)])
def test_word_names_in_3d_cover_no_other_name_and_no_point(view):
    """At the lessons' two camera angles no name overlaps another name or any point's marker on screen, the near
    twins "journey" and "starts" (0.03 apart) included."""
    from matplotlib.transforms import Bbox

    vectors = ah.toy_embeddings()
    weights = torch.softmax(vectors @ vectors[1], dim=-1)
    for ax in (
        ah.plot_embeddings_3d(vectors, ah.WORDS, elev=view[0], azim=view[1]),
        ah.plot_context_vector(vectors, weights, ah.WORDS, query_label="journey", elev=view[0], azim=view[1]),
    ):
        names = _name_boxes_on_screen(ax)
        assert len(names) == 6
        overlapping = [(i, j) for i in range(6) for j in range(i + 1, 6) if names[i].overlaps(names[j])]
        assert not overlapping, [(ah.WORDS[i], ah.WORDS[j]) for i, j in overlapping]
        for collection in ax.collections[:6]:  # the six word points, at their projected (screen) positions
            centre = ax.transData.transform(collection.get_offsets()[0])
            radius = 0.5 * float(collection.get_sizes()[0]) ** 0.5 * ax.figure.dpi / 72  # marker size s is in pt²
            marker = Bbox.from_extents(*(centre - radius), *(centre + radius))
            covered = [ah.WORDS[i] for i, name in enumerate(names) if name.overlaps(marker)]
            assert not covered, f"{covered} covers a point's marker"


def test_attention_steps_draws_scores_weights_on_a_fixed_scale_and_the_weighted_sum():
    vectors = ah.toy_embeddings()
    scores = vectors @ vectors[1]
    fig = ah.plot_attention_steps(scores, vectors, ah.WORDS, query_label="journey")
    bars_scores, bars_weights, stacked = fig.axes
    assert [p.get_height() for p in bars_scores.patches] == pytest.approx(scores.tolist())
    weights = torch.softmax(scores, dim=-1)
    assert [p.get_height() for p in bars_weights.patches] == pytest.approx(weights.tolist())
    assert bars_weights.get_ylim()[0] == 0 and bars_weights.get_ylim()[1] >= 1  # a 0-1 scale, not zoomed in
    # the stacked bars of dimension d add up to the context vector's entry d (weights @ vectors)
    context = weights @ vectors
    tops = [
        max(p.get_y() + p.get_height() for p in stacked.patches if round(p.get_x() + p.get_width() / 2) == d)
        for d in range(3)
    ]
    assert tops == pytest.approx(context.tolist(), abs=1e-6)
    assert all(ax.get_title() and ax.get_ylabel() and ax.get_xlabel() for ax in fig.axes)
    with pytest.raises(ValueError, match="vectors must have one row per score"):
        ah.plot_attention_steps(scores, vectors[:5], ah.WORDS[:6], query_label="journey")


def test_query_and_keys_2d_names_every_key_with_its_score():
    keys = torch.tensor([[1.0, 0.5], [-0.5, 1.0], [2.0, 0.1]])
    query = torch.tensor([1.0, 2.0])
    ax = ah.plot_query_and_keys_2d(query, keys, ["a", "b", "c"], query_label="q")
    texts = [t.get_text() for t in ax.texts]
    for word, key in zip("abc", keys, strict=True):
        assert any(f"key of {word!r}: q · k = {torch.dot(query, key):.2f}" in text for text in texts)
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    with pytest.raises(ValueError, match="query must have shape"):
        ah.plot_query_and_keys_2d(torch.ones(3), keys, ["a", "b", "c"], query_label="q")


def test_score_gradients_draws_both_curves_on_log_axes():
    d_k_values = [1, 4, 16]
    ax = ah.plot_score_gradients(d_k_values, [0.3, 0.1, 1e-3], [0.3, 0.3, 0.3])
    assert [list(line.get_xdata()) for line in ax.lines] == [d_k_values, d_k_values]
    assert list(ax.lines[0].get_ydata()) == [0.3, 0.1, 1e-3]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    with pytest.raises(ValueError, match="same non-zero length"):
        ah.plot_score_gradients(d_k_values, [0.3], [0.3, 0.3, 0.3])


def test_heads_side_by_side_share_a_fixed_0_to_1_scale_with_the_words_as_ticks():
    """A nearly even head must look pale: its colours are not stretched to its own largest weight."""
    even = torch.full((6, 6), 1 / 6)
    sharp = torch.eye(6)
    fig = ah.plot_heads_side_by_side(torch.stack((even, sharp)), ah.WORDS, titles=["even", "sharp"], title="two")
    heads = [ax for ax in fig.axes if ax.images]
    heads = [ax for ax in heads if ax.get_title() in ("even", "sharp")]
    assert [ax.get_title() for ax in heads] == ["even", "sharp"]
    for ax in heads:
        assert ax.images[0].get_clim() == (0.0, 1.0)
        assert [t.get_text() for t in ax.get_xticklabels()] == list(ah.WORDS)
        assert len(ax.texts) == 36  # the weights written in the cells
    assert fig.get_suptitle() == "two" and fig.supxlabel and fig.supylabel
    with pytest.raises(ValueError, match="titles"):
        ah.plot_heads_side_by_side(torch.stack((even, sharp)), ah.WORDS, titles=["only one"])
    with pytest.raises(ValueError, match="num_heads"):
        ah.plot_heads_side_by_side(even, ah.WORDS)


def test_dropout_average_draws_the_running_average_and_the_row_sums():
    torch.manual_seed(0)
    weights = torch.softmax(torch.randn(4, 4), dim=-1)
    draws = torch.stack([torch.nn.Dropout(0.5).train()(weights) for _ in range(50)])
    fig = ah.plot_dropout_average(draws, weights, ["a", "b", "c", "d"], query=2, key=0, p=0.5)
    ax_mean, ax_rows = fig.axes
    scaled = ax_mean.lines[0].get_ydata()
    assert len(scaled) == 50 and abs(scaled[-1] - draws[:, 2, 0].mean().item()) < 1e-6  # the running average
    assert abs(ax_mean.lines[1].get_ydata()[-1] - 0.5 * scaled[-1]) < 1e-6  # without the 1 / (1 - p) scaling
    heights = [bar.get_height() for bar in ax_rows.patches]
    assert torch.allclose(torch.tensor(heights[:4]).float(), draws[0].sum(dim=-1))  # one mask's row sums
    assert all(ax.get_title() and ax.get_xlabel() and ax.get_ylabel() for ax in (ax_mean, ax_rows))
    with pytest.raises(ValueError, match="query"):
        ah.plot_dropout_average(draws, weights, ["a", "b", "c", "d"], query=4, key=0, p=0.5)
    with pytest.raises(ValueError, match="draws"):
        ah.plot_dropout_average(draws[:, :3], weights, ["a", "b", "c", "d"], query=0, key=0, p=0.5)


def test_positional_encoding_plot_shows_sines_cosines_and_their_dot_products():
    pe = ah.PositionalEncoding(64, context_length=50).pe
    fig = ah.plot_positional_encoding(pe, num_shown=20)
    sines, cosines, dots = (ax for ax in fig.axes if ax.images)
    assert sines.images[0].get_clim() == (-1.0, 1.0)
    assert torch.allclose(torch.tensor(sines.images[0].get_array()[:, 0]), pe[:20, 0].double())  # the sine of pair 0
    assert torch.allclose(torch.tensor(cosines.images[0].get_array()[:, 0]), pe[:20, 1].double())
    dot_products = torch.tensor(dots.images[0].get_array())
    assert dot_products.shape == (20, 20)
    assert torch.allclose(dot_products, dot_products.T)  # symmetric: it depends on |i - j|
    assert torch.allclose(dot_products.diagonal(3), dot_products[0, 3].expand(17), atol=1e-6)
    assert all(ax.get_title() and ax.get_xlabel() and ax.get_ylabel() for ax in (sines, cosines, dots))
    with pytest.raises(ValueError, match="pe"):
        ah.plot_positional_encoding(pe[:, :1])


def test_dot_product_panels_draw_one_titled_panel_per_vector():
    a = torch.tensor([1.0, 0.5])
    others = {"same": torch.tensor([2.0, 1.0]), "opposite": torch.tensor([-2.0, -1.0])}
    fig = ah.plot_dot_product_panels(a, others)
    assert len(fig.axes) == 2
    for ax, (name, b) in zip(fig.axes, others.items(), strict=True):
        assert ax.get_title().startswith(name) and f"{torch.dot(a, b).item():+.2f}" in ax.get_title()
        assert ax.get_xlabel() and ax.get_ylabel()
    with pytest.raises(ValueError, match="others must be a non-empty dict"):
        ah.plot_dot_product_panels(a, {})


def test_temperatures_draws_softmax_of_scores_over_t_on_a_0_to_1_scale():
    scores = torch.tensor([0.5, 2.0, -1.0, 1.0])
    temperatures = [0.25, 1.0, 4.0]
    fig = ah.plot_temperatures(scores, ["a", "b", "c", "d"], temperatures, query_label="b")
    assert len(fig.axes) == 3
    largest = []
    for ax, t in zip(fig.axes, temperatures, strict=True):
        heights = [p.get_height() for p in ax.patches]
        assert heights == pytest.approx(torch.softmax(scores / t, dim=-1).tolist())
        assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] >= 1
        assert ax.get_title() == f"T = {t:g}" and ax.get_ylabel() and ax.get_xlabel()
        largest.append(max(heights))
    assert largest == sorted(largest, reverse=True)  # a higher temperature gives flatter weights
    with pytest.raises(ValueError, match="temperatures must be"):
        ah.plot_temperatures(scores, ["a", "b", "c", "d"], [0.0], query_label="b")
