import subprocess
import sys

import matplotlib.pyplot as plt
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attention_helpers as ah
from attention_helpers.training import TokenClassifier, evaluate, make_task, train

SMALL = dict(vocab_size=10, d_model=32, num_heads=2, num_layers=1, ffn_hidden=48)  # d_model != ffn_hidden


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def small_data(seed=0, task="reverse", num_tokens=6):
    return make_task(task, num_train=2000, num_heldout=300, num_tokens=num_tokens, vocab_size=10, seed=seed)


def small_model(seed=0, **options):
    torch.manual_seed(seed)
    return TokenClassifier(**{**SMALL, **options})


# The data


def test_reverse_and_sort_targets_match_python():
    data = small_data()
    for task, python_rule in (("reverse", lambda row: row[::-1]), ("sort", sorted)):
        data = small_data(task=task)
        for inputs, targets in ((data.train_inputs, data.train_targets), (data.heldout_inputs, data.heldout_targets)):
            assert inputs.dtype == targets.dtype == torch.int64
            assert [python_rule(row) for row in inputs.tolist()] == targets.tolist()


def test_sequences_are_distinct_and_heldout_never_seen_in_training():
    data = small_data()
    train_rows = set(map(tuple, data.train_inputs.tolist()))
    heldout_rows = set(map(tuple, data.heldout_inputs.tolist()))
    assert len(train_rows) == 2000 and len(heldout_rows) == 300
    assert not train_rows & heldout_rows
    assert data.train_inputs.shape == (2000, 6) and data.heldout_inputs.shape == (300, 6)
    assert data.num_tokens == 6 and int(data.train_inputs.min()) == 0 and int(data.train_inputs.max()) == 9


def test_distinct_even_when_collisions_are_likely():
    # 2 digits, 8 positions: 256 possible sequences, 120 drawn: random draws repeat often
    data = make_task("reverse", num_train=100, num_heldout=20, num_tokens=8, vocab_size=2, seed=3)
    rows = data.train_inputs.tolist() + data.heldout_inputs.tolist()
    assert len(set(map(tuple, rows))) == 120


def test_data_is_deterministic_for_a_seed():
    first, second, other = small_data(seed=5), small_data(seed=5), small_data(seed=6)
    assert torch.equal(first.train_inputs, second.train_inputs)
    assert torch.equal(first.heldout_inputs, second.heldout_inputs)
    assert not torch.equal(first.train_inputs, other.train_inputs)


def test_a_task_can_be_a_function():
    def rotate(inputs):
        return torch.roll(inputs, 1, dims=-1)

    data = make_task(rotate, num_train=50, num_heldout=10, num_tokens=5, seed=0)
    assert data.task == "rotate"
    assert [row[-1:] + row[:-1] for row in data.train_inputs.tolist()] == data.train_targets.tolist()


# The model


def test_model_shapes_and_weights_from_one_pass():
    model = small_model(num_layers=2).eval()
    tokens = torch.randint(0, 10, (3, 7))
    with torch.no_grad():
        logits, weights = model(tokens, return_weights=True)
        torch.testing.assert_close(model(tokens), logits)
    assert logits.shape == (3, 7, 10)
    assert weights.shape == (2, 3, 2, 7, 7)  # (num_layers, batch, num_heads, num_tokens, num_tokens)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 2, 7))


def test_model_equals_the_same_weights_in_torch_modules():
    """Embedding + positions + torch's nn.TransformerEncoder (our weights copied in) + head."""
    for norm_first in (False, True):
        model = small_model(num_layers=2, norm_first=norm_first).eval()
        torch_encoder = ah.to_torch(model.encoder)
        tokens = torch.randint(0, 10, (4, 9))
        with torch.no_grad():
            x = model.embedding(tokens) + model.positional_encoding.pe[:9]
            expected = model.lm_head(torch_encoder(x))
            torch.testing.assert_close(model(tokens), expected, atol=1e-5, rtol=1e-5)


def test_without_positions_the_model_is_permutation_equivariant():
    tokens = torch.randint(0, 10, (2, 8))
    perm = torch.tensor([3, 0, 7, 1, 6, 2, 5, 4])
    blind, seeing = small_model(positional=False).eval(), small_model().eval()
    with torch.no_grad():
        torch.testing.assert_close(blind(tokens[:, perm]), blind(tokens)[:, perm])
        assert not torch.allclose(seeing(tokens[:, perm]), seeing(tokens)[:, perm], atol=1e-3)


# Training and evaluation


def test_training_learns_to_reverse_far_above_chance():
    data = small_data()
    model = small_model()
    before = evaluate(model, data.heldout_inputs, data.heldout_targets)
    history = train(model, data, num_steps=150, batch_size=64, lr=3e-3, seed=0, eval_every=50)
    after = evaluate(model, data.heldout_inputs, data.heldout_targets)
    assert before < 0.3  # chance is 1 in 10
    assert after > 0.95
    assert history.eval_steps == [50, 100, 150] and history.eval_accuracy[-1] == after
    assert len(history.loss) == len(history.accuracy) == 150
    assert sum(history.loss[-10:]) < 0.2 * sum(history.loss[:10])


def test_training_is_deterministic_for_a_seed_even_with_dropout():
    data = small_data()
    histories, weights = [], []
    for run in range(2):
        model = small_model(dropout=0.2)  # same weights both times
        if run == 1:
            torch.rand(7)  # the global generator now differs: train must not depend on it
        histories.append(train(model, data, num_steps=20, seed=3, eval_every=10))
        weights.append(model.lm_head.weight.detach().clone())
    assert histories[0] == histories[1]
    assert torch.equal(weights[0], weights[1])
    other = train(small_model(dropout=0.2), data, num_steps=20, seed=4)
    assert other.loss != histories[0].loss


def test_training_leaves_the_global_generator_alone():
    data = small_data()
    model = small_model(dropout=0.1)
    torch.manual_seed(11)
    expected = torch.rand(3)
    torch.manual_seed(11)
    train(model, data, num_steps=3, seed=0)
    torch.testing.assert_close(torch.rand(3), expected)


def test_train_matches_the_loop_in_its_docstring():
    data, seed, lr, batch_size = small_data(), 2, 1e-3, 16
    model = small_model(dropout=0.1)
    by_hand = small_model(dropout=0.1)
    history = train(model, data, num_steps=15, batch_size=batch_size, lr=lr, seed=seed)

    losses = []
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(by_hand.parameters(), lr=lr)
    by_hand.train()
    torch.manual_seed(seed)  # train() seeds dropout's generator the same way
    for _ in range(15):
        batch = torch.randint(0, len(data.train_inputs), (batch_size,), generator=generator)
        logits = by_hand(data.train_inputs[batch])
        loss = F.cross_entropy(logits.flatten(0, 1), data.train_targets[batch].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert history.loss == losses
    for ours, theirs in zip(model.parameters(), by_hand.parameters(), strict=True):
        assert torch.equal(ours, theirs)


def test_evaluate_counts_correct_positions_and_restores_the_mode():
    model = small_model()
    inputs = torch.randint(0, 10, (10, 6))
    with torch.no_grad():
        predicted = model.eval()(inputs).argmax(-1)  # (10, 6)
    model.train()
    assert evaluate(model, inputs, predicted) == 1.0
    assert evaluate(model, inputs, (predicted + 1) % 10) == 0.0
    half = predicted.clone()
    half[:5] = (half[:5] + 1) % 10
    assert evaluate(model, inputs, half, batch_size=3) == 0.5
    assert model.training


def test_log_prints_deterministic_progress_lines():
    lines = []
    train(small_model(), small_data(), num_steps=4, log_every=2, log=lines.append)
    assert len(lines) == 2 and lines[0].startswith("step    2: loss ") and "batch accuracy" in lines[1]


# Bad arguments


def test_bad_data_arguments_get_clear_errors():
    with pytest.raises(ValueError, match="task must be one of"):
        make_task("shuffle")
    with pytest.raises(TypeError, match="task must be one of"):
        make_task(3)
    with pytest.raises(TypeError, match="num_train must be an int"):
        make_task(num_train=10.0)
    with pytest.raises(ValueError, match="only 100 different sequences"):
        make_task(num_train=60, num_heldout=10, num_tokens=2)
    with pytest.raises(ValueError, match="shape"):
        make_task(lambda x: x[:, :2], num_train=10, num_heldout=5)
    with pytest.raises(ValueError, match="from 0 to 9"):
        make_task(lambda x: x + 1, num_train=10, num_heldout=5)
    with pytest.raises(TypeError, match="returned must have dtype torch.int64 or torch.int32 .*got torch.float32"):
        make_task(lambda x: x.float(), num_train=10, num_heldout=5)


def test_bad_model_inputs_get_clear_errors():
    model = small_model()
    with pytest.raises(
        TypeError, match=r"tokens must have dtype torch.int64 or torch.int32 .*got torch.float32 with shape \(2, 3\)"
    ):
        model(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"must have 2 dimensions \(batch, num_tokens\), got 1 with shape \(3,\)"):
        model(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"token ids from 0 to 9 \(vocab_size=10\), got values from 0 to 12"):
        model(torch.tensor([[0, 12]]))
    with pytest.raises(ValueError, match="context_length=64"):
        model(torch.zeros(1, 65, dtype=torch.long))
    with pytest.raises(ValueError, match="d_model=30 must be divisible by num_heads=4"):
        TokenClassifier(10, 30, 4, 1, 16)
    with pytest.raises(TypeError, match=r"d_model must be an int, got str \('32'\)"):
        TokenClassifier(10, "32", 4, 1, 16)
    with pytest.raises(ValueError, match="num_layers must be at least 1, got 0"):
        TokenClassifier(10, 32, 4, 0, 16)


def test_bad_training_arguments_get_clear_errors():
    model, data = small_model(), small_data()
    with pytest.raises(TypeError, match="data must be a TaskData"):
        train(model, (data.train_inputs, data.train_targets))
    with pytest.raises(TypeError, match="model must be a TokenClassifier"):
        train(nn.Linear(2, 2), data)
    with pytest.raises(ValueError, match="data has vocab_size=10 but the model was built with vocab_size=12"):
        train(small_model(vocab_size=12), data)
    with pytest.raises(ValueError, match="lr must be positive and finite, got -0.1"):  # as every positive real
        train(model, data, lr=-0.1)
    with pytest.raises(TypeError, match="lr must be a number, positive and finite, got str"):
        train(model, data, lr="0.1")
    with pytest.raises(TypeError, match="num_steps must be an int"):
        train(model, data, num_steps=1.5)
    with pytest.raises(ValueError, match="batch_size must be at least 1, got 0"):
        train(model, data, batch_size=0)
    with pytest.raises(TypeError, match="seed must be an int"):
        train(model, data, seed="0")
    with pytest.raises(ValueError, match="eval_every must be at least 0, got -1"):
        train(model, data, eval_every=-1)
    with pytest.raises(ValueError, match=r"same shape .* got \(300, 6\) and \(300, 5\)"):
        evaluate(model, data.heldout_inputs, data.heldout_targets[:, :5])


# Figures


def test_history_figure_has_loss_and_accuracy_panels():
    history = train(small_model(), small_data(), num_steps=6, eval_every=3)
    fig = ah.plot_history(history, title="reverse")
    loss_ax, accuracy_ax = fig.axes
    assert loss_ax.get_xlabel() == accuracy_ax.get_xlabel() == "training step"
    assert "loss" in loss_ax.get_ylabel() and "accuracy" in accuracy_ax.get_ylabel()
    assert loss_ax.get_title() and accuracy_ax.get_title() and fig.get_suptitle() == "reverse"
    assert list(loss_ax.lines[0].get_ydata()) == history.loss
    assert list(accuracy_ax.lines[1].get_xdata()) == [3, 6]
    assert [t.get_text() for t in accuracy_ax.get_legend().get_texts()] == ["training batch", "held-out set"]
    with pytest.raises(TypeError, match="history must be a History"):
        ah.plot_history({"loss": [1.0]})


def test_attention_grid_has_one_labelled_heatmap_per_layer_and_head():
    weights = torch.softmax(torch.randn(3, 2, 5, 5), dim=-1)  # (num_layers, num_heads, num_tokens, num_tokens)
    labels = ["3", "1", "4", "1", "5"]
    fig = ah.plot_attention_layers(weights, labels, title="before training")
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in heatmaps] == [f"layer {la}, head {h}" for la in range(3) for h in range(2)]
    for ax in heatmaps:
        assert [t.get_text() for t in ax.get_xticklabels()] == labels
        assert [t.get_text() for t in ax.get_yticklabels()] == labels
        assert ax.get_xlabel() and ax.get_ylabel()
        assert ax.images[0].get_clim() == (0.0, 1.0)
    (colorbar_ax,) = [ax for ax in fig.axes if not ax.images]
    assert colorbar_ax.get_ylabel() == "attention weight"
    assert fig.get_suptitle() == "before training"
    with pytest.raises(ValueError, match=r"\(num_layers, num_heads, num_tokens, num_tokens\), got \(2, 5, 5\)"):
        ah.plot_attention_layers(weights[0], labels)
    with pytest.raises(ValueError, match="4 labels but there are 5 query rows"):
        ah.plot_attention_layers(weights, labels[:4])


def test_training_module_does_not_import_matplotlib():
    code = "import sys, attention_helpers.training; assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_warmup_cosine_lr_rises_linearly_then_falls_to_its_floor_at_the_last_step():
    peak, num_steps, warmup = 3e-3, 201, 20
    lrs = [ah.warmup_cosine_lr(step, num_steps, peak, warmup) for step in range(num_steps)]
    assert lrs[:warmup] == pytest.approx([peak * (i + 1) / warmup for i in range(warmup)])  # linear warmup
    assert lrs[warmup] == pytest.approx(peak)  # the cosine starts at the peak
    assert all(a >= b for a, b in zip(lrs[warmup:], lrs[warmup + 1 :], strict=False))  # then only falls
    assert lrs[-1] == pytest.approx(0.1 * peak, rel=1e-12), "the floor is reached at the last step, not one later"
    midpoint = warmup + (num_steps - 1 - warmup) // 2  # half-way through the cosine: half-way to the floor
    assert lrs[midpoint] == pytest.approx(peak * (0.1 + 0.9 * 0.5), rel=1e-9)


@pytest.mark.parametrize(
    ("args", "error", "shown"),
    [
        ((0, 2.0, 0.1, 5), TypeError, "num_steps"),
        ((0, 10, 0.1, 0), ValueError, "warmup_steps"),
        ((-1, 10, 0.1, 2), ValueError, "step must be from 0 to 9 (num_steps=10), got -1"),
        ((10, 10, 0.1, 2), ValueError, "step must be from 0 to 9 (num_steps=10), got 10"),  # past the end
        ((1.5, 10, 0.1, 2), TypeError, "step must be an int"),
        ((3, 10, -0.1, 2), ValueError, "peak_lr must be positive and finite, got -0.1"),
        ((3, 10, float("nan"), 2), ValueError, "peak_lr must be positive and finite, got nan"),
        ((3, 10, "0.1", 2), TypeError, "peak_lr must be a number, positive and finite, got str"),
        ((3, 10, 0.1, 2, -0.5), ValueError, "final_fraction must be at least 0.0"),
        ((3, 10, 0.1, 2, 1.5), ValueError, "final_fraction must be from 0 to 1"),
    ],
)
def test_warmup_cosine_lr_names_a_bad_argument(args, error, shown):
    with pytest.raises(error) as info:
        ah.warmup_cosine_lr(*args)
    assert type(info.value) is error and shown in str(info.value), info.value


def test_warmup_cosine_lr_never_rises_again_after_the_warmup():
    lrs = [ah.warmup_cosine_lr(step, 50, 1.0, 5) for step in range(50)]
    assert max(lrs[5:]) == lrs[5] and min(lrs) == pytest.approx(0.1), "the last steps must not climb back up"


def test_token_accuracy_counts_matching_positions():
    logits = torch.zeros(2, 3, 4)
    logits[0, :, 1] = 1.0  # row 0 predicts 1 everywhere, row 1 predicts 0 everywhere
    targets = torch.tensor([[1, 1, 2], [0, 3, 0]])
    assert ah.token_accuracy(logits, targets) == pytest.approx(4 / 6)


@pytest.mark.parametrize(
    ("logits", "targets", "error", "shown"),
    [
        (torch.zeros(2, 3, 4), torch.zeros(3, 2, dtype=torch.long), ValueError, "(2, 3)"),  # transposed targets
        (torch.zeros(2, 3, 4), torch.zeros(2, 1, dtype=torch.long), ValueError, "(2, 1)"),  # would broadcast
        (torch.zeros(2, 3, 4), torch.zeros(2, 3), TypeError, "torch.float32"),
        (torch.zeros(2, 3, 4), torch.full((2, 3), 4), ValueError, "vocab_size=4"),
        (torch.zeros(6, 4), torch.zeros(6, dtype=torch.long), ValueError, "logits"),
    ],
)
def test_token_accuracy_names_mismatched_inputs(logits, targets, error, shown):
    with pytest.raises(error) as info:
        ah.token_accuracy(logits, targets)
    assert type(info.value) is error and shown in str(info.value), info.value
