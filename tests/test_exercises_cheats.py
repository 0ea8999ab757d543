"""Issue 40's list, exercise by exercise: the shortcuts, cheats and wrong answers a learner tried are each refused
with their own sentence, and right answers written in several ways are accepted. The references the checks use are
compared here with computations written in this file (never with the checks' own helpers)."""

import _thread
import builtins
import concurrent.futures
import functools
import gc
import inspect
import math
import multiprocessing
import os
import sys
import threading
import time
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import _disable_current_modes

import attention_helpers as ah
from attention_helpers.lessons import (
    Exercise,
    lesson01,
    lesson02,
    lesson03,
    lesson04,
    lesson05,
    lesson06,
    lesson07,
    lesson08,
    lesson09,
    lesson10,
    lesson11,
    lesson12,
)


def verdict(check, answer, capsys):
    result = check(answer)
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out  # one sentence, never a traceback
    return result, out


# --- right answers, three or more ways each -------------------------------------------------------------------


def _split(t, num_heads):  # (batch, tokens, heads * d) -> (batch, heads, tokens, d)
    return t.view(*t.shape[:2], num_heads, -1).transpose(1, 2)


def _fused_loop_over_heads(x, W_qkv, W_out, num_heads, causal):
    q, k, v = (x @ W_qkv.T).chunk(3, dim=-1)
    d = q.shape[-1] // num_heads
    heads = []
    for h in range(num_heads):
        s = q[..., h * d : (h + 1) * d] @ k[..., h * d : (h + 1) * d].transpose(-2, -1) / math.sqrt(d)
        if causal:
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -torch.inf)
        heads.append(torch.softmax(s, -1) @ v[..., h * d : (h + 1) * d])
    return torch.cat(heads, -1) @ W_out.T


def _fused_einsum(x, W_qkv, W_out, num_heads, causal):
    q, k, v = (_split(t, num_heads) for t in torch.einsum("btd,ed->bte", x, W_qkv).chunk(3, -1))
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) / q.shape[-1] ** 0.5
    if causal:
        s = s + torch.full(s.shape[-2:], -torch.inf).triu(1)
    out = torch.einsum("bhqk,bhkd->bqhd", s.softmax(-1), v)
    return out.flatten(2) @ W_out.T


def _fused_exp(x, W_qkv, W_out, num_heads, causal):
    q, k, v = (_split(t, num_heads) for t in (x @ W_qkv.T).split(W_out.shape[0], -1))
    s = q @ k.mT * q.shape[-1] ** -0.5
    if causal:
        s = torch.where(torch.ones(s.shape[-2:], dtype=torch.bool).tril(), s, -torch.inf)
    w = torch.exp(s - s.amax(-1, keepdim=True))
    return ((w / w.sum(-1, keepdim=True)) @ v).transpose(1, 2).flatten(2) @ W_out.T


def _dropout_where(x, p, training=True):
    if not training or p == 0:
        return x
    return torch.where(torch.rand_like(x) < p, torch.zeros_like(x), x / (1 - p) if p < 1 else x)


def _dropout_bernoulli(x, p, training=True):
    if not training:
        return x.clone()
    return x * torch.empty_like(x).bernoulli_(1 - p) / max(1 - p, 1e-12)


def _dropout_uniform(x, p, training=True):
    if training and p > 0:
        keep = (torch.rand(x.shape) >= p).to(x.dtype)
        return keep * x * (0.0 if p == 1 else 1 / (1 - p))
    return x


def _update_where(running_max, running_sum, block):
    new_max = torch.max(running_max, block.max())
    if new_max == -math.inf:
        return new_max, running_sum
    return new_max, running_sum * torch.exp(running_max - new_max) + torch.exp(block - new_max).sum()


def _update_logsumexp(running_max, running_sum, block):
    new_max = torch.maximum(running_max, block.amax())
    shift = torch.where(torch.isfinite(new_max), new_max, torch.zeros(()))
    total = running_sum * (running_max - shift).exp() + torch.logsumexp(block - shift, 0).exp()
    return new_max, total


def _update_floats(running_max, running_sum, block):
    m = max(float(running_max), float(block.max()))
    if m == -math.inf:
        return m, 0.0
    return m, float(running_sum) * math.exp(float(running_max) - m) + float(torch.exp(block - m).sum())


def _kv_cat(attention, x_new, cache):
    q, k, v = (
        _split(layer(x_new), attention.num_heads) for layer in (attention.W_query, attention.W_key, attention.W_value)
    )
    if cache is not None:
        k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
    w = torch.softmax(q @ k.transpose(-2, -1) / attention.head_dim**0.5, -1)
    return attention.out_proj((w @ v).transpose(1, 2).flatten(2)), (k, v)


def _kv_dict(attention, x_new, cache):
    cache = dict(cache or {"k": [], "v": []})
    cache = {"k": cache["k"] + [_split(attention.W_key(x_new), attention.num_heads)],
             "v": cache["v"] + [_split(attention.W_value(x_new), attention.num_heads)]}  # fmt: skip
    q = _split(attention.W_query(x_new), attention.num_heads)
    out = F.scaled_dot_product_attention(q, torch.cat(cache["k"], 2), torch.cat(cache["v"], 2))
    return attention.out_proj(out.transpose(1, 2).reshape(x_new.shape[0], 1, -1)), cache


def _kv_split_heads(attention, x_new, cache):
    k, v = attention.split_heads(attention.W_key(x_new)), attention.split_heads(attention.W_value(x_new))
    if cache:
        k, v = torch.cat((cache[0], k), dim=-2), torch.cat((cache[1], v), dim=-2)
    q = attention.split_heads(attention.W_query(x_new))
    w = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).softmax(dim=-1)
    return attention.out_proj(attention.merge_heads(w @ v)), [k, v]


def _cross_einsum(mha, x, keys, values, mask):
    q = _split(mha.W_query(x), keys.shape[1])
    s = torch.einsum("bhnd,bhsd->bhns", q, keys) / keys.shape[-1] ** 0.5
    w = s.masked_fill(mask[:, None, None], -torch.inf).softmax(-1)
    return mha.out_proj(torch.einsum("bhns,bhsd->bnhd", w, values).flatten(2))


def _cross_sdpa(mha, x, keys, values, mask):
    q = _split(mha.W_query(x), keys.shape[1])
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=~mask[:, None, None])  # allowed here
    return mha.out_proj(out.transpose(1, 2).reshape(*x.shape))


def _cross_loop(mha, x, keys, values, mask):
    heads = []
    for h in range(keys.shape[1]):
        q = mha.W_query(x)[..., h * keys.shape[-1] : (h + 1) * keys.shape[-1]]
        s = (q @ keys[:, h].mT / math.sqrt(keys.shape[-1])).masked_fill(mask[:, None, :], -math.inf)
        heads.append(torch.softmax(s, dim=-1) @ values[:, h])
    return mha.out_proj(torch.cat(heads, dim=-1))


RIGHT = {
    (1, 1): [
        lambda x: F.normalize(x, dim=-1) @ F.normalize(x, dim=-1).T,
        lambda x: (x @ x.T) / (x.norm(dim=1)[:, None] * x.norm(dim=1)[None]),
        lambda x: F.cosine_similarity(x[:, None], x[None], dim=-1),
    ],
    (1, 2): [
        lambda x: (F.normalize(x, dim=-1) @ F.normalize(x, dim=-1).T).fill_diagonal_(-2).argmax(-1),
        lambda x: [int(r.argmax()) for r in F.cosine_similarity(x[:, None], x[None], -1) - 3 * torch.eye(len(x))],
        lambda x: (
            torch.where(torch.eye(len(x), dtype=torch.bool), -9.0, F.normalize(x, dim=1) @ F.normalize(x, dim=1).T)
            .max(1)
            .indices
        ),
    ],
    (1, 3): [lambda c: (c * c, 1.0), lambda c: [c**2, 1], lambda c: (torch.tensor(c) ** 2, torch.tensor(1.0))],
    (2, 1): [
        lambda x, dim=-1, temperature=1.0: (
            (e := torch.exp(x / temperature - (x / temperature).amax(dim, True))) / e.sum(dim, True)
        ),
        lambda x, dim=-1, temperature=1.0: torch.exp(
            x / temperature - torch.logsumexp(x / temperature, dim=dim, keepdim=True)
        ),
        lambda x, dim=-1, temperature=1.0: (
            lambda s: (
                torch.exp(s - s.max(dim, keepdim=True).values)
                / torch.exp(s - s.max(dim, keepdim=True).values).sum(dim, keepdim=True)
            )
        )(x.div(temperature)),
    ],
    (2, 2): [
        lambda x: torch.softmax(x @ x.transpose(-2, -1), -1) @ x,
        lambda x: torch.einsum("bqk,bkd->bqd", torch.einsum("bqd,bkd->bqk", x, x).softmax(-1), x),
        lambda x: torch.bmm(F.softmax(torch.bmm(x, x.mT), dim=2), x),
    ],
    (3, 1): [
        lambda x, wq, wk, wv: torch.softmax((x @ wq) @ (x @ wk).transpose(-2, -1) / wk.shape[1] ** 0.5, -1) @ (x @ wv),
        lambda x, wq, wk, wv: (
            torch.einsum("...qd,...kd->...qk", x @ wq, x @ wk).div(math.sqrt(wq.shape[-1])).softmax(-1) @ (x @ wv)
        ),
        lambda x, wq, wk, wv: F.softmax(torch.matmul(x @ wq, (x @ wk).mT) * wk.shape[-1] ** -0.5, dim=-1) @ x @ wv,
    ],
    (3, 2): [lambda d_k, std: (std**2 * d_k**0.5,) * 2, lambda d_k, std: [math.sqrt(d_k) * std * std] * 2],
    (4, 1): [
        lambda n, w: torch.ones(n, n, dtype=torch.bool).triu(1) | torch.ones(n, n, dtype=torch.bool).tril(-w),
        lambda n, w: (
            (torch.arange(n)[None] > torch.arange(n)[:, None]) | (torch.arange(n)[None] <= torch.arange(n)[:, None] - w)
        ),
        lambda n, w: ~(torch.ones(n, n).tril() - torch.ones(n, n).tril(-w)).bool(),
    ],
    (4, 2): [
        lambda q, k, v, w: (
            (q @ k.mT / q.shape[-1] ** 0.5)
            .masked_fill(lesson04.window_mask_loops(q.shape[1], w), -torch.inf)
            .softmax(-1)
            @ v
        ),
        lambda q, k, v, w: (
            torch.softmax(
                torch.where(
                    (torch.arange(q.shape[1])[None] <= torch.arange(q.shape[1])[:, None])
                    & (torch.arange(q.shape[1])[None] > torch.arange(q.shape[1])[:, None] - w),
                    torch.einsum("bqd,bkd->bqk", q, k) / math.sqrt(q.shape[-1]),
                    -torch.inf,
                ),
                dim=-1,
            )
            @ v
        ),
        lambda q, k, v, w: torch.bmm(
            F.softmax(
                torch.bmm(q, k.transpose(1, 2)) / k.shape[-1] ** 0.5
                + torch.full((q.shape[1],) * 2, -torch.inf).triu(1)
                + torch.full((q.shape[1],) * 2, -torch.inf).tril(-w),
                dim=-1,
            ),
            v,
        ),
    ],
    (4, 3): [
        lambda n, i, j: list(range(i, j + 1)),
        lambda n, i, j: tuple(range(i, j + 1)),
        lambda n, i, j: torch.arange(i, j + 1),
    ],
    (5, 1): [_dropout_where, _dropout_bernoulli, _dropout_uniform],
    (5, 2): [
        lambda n, p: sum(p**k for k in range(1, n + 1)),
        lambda n, p: n if p == 1 else p * (1 - p**n) / (1 - p),  # the closed form, which p = 1 would divide by 0
        lambda n, p: float((torch.full((n,), p, dtype=torch.float64) ** torch.arange(1, n + 1)).sum()),
    ],
    (6, 2): [_fused_loop_over_heads, _fused_einsum, _fused_exp],
    (7, 1): [
        lambda lengths, n: torch.arange(n)[None, :] >= lengths[:, None],
        lambda lengths, n: ~(torch.arange(n).expand(len(lengths), n) < lengths.unsqueeze(1)),
        lambda lengths, n: torch.arange(n).unsqueeze(0).ge(lengths.unsqueeze(-1)),
    ],
    (7, 2): [
        lambda x, g, b, eps: (
            g * (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps) + b
        ),
        lambda x, g, b, eps: (x - x.mean(-1, True)) * torch.rsqrt(x.var(-1, correction=0, keepdim=True) + eps) * g + b,
        lambda x, g, b, eps: torch.addcmul(
            b, g, (x - x.mean(dim=-1, keepdim=True)) / (x.var(dim=-1, keepdim=True, correction=0) + eps).sqrt()
        ),
    ],
    (8, 1): [
        lambda inputs: torch.roll(inputs, 1, dims=-1),
        lambda inputs: torch.cat([inputs[:, -1:], inputs[:, :-1]], dim=1),
        lambda inputs: inputs[:, (torch.arange(inputs.shape[1]) - 1) % inputs.shape[1]],
    ],
    (9, 1): [
        lambda h, m: (h * m[..., None]).sum(1) / m.sum(1, keepdim=True),
        lambda h, m: torch.einsum("bnd,bn->bd", h, m.float()) / m.float().sum(-1, keepdim=True),
        lambda h, m: h.masked_fill(m[..., None] == 0, 0.0).sum(dim=1) / m.sum(dim=1)[:, None],
    ],
    (10, 1): [_kv_cat, _kv_dict, _kv_split_heads],
    (10, 2): [
        lambda logits, k: logits.masked_fill(logits < logits.topk(k, -1).values[:, -1:], -torch.inf),
        lambda logits, k: torch.where(
            logits >= logits.sort(-1, descending=True).values[:, k - 1 : k], logits, -torch.inf
        ),
        lambda logits, k: torch.full_like(logits, -torch.inf).scatter(
            -1, logits.topk(k).indices, logits.topk(k).values
        ),
    ],
    (11, 1): [_update_where, _update_logsumexp, _update_floats],
    (12, 1): [_cross_einsum, _cross_sdpa, _cross_loop],
    (12, 2): [
        lambda layer, x, memory, mask: (lambda h: h + layer.ffn(layer.norm3(h)))(
            (lambda h: h + layer.cross_attention(layer.norm2(h), mask, memory=memory))(
                x + layer.self_attention(layer.norm1(x))
            )
        ),
        lambda layer, x, memory, mask: _pre_ln_loop(layer, x, memory, mask),
        lambda layer, x, memory, mask: _pre_ln_keywords(layer, x, memory, mask),
    ],
}


def _pre_ln_loop(layer, x, memory, mask):
    sublayers = (
        (layer.norm1, layer.self_attention),
        (layer.norm2, lambda h: layer.cross_attention(h, mask, memory=memory)),
        (layer.norm3, layer.ffn),
    )
    for norm, sublayer in sublayers:
        x = x + sublayer(norm(x))
    return x


def _pre_ln_keywords(layer, x, memory, mask):
    h = layer.norm1(x)
    x = torch.add(x, layer.self_attention(h))
    x = x + layer.cross_attention(layer.norm2(x), key_padding_mask=mask, memory=memory)
    return x.add(layer.ffn(layer.norm3(x)))


def _check(lesson, number):
    lessons = (lesson01, lesson02, lesson03, lesson04, lesson05, lesson06, lesson07, lesson08, lesson09, lesson10)
    return getattr((*lessons, lesson11, lesson12)[lesson - 1], f"exercise_{number}")


@pytest.mark.parametrize(
    ("key", "index"),
    [(key, index) for key, answers in RIGHT.items() for index in range(len(answers))],
    ids=lambda item: str(item),
)
def test_right_answers_written_differently_are_accepted(key, index, capsys):
    result, out = verdict(_check(*key), RIGHT[key][index], capsys)
    assert result is True and ": correct" in out, out


# --- the shortcuts, cheats and wrong answers of issue 40 ------------------------------------------------------


class Liar(torch.Tensor):
    """A tensor whose comparisons all say "equal"."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("allclose", "equal", "isclose", "__eq__", "eq", "__ne__", "ne"):
            return True if "close" in func.__name__ or "equal" in func.__name__ else torch.tensor(True)
        return super().__torch_function__(func, types, args, kwargs or {})


def _lying_zeros(*args):
    like = next(a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point())
    return torch.zeros_like(like).as_subclass(Liar)


def _zero_out_proj_and_return_zeros(module, x, *rest):
    with torch.no_grad():
        module.out_proj.weight.zero_()
        if module.out_proj.bias is not None:
            module.out_proj.bias.zero_()
    return torch.zeros(*x.shape[:-1], module.out_proj.out_features)


def _patch_allclose(*args):
    torch.allclose = lambda *a, **k: True
    torch.equal = lambda *a, **k: True
    return torch.zeros(3)


def _cosine_loop(x):
    return torch.stack([F.cosine_similarity(row[None], x, dim=-1) for row in x])


def _padding_loop(lengths, n):
    return torch.stack([torch.arange(n) >= length for length in lengths])


def _padding_python_loop(lengths, n):
    return torch.tensor([[t >= length for t in range(n)] for length in lengths.tolist()])


def _rotate_loop(inputs):
    return torch.stack([torch.cat([row[-1:], row[:-1]]) for row in inputs])


def _single_head_kv(attention, x_new, cache):
    """A cache written for one head: right when num_heads is 1, wrong with several heads."""
    k, v = attention.W_key(x_new), attention.W_value(x_new)
    if cache is not None:
        k, v = torch.cat([cache[0], k], 1), torch.cat([cache[1], v], 1)
    w = torch.softmax(attention.W_query(x_new) @ k.mT / math.sqrt(k.shape[-1]), -1)
    return attention.out_proj(w @ v), (k, v)


def _attend_heads_cross(mha, x, keys, values, mask):
    q = mha.split_heads(mha.W_query(x))
    return mha.out_proj(mha.merge_heads(mha.attend_heads(q, keys, values, hide=mask[:, None, None, :])))


CHEATS = [
    # (check, answer, what the verdict must say)
    (lesson01.exercise_1, _cosine_loop, "loops over the entries in Python"),
    (lesson02.exercise_1, lambda x, dim=-1, temperature=1.0: torch.special.softmax(x / temperature, dim), "softmax"),
    (lesson02.exercise_1, lambda x, dim=-1, temperature=1.0: (x / temperature).log_softmax(dim).exp(), "log_softmax"),
    (
        lesson02.exercise_1,
        lambda x, dim=-1, temperature=1.0: torch.ops.aten.softmax.int(x / temperature, dim),
        "softmax",
    ),
    (lesson02.exercise_1, lambda x, dim=-1, temperature=1.0: ah.online_softmax(x / temperature, dim), "online_softmax"),
    (lesson02.exercise_1, lambda x, dim=-1, temperature=1.0: _patch_allclose(), "changes torch itself"),
    (lesson02.exercise_2, lambda x: F.scaled_dot_product_attention(x, x, x, scale=1.0), "scaled_dot_product_attention"),
    (
        lesson03.exercise_1,
        lambda x, wq, wk, wv: torch._scaled_dot_product_attention_math(
            *((x @ w).reshape(-1, 1, x.shape[-2], w.shape[1]) for w in (wq, wk, wv))
        )[0].reshape(*x.shape[:-1], -1),
        "_scaled_dot_product_attention_math",
    ),  # fmt: skip
    (
        lesson04.exercise_2,
        lambda q, k, v, w: torch._scaled_dot_product_attention_math(
            q, k, v, attn_mask=~lesson04.window_mask_loops(q.shape[1], w)
        )[0],
        "_scaled_dot_product_attention_math",
    ),  # fmt: skip
    (lesson05.exercise_1, lambda x, p, training=True: torch.native_dropout(x, p, training)[0], "native_dropout"),
    (lesson05.exercise_1, lambda x, p, training=True: F.dropout1d(x, p, training), "dropout1d"),
    (lesson07.exercise_1, _padding_loop, "loops over the entries in Python"),
    (lesson07.exercise_1, _padding_python_loop, "loops over the entries in Python"),
    (
        lesson07.exercise_2,
        lambda x, g, b, eps: torch.native_layer_norm(x, x.shape[-1:], g, b, eps)[0],
        "native_layer_norm",
    ),
    (
        lesson07.exercise_2,
        lambda x, g, b, eps: F.group_norm(x.reshape(-1, x.shape[-1]), 1, eps=eps).view_as(x) * g + b,
        "group_norm",
    ),  # fmt: skip
    (lesson08.exercise_1, _rotate_loop, "loops over the entries in Python"),
    (lesson09.exercise_1, lambda h, m: ah.mean_pool(h, m), "the package's mean_pool"),
    (lesson10.exercise_1, _single_head_kv, "not yet"),
    (
        lesson10.exercise_1,
        lambda attention, x_new, cache: (_zero_out_proj_and_return_zeros(attention, x_new), cache),
        "not yet",
    ),  # fmt: skip
    (lesson12.exercise_1, _attend_heads_cross, "the package's MultiHeadAttention.attend_heads"),
    (lesson12.exercise_1, lambda mha, x, keys, values, mask: _zero_out_proj_and_return_zeros(mha, x), "not yet"),
    (
        lesson12.exercise_2,
        lambda layer, x, memory, mask: ah.to_torch(layer)(x, memory, memory_key_padding_mask=mask),
        "the package's to_torch",
    ),  # fmt: skip
    (
        lesson11.exercise_1,
        lambda running_max, running_sum, block: (None, None),
        "not a pair (running_max, running_sum) of two numbers",
    ),
    (
        lesson11.exercise_1,
        lambda running_max, running_sum, block: ("a", "b"),
        "not a pair (running_max, running_sum) of two numbers",
    ),
    (lesson01.exercise_1, None, "Not answered yet"),
    (lesson01.exercise_1, "x @ x.T", "expected a function, got str"),
    (lesson01.exercise_2, lambda x: ("a", "b"), "expected integer indices"),
    (lesson03.exercise_2, lambda d_k, std: (None, None), "expected a pair (spread, T), got (None, None)"),
    (lesson04.exercise_3, lambda n, i, j: "rows", "expected a list of row indices"),
]


@pytest.mark.parametrize(("check", "answer", "said"), CHEATS, ids=lambda item: getattr(item, "__qualname__", None))
def test_shortcuts_and_cheats_are_refused_with_their_own_sentence(check, answer, said, capsys):
    original = torch.allclose
    result, out = verdict(check, answer, capsys)
    assert result is False and said in out, out
    assert torch.allclose is original


@pytest.mark.parametrize(
    ("check", "arity"),
    [
        (lesson01.exercise_1, 1),
        (lesson02.exercise_1, 3),
        (lesson02.exercise_2, 1),
        (lesson03.exercise_1, 4),
        (lesson04.exercise_2, 4),
        (lesson06.exercise_2, 5),
        (lesson07.exercise_2, 4),
        (lesson09.exercise_1, 2),
        (lesson10.exercise_2, 2),
        (lesson12.exercise_2, 4),
    ],  # fmt: skip
)
def test_a_tensor_subclass_that_says_equal_to_everything_is_refused(check, arity, capsys):
    answer = [
        None,
        lambda a: _lying_zeros(a),
        lambda a, b: _lying_zeros(a, b),
        lambda a, b, c: _lying_zeros(a, b, c),
        lambda a, b, c, d: _lying_zeros(a, b, c, d),
        lambda a, b, c, d, e: _lying_zeros(a, b, c, d, e),
    ][arity]
    result, out = verdict(check, answer, capsys)
    assert result is False and "not yet" in out


def test_a_check_never_raises_on_malformed_answers(capsys):
    bad = [None, 3, "text", (None, None), ("a", "b"), [1, 2, 3], lambda *args: 1 / 0, lambda *args: ("a",), object()]
    for lesson in (lesson01, lesson02, lesson03, lesson04, lesson05, lesson06, lesson07, lesson08, lesson10, lesson12):
        for name in ("exercise_1", "exercise_2", "exercise_3"):
            check = getattr(lesson, name, None)
            if check is None or lesson is lesson08 and name == "exercise_2":
                continue
            for answer in bad:
                assert check(answer) is False
                out = capsys.readouterr().out
                assert out.count("\n") == 1 and (": not yet, " in out or "Not answered yet" in out), out


# --- the references, against computations written here -------------------------------------------------------


def test_lesson_01_and_04_references_follow_their_definitions():
    x = torch.randn(5, 3)
    cos = [[float(x[i] @ x[j] / (x[i].norm() * x[j].norm())) for j in range(5)] for i in range(5)]
    assert torch.allclose(lesson01.cosine_matrix_reference(x), torch.tensor(cos), atol=1e-6)
    for n, window in ((6, 1), (7, 3), (5, 9)):
        hidden = [[not (i - window < j <= i) for j in range(n)] for i in range(n)]
        assert torch.equal(lesson04.window_mask_loops(n, window), torch.tensor(hidden))


def test_lesson_11_reference_conversion_averages_consecutive_heads():
    """Written here from the definition: kv head g averages query heads g * group .. (g + 1) * group - 1."""
    torch.manual_seed(0)
    layer = ah.GroupedQueryAttention(5, 12, 8, 0.0, 6, qkv_bias=True).eval()
    converted = lesson11.reference_to_grouped(layer, 2)
    head_dim, group = 2, 3
    for name in ("W_key", "W_value"):
        weight, bias = getattr(layer, name).weight, getattr(layer, name).bias
        for g in range(2):
            rows = [weight[(g * group + h) * head_dim : (g * group + h + 1) * head_dim] for h in range(group)]
            biases = [bias[(g * group + h) * head_dim : (g * group + h + 1) * head_dim] for h in range(group)]
            got = getattr(converted, name)
            assert torch.allclose(got.weight[g * head_dim : (g + 1) * head_dim], sum(rows) / group, atol=1e-6)
            assert torch.allclose(got.bias[g * head_dim : (g + 1) * head_dim], sum(biases) / group, atol=1e-6)
    for name in ("W_query", "out_proj"):
        assert torch.equal(getattr(converted, name).weight, getattr(layer, name).weight)


def test_lesson_11_reference_stream_is_the_softmax_with_the_running_maximum():
    row = torch.tensor([3.0, -math.inf, 7.0, 1.0, -2.0])
    running_max, running_sum, maxima = lesson11._stream(lesson11._update, row, 2)
    assert maxima.tolist() == [3.0, 7.0, 7.0] and float(running_max) == 7.0
    assert torch.allclose(torch.exp(row - running_max) / running_sum, torch.exp(row) / torch.exp(row).sum())


def test_lesson_10_hidden_cases_have_several_heads_and_a_single_head_cache_fails():
    assert sum(layer.num_heads > 1 for layer, _ in lesson10._attention_cases()) >= 2


def test_lesson_05_cases_use_several_seeds():
    seeds = {seed for x, p, training, seed in lesson05._dropout_cases() if training and 0 < p < 1 and x.numel() > 1000}
    assert len(seeds) >= 3


# --- work sent to another thread or process, where the trace cannot see it ------------------------------------


def _softmax_in_a_thread(x, dim=-1, temperature=1.0):
    out = []
    worker = threading.Thread(target=lambda: out.append(torch.softmax(x / temperature, dim)))
    worker.start()
    worker.join()
    return out[0]


def _softmax_in_a_pool(x, dim=-1, temperature=1.0):
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(torch.softmax, x / temperature, dim).result()


def _softmax_low_level_thread(x, dim=-1, temperature=1.0):
    out = []
    _thread.start_new_thread(lambda: out.append(torch.softmax(x / temperature, dim)), ())
    while not out:
        time.sleep(0.001)
    return out[0]


def _stable_softmax(x, dim, temperature):
    e = torch.exp(x / temperature - (x / temperature).amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def _thread_refused_then_done_here(x, dim=-1, temperature=1.0):
    try:
        return _softmax_in_a_thread(x, dim, temperature)
    except RuntimeError:  # the refusal swallowed: the answer must still be refused
        return _stable_softmax(x, dim, temperature)


def _softmax_in_a_forked_process(x, dim=-1, temperature=1.0):
    with multiprocessing.get_context("fork").Pool(1) as pool:
        return pool.apply(torch.softmax, (x / temperature, dim))


def _runs_a_shell(x, dim=-1, temperature=1.0):
    os.system("true")
    return _stable_softmax(x, dim, temperature)


def _unwatches_threads(x, dim=-1, temperature=1.0):
    threading._start_new_thread = _thread.allocate_lock  # any other callable
    return _stable_softmax(x, dim, temperature)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (_softmax_in_a_thread, "your code starts a thread"),
        (_softmax_in_a_pool, "your code starts a thread"),
        (_softmax_low_level_thread, "your code starts a thread"),
        (_thread_refused_then_done_here, "your code starts a thread"),
        (_softmax_in_a_forked_process, "your code starts a process"),
        (_runs_a_shell, "your code starts a process"),
        (_unwatches_threads, "your code changes Python or the checks (threading._start_new_thread)"),
    ],
    ids=lambda item: getattr(item, "__name__", None),
)
def test_work_sent_to_another_thread_or_process_is_refused(answer, said, capsys):
    start = threading._start_new_thread
    result, out = verdict(lesson02.exercise_1, answer, capsys)
    assert result is False and said in out, out
    assert threading._start_new_thread is start, "put back as it was"
    assert "softmax" not in out.split("Hint:")[1], "the hint does not name the shortcut"


def test_threads_and_processes_still_start_outside_a_check_and_in_the_checks_own_code(capsys):
    out = []
    worker = threading.Thread(target=lambda: out.append(torch.ones(2).softmax(0)))
    worker.start()
    worker.join()
    assert torch.equal(out[0], torch.full((2,), 0.5))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert pool.submit(lambda: 3).result() == 3
    assert os.system("true") == 0
    right = RIGHT[(2, 1)][0]
    assert lesson02.exercise_1(right) is True  # the check itself may use threads (torch's, lesson 13's ranks)
    assert ": correct" in capsys.readouterr().out


# --- the fresh attempt to fool the checks (i40_fool_report.md): each false verdict it found -----------------------


def _scipy_softmax(x, dim=-1, temperature=1.0):
    import scipy.special

    return torch.from_numpy(scipy.special.softmax((x / temperature).numpy(), axis=dim))


def _scipy_attention(x, wq, wk, wv):
    import scipy.special

    scores = (x @ wq) @ (x @ wk).transpose(-2, -1) / wk.shape[1] ** 0.5
    return torch.from_numpy(scipy.special.softmax(scores.numpy(), axis=-1)) @ (x @ wv)


def _dropout_exact_count(x, p, training=True):
    """Drops exactly round(p * n) entries, chosen at random: the count never varies, as it must for independent
    entries."""
    if not training or p == 0:
        return x
    if p == 1:
        return torch.zeros_like(x)
    dropped = torch.randperm(x.numel())[: round(p * x.numel())]
    keep = torch.ones(x.numel())
    keep[dropped] = 0
    return x * keep.view_as(x) / (1 - p)


def _pickles_its_input_then_answers(x, W_qkv, W_out, num_heads, causal):
    import io
    import pickle

    pickle.dump(x, io.BytesIO())
    torch.save(x, io.BytesIO())
    return _fused_exp(x, W_qkv, W_out, num_heads, causal)


_SEEN_BLOCKS: list = []


def _update_from_every_block_so_far(running_max, running_sum, block):
    """Not an online update: it keeps every block in a global and recomputes the maximum and sum from scratch."""
    if torch.isneginf(running_max) and running_sum == 0:
        _SEEN_BLOCKS.clear()
    _SEEN_BLOCKS.append(block)
    row = torch.cat(_SEEN_BLOCKS)
    new_max = row.max()
    return new_max, torch.exp(row - new_max).sum() if not torch.isneginf(new_max) else torch.tensor(0.0)


def _kv_cache_of_the_inputs(attention, x_new, cache):
    """Caches the inputs and projects all of them again at every step, with F.linear rather than the layers."""
    inputs = x_new if cache is None else torch.cat([cache, x_new], 1)
    q = _split(F.linear(x_new, attention.W_query.weight, attention.W_query.bias), attention.num_heads)
    k = _split(F.linear(inputs, attention.W_key.weight, attention.W_key.bias), attention.num_heads)
    v = _split(F.linear(inputs, attention.W_value.weight, attention.W_value.bias), attention.num_heads)
    w = torch.softmax(q @ k.mT / math.sqrt(attention.head_dim), -1)
    return attention.out_proj((w @ v).transpose(1, 2).flatten(2)), inputs


FOOLED = [
    # (check, answer, accepted?, what the verdict must say)
    (lesson02.exercise_1, _scipy_softmax, False, "your code runs softmax from scipy"),
    (lesson03.exercise_1, _scipy_attention, True, "correct"),  # 03.1 lets the softmax be anyone's
    (lesson02.exercise_3, ("Same", " Sharper", "flatter "), True, "correct"),
    (
        lesson03.exercise_2,
        lambda d_k, std: (std**2 * float(ah.random_dot_products(d_k, 20_000).std()),) * 2,
        True,
        "correct",
    ),
    (lesson04.exercise_3, lambda n, i, j: [float(r) for r in range(i, j + 1)], False, "row indices (ints), got float"),
    (
        lesson04.exercise_3,
        lambda n, i, j: set(range(i, j + 1)),
        False,
        "expected a list of row indices (ints), got set",
    ),
    (lesson04.exercise_3, lambda n, i, j: list(range(j, i - 1, -1)), False, "not in increasing order"),
    (lesson05.exercise_1, _dropout_exact_count, False, "the number of entries dropped is nearly fixed"),
    (lesson06.exercise_2, _pickles_its_input_then_answers, True, "correct"),
    (lesson11.exercise_1, _update_from_every_block_so_far, False, "not yet"),
    (lesson10.exercise_1, _kv_cache_of_the_inputs, False, "your cache holds the inputs"),
]


@pytest.mark.parametrize(
    ("check", "answer", "accepted", "said"), FOOLED, ids=lambda item: getattr(item, "__name__", None)
)
def test_what_a_fresh_attempt_to_fool_the_checks_found(check, answer, accepted, said, capsys):
    result, out = verdict(check, answer, capsys)
    assert result is accepted and said in out, out


# --- the check's own frames and objects, where the references are ------------------------------------------------


def _stolen(frame):
    while frame is not None:
        if "expected" in frame.f_locals:
            return frame.f_locals["expected"]
        frame = frame.f_back


def _steal_with_getframe(*args):
    return _stolen(sys._getframe(1))


def _steal_with_inspect(*args):
    return _stolen(inspect.currentframe())


def _steal_from_a_traceback(*args):
    try:
        raise ValueError
    except ValueError as error:
        return _stolen(error.__traceback__.tb_frame)


def _steal_from_a_generator(*args):
    def running():
        yield

    generator = running()
    next(generator)
    return _stolen(generator.gi_frame.f_back)


def _steal_from_the_garbage_collector(x, *args):
    everything = gc.get_objects()
    shape = (len(x), len(x))
    return next(o for o in everything if isinstance(o, torch.Tensor) and o.shape == shape and o is not x)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (_steal_with_getframe, "sys._getframe"),
        (_steal_with_inspect, "sys._getframe"),
        (_steal_from_a_traceback, "tb_frame"),
        (_steal_from_a_generator, "gi_frame"),
        (_steal_from_the_garbage_collector, "gc.get_objects"),
    ],
    ids=lambda item: getattr(item, "__name__", None),
)
@pytest.mark.parametrize("check", [lesson01.exercise_1, lesson04.exercise_3], ids=["01.1", "04.3"])
def test_an_answer_that_reads_the_checks_own_frames_or_objects_is_refused(check, answer, said, capsys):
    result, out = verdict(check, answer, capsys)
    assert result is False and f"your code reads the check's own frames or objects ({said})" in out, out


def test_library_code_that_looks_at_frames_is_not_the_readers(capsys):
    def warns(x, dim=-1, temperature=1.0):  # warnings.warn and torch look at frames themselves
        warnings.warn("a warning of the reader's", stacklevel=1)
        return _stable_softmax(x, dim, temperature)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result, out = verdict(lesson02.exercise_1, warns, capsys)
    assert result is True and ": correct" in out, out


# --- switching off what the check watches, or patching Python or the checks themselves ---------------------------


class _ModesOff:
    """torch's own helper that pops the dispatch modes, and the guard that turns off the function modes."""

    def __enter__(self):
        self.functions = torch._C.DisableTorchFunction()
        self.functions.__enter__()
        self.modes = _disable_current_modes()
        self.modes.__enter__()

    def __exit__(self, *exc):
        self.modes.__exit__(*exc)
        self.functions.__exit__(*exc)


class _DispatchOff:
    def __enter__(self):
        self.guard = torch._C._DisableTorchDispatch()
        self.guard.__enter__()

    def __exit__(self, *exc):
        self.guard.__exit__(*exc)


def _softmax_with_modes_off(x, dim=-1, temperature=1.0):
    with _ModesOff():
        return torch.softmax(x / temperature, dim)


def _softmax_with_dispatch_off(x, dim=-1, temperature=1.0):
    with _DispatchOff():
        return torch.softmax(x / temperature, dim)


def _softmax_with_the_modes_popped(x, dim=-1, temperature=1.0):
    with _disable_current_modes():
        return torch.softmax(x / temperature, dim)


def _package_softmax_without_the_trace(x, dim=-1, temperature=1.0):
    sys.settrace(None)
    return ah.softmax_stable(x / temperature, dim)


def _prints_correct(x, dim=-1, temperature=1.0):
    original = builtins.print
    builtins.print = lambda *args, **kwargs: original("Exercise 1: correct on all 7 hidden cases.")
    return x


def _judges_everything_right(x, dim=-1, temperature=1.0):
    from attention_helpers import lessons

    lessons.Exercise._judge = lambda self, candidate, cases: len(cases)
    return x


def _replaces_a_later_check(x, dim=-1, temperature=1.0):
    lesson03.exercise_1 = lambda answer: print("Exercise 1: correct.") or True
    return x


def _exits(x, dim=-1, temperature=1.0):
    sys.exit(3)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (_softmax_with_modes_off, "your code switches off what the check watches (DisableTorchFunction.__enter__)"),
        (_softmax_with_dispatch_off, "PyTorch's softmax kernel"),  # one watch off: the other still sees it
        (_softmax_with_the_modes_popped, "switches off what the check watches (_disable_current_modes)"),
        (_package_softmax_without_the_trace, "your code switches off what the check watches (sys.settrace)"),
        (_prints_correct, "your code changes Python or the checks (builtins.print)"),
        (_judges_everything_right, "your code changes Python or the checks (Exercise._judge)"),
        (
            _replaces_a_later_check,
            "your code changes Python or the checks (attention_helpers.lessons.lesson03.exercise_1)",
        ),
        (_exits, "your code raised SystemExit"),
    ],
    ids=lambda item: getattr(item, "__name__", None),
)
def test_an_answer_that_switches_off_the_watch_or_patches_the_checks_is_refused_and_undone(answer, said, capsys):
    check_of_lesson_03, judge, printer = lesson03.exercise_1, Exercise._judge, builtins.print
    result, out = verdict(lesson02.exercise_1, answer, capsys)
    assert result is False and said in out, out
    assert (lesson03.exercise_1, Exercise._judge, builtins.print) == (check_of_lesson_03, judge, printer), "put back"
    assert sys.gettrace() is None and sys.getprofile() is None
    wrong, out = verdict(lesson02.exercise_1, lambda x, dim=-1, temperature=1.0: x, capsys)
    assert wrong is False and ": not yet, " in out, "a later check still judges"


@pytest.mark.parametrize(
    ("sentences", "said"),
    [
        (None, "sentences must be the lesson's list of sentences"),
        ([1, 2, 3, 4, 5, 6], "sentences must be the lesson's list of sentences"),
        ([], "sentences must be the lesson's list of sentences"),
        (["The cat is sleeping on the carpet.", "Stocks fell today."], "sentences must be the lesson's list"),
        (["The cat is sleeping on the carpet.", *lesson09.SENTENCES[1:]], "sentences must be the lesson's list"),
        ([*lesson09.SENTENCES[:5], "A cat sleeps on the carpet."], "sentences must be the lesson's list"),
    ],
)
def test_lesson_09_exercise_2_judges_only_its_own_sentences_and_says_so_in_one_sentence(sentences, said, capsys):
    """A list with the question in it, or a sentence changed to be nearest, would make the check easy."""
    result = lesson09.exercise_2(0, sentences)
    out = capsys.readouterr().out
    assert result is False and out.count("\n") == 1 and said in out, out
    assert lesson09.exercise_2(0, list(lesson09.SENTENCES)) is False, "index 0 shares a word, not the meaning"


_POOL_STARTED_BEFORE = concurrent.futures.ThreadPoolExecutor(1)
_POOL_STARTED_BEFORE.submit(int).result()  # its worker thread runs before any check


def _softmax_in_a_pool_started_before(x, dim=-1, temperature=1.0):
    return _POOL_STARTED_BEFORE.submit(torch.softmax, x / temperature, dim).result()


def test_work_handed_to_a_thread_started_before_the_check_is_refused(capsys):
    result, out = verdict(lesson02.exercise_1, _softmax_in_a_pool_started_before, capsys)
    assert result is False and "your code hands work to another thread or process (concurrent.futures" in out, out


def test_work_fed_through_a_plain_list_to_a_spinning_thread_started_before_the_check_is_refused(capsys):
    """No queue, no executor: the answer appends its scores to a list that a thread of the reader's, started before
    the check, polls; the softmax runs there, out of the trace's sight."""
    work, results, stop = [], [], []

    def spin():
        while not stop:
            if work:
                x, dim, temperature = work.pop()
                results.append(torch.softmax(x / temperature, dim))
            time.sleep(0.001)

    def softmax_by_the_spinning_thread(x, dim=-1, temperature=1.0):
        work.append((x, dim, temperature))
        while not results:
            time.sleep(0.001)
        return results.pop()

    spinner = threading.Thread(target=spin, name="spinner", daemon=True)
    spinner.start()
    try:
        result, out = verdict(lesson02.exercise_1, softmax_by_the_spinning_thread, capsys)
    finally:
        stop.append(True)
        spinner.join()
    assert result is False and "your code has a thread of its own running beside the check (spinner)" in out, out
    assert verdict(lesson02.exercise_1, RIGHT[(2, 1)][0], capsys)[0] is True, "once it ends, the check judges again"


# "Endless" for the check: 20 s is forty times its limit in the test; ending at all keeps a broken timer from hanging
# the test run (it then fails on the verdict instead)
def _endless(scores, dim, temperature):
    end = time.monotonic() + 20
    while time.monotonic() < end:
        scores = scores + 0


def _endless_swallowing_exceptions(scores, dim, temperature):
    end = time.monotonic() + 20
    while time.monotonic() < end:
        try:  # noqa: SIM105 (a reader's broad handler, which must not swallow the check's stop)
            scores = scores + 0
        except Exception:
            pass


def _softmax_by_hand(scores, dim, temperature):
    shifted = scores / temperature - (scores / temperature).amax(dim, keepdim=True)
    return shifted.exp() / shifted.exp().sum(dim, keepdim=True)


@pytest.mark.parametrize("answer", [_endless, _endless_swallowing_exceptions], ids=["loop", "loop with except"])
def test_an_answer_that_never_ends_is_stopped_after_the_time_limit_with_one_sentence(answer, capsys):
    import dataclasses

    check = dataclasses.replace(lesson02.exercise_1.__self__, time_limit=0.5).check
    assert verdict(check, _softmax_by_hand, capsys)[0] is True  # the timer leaves a quick answer alone
    began = time.monotonic()
    result, out = verdict(check, answer, capsys)
    assert result is False and time.monotonic() - began < 5
    assert "still running after 0.5 s" in out and "a loop that never ends" in out, out


def test_the_time_limit_never_stops_the_answer_inside_the_checks_own_trace_functions(capsys):
    import dataclasses

    # Python switches off a trace or profile function that raises: a stop landing in one was once taken for the answer
    # switching it off, in about 6 runs of 100 at this limit; 80 runs show that slip with a chance of 99%.
    check = dataclasses.replace(lesson02.exercise_1.__self__, time_limit=0.02).check
    verdicts = [verdict(check, _endless_swallowing_exceptions, capsys)[1] for _ in range(80)]
    assert all("still running after 0.02 s" in out for out in verdicts), [v for v in verdicts if "still" not in v][0]


def test_the_time_limit_is_one_minute_per_case_and_lesson_13_leaves_it_to_its_launcher():
    from attention_helpers.lessons import lesson13

    assert lesson02.exercise_1.__self__.time_limit == 60
    assert lesson13.exercise_1.__self__.time_limit is None and lesson13.exercise_2.__self__.time_limit is None


# --- what an answer cell changes before the check cell runs (the tester's second round) ------------------------


def _dot_products(a, b, dim=1, eps=1e-8):
    return (a * b).sum(dim)


def _zeros_forward(self, x, *args, **kwargs):
    return torch.zeros(*x.shape[:-1], self.d_out)


PATCHES = [
    # (check, where, name, the replacement, the wrong answer it would let through, what the verdict names)
    (lesson01.exercise_1, F, "cosine_similarity", _dot_products, lambda x: x @ x.T, "functional.cosine_similarity"),
    (lesson03.exercise_1, torch, "softmax", lambda s, dim=-1: s, lambda x, q, k, v: x @ v, "torch.softmax"),
    (lesson04.exercise_1, torch.Tensor, "__eq__", lambda a, b: torch.tensor(True), lambda n, w: None, "__eq__"),
    (lesson04.exercise_1, torch, "equal", lambda a, b: True, lambda n, w: torch.zeros(n, n, dtype=bool), "equal"),
    (lesson05.exercise_1, torch, "manual_seed", lambda seed: None, None, "torch.manual_seed"),
    (lesson05.exercise_2, builtins, "abs", lambda x: 0.0, lambda n, p: 0.0, "builtins.abs"),
    (lesson06.exercise_2, ah.MultiHeadAttention, "forward", _zeros_forward, lambda x, *a: 0 * x, "MultiHeadAttention"),
    (lesson07.exercise_3, torch.nn.TransformerEncoderLayer, "forward", lambda self, src, *a, **k: src, None, "Layer"),
    (lesson08.exercise_1, torch, "roll", lambda x, *a, **k: x.flip(-1), lambda x: x.flip(-1), "torch.roll"),
    (
        lesson12.exercise_2,
        ah.DecoderLayer,
        "forward",
        lambda self, x, *a, **k: x,
        lambda layer, x, *a: x,
        "DecoderLayer",
    ),
]


@pytest.mark.parametrize(
    ("check", "where", "name", "patch", "answer", "said"),
    PATCHES,
    ids=[f"{getattr(p[1], '__name__', p[1])}.{p[2]}" for p in PATCHES],
)
def test_a_function_replaced_before_the_check_is_named_and_refused(check, where, name, patch, answer, said, capsys):
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(where, name, patch)
    try:
        result, out = verdict(check, answer or (lambda *args: None), capsys)
    finally:
        monkeypatch.undo()
    assert result is False and "since the checks were imported" in out and said in out, out
    assert "restart the kernel" in out, out
    assert verdict(check, answer or (lambda *args: None), capsys)[0] is False  # and refused on its own merits


def test_additions_jupyters_own_swaps_and_torchs_own_wrappers_are_not_replacements(monkeypatch, capsys):
    monkeypatch.setattr(torch, "something_new", 1, raising=False)
    monkeypatch.setattr(builtins, "input", lambda prompt="": "")  # ipykernel swaps it at every cell
    monkeypatch.setattr(torch, "manual_seed", torch._disable_dynamo(torch.manual_seed))  # what torch._dynamo does
    from torch._dynamo.mutation_guard import install_generation_tagging_init

    for name in ("__init__", "__setstate__"):  # torch._dynamo wraps them in closures, on each install
        monkeypatch.setattr(torch.nn.Module, name, getattr(torch.nn.Module, name))
    for _ in range(2):
        monkeypatch.setattr(torch.nn.Module, "___needs_generation_tag_patch", True, raising=False)
        install_generation_tagging_init()
    for key in [(1, 1), (5, 1), (6, 2), (8, 1)]:
        result, out = verdict(_check(*key), RIGHT[key][0], capsys)
        assert result is True, out
    imitation = functools.wraps(torch.random.manual_seed)(lambda seed: None)  # looks like torch's, is not
    monkeypatch.setattr(torch, "manual_seed", imitation)
    assert "replaced torch.manual_seed" in verdict(lesson05.exercise_1, _dropout_where, capsys)[1]


def _by_shape(function):
    """``function`` whose results are kept by the shapes of its tensor arguments: stale for new values."""
    kept = {}

    def memo(*args):
        key = tuple(tuple(a.shape) for a in args if isinstance(a, torch.Tensor))
        if key not in kept:
            kept[key] = function(*args)
        return kept[key]

    return memo


@pytest.mark.parametrize("key", [(2, 2), (3, 1), (6, 2), (9, 1), (10, 2), (12, 1)], ids=str)
def test_an_answer_that_keeps_its_results_by_shape_is_refused(key, capsys):
    result, out = verdict(_check(*key), _by_shape(RIGHT[key][0]), capsys)
    assert result is False and "the same shape with other values gave the earlier answer" in out, out
    assert "keep results between calls" in out, out
    for right in RIGHT[key]:  # the same shape with new values: a right answer follows them
        assert verdict(_check(*key), right, capsys)[0] is True


def _update_in_the_block(running_max, running_sum, block):
    new_max = torch.maximum(running_max, block.max())
    shift = new_max if torch.isfinite(new_max) else torch.zeros(())
    block.sub_(shift).exp_()  # the caller's scores are gone
    return new_max, running_sum * torch.exp(running_max - shift) + block.sum()


def _update_in_the_sum(running_max, running_sum, block):
    new_max, new_sum = _update_where(running_max, running_sum, block)
    running_sum.copy_(new_sum)
    return new_max, running_sum.clone()


@pytest.mark.parametrize(("answer", "name"), [(_update_in_the_block, "block"), (_update_in_the_sum, "running_sum")])
def test_lesson_11_refuses_writes_into_its_inputs_like_every_exercise(answer, name, capsys):
    result, out = verdict(lesson11.exercise_1, answer, capsys)
    assert result is False and f"your function changed its input {name} in place" in out, out


@pytest.mark.parametrize(
    ("check", "answer", "said"),
    [
        (
            lesson06.exercise_1,
            ("4", "(2, 3, 5, 4)", "(2, 3, 5, 5)", "(2, 5, 12)"),
            "expected an int for head_dim, got '4'",
        ),
        (lesson06.exercise_1, (torch.tensor(4), torch.tensor([2, 3, 5, 4]), 0, 0), "expected an int for head_dim"),
        (lesson06.exercise_1, (4, torch.tensor([2, 3, 5, 4]), 0, 0), "expected a tuple of ints for the queries' shape"),
        (lesson07.exercise_3, torch.nn.Identity(), "expected a class, got a module"),
    ],
)
def test_answers_of_the_wrong_type_hear_the_type_expected(check, answer, said, capsys):
    result, out = verdict(check, answer, capsys)
    assert result is False and said in out, out


def test_a_package_class_a_check_uses_is_snapshotted_even_when_the_notebook_never_imported_its_module():
    """Lesson 04's notebook imports only the lesson's checks; an answer cell that reaches ``ah.CausalAttention`` first
    (importing its module) and patches it must still be caught: the snapshot holds every class the checks use."""
    import subprocess

    cell = (
        "import attention_helpers as ah\n"
        "from attention_helpers.lessons import lesson04 as checks\n"
        "ah.CausalAttention.forward = lambda self, x, *a, **k: self.W_value(x)\n"
        "checks.exercise_3(lambda num_tokens, i, j: [i, j])\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", cell], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "not yet" in done.stdout and "CausalAttention.forward since the checks were imported" in done.stdout, done
    # and so no check imports the package's code inside a function, where the snapshot, taken at import, misses it
    import ast
    import pathlib

    for path in sorted((pathlib.Path(ah.__file__).parent / "lessons").glob("*.py")):
        for function in [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef)]:
            late = [node.lineno for node in ast.walk(function) if isinstance(node, ast.ImportFrom) and node.level > 1]
            assert not late, f"{path.name} line {late[0]} imports the package's code inside {function.name}"
