"""Properties that a single planted bug breaks and that no other test watched: dropout's 1 / (1 - p), a LayerNorm
eps carried through interop, the source padding mask of the encoder-decoder, and evaluation in eval mode.

Each test is written against the public API, so that it holds whatever the modules look like inside.
"""

import pytest
import torch
from conftest import small_seq2seq_config
from torch import nn

import attention_helpers as ah
from attention_helpers.training import evaluate

# --- dropout scales the survivors by 1 / (1 - p) ----------------------------------------------------------------


def test_feed_forward_dropout_keeps_the_expected_value():
    """linear2 is linear, so the mean of linear2(dropout(h)) over many masks is linear2(h): a dropout that does
    not divide the survivors by 1 - p shrinks it by the factor 1 - p."""
    torch.manual_seed(0)
    ffn = ah.FeedForward(5, 7, dropout=0.5)
    x = torch.randn(1, 3, 5)
    with torch.no_grad():
        expected = ffn.eval()(x)
        ffn.train()
        mean = torch.stack([ffn(x) for _ in range(4000)]).mean(0)
    scale = expected.abs().max()
    assert (mean - expected).abs().max() < 0.05 * scale, "training-mode dropout must keep each entry's expected value"


@pytest.mark.parametrize("p", [0.25, 0.6])
def test_the_dropout_sites_keep_zero_or_x_over_one_minus_p(p):
    """Every dropout site of a feed-forward network in training mode: an entry is 0 or x / (1 - p)."""
    from attention_helpers.encoder import dropout_if_training

    dropout = nn.Dropout(p).train()
    x = torch.rand(200, 50) + 0.5  # no entry near 0
    out = dropout_if_training(dropout, x)
    kept = out != 0
    torch.testing.assert_close(out[kept], x[kept] / (1 - p), msg="survivors must be divided by 1 - p")
    assert abs((~kept).float().mean().item() - p) < 0.03, "a fraction p of the entries must be dropped"


# --- interop keeps a LayerNorm's eps ------------------------------------------------------------------------------


def _near_constant(*shape):
    """Tokens whose variance (about 1e-4) is smaller than a large eps, so that eps changes the output."""
    return 5 + 0.01 * torch.randn(*shape)


@pytest.mark.parametrize("eps", [1e-2, 0.5])
def test_interop_keeps_a_non_default_layer_norm_eps(eps):
    torch.manual_seed(0)
    torch_norm = nn.LayerNorm(6, eps=eps)
    x = _near_constant(2, 3, 6)
    ours = ah.LayerNorm.from_torch(torch_norm)
    torch.testing.assert_close(ours(x), torch_norm(x), msg=f"from_torch(nn.LayerNorm(eps={eps})) lost its eps")
    back = ah.to_torch(ours)
    torch.testing.assert_close(back(x), torch_norm(x), msg=f"to_torch(LayerNorm(eps={eps})) lost its eps")


def test_interop_keeps_the_eps_of_a_whole_encoder_layer():
    torch.manual_seed(0)
    torch_layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, layer_norm_eps=0.3).eval()
    x = _near_constant(2, 4, 8)
    ours = ah.from_torch(torch_layer).eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(x), torch_layer(x), msg="from_torch(encoder layer) lost layer_norm_eps")
        torch.testing.assert_close(ah.to_torch(ours).eval()(x), torch_layer(x), msg="to_torch lost layer_norm_eps")


# --- the encoder-decoder hides the source's padding ----------------------------------------------------------------


def _seq2seq():
    torch.manual_seed(0)
    return ah.Seq2SeqTransformer(small_seq2seq_config(context_length=16, pad_id=0)).eval()


def test_seq2seq_ignores_the_padded_source_tokens_and_reads_the_others():
    """With the padding mask inverted, the output would depend on the padding only: changing what sits under
    the padding would change it, and changing a real source token would not."""
    model = _seq2seq()
    src = torch.tensor([[3, 4, 5, 6, 7], [8, 9, 10, 0, 0]])
    tgt = torch.tensor([[1, 2, 3], [1, 4, 5]])
    with torch.no_grad():
        logits = model(src, tgt)
        memory, padding = model.encode(src)
        assert torch.equal(padding, src == 0), "encode must return True at the padding"
        # The padded positions of row 1 hold other values of memory: the decoder must not read them.
        hidden = model.transformer.decode(model.embed_target(tgt), memory, None, padding)
        memory_changed = memory.clone()
        memory_changed[1, 3:] = 100 * torch.randn(2, memory.shape[-1])
        hidden_changed = model.transformer.decode(model.embed_target(tgt), memory_changed, None, padding)
        torch.testing.assert_close(hidden_changed, hidden, msg="the decoder read the padded memory positions")
        # A real source token changes the output of its own row only.
        other = src.clone()
        other[1, 0] = 11
        changed = model(other, tgt)
    torch.testing.assert_close(changed[0], logits[0])
    assert not torch.allclose(changed[1], logits[1]), "the output ignores the source's real tokens"


def test_seq2seq_encoder_output_at_real_tokens_ignores_the_padding_length():
    """Padding a source further must leave the encoder's output at its real tokens unchanged."""
    model = _seq2seq()
    with torch.no_grad():
        short, _ = model.encode(torch.tensor([[3, 4, 5, 0]]))
        long, _ = model.encode(torch.tensor([[3, 4, 5, 0, 0, 0, 0]]))
    torch.testing.assert_close(long[:, :3], short[:, :3], msg="the encoder's self-attention read its padding")


# --- evaluation runs in eval mode and restores the mode, even when it raises ----------------------------------


def _gpt(dropout=0.5):
    torch.manual_seed(0)
    return ah.GPT(ah.GPTConfig(vocab_size=11, context_length=8, d_model=16, num_heads=2, num_layers=2, dropout=dropout))


def _classifier(dropout=0.5):
    torch.manual_seed(0)
    return ah.TokenClassifier(vocab_size=11, d_model=12, num_heads=2, num_layers=1, ffn_hidden=20, dropout=dropout)


def _seq2seq_with_dropout():
    torch.manual_seed(0)
    return ah.Seq2SeqTransformer(small_seq2seq_config(dropout=0.5, context_length=16))


IDS = torch.randint(0, 11, (30,), generator=torch.Generator().manual_seed(1))
EVALUATIONS = {
    "evaluate_loss": (_gpt, lambda model: ah.evaluate_loss(model, IDS, 8)),
    "evaluate": (_classifier, lambda model: evaluate(model, IDS[:24].view(4, 6), IDS[1:25].view(4, 6))),
    "greedy_decode": (_seq2seq_with_dropout, lambda model: ah.greedy_decode(model, IDS[:10].view(2, 5), 1, 4)),
    "greedy_decode without cache": (
        _seq2seq_with_dropout,
        lambda model: ah.greedy_decode(model, IDS[:10].view(2, 5), 1, 4, use_cache=False),
    ),
}


def _same(a, b):
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


@pytest.mark.parametrize("name", list(EVALUATIONS))
def test_evaluation_runs_in_eval_mode_and_restores_training_mode(name):
    """A model in training mode (dropout 0.5) gives the eval-mode result, twice, and is back in training mode."""
    build, measure = EVALUATIONS[name]
    model = build()
    expected = measure(model.eval())
    model.train()
    first, second = measure(model), measure(model)
    assert _same(first, expected) and _same(second, expected), f"{name} measured with dropout on (not in eval mode)"
    assert model.training and all(m.training for m in model.modules()), f"{name} left the model in eval mode"


BAD_EVALUATIONS = {
    "evaluate_loss": (_gpt, lambda model: ah.evaluate_loss(model, IDS + 20, 8)),
    "evaluate": (_classifier, lambda model: evaluate(model, IDS[:24].view(4, 6) + 20, IDS[1:25].view(4, 6))),
    "greedy_decode": (_seq2seq_with_dropout, lambda model: ah.greedy_decode(model, IDS[:10].view(2, 5) + 20, 1, 4)),
    "evaluate, raising inside the model": (  # 6 tokens for a positional table of 4: the model raises after eval()
        lambda: ah.TokenClassifier(11, 12, 2, 1, 20, dropout=0.5, context_length=4),
        lambda model: evaluate(model, IDS[:24].view(4, 6), IDS[1:25].view(4, 6)),
    ),
}


@pytest.mark.parametrize("name", list(BAD_EVALUATIONS))
def test_evaluation_that_raises_restores_training_mode(name):
    build, measure = BAD_EVALUATIONS[name]
    model = build().train()
    with pytest.raises(ValueError):
        measure(model)
    assert model.training and all(m.training for m in model.modules()), f"{name} raised and left eval mode on"


def test_evaluate_loss_restores_training_mode_when_the_model_raises():
    """The error comes from inside the model (a window longer than its context), after eval() was called."""
    model = _gpt().train()
    with pytest.raises(ValueError):
        ah.evaluate_loss(model, IDS, 9)  # context_length is 8
    assert model.training, "evaluate_loss raised and left the model in eval mode"
