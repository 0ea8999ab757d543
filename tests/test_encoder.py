import math

import pytest
import torch
from conftest import perturb_
from torch import nn

import attention_helpers as ah
from attention_helpers import (
    Encoder,
    EncoderConfig,
    EncoderLayer,
    FeedForward,
    LayerNorm,
    PositionalEncoding,
    rope_rotate,
    to_torch,
)


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, expected, atol=atol, rtol=1e-4)


@pytest.mark.parametrize("shape", [12, (4, 6)])
def test_layer_norm_equals_torch_forward_and_backward(shape):
    torch_norm = perturb_(nn.LayerNorm(shape, eps=1e-5))
    ours = LayerNorm.from_torch(torch_norm)
    trailing = (shape,) if isinstance(shape, int) else shape
    x = (torch.randn(2, 5, *trailing) * 3 + 1).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    out, ref = ours(x), torch_norm(x_ref)
    close(out, ref)
    g = torch.autograd.grad(out.square().sum(), [x, ours.gamma, ours.beta])
    g_ref = torch.autograd.grad(ref.square().sum(), [x_ref, torch_norm.weight, torch_norm.bias])
    for a, b in zip(g, g_ref, strict=True):
        close(a, b)
    close(to_torch(ours)(x_ref), out)


def test_layer_norm_normalises_each_token_on_its_own():
    x = torch.randn(3, 4, 10) * 5 + 2
    out = LayerNorm(10)(x)
    close(out.mean(-1), torch.zeros(3, 4))
    close(out.var(-1, unbiased=False), torch.ones(3, 4), atol=1e-3)
    close(LayerNorm(10)(x[1:2]), out[1:2])  # independent of the other batch elements


def test_feed_forward_acts_on_each_position_separately():
    ffn = FeedForward(8, 20, dropout=0.0, activation="gelu")
    x = torch.randn(2, 5, 8)
    per_token = torch.stack([torch.stack([ffn(x[b, t]) for t in range(5)]) for b in range(2)])
    close(ffn(x), per_token)


def _torch_layer(d_model, heads, ffn_hidden, norm_first, activation):
    layer = nn.TransformerEncoderLayer(
        d_model, heads, ffn_hidden, dropout=0.1, activation=activation, batch_first=True, norm_first=norm_first
    )
    return perturb_(layer, std=0.2)


def _padding(batch, num_tokens):
    mask = torch.zeros(batch, num_tokens, dtype=torch.bool)
    mask[1, -3:] = True
    return mask


def _torch_layer_grads_in_our_names(layer: nn.TransformerEncoderLayer, prefix: str = "") -> dict:
    """The gradients of torch's layer, keyed by the names of the same parameters in our EncoderLayer
    (torch packs the three projections into one in_proj; ours keeps W_query, W_key, W_value apart)."""
    attn = layer.self_attn
    grads = {}
    for i, name in enumerate(("W_query", "W_key", "W_value")):
        grads[f"{prefix}attention.{name}.weight"] = attn.in_proj_weight.grad.chunk(3)[i]
        grads[f"{prefix}attention.{name}.bias"] = attn.in_proj_bias.grad.chunk(3)[i]
    for ours, theirs in (
        ("attention.out_proj", attn.out_proj),
        ("ffn.linear1", layer.linear1),
        ("ffn.linear2", layer.linear2),
    ):
        grads[f"{prefix}{ours}.weight"], grads[f"{prefix}{ours}.bias"] = theirs.weight.grad, theirs.bias.grad
    for ours, theirs in (("norm1", layer.norm1), ("norm2", layer.norm2)):
        grads[f"{prefix}{ours}.gamma"], grads[f"{prefix}{ours}.beta"] = theirs.weight.grad, theirs.bias.grad
    return grads


def _assert_parameter_grads_equal(ours: nn.Module, expected: dict) -> None:
    names = [name for name, _ in ours.named_parameters()]
    assert sorted(names) == sorted(expected)
    for name, param in ours.named_parameters():
        scale = expected[name].abs().max().item()
        close(param.grad, expected[name], atol=1e-5 * max(scale, 1.0))


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("padded", [False, True])
def test_encoder_layer_equals_torch_forward_and_backward(norm_first, activation, padded):
    torch_layer = _torch_layer(16, 4, 40, norm_first, activation).eval()
    ours = EncoderLayer.from_torch(torch_layer)
    assert not ours.training
    x = torch.randn(3, 7, 16, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    padding = _padding(3, 7) if padded else None
    out, ref = ours(x, padding), torch_layer(x_ref, src_key_padding_mask=padding)
    close(out, ref)
    out.square().sum().backward()
    ref.square().sum().backward()
    close(x.grad, x_ref.grad)
    _assert_parameter_grads_equal(ours, _torch_layer_grads_in_our_names(torch_layer))
    with torch.no_grad():
        close(to_torch(ours)(x_ref, src_key_padding_mask=padding), out)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_five_layer_encoder_equals_torch_transformer_encoder(norm_first, activation):
    final_norm = nn.LayerNorm(16) if norm_first else None
    torch_encoder = nn.TransformerEncoder(
        _torch_layer(16, 4, 40, norm_first, activation), num_layers=5, norm=final_norm, enable_nested_tensor=False
    )
    perturb_(torch_encoder, std=0.2).eval()
    ours = Encoder.from_torch(torch_encoder)
    assert len(ours.layers) == 5 and (ours.final_norm is not None) == norm_first
    x = torch.randn(3, 7, 16, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    padding = _padding(3, 7)
    out, ref = ours(x, padding), torch_encoder(x_ref, src_key_padding_mask=padding)
    close(out, ref)
    out.square().sum().backward()
    ref.square().sum().backward()
    close(x.grad, x_ref.grad, atol=1e-4 * x_ref.grad.abs().max().item())
    expected = {}
    for i, layer in enumerate(torch_encoder.layers):
        expected |= _torch_layer_grads_in_our_names(layer, prefix=f"layers.{i}.")
    if final_norm is not None:
        expected |= {"final_norm.gamma": final_norm.weight.grad, "final_norm.beta": final_norm.bias.grad}
    _assert_parameter_grads_equal(ours, expected)
    with torch.no_grad():
        close(to_torch(ours)(x_ref, src_key_padding_mask=padding), out)


def test_seed_004_configuration_equals_torch_and_has_torchs_parameter_count():
    """d_model 512, 8 heads, ffn 2048, dropout 0.1, 5 layers, a batch of 30 x 200 tokens."""
    ours = Encoder(EncoderConfig(d_model=512, ffn_hidden=2048, num_heads=8, dropout=0.1, num_layers=5)).eval()
    torch_encoder = to_torch(ours)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in torch_encoder.parameters())
    x = torch.randn(30, 200, 512)
    with torch.no_grad():
        out = ours(x)
        close(out, torch_encoder(x))
    assert out.shape == (30, 200, 512)


def test_pre_and_post_ln_differ_but_both_normalise_where_they_should():
    torch.manual_seed(3)
    post = Encoder(EncoderConfig(d_model=16, ffn_hidden=40, num_heads=4, num_layers=2))
    torch.manual_seed(3)
    pre = Encoder(EncoderConfig(d_model=16, ffn_hidden=40, num_heads=4, num_layers=2, norm_first=True))
    x = torch.randn(2, 6, 16) * 4 + 3
    out_post, out_pre = post(x), pre(x)
    assert not torch.allclose(out_post, out_pre)
    close(out_post.mean(-1), torch.zeros(2, 6))  # post-LN ends with a LayerNorm; pre-LN does not
    assert out_pre.mean(-1).abs().max() > 0.1


def test_encoder_dropout_is_random_in_training_and_off_in_eval():
    torch.manual_seed(2)
    encoder = Encoder(EncoderConfig(d_model=16, ffn_hidden=40, num_heads=4, dropout=0.1, num_layers=2))
    torch.manual_seed(2)
    no_dropout = Encoder(
        EncoderConfig(d_model=16, ffn_hidden=40, num_heads=4, num_layers=2)
    )  # the same weights: dropout creates no parameters
    x = torch.randn(2, 6, 16)
    with torch.no_grad():
        first, second, plain = encoder(x), encoder(x), no_dropout(x)
        assert not torch.allclose(first, second) and not torch.allclose(first, plain)
        close(encoder.eval()(x), plain)


def test_encoder_without_positions_is_permutation_equivariant_and_positions_break_it():
    encoder = Encoder(EncoderConfig(d_model=16, ffn_hidden=40, num_heads=4, num_layers=3, activation="gelu")).eval()
    x = torch.randn(2, 8, 16)
    perm = torch.randperm(8)
    with torch.no_grad():
        close(encoder(x[:, perm]), encoder(x)[:, perm])
        positions = PositionalEncoding(16)
        shuffled = encoder(positions(x[:, perm]))
        assert not torch.allclose(shuffled, encoder(positions(x))[:, perm], atol=1e-3)


@pytest.mark.parametrize("d_model", [8, 7])
def test_positional_encoding_follows_the_formula(d_model):
    pe = PositionalEncoding(d_model, context_length=50)
    for pos in (0, 1, 17, 49):
        for i in range(d_model):
            angle = pos / 10000 ** ((i - i % 2) / d_model)
            expected = math.sin(angle) if i % 2 == 0 else math.cos(angle)
            assert abs(pe.pe[pos, i].item() - expected) < 1e-6, (pos, i)
    x = torch.zeros(2, 10, d_model)
    close(pe(x), pe.pe[:10].expand(2, 10, d_model))
    assert pe.pe.abs().max() <= 1.0
    assert len({tuple(row) for row in pe.pe.round(decimals=4).tolist()}) == 50  # every position distinct


def _rope_score(q, k, m, n, head_dim):
    """The score of query q rotated to position m with key k rotated to position n; q, k (head_dim,), float64."""
    rotated_q = rope_rotate(q.reshape(1, head_dim), torch.tensor([m]))
    rotated_k = rope_rotate(k.reshape(1, head_dim), torch.tensor([n]))
    return (rotated_q * rotated_k).sum().item()


@pytest.mark.parametrize("head_dim", [2, 6, 64])
def test_rope_score_depends_only_on_the_offset(head_dim):
    generator = torch.Generator().manual_seed(head_dim)
    for _ in range(5):
        q, k = torch.randn(2, head_dim, dtype=torch.float64, generator=generator)
        for m, n in ((0, 0), (3, 7), (9, 2), (40, 40)):
            score = _rope_score(q, k, m, n, head_dim)
            for shift in (1, 5, 100, 2047):
                assert math.isclose(_rope_score(q, k, m + shift, n + shift, head_dim), score, abs_tol=1e-9)
        # ... and on the offset it does depend: a different offset gives a different score
        assert not math.isclose(_rope_score(q, k, 3, 7, head_dim), _rope_score(q, k, 7, 3, head_dim), abs_tol=1e-6)


def test_rope_scores_of_a_whole_sequence_are_constant_along_diagonals():
    q, k = torch.randn(2, 3, 12, 8, dtype=torch.float64).unbind(0)  # (num_heads, num_tokens, head_dim) each
    scores = rope_rotate(q[:, :1].expand(3, 12, 8)) @ rope_rotate(k[:, :1].expand(3, 12, 8)).transpose(-2, -1)
    for offset in range(-11, 12):
        diagonal = scores.diagonal(offset, dim1=-2, dim2=-1)  # (num_heads, 12 - |offset|)
        close(diagonal, diagonal[..., :1].expand_as(diagonal), atol=1e-10)


def test_rope_preserves_norms_and_position_zero_is_the_identity():
    x = torch.randn(2, 4, 9, 16)  # (batch, num_heads, num_tokens, head_dim)
    rotated = rope_rotate(x)
    assert rotated.shape == x.shape and rotated.dtype == x.dtype
    close(rotated.norm(dim=-1), x.norm(dim=-1))
    assert torch.equal(rotated[..., 0, :], x[..., 0, :])
    assert not torch.allclose(rotated[..., 1:, :], x[..., 1:, :])
    assert torch.equal(rope_rotate(x, torch.zeros(9, dtype=torch.long)), x)


def test_rope_accepts_positions_per_sequence():
    x = torch.randn(2, 4, 5, 8)  # (batch, num_heads, num_tokens, head_dim)
    positions = torch.tensor([[0, 1, 2, 3, 4], [10, 11, 12, 13, 14]])[:, None]  # (batch, 1, num_tokens)
    rotated = rope_rotate(x, positions)
    close(rotated[0], rope_rotate(x[0]))
    close(rotated[1], rope_rotate(x[1], torch.arange(10, 15)))


@pytest.mark.parametrize("head_dim", [8, 64])
def test_rope_equals_hugging_face_llama(head_dim):
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig

    config = LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim, max_position_embeddings=64)
    rotary = llama.LlamaRotaryEmbedding(config=config)
    q, k = torch.randn(2, 3, 2, 11, head_dim).unbind(0)  # (batch, num_heads, num_tokens, head_dim) each
    position_ids = torch.tensor([list(range(11)), list(range(20, 31)), [0] * 11])  # (batch, num_tokens)
    cos, sin = rotary(q, position_ids)  # (batch, num_tokens, head_dim) each
    q_ref, k_ref = llama.apply_rotary_pos_emb(q, k, cos, sin)
    close(rope_rotate(q, position_ids[:, None]), q_ref)
    close(rope_rotate(k, position_ids[:, None]), k_ref)


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: rope_rotate(torch.randn(2, 5, 7)), ValueError, ["head_dim=7", "(2, 5, 7)", "even"]),
        (lambda: rope_rotate(torch.randn(8)), ValueError, ["x", "(8,)", "(..., num_tokens, head_dim)"]),
        (lambda: rope_rotate(torch.ones(2, 5, 8, dtype=torch.long)), TypeError, ["x", "floating-point", "int64"]),
        (lambda: rope_rotate([[1.0, 2.0]]), TypeError, ["x", "torch.Tensor", "list"]),
        (lambda: rope_rotate(torch.randn(5, 8), torch.arange(4)), ValueError, ["positions", "(4,)", "(5,)"]),
        (lambda: rope_rotate(torch.randn(5, 8), [0, 1, 2, 3, 4]), TypeError, ["positions", "list"]),
        (lambda: rope_rotate(torch.randn(5, 8), torch.ones(5, dtype=torch.bool)), TypeError, ["positions", "bool"]),
        (lambda: rope_rotate(torch.randn(5, 8), base=0.0), ValueError, ["base", "positive"]),
        (lambda: rope_rotate(torch.randn(5, 8), base="10000"), TypeError, ["base", "str"]),
    ],
    ids=[
        "odd head_dim",
        "rank 1",
        "integer dtype",
        "not a tensor",
        "positions length",
        "positions list",
        "positions bool",
        "base zero",
        "base string",
    ],
)
def test_rope_bad_input_is_named(call, error, words):
    with pytest.raises(error) as excinfo:
        call()
    for word in words:
        assert word in str(excinfo.value), (word, str(excinfo.value))


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_encoder_returns_every_layers_weights_from_one_pass_equal_to_torchs(norm_first):
    torch_encoder = nn.TransformerEncoder(
        _torch_layer(16, 4, 40, norm_first, "gelu"), num_layers=3, enable_nested_tensor=False
    )
    perturb_(torch_encoder, std=0.2).eval()
    ours = Encoder.from_torch(torch_encoder)
    x, padding = torch.randn(3, 7, 16), _padding(3, 7)
    with torch.no_grad():
        out, attn_weights = ours(x, padding, return_weights=True)
        close(out, ours(x, padding))
        assert attn_weights.shape == (3, 3, 4, 7, 7)  # (num_layers, batch, num_heads, num_tokens, num_tokens)
        layer_input = x
        for layer, weights in zip(torch_encoder.layers, attn_weights, strict=True):
            attn_input = layer.norm1(layer_input) if norm_first else layer_input
            _, ref = layer.self_attn(
                attn_input, attn_input, attn_input, key_padding_mask=padding, average_attn_weights=False
            )
            close(weights, ref)
            layer_input = layer(layer_input, src_key_padding_mask=padding)


def test_a_bad_padding_mask_is_named_at_the_entry_point_before_any_layer_runs():
    """A stack checks its masks on entry, so the error names the caller's argument (not a layer's) and no layer
    has run; the layers may check shapes again, but none reads a mask's values (see test_compile)."""
    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(d_model=8, ffn_hidden=16, num_heads=2, num_layers=3)).eval()
    model = ah.EncoderDecoder(
        ah.EncoderDecoderConfig(d_model=8, num_heads=2, num_encoder_layers=2, num_decoder_layers=3, ffn_hidden=16)
    ).eval()
    ran = []
    for layer in [*encoder.layers, *model.encoder.layers, *model.decoder_layers]:
        layer.register_forward_hook(lambda module, inputs, output: ran.append(module))
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"key_padding_mask of shape \(2, 4\)"):
        encoder(x, torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"tgt_key_padding_mask of shape \(2, 5\)"):
        model(x, torch.randn(2, 4, 8), None, torch.zeros(2, 5, dtype=torch.bool))
    assert ran == []


def test_layer_norm_refuses_a_half_input_to_float32_weights_though_f_layer_norm_takes_it():
    torch.nn.functional.layer_norm(torch.randn(2, 4).half(), (4,), torch.ones(4), torch.zeros(4))  # torch: no error
    with pytest.raises(TypeError, match=r"inputs has dtype torch.float16 .* LayerNorm are torch.float32"):
        LayerNorm(4)(torch.randn(2, 4).half())


@pytest.mark.parametrize("norm_first", [True, False])
def test_the_residual_sublayer_is_pre_ln_or_post_ln_and_passes_the_attention_weights_on(norm_first):
    """The helper every layer uses, against the two formulas written here (Xiong et al. 2020, figure 1); dropout
    runs in training mode only, and a sublayer's extra outputs come back after x."""
    from attention_helpers.encoder import residual

    torch.manual_seed(0)
    x = torch.randn(2, 5, 8)
    norm = perturb_(nn.LayerNorm(8))
    weight = torch.randn(8, 8)

    def sublayer(h):
        return torch.tanh(h @ weight)

    expected = x + sublayer(norm(x)) if norm_first else norm(x + sublayer(x))
    dropout = nn.Dropout(0.5).eval()
    torch.testing.assert_close(residual(x, sublayer, norm, dropout, norm_first), expected)
    out, extra = residual(x, lambda h: (sublayer(h), "weights"), norm, dropout, norm_first)
    torch.testing.assert_close(out, expected)
    assert extra == "weights"
    dropped = residual(x, sublayer, norm, dropout.train(), norm_first)
    assert not torch.allclose(dropped, expected), "in training mode the branch goes through dropout"
