"""Lesson 12's ablations: decoding with the cross-attention weights replaced (attention_helpers.dates), and the
input-format classifier they group examples by."""

import datetime

import pytest
import torch

import attention_helpers as ah
from attention_helpers import dates


@pytest.mark.parametrize("style", range(len(dates.FORMATS)))
def test_format_of_recovers_the_style_that_wrote_each_date(style):
    for day in (datetime.date(1900, 1, 1), datetime.date(2026, 11, 24), datetime.date(2099, 5, 9)):
        assert dates.format_of(dates.format_date(day, style)) == style


def test_format_of_names_the_argument_on_bad_input():
    with pytest.raises(ValueError, match="text must be a date"):
        dates.format_of("yesterday")
    with pytest.raises(TypeError, match="text must be a str"):
        dates.format_of(2026)


def small_model(norm_first=False, seed=0):
    torch.manual_seed(seed)
    model = ah.Seq2SeqTransformer(
        ah.Seq2SeqConfig(
            src_vocab_size=20,
            tgt_vocab_size=15,
            d_model=16,
            num_heads=4,
            num_encoder_layers=2,
            num_decoder_layers=3,
            ffn_hidden=24,
            norm_first=norm_first,
            context_length=16,
        )
    )
    with torch.no_grad():  # sharper than at initialisation, so a wrong weighting shows in the logits
        for p in model.parameters():
            p.mul_(3.0)
    return model.eval()


def inputs(seed=1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(1, 20, (3, 9), generator=g)
    src[1, 6:] = 0  # padding, which the model's own weights leave out
    return src, torch.randint(0, 15, (3, 5), generator=g)


@pytest.mark.parametrize("norm_first", [False, True])
def test_the_models_own_weights_give_the_models_own_logits(norm_first):
    model = small_model(norm_first)
    src, tgt = inputs()
    with torch.no_grad():
        logits, weights = model(src, tgt, return_weights=True)  # weights (3 layers, 3, 4 heads, 5, 9)
    replayed = dates.logits_with_cross_weights(model, src, tgt, weights)
    torch.testing.assert_close(replayed, logits, atol=1e-5, rtol=1e-5)


def test_other_weights_change_the_logits_and_the_model_keeps_its_mode():
    model = small_model().train()
    src, tgt = inputs()
    with torch.no_grad():
        logits, weights = model.eval()(src, tgt, return_weights=True)
    model.train()
    uniform = torch.full_like(weights, 1 / src.shape[1])
    changed = dates.logits_with_cross_weights(model, src, tgt, uniform)
    assert (changed - logits).abs().max() > 1e-2  # the weights are used, not recomputed
    assert model.training  # the function runs in eval mode and restores the mode


def test_greedy_decoding_with_its_own_weights_writes_what_greedy_decode_writes():
    model = small_model(seed=3)
    src, _ = inputs(seed=4)
    ids, weights = ah.greedy_decode(model, src, 1, 6, return_weights=True)  # weights (3, 3, 4, 6, 9)
    assert torch.equal(dates.greedy_decode_with_cross_weights(model, src, 1, weights), ids)
    # position i must use row i of the weights: shifting the rows by one changes what is written
    shifted = torch.cat([weights[:, :, :, 1:], weights[:, :, :, :1]], dim=3)
    assert not torch.equal(dates.greedy_decode_with_cross_weights(model, src, 1, shifted), ids)


def test_cross_weights_of_the_wrong_shape_are_refused_with_the_expected_shape():
    model = small_model()
    src, tgt = inputs()
    with pytest.raises(ValueError, match=r"cross_weights must have shape .*\(3, 3, 4, 5, 9\)"):
        dates.logits_with_cross_weights(model, src, tgt, torch.ones(3, 3, 4, 5, 8))
    with pytest.raises(ValueError, match="cross_weights must have shape"):
        dates.greedy_decode_with_cross_weights(model, src, 1, torch.ones(3, 4, 5, 9))
