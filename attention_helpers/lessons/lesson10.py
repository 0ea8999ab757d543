"""Lesson 10's checks: a KV cache for one causal attention layer, fed hidden sequences one token at a time and
compared with the layer on the whole sequence, and a top-k filter."""

from __future__ import annotations

import torch

from ..attention import MultiHeadAttention
from ..decoding import top_k_filter
from ..functional import causal_mask
from . import Exercise, Mistake, WrongFormError, attend, call_answer, compare, hidden_generator, plain, trusted

_SEED = 10_01


def _attention_cases() -> list[tuple[MultiHeadAttention, torch.Tensor]]:
    """Hidden causal layers (``d_in != d_out``, 1 to 3 heads) and sequences ``(batch, num_tokens, d_in)``."""
    generator, cases = hidden_generator(_SEED), []
    for d_in, d_out, num_heads, batch, num_tokens in ((5, 6, 2, 1, 7), (4, 9, 3, 3, 5), (3, 4, 1, 2, 1)):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=generator)))
            layer = MultiHeadAttention(d_in, d_out, 16, 0.0, num_heads, qkv_bias=True).eval()
        cases.append((layer, torch.randn(batch, num_tokens, d_in, generator=generator)))
    return cases


KV_HINT = (
    "each step projects only the new token, splits it into heads, appends its key and value to the cached ones "
    "along the token axis, lets the new query attend to all of them (no mask is needed: nothing cached lies in its "
    "future), then merges the heads and projects (reread 'A KV cache, by hand')"
)
CACHE_HINT = "a KV cache keeps the keys and values themselves, not the inputs: each step projects only the new token"


def _step_by_step(kv_step, layer: MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
    """``x`` fed to ``kv_step`` one token at a time, twice in turns, each from no cache and then from its own: the
    outputs ``(batch, num_tokens, d_out)``; a step continues from the cache it is given, from nothing else."""
    projected: list[int] = []  # how many tokens each call of W_key and W_value projects
    for projection in (layer.W_key, layer.W_value):  # the answer's own copy of the layer, dropped after its run
        projection.register_forward_hook(lambda module, inputs, output: projected.append(inputs[0].shape[-2]))
    outputs, caches = [], [None, None]
    for t in range(x.shape[1]):
        out, caches[0] = _one_step(kv_step, layer, x, t, caches[0], projected)
        again, caches[1] = _one_step(kv_step, layer, x, t, caches[1], projected)
        with trusted():  # the check's comparison, not the answer's code
            if compare(again, out) is not None:
                raise WrongFormError(
                    f"your function does not continue from the cache it is given: fed two sequences in turns, step "
                    f"{t} changed",
                    "all a step knows of the earlier tokens must come in through its cache argument and go out in the "
                    "cache it returns, with nothing kept in a global variable or on the layer",
                )
        outputs.append(out)
    return torch.cat(outputs, dim=1)


def _one_step(kv_step, layer, x: torch.Tensor, t: int, cache, projected: list) -> tuple:
    """Step ``t`` of ``x`` from ``cache``: ``(out, cache)``; a step that changes its ``x_new``, projects more than the
    new token or returns no ``(out, cache)`` is of the wrong form."""
    result = call_answer(lambda x_new: kv_step(layer, x_new, cache), x[:, t : t + 1].clone())  # the cache may change
    if any(count > 1 for count in projected):
        raise WrongFormError(f"at step {t} W_key or W_value projected {max(projected)} tokens", CACHE_HINT)
    projected.clear()
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise WrongFormError(f"kv_step must return a pair (out, cache), got {type(result).__name__}", KV_HINT)
    out, cache = result
    if t > 0 and _holds_inputs(cache, x[:, :t]):
        raise WrongFormError(f"your cache holds the inputs at step {t}, not their keys and values", CACHE_HINT)
    if not isinstance(out, torch.Tensor) or out.shape != (x.shape[0], 1, layer.d_out):
        with trusted():
            problem = compare(out, torch.zeros(len(x), 1, layer.d_out))
        raise WrongFormError(f"at step {t}, out: {problem}", KV_HINT)
    return plain(out), cache


def _holds_inputs(cache, inputs: torch.Tensor) -> bool:
    """Whether ``cache`` (a tensor, or tuples, lists and dicts of them) holds one of ``inputs``, in any order."""
    if isinstance(cache, torch.Tensor):
        cache, d_in = plain(cache), inputs.shape[-1]
        if cache.dim() == 0 or cache.shape[-1] != d_in:
            return False
        return bool((cache[..., None, :] == inputs.reshape(-1, d_in)).all(-1).any())
    items = cache.values() if isinstance(cache, dict) else cache if isinstance(cache, (tuple, list)) else ()
    return any(_holds_inputs(item, inputs) for item in items)


def _kv_mistakes(layer: MultiHeadAttention, x: torch.Tensor) -> list[Mistake]:
    """The named mistakes of exercise 1 on one hidden case: the layer on the whole sequence with other keys hidden than
    the future ones, compared after the first step (which may see no key)."""
    queries, keys, values = (layer.split_heads(w(x)) for w in (layer.W_query, layer.W_key, layer.W_value))
    future, itself = causal_mask(x.shape[1]), torch.eye(x.shape[1], dtype=torch.bool)

    def after_first(hide, swap=False):
        scored, mixed = (values, keys) if swap else (keys, values)
        wrong = layer.out_proj(layer.merge_heads(attend(queries, scored, mixed, hide=hide)))
        return lambda answer: x.shape[1] > 1 and compare(answer[:, 1:], wrong[:, 1:]) is None

    attends_to = (  # (the keys hidden from each new query, which mistake hides them)
        (~itself, "only to itself: its key and value are never appended to the cache it returns"),
        (future[0], "only to the first token: a causal mask's first row was applied to the new query"),
        (future | itself, "to the tokens before it but not to itself: it ran before its key was appended"),
    )
    return [
        Mistake("your outputs hold nan: a query saw no key", "it must see itself", matches=lambda a: a.isnan().any()),
        *(Mistake(f"each new token attends {what}", KV_HINT, matches=after_first(hide)) for hide, what in attends_to),
        Mistake(
            "the keys and values are swapped: the query is scored against the values, and the weights mix the keys",
            "the query is compared with the keys, from W_key, and the weights mix the values, from W_value; keep them "
            "in that order in the cache too",
            matches=after_first(future, swap=True),
        ),
    ]


# ``kv_step(attention, x_new, cache) -> (out, cache)``: ``attention`` a causal ``ah.MultiHeadAttention``, ``x_new``
# ``(batch, 1, d_in)``, ``cache`` None at the first step, then whatever the previous step returned; ``out`` ``(batch, 1,
# d_out)`` must equal that position's row of ``attention(x)`` on the whole sequence.
exercise_1 = Exercise(
    "Exercise 1",
    reference=lambda layer, x: layer(x),  # (batch, num_tokens, d_out): the uncached causal layer
    cases=_attention_cases,
    run=_step_by_step,
    hint=KV_HINT,
    mistakes=_kv_mistakes,
    done=" on all {n} hidden sequences, step by step equal to the uncached layer",
    rule="the exercise asks you to write the cache yourself from the layer's W_query, W_key, W_value and out_proj, "
    "not to run the layer or the package's cache",
    allowed=(MultiHeadAttention.split_heads, MultiHeadAttention.merge_heads),
).check


def _top_k_cases() -> list[tuple[torch.Tensor, int]]:
    """Hidden logits ``(batch, vocab_size)`` and k: a batch of one, k = 1, k = vocab_size, an odd vocabulary."""
    generator = hidden_generator(_SEED + 1)
    shapes = ((1, 11, 3, 1), (4, 73, 5, 3), (3, 9, 1, 1), (2, 7, 7, 1))  # (batch, vocab_size, k, spread)
    return [(spread * torch.randn(batch, vocab, generator=generator), k) for batch, vocab, k, spread in shapes]


TOP_K_HINT = (
    "find each row's k-th largest logit, and set every logit below it to minus infinity (reread 'Temperature and "
    "top-k')"
)


def _top_k_mistakes(logits, k):
    """The named mistakes of exercise 2 on one hidden case (a test that cannot run on the answer is skipped)."""
    expected = top_k_filter(logits, k)
    smallest = torch.topk(logits, k, dim=-1, largest=False).values[:, -1:]

    def kept(answer):  # how many logits each row keeps: the finite ones, or the non-zero ones where some are 0
        finite = torch.isfinite(answer)
        return (finite & (answer != 0) if bool((answer == 0).any()) else finite).sum(-1)

    return [
        Mistake("you kept the k smallest logits", TOP_K_HINT, logits.masked_fill(logits > smallest, -torch.inf)),
        Mistake("the dropped logits are 0, not -inf", "set them to minus infinity", expected.nan_to_num(neginf=0.0)),
        Mistake(
            lambda answer: f"each row keeps {int(kept(answer)[0])} logits, not k = {k}",
            TOP_K_HINT,
            matches=lambda answer: answer.shape == logits.shape and (kept(answer) != k).all(),
        ),
    ]


# ``my_top_k(logits, k)``: keep the ``k`` largest logits of each row, set the others to ``-inf``.
exercise_2 = Exercise(
    "Exercise 2",
    reference=top_k_filter,
    cases=_top_k_cases,
    hint=TOP_K_HINT,
    describe=lambda n, total, logits, k: f"on hidden case {n} of {total} (k = {k}, logits {tuple(logits.shape)})",
    mistakes=_top_k_mistakes,
    returned_none="return the filtered logits",
    rule="the exercise asks you to write the filter yourself, not to call the package's top_k_filter",
).check
