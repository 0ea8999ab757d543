"""Lesson 10's exercise checks: a KV cache step against the uncached layer, and top-k filtering."""

import math

import torch

from attention_helpers.lessons import lesson10 as checks

NOT_ANSWERED = "Not answered yet (the answer is still None).\n"


def verdict(capsys, check, *args):
    result = check(*args)
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return result, out


def make_step(append=True, attend_before_append=False, first_row_mask=False, swap=False):
    def kv_step(attention, x_new, cache):
        batch = x_new.shape[0]

        def split(t):
            return t.view(batch, 1, attention.num_heads, attention.head_dim).transpose(1, 2)

        query, key, value = (
            split(attention.W_query(x_new)),
            split(attention.W_key(x_new)),
            split(attention.W_value(x_new)),
        )
        if swap:
            key, value = value, key
        old_keys, old_values = cache if cache is not None else (key[:, :, :0], value[:, :, :0])
        keys, values = torch.cat([old_keys, key], dim=2), torch.cat([old_values, value], dim=2)
        seen_keys, seen_values = (old_keys, old_values) if attend_before_append else (keys, values)
        scores = query @ seen_keys.transpose(-2, -1) / math.sqrt(attention.head_dim)
        if first_row_mask:
            scores = scores.masked_fill(attention.mask[:1, : seen_keys.shape[2]], -math.inf)
        weights = torch.softmax(scores, dim=-1)
        out = attention.out_proj((weights @ seen_values).transpose(1, 2).reshape(batch, 1, attention.d_out))
        return out, ((keys, values) if append else cache)

    return kv_step


def recompute_from_cached_inputs(attention, x_new, cache):
    """Not a KV cache: keeps the inputs and reruns the whole layer on them, which gives the right rows."""
    inputs = x_new if cache is None else torch.cat([cache, x_new], dim=1)
    return attention(inputs)[:, -1:], inputs


def project_cached_inputs(attention, x_new, cache):
    """Right outputs, but the keys and values of every cached input are projected again at each step."""
    inputs = x_new if cache is None else torch.cat([cache, x_new], dim=1)
    out, _ = make_step()(attention, x_new, None)  # a first step of the right answer: shapes and names
    keys = attention.W_key(inputs)
    return out + 0 * keys.sum(), inputs


def reproject_newest_first(attention, x_new, cache):
    """Right outputs, but the cache holds the inputs, newest first, projected again with the weights, not the layers."""
    inputs = x_new if cache is None else torch.cat([x_new, cache], dim=1)
    keys, values = (torch.nn.functional.linear(inputs, w.weight, w.bias) for w in (attention.W_key, attention.W_value))
    query, keys, values = (attention.split_heads(t) for t in (attention.W_query(x_new), keys, values))
    weights = torch.softmax(query @ keys.transpose(-2, -1) / math.sqrt(attention.head_dim), dim=-1)
    return attention.out_proj(attention.merge_heads(weights @ values)), inputs


def package_cache(attention, x_new, cache):
    """The package's own cache, which the statement forbids."""
    import attention_helpers as ah

    if cache is None:
        cache = ah.KVCache(1, x_new.shape[0], attention.num_heads, 16, attention.head_dim)
    return attention(x_new, cache=cache), cache


def test_kv_cache_step(capsys):
    assert verdict(capsys, checks.exercise_1, None) == (False, "Exercise 1: " + NOT_ANSWERED)
    ok, out = verdict(capsys, checks.exercise_1, make_step())
    assert ok and out.startswith("Exercise 1: correct")
    for wrong, reason in (
        (make_step(append=False), "never appended"),
        (make_step(first_row_mask=True), "a causal mask's first row"),
        (make_step(attend_before_append=True), "not to itself"),
        (lambda attention, x_new, cache: attention(x_new), "runs the package's MultiHeadAttention.forward"),
        (lambda attention, x_new, cache: attention.W_value(x_new), "must return a pair"),
        (recompute_from_cached_inputs, "runs the package's MultiHeadAttention.forward"),
        (project_cached_inputs, "projected 2 tokens"),
        (reproject_newest_first, "your cache holds the inputs at step 1"),
        (package_cache, "runs the package's"),
    ):
        ok, out = verdict(capsys, checks.exercise_1, wrong)
        assert not ok and "not yet" in out and reason in out and "Hint: " in out


def test_top_k(capsys):
    assert verdict(capsys, checks.exercise_2, None) == (False, "Exercise 2: " + NOT_ANSWERED)

    def top_k(logits, k):
        return logits.masked_fill(logits < logits.topk(k, dim=-1).values[:, -1:], -math.inf)

    ok, out = verdict(capsys, checks.exercise_2, top_k)
    assert ok and out.startswith("Exercise 2: correct")
    for wrong, reason in (
        (lambda logits, k: logits.topk(k, dim=-1).values, "expected shape (1, 11), got (1, 3)"),
        (
            lambda logits, k: logits.masked_fill(
                logits > logits.topk(k, dim=-1, largest=False).values[:, -1:], -math.inf
            ),
            "kept the k smallest",
        ),
        (lambda logits, k: top_k(logits, k).nan_to_num(neginf=0.0), "are 0, not -inf"),
        (
            lambda logits, k: logits.masked_fill(logits <= logits.topk(k, dim=-1).values[:, -1:], -math.inf),
            "logits, not k",
        ),
    ):
        ok, out = verdict(capsys, checks.exercise_2, wrong)
        assert not ok and "not yet" in out and reason in out and "Hint: " in out


def test_kv_step_that_changes_its_input_in_place_is_rejected(capsys):
    right = make_step()

    def scales_x_new_in_place(attention, x_new, cache):
        out, cache = right(attention, x_new, cache)
        x_new.zero_()  # the caller's token is gone
        return out, cache

    ok, out = verdict(capsys, checks.exercise_1, scales_x_new_in_place)
    assert not ok and "changed its input x_new in place" in out and "Hint: build a new tensor" in out


def test_kv_step_may_grow_its_own_cache_in_place(capsys):
    """The cache is the answer's own (what its previous call returned): writing into it is not a mistake."""
    right = make_step()

    def preallocated(attention, x_new, cache):  # cache: (2, batch, num_heads, 16, head_dim), filled up to .length
        length = 0 if cache is None else cache.length
        old = None if cache is None else tuple(cache[:, :, :, :length])
        out, (keys, values) = right(attention, x_new, old)
        if cache is None:
            cache = torch.zeros(2, *keys.shape[:2], 16, keys.shape[-1])
        cache[0, :, :, length] = keys[:, :, -1]  # written into the tensor the previous call returned
        cache[1, :, :, length] = values[:, :, -1]
        cache.length = length + 1
        return out, cache

    ok, out = verdict(capsys, checks.exercise_1, preallocated)
    assert ok, out


def test_top_k_that_changes_its_logits_in_place_is_rejected(capsys):
    def in_place(logits, k):
        return logits.masked_fill_(logits < logits.topk(k, dim=-1).values[:, -1:], -math.inf)

    ok, out = verdict(capsys, checks.exercise_2, in_place)
    assert not ok and "changed its input logits in place" in out and "Hint: build a new tensor" in out


def test_top_k_may_not_call_the_packages_top_k_filter(capsys):
    import attention_helpers as ah

    for answer in (ah.top_k_filter, lambda logits, k: ah.decoding.top_k_filter(logits, k)):
        ok, out = verdict(capsys, checks.exercise_2, answer)
        assert not ok and "runs the package's top_k_filter" in out and "Hint: the exercise asks you" in out, out


def test_kv_step_with_keys_and_values_swapped_gets_its_own_hint(capsys):
    ok, out = verdict(capsys, checks.exercise_1, make_step(swap=True))
    assert not ok and "the keys and values are swapped" in out
    assert "Hint: the query is compared with the keys, from W_key, and the weights mix the values" in out


_KEPT = {}  # a global the wrong answer below keeps its keys and values in


def global_cache(attention, x_new, cache):
    """Right outputs for one sequence at a time, but the keys and values live in a global: the cache it returns is 0."""
    out, grown = make_step()(attention, x_new, None if cache is None else _KEPT[id(attention)])
    _KEPT[id(attention)] = grown
    return out, 0


def cache_in_a_dict_grown_in_place(attention, x_new, cache):
    """Right: the cache is a dict the step grows in place, the keys and values kept before the heads are split."""
    cache = {"keys": x_new.new_empty(len(x_new), 0, attention.d_out), "values": None} if cache is None else cache
    cache["keys"] = torch.cat([cache["keys"], attention.W_key(x_new)], dim=1)
    cache["values"] = attention.W_value(x_new) if cache["values"] is None else cache["values"]
    if cache["values"].shape[1] < cache["keys"].shape[1]:
        cache["values"] = torch.cat([cache["values"], attention.W_value(x_new)], dim=1)
    heads = [attention.split_heads(t) for t in (attention.W_query(x_new), cache["keys"], cache["values"])]
    weights = torch.softmax(heads[0] @ heads[1].transpose(-2, -1) * attention.head_dim**-0.5, dim=-1)
    return attention.out_proj(attention.merge_heads(weights @ heads[2])), cache


def cache_as_a_list_of_steps(attention, x_new, cache):
    """Right: the cache is a list of each step's (key, value) heads, concatenated when attending."""
    batch, heads, head_dim = len(x_new), attention.num_heads, attention.head_dim
    key, value = (
        w(x_new).reshape(batch, 1, heads, head_dim).permute(0, 2, 1, 3) for w in (attention.W_key, attention.W_value)
    )
    steps = [*(cache or []), (key, value)]
    keys, values = torch.cat([k for k, _ in steps], 2), torch.cat([v for _, v in steps], 2)
    query = attention.W_query(x_new).reshape(batch, 1, heads, head_dim).permute(0, 2, 1, 3)
    context = torch.softmax(torch.einsum("bhqd,bhkd->bhqk", query, keys) / math.sqrt(head_dim), -1) @ values
    return attention.out_proj(context.permute(0, 2, 1, 3).reshape(batch, 1, attention.d_out)), steps


def test_kv_step_must_continue_from_the_cache_it_is_given(capsys):
    for right in (make_step(), cache_in_a_dict_grown_in_place, cache_as_a_list_of_steps):
        ok, out = verdict(capsys, checks.exercise_1, right)
        assert (
            ok and out == "Exercise 1: correct on all 3 hidden sequences, step by step equal to the uncached layer.\n"
        )
    ok, out = verdict(capsys, checks.exercise_1, global_cache)
    assert not ok and "your function does not continue from the cache it is given" in out, out
    assert "global variable" in out.split("Hint: ")[1], out
