"""The encoder-decoder equals PyTorch's nn.Transformer, its explicit cache equals a full recomputation, and
lesson 12's date task keeps its held-out dates out of training."""

import datetime
import warnings
from functools import partial

import pytest
import torch
from conftest import check_calls, small_seq2seq_config
from torch import nn

import attention_helpers as ah
from attention_helpers.dates import FORMATS, format_date, make_dates
from attention_helpers.encoder_decoder import (
    DecoderLayer,
    EncoderDecoder,
    EncoderDecoderConfig,
    Seq2SeqConfig,
    Seq2SeqTransformer,
    greedy_decode,
)

D_MODEL, NUM_HEADS, FFN_HIDDEN = 12, 4, 20  # ffn_hidden != 4 * d_model
SRC_LEN, TGT_LEN = 7, 5


def _inputs(seed=0, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    src = torch.randn(3, SRC_LEN, D_MODEL, generator=generator, dtype=dtype, requires_grad=True)
    tgt = torch.randn(3, TGT_LEN, D_MODEL, generator=generator, dtype=dtype, requires_grad=True)
    src_padding = torch.zeros(3, SRC_LEN, dtype=torch.bool)
    src_padding[1, 4:] = True  # padding on both sides, in different sequences
    src_padding[2, 6:] = True
    tgt_padding = torch.zeros(3, TGT_LEN, dtype=torch.bool)
    tgt_padding[0, 3:] = True
    return src, tgt, src_padding, tgt_padding


def _torch_forward(transformer, src, tgt, src_padding, tgt_padding):
    return transformer(
        src,
        tgt,
        tgt_mask=ah.causal_mask(tgt.shape[1]),
        src_key_padding_mask=src_padding,
        tgt_key_padding_mask=tgt_padding,
        memory_key_padding_mask=src_padding,
    )


def _model(norm_first, seed=0):
    torch.manual_seed(seed)
    return EncoderDecoder(
        EncoderDecoderConfig(
            d_model=D_MODEL,
            num_heads=NUM_HEADS,
            num_encoder_layers=2,
            num_decoder_layers=3,
            ffn_hidden=FFN_HIDDEN,
            dropout=0.0,
            norm_first=norm_first,
        )
    ).double()


@pytest.mark.parametrize("norm_first", [False, True])
def test_to_torch_gives_an_equal_nn_transformer_outputs_and_gradients(norm_first):
    model = _model(norm_first)
    transformer = ah.to_torch(model)
    assert isinstance(transformer, nn.Transformer) and transformer.batch_first
    assert transformer.encoder.norm is not None and transformer.decoder.norm is not None
    src, tgt, src_padding, tgt_padding = _inputs()
    ours = model(src, tgt, src_padding, tgt_padding)
    theirs = _torch_forward(transformer, src, tgt, src_padding, tgt_padding)
    assert ours.shape == (3, TGT_LEN, D_MODEL)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)

    weights = torch.randn(ours.shape, generator=torch.Generator().manual_seed(1), dtype=ours.dtype)
    ours_grads = torch.autograd.grad((ours * weights).sum(), [src, tgt, *model.parameters()])
    theirs_grads = torch.autograd.grad((theirs * weights).sum(), [src, tgt, *transformer.parameters()])
    torch.testing.assert_close(ours_grads[:2], theirs_grads[:2], rtol=0, atol=1e-12)  # src and tgt
    ours_named = dict(zip([n for n, _ in model.named_parameters()], ours_grads[2:], strict=True))
    theirs_named = dict(zip([n for n, _ in transformer.named_parameters()], theirs_grads[2:], strict=True))
    for layer in range(3):
        ours_qkv = torch.cat(
            [ours_named[f"decoder_layers.{layer}.cross_attention.{w}.weight"] for w in ["W_query", "W_key", "W_value"]]
        )
        torch.testing.assert_close(ours_qkv, theirs_named[f"decoder.layers.{layer}.multihead_attn.in_proj_weight"])
        torch.testing.assert_close(
            ours_named[f"decoder_layers.{layer}.ffn.linear1.weight"],
            theirs_named[f"decoder.layers.{layer}.linear1.weight"],
        )
    torch.testing.assert_close(ours_named["final_norm.gamma"], theirs_named["decoder.norm.weight"])
    torch.testing.assert_close(ours_named["encoder.final_norm.gamma"], theirs_named["encoder.norm.weight"])


@pytest.mark.parametrize("norm_first", [False, True])
def test_from_torch_copies_an_nn_transformer(norm_first):
    torch.manual_seed(3)
    with warnings.catch_warnings():  # nn.Transformer warns that a pre-LN encoder cannot use nested tensors
        warnings.simplefilter("ignore", UserWarning)
        transformer = nn.Transformer(
            D_MODEL, NUM_HEADS, 2, 2, dim_feedforward=FFN_HIDDEN, dropout=0.0, batch_first=True, norm_first=norm_first
        ).double()
    model = EncoderDecoder.from_torch(transformer)
    assert model.decoder_layers[0].norm_first is norm_first
    src, tgt, src_padding, tgt_padding = _inputs(seed=4)
    torch.testing.assert_close(
        model(src, tgt, src_padding, tgt_padding),
        _torch_forward(transformer, src, tgt, src_padding, tgt_padding),
        rtol=0,
        atol=1e-12,
    )


def test_float32_parity_and_gelu():
    torch.manual_seed(5)
    model = EncoderDecoder(
        EncoderDecoderConfig(
            d_model=16, num_heads=4, num_encoder_layers=1, num_decoder_layers=2, ffn_hidden=24, activation="gelu"
        )
    )
    generator = torch.Generator().manual_seed(6)
    src, tgt = torch.randn(3, SRC_LEN, 16, generator=generator), torch.randn(3, TGT_LEN, 16, generator=generator)
    _, _, src_padding, tgt_padding = _inputs()
    with torch.no_grad():
        ours = model(src, tgt, src_padding, tgt_padding)
        theirs = _torch_forward(ah.to_torch(model), src, tgt, src_padding, tgt_padding)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)


def test_decoder_is_causal_and_cross_attention_skips_source_padding():
    model = _model(False)
    src, tgt, src_padding, _ = _inputs()
    with torch.no_grad():
        out = model(src, tgt, src_padding)
        changed_tgt = tgt.clone()
        changed_tgt[:, 3:] += 1.0
        torch.testing.assert_close(model(src, changed_tgt, src_padding)[:, :3], out[:, :3], rtol=0, atol=1e-12)
        changed_src = src.clone()
        changed_src[src_padding] += 5.0  # only padded source positions change
        torch.testing.assert_close(model(changed_src, tgt, src_padding), out, rtol=0, atol=1e-12)
        _, weights = model(src, tgt, src_padding, return_weights=True)
    assert weights.shape == (3, 3, NUM_HEADS, TGT_LEN, SRC_LEN)  # (layers, batch, heads, tgt_len, src_len)
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1], dtype=weights.dtype))
    assert (weights[:, 1, ..., 4:] == 0).all()


@pytest.mark.parametrize("chunks", [(1, 1, 1, 1, 1), (3, 2), (5,)])
def test_decode_with_the_cache_equals_the_full_decoder(chunks):
    model = _model(True)
    src, tgt, src_padding, _ = _inputs()
    with torch.no_grad():
        memory = model.encode(src, src_padding)
        full, full_weights = model.decode(tgt, memory, None, src_padding, return_weights=True)
        cache, outputs, weights, start = model.new_cache(batch=3), [], [], 0
        for size in chunks:
            out, w = model.decode(tgt[:, start : start + size], memory, None, src_padding, True, cache=cache)
            start += size
            assert cache.num_tokens == start
            outputs.append(out)
            weights.append(w)
    assert type(cache) is type(
        ah.GPT(
            ah.GPTConfig(vocab_size=5, context_length=4, d_model=12, num_heads=3, num_layers=1, dropout=0.0)
        ).new_cache(1)
    )  # one cache class for every decoder
    assert cache.keys[0][:, :, :start].shape == (3, NUM_HEADS, TGT_LEN, D_MODEL // NUM_HEADS)
    assert cache.memory_keys[0].shape == (3, NUM_HEADS, SRC_LEN, D_MODEL // NUM_HEADS)
    torch.testing.assert_close(torch.cat(outputs, 1), full, rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.cat(weights, 3), full_weights, rtol=0, atol=1e-12)


def _trained_free_seq2seq():
    torch.manual_seed(0)
    return Seq2SeqTransformer(
        Seq2SeqConfig(
            src_vocab_size=20,
            tgt_vocab_size=15,
            d_model=16,
            num_heads=4,
            num_encoder_layers=2,
            num_decoder_layers=2,
            ffn_hidden=24,
            context_length=16,
        )
    )


def test_greedy_decoding_with_and_without_the_cache_gives_the_same_tokens():
    model = _trained_free_seq2seq()
    src = torch.randint(2, 20, (6, 9), generator=torch.Generator().manual_seed(1))
    src[2, 6:] = 0  # padding
    cached, cached_weights = greedy_decode(model, src, 1, 12, use_cache=True, return_weights=True)
    uncached, uncached_weights = greedy_decode(model, src, 1, 12, use_cache=False, return_weights=True)
    assert cached.shape == (6, 12)
    assert torch.equal(cached, uncached)
    torch.testing.assert_close(cached_weights, uncached_weights, rtol=0, atol=1e-5)
    # the same as running the model on its own output at once
    with torch.no_grad():
        logits = model(src, torch.cat([torch.ones(6, 1, dtype=torch.long), cached[:, :-1]], 1))
    assert torch.equal(logits.argmax(-1), cached)
    assert model.training  # restored


def test_seq2seq_forward_shapes_and_weights():
    model = _trained_free_seq2seq()
    src = torch.randint(1, 20, (2, 9))
    tgt = torch.randint(0, 15, (2, 4))
    logits, weights = model(src, tgt, return_weights=True)
    assert logits.shape == (2, 4, 15) and weights.shape == (2, 2, 4, 4, 9)


def test_date_task_is_deterministic_and_keeps_heldout_dates_out_of_training():
    data = make_dates(3000, 500, seed=5)
    again = make_dates(3000, 500, seed=5)
    assert data.train_texts == again.train_texts and data.heldout_texts == again.heldout_texts
    assert torch.equal(data.train_src, again.train_src) and torch.equal(data.heldout_tgt, again.heldout_tgt)
    assert make_dates(3000, 500, seed=6).train_texts != data.train_texts
    assert not set(data.heldout_targets) & set(data.train_targets)  # no held-out date in training, in any format
    assert len(set(data.train_targets)) == 3000
    assert data.train_tgt.shape == (3000, 11) and (data.train_tgt[:, 0] == data.tokenizer.bos_id).all()
    for text, target, src, tgt in zip(
        data.heldout_texts[:50], data.heldout_targets[:50], data.heldout_src, data.heldout_tgt, strict=False
    ):
        assert data.tokenizer.decode(src) == text and data.tokenizer.decode(tgt[1:]) == target
        date = datetime.date.fromisoformat(target)
        assert text in {format_date(date, style) for style in range(len(FORMATS))}
    assert {format_date(datetime.date(2026, 11, 24), style) for style in range(4)} == {
        "24 November 2026",
        "November 24, 2026",
        "Tuesday 24 Nov 2026",
        "24/11/2026",
    }


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda m: m(torch.randn(2, 5, 12), torch.randn(2, 4, 8)), ValueError, r"tgt must have shape .* d_model=12"),
        (lambda m: m(torch.randn(5, 12), torch.randn(2, 4, 12)), ValueError, r"src must have 3 dimensions"),
        (lambda m: m(torch.randn(2, 5, 12), torch.randn(3, 4, 12)), ValueError, r"same number of sequences"),
        (lambda m: m(torch.randn(2, 5, 12).double(), torch.randn(2, 4, 12)), TypeError, r"dtype torch.float64"),
        (
            lambda m: m(torch.randn(2, 5, 12), torch.randn(2, 4, 12), torch.zeros(2, 5)),
            TypeError,
            r"src_key_padding_mask must have dtype torch.bool",
        ),
        (
            lambda m: m(torch.randn(2, 5, 12), torch.randn(2, 4, 12), torch.zeros(2, 4, dtype=torch.bool)),
            ValueError,
            r"does not broadcast .* \(2, 5\)",
        ),
        (
            lambda m: m(torch.randn(2, 5, 12), torch.randn(2, 4, 12), None, torch.zeros(2, 5, dtype=torch.bool)),
            ValueError,
            r"tgt_key_padding_mask .* \(2, 4\)",
        ),
        (
            lambda m: m.decode(torch.randn(2, 1, 12), torch.randn(2, 5, 12), cache=()),
            TypeError,
            r"cache must be a KVCache .*, got tuple",
        ),
        (
            lambda m: m.decode(torch.randn(2, 1, 12), torch.randn(2, 5, 12), cache=m.new_cache(3)),
            ValueError,
            r"the cache holds batch=3 but the input has batch=2",
        ),
    ],
)
def test_bad_input_gets_a_clear_error(call, error, match):
    torch.manual_seed(0)
    model = EncoderDecoder(
        EncoderDecoderConfig(d_model=12, num_heads=3, num_encoder_layers=1, num_decoder_layers=2, ffn_hidden=20)
    )
    with pytest.raises(error, match=match):
        call(model)


def test_bad_construction_and_conversion():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        EncoderDecoder(
            EncoderDecoderConfig(d_model=10, num_heads=3, num_encoder_layers=1, num_decoder_layers=1, ffn_hidden=20)
        )
    with pytest.raises(ValueError, match="num_decoder_layers must be at least 1"):
        EncoderDecoder(
            EncoderDecoderConfig(d_model=12, num_heads=3, num_encoder_layers=1, num_decoder_layers=0, ffn_hidden=20)
        )
    with pytest.raises(TypeError, match="torch.nn.Transformer"):
        EncoderDecoder.from_torch(nn.Linear(2, 2))
    with pytest.raises(TypeError, match="TransformerDecoderLayer"):
        DecoderLayer.from_torch(nn.Linear(2, 2))
    model = _trained_free_seq2seq()
    with pytest.raises(ValueError, match=r"src_ids must hold token ids from 0 to 19 \(vocab_size=20\)"):
        model(torch.tensor([[25, 1]]), torch.tensor([[1]]))
    with pytest.raises(TypeError, match="int64"):
        greedy_decode(model, torch.ones(1, 3), 1, 4)
    with pytest.raises(ValueError, match="context_length=16"):
        greedy_decode(model, torch.ones(1, 3, dtype=torch.long), 1, 17)
    with pytest.raises(TypeError, match="Seq2SeqTransformer"):
        greedy_decode(nn.Linear(2, 2), torch.ones(1, 3, dtype=torch.long), 1, 4)
    with pytest.raises(ValueError, match="num_train \\+ num_heldout"):
        make_dates(70_000, 10_000)


def test_cached_decoding_projects_the_source_once_and_keeps_no_state_in_the_modules():
    model = _trained_free_seq2seq()
    src = torch.randint(1, 20, (2, 9), generator=torch.Generator().manual_seed(2))
    calls = {True: 0, False: 0}
    use_cache = True

    def count(module, inputs, output):
        calls[use_cache] += 1

    hooks = [layer.cross_attention.W_key.register_forward_hook(count) for layer in model.transformer.decoder_layers]
    greedy_decode(model, src, 1, 8, use_cache=True)
    use_cache = False
    greedy_decode(model, src, 1, 8, use_cache=False)
    for hook in hooks:
        hook.remove()
    assert calls[True] == 2  # once per decoder layer, for all 8 steps
    assert calls[False] == 2 * 8  # once per layer and step
    kept = [name for module in model.modules() for name, v in vars(module).items() if isinstance(v, torch.Tensor)]
    assert kept == [], f"tensors kept on the modules: {kept}"


@pytest.mark.parametrize("norm_first", [False, True])
def test_parity_in_eval_mode_where_torch_takes_its_fast_paths(norm_first):
    torch.manual_seed(8)
    model = EncoderDecoder(
        EncoderDecoderConfig(
            d_model=16,
            num_heads=4,
            num_encoder_layers=2,
            num_decoder_layers=2,
            ffn_hidden=40,
            dropout=0.1,
            norm_first=norm_first,
        )
    ).eval()  # dropout off in eval mode
    transformer = ah.to_torch(model)
    assert not transformer.training
    src_padding = _inputs()[2]
    src = torch.randn(3, SRC_LEN, 16, generator=torch.Generator().manual_seed(10))
    tgt = torch.randn(3, TGT_LEN, 16, generator=torch.Generator().manual_seed(11))
    with torch.no_grad():
        ours = model(src, tgt, src_padding)
        theirs = transformer(
            src,
            tgt,
            tgt_mask=ah.causal_mask(TGT_LEN),
            src_key_padding_mask=src_padding,
            memory_key_padding_mask=src_padding,
        )
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)


def test_the_encoder_decoder_configs_take_fields_by_name_and_check_them_once():
    sizes = dict(d_model=12, num_heads=3, num_encoder_layers=1, num_decoder_layers=2, ffn_hidden=20)
    with pytest.raises(TypeError, match="positional"):
        EncoderDecoderConfig(12, 3, 1, 2, 20)
    model = Seq2SeqTransformer(Seq2SeqConfig(src_vocab_size=13, tgt_vocab_size=9, **sizes))
    assert len(model.transformer.encoder.layers) == 1 and len(model.transformer.decoder_layers) == 2
    assert model.context_length == 64 and EncoderDecoderConfig(**sizes).context_length == 512  # as before
    for fields, error, fragments in [
        (dict(sizes, ffn_hidden=0), ValueError, ["ffn_hidden", "0"]),
        (dict(sizes, norm_first="yes"), TypeError, ["norm_first", "str"]),
        (dict(sizes, activation="tanh"), ValueError, ["activation", "tanh"]),
        (dict(sizes, eps=0.0), ValueError, ["eps", "0.0"]),
        (dict(sizes, src_vocab_size=13, tgt_vocab_size=9, pad_id=13), ValueError, ["pad_id", "13"]),
    ]:
        config = Seq2SeqConfig if "pad_id" in fields else EncoderDecoderConfig
        with pytest.raises(error) as info:
            config(**fields)
        assert all(fragment in str(info.value) for fragment in fragments), info.value
    with pytest.raises(TypeError, match="EncoderDecoderConfig"):
        EncoderDecoder(sizes)


def test_a_cached_decoder_step_checks_at_the_door_once_whatever_the_depth_and_greedy_decode_not_per_step():
    """A direct cached step checks its ids, memory, padding and cache at the model's door: as many check calls with 4
    layers as with 1 (none per layer). greedy_decode checks its arguments once and its steps none."""
    counts = {}
    src, tgt = torch.randint(3, 13, (2, 5)), torch.randint(3, 9, (2, 4))
    for layers in (1, 4):
        config = small_seq2seq_config(num_encoder_layers=layers, num_decoder_layers=layers)
        model = Seq2SeqTransformer(config).eval()
        with torch.no_grad():
            memory, padding = model.encode(src)
            cache = model.new_cache(2)
            model.decode(tgt[:, :3], memory, padding, cache=cache)
            counts[layers] = check_calls(partial(model.decode, tgt[:, 3:], memory, padding, cache=cache))
        assert {"check_token_ids", "check_cache", "check_decoder_inputs"} <= set(counts[layers])
        short, longer = (check_calls(partial(greedy_decode, model, src, 1, n)) for n in (2, 6))
        assert short and longer == short, "greedy_decode checks its arguments, then each step of its loop runs none"
    assert counts[4] == counts[1], "a check ran per layer"
