"""Lesson 12's checks: nothing before an attempt, a named mistake for each plausible wrong answer, and the right
answers accepted."""

import copy
import math

import pytest
import torch

import attention_helpers as ah
from attention_helpers.lessons import lesson12 as checks


def _cross(
    scale_by_d_model=False,
    use_mask=True,
    reverse_mask=False,
    transpose=True,
    out_proj=True,
    fill=float("-inf"),
    causal=False,
    keys_from_x=False,
):
    def cross_attention_step(mha, x, keys, values, key_padding_mask):
        batch, num_new, d_model = x.shape
        head_dim = keys.shape[-1]

        def split(t):
            return t.view(batch, t.shape[1], -1, head_dim).transpose(1, 2)

        queries = split(mha.W_query(x))
        if keys_from_x:  # projected again, from the decoder's side
            keys, values = split(mha.W_key(x)), split(mha.W_value(x))
        scores = queries @ keys.transpose(-2, -1) / math.sqrt(d_model if scale_by_d_model else head_dim)
        if causal:
            scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
        if use_mask:
            hide = ~key_padding_mask if reverse_mask else key_padding_mask
            scores = scores.masked_fill(hide[:, None, None, :], fill)
        context = torch.softmax(scores, dim=-1) @ values
        context = (context.transpose(1, 2) if transpose else context).reshape(batch, num_new, d_model)
        return mha.out_proj(context) if out_proj else context

    return cross_attention_step


def _pre_ln(
    residual_normalised=False,
    use_mask=True,
    cross_on_target=False,
    post_ln=False,
    extra_norm=False,
    memory_norm=None,
):
    def pre_ln_decoder_layer(layer, x, memory, mask):
        def cross(h):
            if cross_on_target:
                return layer.cross_attention(h, memory=h)
            source = getattr(layer, memory_norm)(memory) if memory_norm else memory
            return layer.cross_attention(h, mask if use_mask else None, memory=source)

        if post_ln:
            x = layer.norm1(x + layer.self_attention(x))
            x = layer.norm2(x + cross(x))
            return layer.norm3(x + layer.ffn(x))
        for norm, sublayer in ((layer.norm1, layer.self_attention), (layer.norm2, cross), (layer.norm3, layer.ffn)):
            normalised = norm(x)
            x = (normalised if residual_normalised else x) + sublayer(normalised)
        return layer.norm3(x) if extra_norm else x

    return pre_ln_decoder_layer


def test_unanswered(capsys):
    assert checks.exercise_1(None) is False
    assert checks.exercise_2(None) is False
    assert capsys.readouterr().out == (
        "Exercise 1: Not answered yet (the answer is still None).\n"
        "Exercise 2: Not answered yet (the answer is still None).\n"
    )


def test_right_answers(capsys):
    assert checks.exercise_1(_cross()) is True
    assert checks.exercise_2(_pre_ln()) is True
    out = capsys.readouterr().out
    assert "Exercise 1: correct on all 3 hidden cases." in out and "Exercise 2: correct on all 2 hidden cases." in out


@pytest.mark.parametrize(
    ("wrong", "reason", "hint"),
    [
        (_cross(use_mask=False), "padded source positions get attention", "minus infinity"),
        (_cross(reverse_mask=True), "mask is reversed", "True at padding"),
        (_cross(reverse_mask=True, fill=-1e9), "mask is reversed", "True at padding"),
        (_cross(reverse_mask=True, fill=torch.finfo(torch.float32).min), "mask is reversed", "True at padding"),
        (_cross(causal=True), "a causal mask hides later source positions", "hide only the padding"),
        (_cross(keys_from_x=True, use_mask=False), "that is self-attention", "only the queries come from x"),
        (_cross(scale_by_d_model=True), "divided by sqrt(d_model)", "head_dim"),
        (_cross(transpose=False), "mixes positions and heads", "move the head axis back"),
        (_cross(out_proj=False), "not mixed by out_proj", "output projection"),
        (lambda mha, x, keys, values, mask: None, "returned None", "return"),
        (lambda mha, x, keys, values, mask: x @ keys, "raised RuntimeError", "only the queries come from x"),
    ],
)
def test_exercise_1_names_the_mistake(capsys, wrong, reason, hint):
    assert checks.exercise_1(wrong) is False
    out = capsys.readouterr().out
    assert out.startswith("Exercise 1: not yet, ") and reason in out and hint in out.split("Hint:")[1]


@pytest.mark.parametrize(
    ("wrong", "reason", "hint"),
    [
        (_pre_ln(post_ln=True), "post-LN layer", "normalises each sublayer's input"),
        (_pre_ln(residual_normalised=True), "residual adds the normalised copy", "unnormalised x"),
        (_pre_ln(use_mask=False), "attends to the source's padding", "memory_key_padding_mask"),
        (_pre_ln(cross_on_target=True), "reads the target instead", "encoder's memory"),
        (_pre_ln(extra_norm=True), "normalised once more", "residual stream"),
        (_pre_ln(memory_norm="norm2"), "memory is normalised again", "pass memory to cross_attention as it is"),
        (_pre_ln(memory_norm="norm1"), "memory is normalised again", "pass memory to cross_attention as it is"),
        (lambda layer, x, memory, mask: x, "some values differ", "three sublayers in turn"),
    ],
)
def test_exercise_2_names_the_mistake(capsys, wrong, reason, hint):
    assert checks.exercise_2(wrong) is False
    out = capsys.readouterr().out
    assert out.startswith("Exercise 2: not yet, ") and reason in out and hint in out.split("Hint:")[1]


def test_not_a_function(capsys):
    assert checks.exercise_1(3) is False
    assert "expected a function" in capsys.readouterr().out


def test_exercise_2_may_not_run_the_layer_itself(capsys):
    """The exercise asks for the layer's forward written out: calling the layer is not an answer, with or without
    the source's padding mask."""
    for answer in (
        lambda layer, x, memory, mask: layer(x, memory, None, mask),
        lambda layer, x, memory, mask: layer.forward(x, memory, memory_key_padding_mask=mask),
        lambda layer, x, memory, mask: layer(x, memory),
        lambda layer, x, memory, mask: ah.to_torch(layer)(x, memory, memory_key_padding_mask=mask),
        lambda layer, x, memory, mask: copy.deepcopy(layer)(x, memory, None, mask),
    ):
        assert checks.exercise_2(answer) is False
        out = capsys.readouterr().out
        assert out.startswith("Exercise 2: not yet, your code runs the package's "), out
        assert "Hint: the exercise asks for the layer's forward written out from its parts" in out


def test_every_hidden_layer_case_has_padding_that_changes_the_output():
    """A layer that ignores the padding mask must be wrong on every hidden case, not only on the first."""
    for layer, x, memory, mask in checks._layer_cases():
        assert bool(mask.any()), "a hidden case without source padding cannot catch a dropped mask"
        with torch.no_grad():
            assert not torch.allclose(layer(x, memory, None, mask), layer(x, memory, None, None), atol=1e-4)


def test_changing_an_input_in_place_is_rejected(capsys):
    right = _cross()

    def in_place(mha, x, keys, values, mask):
        out = right(mha, x, keys, values, mask)
        keys.mul_(2)
        return out

    assert checks.exercise_1(in_place) is False
    assert "changed its input keys in place" in capsys.readouterr().out
