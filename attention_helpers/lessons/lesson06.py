"""Lesson 06's checks: the shapes inside the multi-head layer, and multi-head attention from one fused
query/key/value weight, compared with the package's ``MultiHeadAttention`` given the same weights."""

from __future__ import annotations

import numbers

import torch

from ..attention import MultiHeadAttention
from ..functional import causal_mask
from . import ATTENTION_KERNELS, NO_OUT_PROJ, OVER_QUERIES, Exercise, Mistake, attend, compare, hidden_generator

SEED = 606


def _shapes_reference() -> tuple:
    """What exercise 1 asks about, measured on the package's layer."""
    mha = MultiHeadAttention(3, 12, 5, 0.0, num_heads=3).eval()
    x = torch.randn(2, 5, 3, generator=hidden_generator(SEED))
    out, weights = mha(x, return_weights=True)
    return mha.head_dim, tuple(mha.split_heads(mha.W_query(x)).shape), tuple(weights.shape), tuple(out.shape)


_SHAPE_ITEMS = ("head_dim", "the queries' shape", "the weights' shape", "the output's shape")

# Plausible wrong items of exercise 1: (item index, wrong value, what it means, hint).
_SHAPE_MISTAKES = (
    (0, 12, "head_dim is not d_out", "the heads share d_out between them"),
    (0, 1, "head_dim does not come from d_in", "the heads split the projected width, d_out, between them"),
    (1, (2, 5, 3, 4), "the heads come after the tokens", "once split, the heads are moved in front of the tokens"),
    (1, (2, 3, 5, 12), "each head's queries are not d_out wide", "each head gets a slice of head_dim columns"),
    (2, (2, 3, 5, 4), "the attention weights are not head_dim wide", "each head has one weight per (query, key) pair"),
    (2, (2, 5, 5), "the attention weights have no head axis", "every head computes its own weights"),
    (3, (2, 5, 4), "the output is not one head wide", "the heads are merged back side by side, d_out wide"),
    (3, (2, 3, 5, 4), "the output still has a head axis", "the heads are merged back into (batch, num_tokens, d_out)"),
)


def _shapes_differ(answer, expected) -> str | None:
    """Name the first wrong item by what it is ("the output's shape (2, 5, 3) is not right")."""
    if not isinstance(answer, (tuple, list)) or len(answer) != len(expected):
        return compare(answer, expected, 0)
    for name, a, e in zip(_SHAPE_ITEMS, answer, expected, strict=True):
        a = tuple(a) if isinstance(a, (tuple, list, torch.Size)) else a
        items = a if isinstance(e, tuple) else (a,)  # '4' or tensor(4) is not 4
        if not isinstance(items, tuple) or not all(isinstance(i, numbers.Integral) for i in items):
            return f"expected {'a tuple of ints' if isinstance(e, tuple) else 'an int'} for {name}, got {a!r}"
        if a != e:
            return f"{name} {a} is not right"
    return None


# ``answer = (head_dim, queries_shape, weights_shape, output_shape)`` for lesson 06's layer.
exercise_1 = Exercise(
    "Exercise 1",
    reference=_shapes_reference,
    cases=lambda: [()],
    hint="the heads share d_out between them; inside the layer the heads come before the tokens; the output is d_out "
    "wide (reread 'Several heads side by side')",
    mistakes=lambda: [
        Mistake(f"{_SHAPE_ITEMS[index]} {wrong} is not right: {meaning}", hint, wrong, item=index)
        for index, wrong, meaning, hint in _SHAPE_MISTAKES
    ],
    done="",
    value=True,
    differ=_shapes_differ,
).check


def _multi_head(x, W_qkv, W_out, num_heads, causal, *, split="", merge="", scale="head_dim", mask="causal", **slip):
    """Fused-weight multi-head attention, right by default; each keyword reproduces one plausible mistake (to name
    it: the right answer comes from the package's MultiHeadAttention)."""
    batch, num_tokens, _ = x.shape
    d_out = W_out.shape[0]
    head_dim = d_out // num_heads
    qkv = x @ W_qkv.T  # (batch, num_tokens, 3 * d_out)
    if split == "interleaved":  # rows read head by head: [q0, k0, v0, q1, ...]
        queries, keys, values = qkv.view(batch, num_tokens, num_heads, 3 * head_dim).transpose(1, 2).chunk(3, dim=-1)
    else:
        queries, keys, values = (t.unflatten(-1, (num_heads, head_dim)).transpose(1, 2) for t in qkv.chunk(3, -1))
    hide = causal_mask(num_tokens) if (mask == "causal" and causal) or mask == "always" else None
    if mask == "diagonal" and causal:  # the query's own key hidden too (a finite fill, so row 0 is not nan)
        hide = torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu()
    scale = {"head_dim": head_dim**0.5, "d_out": d_out**0.5, "none": 1.0}[scale]
    fill = -torch.inf if mask != "diagonal" else torch.finfo(x.dtype).min
    context_vec = attend(queries, keys, values, scale=scale, hide=hide, fill=fill, dim=slip.get("softmax_dim", -1))
    if merge != "reshape_only":  # (batch, num_heads, num_tokens, head_dim) -> (batch, num_tokens, num_heads, ...)
        context_vec = context_vec.transpose(1, 2)
    context_vec = context_vec.reshape(batch, num_tokens, d_out)
    if slip.get("no_out_projection"):
        return context_vec
    return context_vec @ (W_out if slip.get("out_not_transposed") else W_out.T)


# (keywords of _multi_head, what the answer matches, hint)
_FUSED_MISTAKES = (
    (
        {"merge": "reshape_only"},
        "you merged by reshaping (batch, num_heads, num_tokens, head_dim) straight to (batch, num_tokens, d_out)",
        "move the head axis back next to head_dim before merging: a straight reshape mixes several tokens of one head",
    ),
    ({"scale": "none"}, "the 1 / sqrt(head_dim) is missing", "divide each head's scores by sqrt(head_dim)"),
    ({"scale": "d_out"}, "the scores are divided by sqrt(d_out)", "each head's dot products run over head_dim numbers"),
    ({"split": "interleaved"}, "W_qkv was read head by head", "W_qkv stacks all queries, all keys, then all values"),
    ({"mask": "never"}, "no causal mask with causal=True", "with causal=True, hide the scores above the diagonal"),
    ({"mask": "always"}, "the causal mask is applied with causal=False", "apply the mask only when causal is True"),
    ({"mask": "diagonal"}, "your causal mask hides each token's own key too", "never hide the query's own key"),
    ({"no_out_projection": True}, "the heads' merged output is not projected by W_out", NO_OUT_PROJ[1]),
    ({"softmax_dim": -2}, *OVER_QUERIES),
    ({"out_not_transposed": True}, "the output projection is x @ W_out instead of x @ W_out.T", "it needs transposing"),
)

# (batch, num_tokens, d_in, d_out, num_heads, causal): d_in != d_out, a batch of 1, odd lengths, both modes
_FUSED_CASES = ((2, 7, 5, 12, 3, True), (1, 5, 6, 8, 2, False), (3, 9, 4, 6, 3, True), (1, 3, 7, 10, 5, False))
_FUSED_CASES += ((1, 1, 3, 4, 2, True),)


def _fused_inputs(generator, batch, num_tokens, d_in, d_out):
    x = torch.randn(batch, num_tokens, d_in, generator=generator)
    W_qkv = torch.randn(3 * d_out, d_in, generator=generator)  # scores large enough to tell scalings apart
    return x, W_qkv, torch.randn(d_out, d_out, generator=generator) / d_out**0.5


def _fused_reference(x, W_qkv, W_out, num_heads, causal):
    """The package's layer with the same weights: [W_query; W_key; W_value] = W_qkv, out_proj = W_out."""
    _, num_tokens, d_in = x.shape
    mha = MultiHeadAttention(d_in, W_out.shape[0], num_tokens, 0.0, num_heads, causal=causal, proj_bias=False)
    names = ("W_query.weight", "W_key.weight", "W_value.weight", "out_proj.weight")
    mha.load_state_dict(dict(zip(names, (*W_qkv.chunk(3), W_out), strict=True)), strict=False)  # its mask kept
    return mha.eval()(x)


def _shuffled_too(fused_attention, x, W_qkv, W_out, num_heads, causal) -> tuple | None:
    """The answer on the case, then without a mask on the tokens each moved one place, and with its output rows moved
    one place after: a merge that mixes heads and positions gives two different results."""
    out = fused_attention(x, W_qkv, W_out, num_heads, causal)
    perm = torch.roll(torch.arange(x.shape[1]), 1)
    try:
        shuffled_first = fused_attention(x[:, perm], W_qkv, W_out, num_heads, False)
        return out, shuffled_first, fused_attention(x, W_qkv, W_out, num_heads, False)[:, perm]
    except Exception:  # the answer's failure is reported by the comparison of its first result
        return None if out is None else (out,)


# ``fused_attention(x, W_qkv, W_out, num_heads, causal)`` against ``MultiHeadAttention`` on hidden inputs.
exercise_2 = Exercise(
    "Exercise 2",
    reference=lambda *case: (_fused_reference(*case),),
    cases=lambda: [
        (*_fused_inputs(generator, *c[:4]), *c[4:]) for generator in [hidden_generator(SEED)] for c in _FUSED_CASES
    ],
    run=_shuffled_too,
    hint="one projection gives queries, keys and values side by side; cut it into the three, split each into "
    "heads with the heads before the tokens, scale by the square root of head_dim, mask if causal, softmax over "
    "the keys, mix the values, then move the heads back next to head_dim before merging and projecting (reread "
    "'One projection, split into heads')",
    mistakes=lambda *case: [
        Mistake(
            "your output holds nan",
            "a row whose scores are all -inf gives nan: the causal mask never hides the query itself",
            matches=lambda answer: bool(answer[0].isnan().any()),
        ),
        *(Mistake(meaning, hint, (_multi_head(*case, **keywords),)) for keywords, meaning, hint in _FUSED_MISTAKES),
        Mistake(
            "with causal=False, shuffling the input tokens does not shuffle your output rows the same way",
            "heads and positions got mixed in a reshape: split the last axis into heads before moving them, and move "
            "them back before merging (reread 'A common mistake: merging the heads without the transpose')",
            matches=lambda answer: len(answer) == 3 and compare(answer[1], answer[2]) is not None,
        ),
    ],
    differ=lambda answer, expected: compare(answer[0], expected[0]),
    forbidden=ATTENTION_KERNELS,
    rule="the exercise asks for the heads written out with plain tensor operations, not a ready-made attention "
    "(the package's layers, nn.MultiheadAttention or scaled_dot_product_attention): reread 'One projection, split "
    "into heads'",
).check
