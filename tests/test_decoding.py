"""decoding: grouped-query attention, the explicit KV cache, sampling and generate."""

import copy

import pytest
import torch
import torch.nn.functional as F
from conftest import perturb_, small_gpt

import attention_helpers as ah
from attention_helpers import GroupedQueryAttention, KVCache, MultiHeadAttention, to_torch

D_IN, D_OUT, NUM_HEADS, CONTEXT = 5, 12, 6, 16  # head_dim 2, d_in != d_out


def grouped(num_kv_heads, qkv_bias=True):
    return perturb_(
        GroupedQueryAttention(D_IN, D_OUT, CONTEXT, 0.0, NUM_HEADS, qkv_bias, num_kv_heads=num_kv_heads)
    ).eval()


def with_repeated_kv_weights(gqa: GroupedQueryAttention) -> MultiHeadAttention:
    """An ordinary module (one kv head per query head) whose key/value weights repeat each of ``gqa``'s kv heads
    for its group of query heads: the textbook definition of grouped-query attention."""
    full = MultiHeadAttention(D_IN, D_OUT, CONTEXT, 0.0, NUM_HEADS, True).eval()
    group = gqa.num_heads // gqa.num_kv_heads
    with torch.no_grad():
        full.W_query.load_state_dict(gqa.W_query.state_dict())
        full.out_proj.load_state_dict(gqa.out_proj.state_dict())
        for ours, theirs in ((full.W_key, gqa.W_key), (full.W_value, gqa.W_value)):
            # rows of the projection come in head_dim-sized chunks, one per head
            ours.weight.copy_(
                theirs.weight.unflatten(0, (gqa.num_kv_heads, -1)).repeat_interleave(group, 0).flatten(0, 1)
            )
            ours.bias.copy_(theirs.bias.unflatten(0, (gqa.num_kv_heads, -1)).repeat_interleave(group, 0).flatten(0, 1))
    return full


@pytest.mark.parametrize("num_kv_heads", [1, 2, 3, 6])
def test_grouped_query_attention_equals_repeating_the_kv_heads(num_kv_heads):
    gqa = grouped(num_kv_heads)
    full = with_repeated_kv_weights(gqa)
    x = torch.randn(3, 9, D_IN)
    padding = torch.zeros(3, 9, dtype=torch.bool)
    padding[1, 6:] = True
    with torch.no_grad():
        expected, expected_weights = full(x, return_weights=True)
        context_vec, attn_weights = gqa(x, return_weights=True)  # explicit path
        torch.testing.assert_close(context_vec, expected)
        torch.testing.assert_close(attn_weights, expected_weights)
        torch.testing.assert_close(gqa(x), expected)  # fast path
        torch.testing.assert_close(gqa(x, padding), full(x, padding))
        torch.testing.assert_close(gqa(x, padding, return_weights=True)[0], full(x, padding))


@pytest.mark.skipif(
    tuple(int(part) for part in torch.__version__.split(".")[:2]) < (2, 5), reason="enable_gqa= came in torch 2.5"
)
@pytest.mark.parametrize("num_kv_heads", [1, 3])
def test_grouped_query_attention_equals_torch_enable_gqa(num_kv_heads):
    gqa = grouped(num_kv_heads)
    x = torch.randn(2, 11, D_IN)
    with torch.no_grad():
        queries = gqa.W_query(x).unflatten(-1, (NUM_HEADS, -1)).transpose(1, 2)  # (2, 6, 11, 2)
        keys = gqa.W_key(x).unflatten(-1, (num_kv_heads, -1)).transpose(1, 2)  # (2, num_kv_heads, 11, 2)
        values = gqa.W_value(x).unflatten(-1, (num_kv_heads, -1)).transpose(1, 2)
        context_vec = F.scaled_dot_product_attention(queries, keys, values, is_causal=True, enable_gqa=True)
        expected = gqa.out_proj(context_vec.transpose(1, 2).flatten(2))
        torch.testing.assert_close(gqa(x), expected)
        torch.testing.assert_close(gqa(x, return_weights=True)[0], expected)


@pytest.mark.parametrize("return_weights", [False, True])
def test_grouped_query_gradients_are_the_repeated_heads_gradients_summed(return_weights):
    """A shared kv head gets the gradients of all the copies it stands for (both paths)."""
    gqa = grouped(2)
    full = with_repeated_kv_weights(gqa)
    x = torch.randn(2, 7, D_IN)
    for module in (gqa, full):
        output = module(x, return_weights=True)[0] if return_weights else module(x)
        output.square().sum().backward()
    torch.testing.assert_close(gqa.W_query.weight.grad, full.W_query.weight.grad)
    for ours, theirs in ((gqa.W_key, full.W_key), (gqa.W_value, full.W_value)):
        # (num_heads * head_dim, d_in) -> (num_kv_heads, group, head_dim, d_in), summed over each group
        summed = theirs.weight.grad.unflatten(0, (gqa.num_kv_heads, NUM_HEADS // gqa.num_kv_heads, -1)).sum(1)
        torch.testing.assert_close(ours.weight.grad, summed.flatten(0, 1))


def test_grouped_query_attention_trains_with_dropout_on_the_explicit_path():
    module = GroupedQueryAttention(D_IN, D_OUT, CONTEXT, 0.5, NUM_HEADS, num_kv_heads=2)
    x = torch.randn(2, 7, D_IN, requires_grad=True)
    module(x).sum().backward()
    assert module.W_key.weight.grad.shape == (2 * 2, D_IN) and x.grad.isfinite().all()


def test_fewer_kv_heads_mean_fewer_key_value_parameters_and_a_smaller_kv_cache():
    head_dim = D_OUT // NUM_HEADS
    default = MultiHeadAttention(D_IN, D_OUT, CONTEXT, 0.0, NUM_HEADS, qkv_bias=True)
    counts = {}
    for num_kv_heads in (6, 3, 2, 1):
        module = GroupedQueryAttention(D_IN, D_OUT, CONTEXT, 0.0, NUM_HEADS, qkv_bias=True, num_kv_heads=num_kv_heads)
        kv_params = sum(p.numel() for layer in (module.W_key, module.W_value) for p in layer.parameters())
        assert kv_params == 2 * (D_IN + 1) * num_kv_heads * head_dim
        counts[num_kv_heads] = kv_params
        # what a KV cache stores per token: this call's keys and values, before any repetition
        x = torch.randn(1, 4, D_IN)
        cached_per_token = (module.W_key(x).shape[-1] + module.W_value(x).shape[-1]) * x.element_size()
        assert cached_per_token == 2 * num_kv_heads * head_dim * 4
    assert (
        counts[6] == 6 * counts[1]
        and counts[6] == sum(p.numel() for p in (default.W_key.weight, default.W_key.bias)) * 2
    )


def test_default_keeps_the_parameter_layout_and_seeded_values():
    torch.manual_seed(123)
    default = MultiHeadAttention(D_IN, D_OUT, CONTEXT, 0.0, NUM_HEADS)
    torch.manual_seed(123)
    grouped_default = GroupedQueryAttention(D_IN, D_OUT, CONTEXT, 0.0, NUM_HEADS)
    assert grouped_default.num_kv_heads == NUM_HEADS
    assert [name for name, _ in default.named_parameters()] == [
        "W_query.weight",
        "W_key.weight",
        "W_value.weight",
        "out_proj.weight",
        "out_proj.bias",
    ]
    for (name, a), (_, b) in zip(default.state_dict().items(), grouped_default.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize(
    ("num_kv_heads", "error", "message"),
    [
        (4, ValueError, "num_heads=6 must be divisible by num_kv_heads=4"),
        (0, ValueError, "num_kv_heads must be at least 1"),
        (12, ValueError, "num_heads=6 must be divisible by num_kv_heads=12"),
        (2.0, TypeError, "num_kv_heads must be an int"),
        (True, TypeError, "num_kv_heads must be an int"),
    ],
)
def test_bad_num_kv_heads_is_rejected(num_kv_heads, error, message):
    with pytest.raises(error, match=message):
        GroupedQueryAttention(D_IN, D_OUT, CONTEXT, 0.0, NUM_HEADS, num_kv_heads=num_kv_heads)


def test_to_torch_rejects_grouped_query_attention():
    module = GroupedQueryAttention(D_OUT, D_OUT, CONTEXT, 0.0, NUM_HEADS, num_kv_heads=2)
    with pytest.raises(ValueError, match="num_heads=6 and num_kv_heads=2"):
        to_torch(module)


def test_the_kv_cache_of_grouped_query_attention_holds_only_the_kv_heads():
    """Lessons 10 and 11 together: the cache stores keys and values before they are repeated to the query heads,
    so grouped-query attention caches num_kv_heads heads, and cached equals uncached computation."""
    gqa = GroupedQueryAttention(8, 12, 10, 0.0, 4, num_kv_heads=2).eval()
    x = torch.randn(2, 7, 8)
    with torch.no_grad():
        full = gqa(x)
        cache = KVCache(1, 2, 2, 7, 3)  # (num_layers, batch, num_kv_heads, capacity, head_dim)
        pieces = []
        for start, end in ((0, 4), (4, 5), (5, 6), (6, 7)):
            pieces.append(gqa(x[:, start:end], cache=cache))
        torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-6, rtol=1e-5)
        assert cache.keys[0].shape == cache.values[0].shape == (2, 2, 7, 3)
        cache = KVCache(1, 2, 2, 7, 3)
        _, weights = gqa(x[:, :5], cache=cache, return_weights=True)
        _, step_weights = gqa(x[:, 5:6], cache=cache, return_weights=True)
        assert weights.shape == (2, 4, 5, 5) and step_weights.shape == (2, 4, 1, 6)


def _sdpa_without_enable_gqa(monkeypatch):
    """Make the fused kernel behave like torch 2.3 and 2.4, which have no ``enable_gqa`` argument; returns the
    list of calls, to show the fused path was taken."""
    original = F.scaled_dot_product_attention
    calls = []

    def old_sdpa(*args, **kwargs):
        if "enable_gqa" in kwargs:
            raise TypeError("scaled_dot_product_attention() got an unexpected keyword argument 'enable_gqa'")
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", old_sdpa)  # the name attention.py looks up
    return calls


@pytest.mark.parametrize("num_kv_heads", [6, 3, 1], ids=["equal heads", "grouped", "multi-query"])
@pytest.mark.parametrize("padding", [False, True], ids=["is_causal", "mask"])
def test_the_fused_path_runs_on_a_torch_without_enable_gqa(monkeypatch, num_kv_heads, padding):
    """torch added enable_gqa= in 2.5; the package supports torch>=2.3, so it repeats the kv heads itself and never
    passes the argument: the fused path runs where the argument is missing."""
    module = grouped(num_kv_heads)
    x = torch.randn(2, 9, D_IN)
    mask = torch.zeros(2, 9, dtype=torch.bool) if padding else None
    if padding:
        mask[1, 7:] = True
    with torch.no_grad():
        expected = module(x, mask)
        calls = _sdpa_without_enable_gqa(monkeypatch)
        torch.testing.assert_close(module(x, mask), expected)
    assert calls, "the fused kernel was not called"


# --- the KV cache -------------------------------------------------------------------------------------------


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, expected, atol=atol, rtol=1e-4)


def run_in_chunks(attention, x, chunks, padding=None, return_weights=False):
    """Feed ``x`` to ``attention`` a few tokens at a time through one KVCache; returns the outputs (and weights)."""
    cache = KVCache(1, x.shape[0], attention.num_kv_heads, x.shape[1], attention.head_dim)
    outputs, start = [], 0
    for size in chunks:
        mask = None if padding is None else padding[:, : start + size]
        outputs.append(attention(x[:, start : start + size], mask, return_weights, cache=cache))
        start += size
    return outputs, cache


@pytest.mark.parametrize("chunks", [[1] * 9, [4, 1, 1, 3], [9]])
@pytest.mark.parametrize("explicit", [False, True], ids=["fused", "explicit"])
def test_cached_chunks_give_the_same_output_as_one_full_pass(chunks, explicit):
    """Under a causal mask earlier keys and values never change, so feeding the tokens a few at a time with the
    cache must reproduce the full pass, row for row, attention weights included."""
    gqa = perturb_(GroupedQueryAttention(6, 12, 10, 0.0, 3, qkv_bias=True)).eval()
    x = torch.randn(2, 9, 6)
    full, full_weights = gqa(x, return_weights=True)
    with torch.no_grad():
        outputs, cache = run_in_chunks(gqa, x, chunks, return_weights=explicit)
    if explicit:
        start = 0
        for size, (_, weights) in zip(chunks, outputs, strict=True):
            close(weights, full_weights[:, :, start : start + size, : start + size])
            start += size
        outputs = [out for out, _ in outputs]
    close(torch.cat(outputs, dim=1), full)
    assert cache.num_tokens == 9
    # what the cache holds is the keys of the full pass, head by head: (batch, num_heads, tokens, head_dim)
    close(cache.keys[0], gqa.split_heads(gqa.W_key(x)))


def test_cache_with_a_padding_mask_over_all_keys_matches_the_full_pass():
    gqa = perturb_(GroupedQueryAttention(6, 12, 10, 0.0, 3)).eval()
    x = torch.randn(2, 6, 6)
    padding = torch.zeros(2, 6, dtype=torch.bool)
    padding[1, 2] = True  # a hole in the middle of sequence 1
    full = gqa(x, padding)
    with torch.no_grad():
        for chunks in ([1] * 6, [2, 3, 1]):  # one token (no causal mask) and several (the mask's rows from start)
            steps, _ = run_in_chunks(gqa, x, chunks, padding)
            close(torch.cat(steps, dim=1)[:, 3:], full[:, 3:])
            close(torch.cat(steps, dim=1)[0], full[0])


def tensors_kept(model: torch.nn.Module) -> list[str]:
    """Names of the tensors a module (or its children) keeps outside parameters and buffers, also inside
    tuples, lists and dicts."""

    def holds_tensor(value) -> bool:
        if isinstance(value, torch.Tensor):
            return True
        if isinstance(value, (tuple, list)):
            return any(holds_tensor(v) for v in value)
        return isinstance(value, dict) and any(holds_tensor(v) for v in value.values())

    internals = set(vars(torch.nn.Module()))  # _parameters, _buffers, _modules, hooks
    return [
        name
        for module in model.modules()
        for name, value in vars(module).items()
        if name not in internals and holds_tensor(value)
    ]


def test_gradients_flow_through_the_cache():
    """With autograd on, each write copies the cache first, so backward through cached steps works and gives the
    gradients of the full pass (writing over the views autograd kept would fail deep inside backward)."""
    model = small_gpt()
    ids = torch.randint(0, 11, (2, 7))
    model(ids).square().sum().backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    cache = model.new_cache(batch=2)
    pieces = [model(ids[:, :4], cache)] + [model(ids[:, i : i + 1], cache) for i in range(4, 7)]
    torch.cat(pieces, dim=1).square().sum().backward()
    for param, grad in zip(model.parameters(), expected, strict=True):
        close(param.grad, grad, atol=1e-4)


def test_the_modules_keep_no_cache_state():
    """The cache lives in the KVCache object only: after a cached call with gradients on, the module has no extra
    tensors, state_dict() is unchanged, and a deepcopy works (a cache inside the module held non-leaf tensors)."""
    gqa = perturb_(GroupedQueryAttention(6, 12, 10, 0.0, 3))
    keys_before = list(gqa.state_dict())
    x = torch.randn(1, 4, 6, requires_grad=True)
    cache = KVCache(1, 1, 3, 10, 4)
    gqa(x, cache=cache).sum().backward(retain_graph=True)
    assert list(gqa.state_dict()) == keys_before
    assert tensors_kept(gqa) == []
    clone = copy.deepcopy(gqa)
    close(clone(x), gqa(x))
    second = torch.randn(1, 4, 6)
    close(gqa(second), gqa(second, cache=KVCache(1, 1, 3, 10, 4)))  # a new cache: a new sequence


def test_the_cache_writes_in_place_and_returns_views():
    """Preallocated: update() copies a step's keys into the cache and returns views of it, so no step recopies the
    tokens already cached."""
    cache = KVCache(1, 1, 3, 8, 4)
    storage = cache.keys[0].data_ptr()
    for step in range(8):
        keys, values = cache.update(0, torch.full((1, 3, 1, 4), float(step)), torch.zeros(1, 3, 1, 4))
        assert keys.shape == (1, 3, step + 1, 4) and keys.data_ptr() == storage
        assert torch.equal(keys[0, 0, :, 0], torch.arange(step + 1, dtype=torch.float32))
    assert cache.keys[0].data_ptr() == storage and cache.num_tokens == 8


def test_the_cache_moves_on_once_every_layer_has_written_and_refuses_a_second_write():
    """The cache owns its position: it counts new tokens when the last layer has written them, and a layer that
    writes twice at one position (a forgotten or doubled advance, in a cache that the caller advances) is an error."""
    cache = KVCache(2, 1, 3, 8, 4)
    new = torch.randn(1, 3, 2, 4)
    cache.update(0, new, new)
    assert cache.num_tokens == 0  # layer 1 has not written yet
    with pytest.raises(ValueError, match="layer 0 already wrote its keys and values at position 0"):
        cache.update(0, new, new)
    with pytest.raises(ValueError, match="layer 1 writes 1 tokens but an earlier layer wrote 2"):
        cache.update(1, new[:, :, :1], new[:, :, :1])
    keys, _ = cache.update(1, new, new)
    assert cache.num_tokens == 2 and keys.shape == (1, 3, 2, 4)
    assert not hasattr(cache, "advance"), "the position is the cache's own business"


def test_under_autograd_a_write_copies_only_the_layer_it_writes():
    """With gradients on, a write copies the layer's tensors first (autograd keeps the views earlier writes gave
    out), and no other layer's."""
    cache = KVCache(4, 1, 2, 6, 3)
    before = [k.data_ptr() for k in cache.keys] + [v.data_ptr() for v in cache.values]
    new = torch.randn(1, 2, 1, 3, requires_grad=True)
    cache.update(2, new, new)
    after = [k.data_ptr() for k in cache.keys] + [v.data_ptr() for v in cache.values]
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert changed == [2, 6], "only layer 2's keys and values are new tensors"


def test_cache_bad_use_names_what_is_wrong():
    gqa = GroupedQueryAttention(6, 12, 5, 0.0, 3)
    cache = KVCache(1, 2, 3, 5, 4)
    gqa(torch.randn(2, 4, 6), cache=cache)  # 4 tokens cached
    with pytest.raises(ValueError, match=r"holds 4 tokens and the input adds 2, more than context_length=5"):
        gqa(torch.randn(2, 2, 6), cache=cache)
    with pytest.raises(ValueError, match="batch=2 but the input has batch=3"):
        gqa(torch.randn(3, 1, 6), cache=cache)
    with pytest.raises(ValueError, match="num_kv_heads=3, head_dim=4 but the attention layer has num_kv_heads=1"):
        GroupedQueryAttention(6, 12, 5, 0.0, 3, num_kv_heads=1)(torch.randn(2, 1, 6), cache=cache)
    gqa64 = copy.deepcopy(gqa).double()
    with pytest.raises(TypeError, match="the cache holds torch.float32 on cpu, the input is torch.float64"):
        gqa64(torch.randn(2, 1, 6, dtype=torch.float64), cache=cache)
    with pytest.raises(TypeError, match="cache must be a KVCache .*, got tuple"):
        gqa(torch.randn(2, 1, 6), cache=(cache.keys, cache.values))
    # with the cache, the padding mask covers every key: the 4 cached tokens and the new one
    with pytest.raises(ValueError, match=r"key_padding_mask of shape \(2, 3\).*\(2, 5\)"):
        gqa(torch.randn(2, 1, 6), torch.zeros(2, 3, dtype=torch.bool), cache=cache)
    with pytest.raises(ValueError, match="capacity must be at least 1"):
        KVCache(1, 2, 3, 0, 4)
    with pytest.raises(ValueError, match="layer_idx=1 but the cache holds num_layers=1"):
        gqa(torch.randn(2, 1, 6), cache=cache, layer_idx=1)
    # cached and new tokens together may not outrun the causal mask, whatever the cache's capacity
    cache = KVCache(1, 1, 3, 8, 4)
    gqa(torch.randn(1, 3, 6), cache=cache)
    with pytest.raises(ValueError, match="holds 3 tokens and the input adds 3, more than context_length=5"):
        gqa(torch.randn(1, 3, 6), cache=cache)
    # the input's own mistakes are named before the cache's
    with pytest.raises(ValueError, match=r"x must have 3 dimensions \(batch, num_tokens, d_in\)"):
        gqa(torch.randn(5, 6), cache=cache)


def test_a_model_names_a_cache_that_does_not_fit_it():
    model = small_gpt()  # 2 layers, 4 heads of 4, context_length 12
    ids = torch.randint(0, 11, (2, 3))
    for layers in (1, 3):
        with pytest.raises(ValueError, match=f"the cache holds num_layers={layers} but the model has num_layers=2"):
            model(ids, KVCache(layers, 2, 4, 12, 4))
    with pytest.raises(ValueError, match="capacity must be at least 1"):
        model.new_cache(1, 0)
    with pytest.raises(ValueError, match="capacity=20 is more than the model reads: context_length=12"):
        model.new_cache(1, 20)
    block = model.blocks[0]
    with pytest.raises(ValueError, match="x has num_tokens=13 but the module was built with context_length=12"):
        block(torch.randn(1, 13, 16))
    with pytest.raises(ValueError, match=r"must end with parameters_shape \(16,\)"):
        block(torch.randn(1, 3, 8))


# --- generation ---------------------------------------------------------------------------------------------


def test_generate_keeps_the_prompt_and_adds_max_new_tokens():
    model = small_gpt()
    prompt = torch.randint(0, 11, (3, 4))
    out = ah.generate(model, prompt, 6, generator=torch.Generator().manual_seed(0))
    assert out.shape == (3, 10) and out.dtype == torch.long
    assert torch.equal(out[:, :4], prompt)
    assert ((out >= 0) & (out < 11)).all()
    assert torch.equal(ah.generate(model, prompt, 0), prompt)


def test_greedy_generation_follows_the_argmax_and_ignores_the_generator():
    model = small_gpt()
    prompt = torch.randint(0, 11, (2, 3))
    out = ah.generate(model, prompt, 5, temperature=0)
    for i in range(3, 8):
        assert torch.equal(out[:, i], model(out[:, :i])[:, -1].argmax(-1))
    assert torch.equal(ah.generate(model, prompt, 5, temperature=0, generator=torch.Generator().manual_seed(9)), out)


@pytest.mark.parametrize("new_tokens", [8, 20], ids=["within the context", "past the context"])
@pytest.mark.parametrize(("temperature", "top_k"), [(0, None), (1.0, None), (0.8, 3)])
def test_cached_and_uncached_generation_give_identical_tokens(new_tokens, temperature, top_k):
    model = small_gpt()
    prompt = torch.randint(0, 11, (3, 4))
    outs = [
        ah.generate(
            model, prompt, new_tokens, temperature, top_k, use_cache=cache, generator=torch.Generator().manual_seed(5)
        )
        for cache in (True, False)
    ]
    assert torch.equal(outs[0], outs[1])
    assert outs[0].shape == (3, 4 + new_tokens)


def _record_embedding_inputs(model):
    """Record the token ids the model is fed at each call (a forward hook on the token embedding)."""
    fed = []
    model.token_embedding.register_forward_hook(lambda module, args, output: fed.append(args[0].clone()))
    return fed


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_feeds_one_token_per_step_with_the_cache_and_the_window_without(use_cache):
    """With the cache, each step after the first runs the model on the newest token only, until the sequence
    outgrows context_length=12; then, and without the cache, on the last (at most) 12 tokens."""
    model = small_gpt()
    fed = _record_embedding_inputs(model)
    prompt = torch.randint(0, 11, (2, 4))
    out = ah.generate(model, prompt, 12, temperature=0, use_cache=use_cache)
    assert len(fed) == 12
    for step, ids in enumerate(fed):
        length = 4 + step  # tokens before this step
        if use_cache and step > 0 and length <= 12:
            assert torch.equal(ids, out[:, length - 1 : length]), f"step {step}: fed {ids.shape[1]} tokens"
        else:
            assert torch.equal(ids, out[:, max(0, length - 12) : length]), f"step {step}: fed {ids.shape[1]} tokens"


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_from_a_prompt_longer_than_the_context_keeps_its_last_tokens(use_cache):
    model = small_gpt()
    fed = _record_embedding_inputs(model)
    prompt = torch.randint(0, 11, (2, 15))  # context_length is 12
    out = ah.generate(model, prompt, 3, temperature=0, use_cache=use_cache)
    assert torch.equal(fed[0], prompt[:, -12:])
    truncated = ah.generate(model, prompt[:, -12:], 3, temperature=0, use_cache=use_cache)
    assert torch.equal(out[:, :15], prompt) and torch.equal(out[:, 15:], truncated[:, 12:])


def _record_sampled_probabilities(monkeypatch):
    """Record the probabilities handed to torch.multinomial (the name decoding.py looks up)."""
    seen = []
    multinomial = torch.multinomial

    def recording(probs, *args, **kwargs):
        seen.append(probs.clone())
        return multinomial(probs, *args, **kwargs)

    monkeypatch.setattr(torch, "multinomial", recording)
    return seen


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.5])
def test_sampling_divides_the_logits_by_the_temperature(monkeypatch, temperature):
    seen = _record_sampled_probabilities(monkeypatch)
    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0], [3.0, -2.0, 0.5, 0.5]])
    ah.sample_next_token(logits, temperature)
    close(seen[-1], torch.softmax(logits / temperature, dim=-1))
    ah.sample_next_token(logits, temperature, top_k=2)
    cut = float("-inf")
    top2 = torch.tensor([[cut, 1.0, 2.0, cut], [3.0, cut, 0.5, 0.5]])  # a tie with the 2nd largest is kept
    close(seen[-1], torch.softmax(top2 / temperature, dim=-1))
    model = small_gpt()
    prompt = torch.randint(0, 11, (2, 3))
    ah.generate(model, prompt, 1, temperature, generator=torch.Generator().manual_seed(0))
    close(seen[-1], torch.softmax(model(prompt)[:, -1] / temperature, dim=-1))


def test_generate_restores_the_training_mode():
    model = small_gpt(dropout=0.5).train()
    prompt = torch.randint(0, 11, (2, 3))
    out = ah.generate(model, prompt, 5, temperature=0)
    assert model.training
    assert torch.equal(out, ah.generate(model.eval(), prompt, 5, temperature=0))  # dropout was off while generating


def test_sampling_with_a_seeded_generator_repeats_and_follows_the_probabilities():
    model = small_gpt()
    prompt = torch.randint(0, 11, (2, 3))
    first = ah.generate(model, prompt, 10, generator=torch.Generator().manual_seed(1))
    assert torch.equal(first, ah.generate(model, prompt, 10, generator=torch.Generator().manual_seed(1)))
    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0]])
    draws = torch.cat([ah.sample_next_token(logits, generator=torch.Generator().manual_seed(s)) for s in range(4000)])
    frequencies = torch.bincount(draws.flatten(), minlength=4) / 4000
    close(frequencies, torch.softmax(logits[0], -1), atol=0.03)


def test_top_k_keeps_the_k_largest_logits():
    logits = torch.randn(5, 30)
    filtered = ah.top_k_filter(logits, 4)
    kept = torch.isfinite(filtered)
    assert (kept.sum(-1) == 4).all()
    assert torch.equal(kept, torch.zeros_like(kept).scatter(-1, logits.topk(4, dim=-1).indices, True))
    close(filtered[kept], logits[kept])
    assert torch.equal(ah.top_k_filter(logits, 100), logits)  # k beyond the vocabulary keeps everything
    assert torch.equal(ah.sample_next_token(logits, top_k=1), logits.argmax(-1, keepdim=True))


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"max_new_tokens": -1}, ValueError, "max_new_tokens"),
        ({"temperature": -0.5}, ValueError, "temperature"),
        ({"top_k": 0}, ValueError, "top_k"),
    ],
)
def test_generate_bad_arguments(kwargs, error, fragment):
    args = {"max_new_tokens": 3, **kwargs}
    with pytest.raises(error, match=fragment):
        ah.generate(small_gpt(), torch.zeros(1, 2, dtype=torch.long), **args)
    with pytest.raises(TypeError, match="GPT"):
        ah.generate(ah.BigramLanguageModel(11), torch.zeros(1, 2, dtype=torch.long), 3)


LOGITS = torch.randn(2, 5, 11)  # (batch, num_tokens, vocab_size)


@pytest.mark.parametrize(
    ("call", "error", "fragments"),
    [
        (lambda: ah.language_model_loss(LOGITS, torch.zeros(2, 5)), TypeError, ["targets", "torch.float32", "(2, 5)"]),
        (
            lambda: ah.language_model_loss(LOGITS, torch.full((2, 5), 11)),
            ValueError,
            ["targets", "vocab_size=11", "from 11 to 11"],
        ),
        (lambda: ah.language_model_loss(LOGITS, [[0] * 5] * 2), TypeError, ["targets", "list"]),
        (
            lambda: ah.BigramLanguageModel.from_counts(torch.tensor([], dtype=torch.long), 11),
            ValueError,
            ["token_ids", "at least 2 tokens", "(0,)"],
        ),
        (lambda: ah.sample_next_token(LOGITS), ValueError, ["logits", "(batch, vocab_size)", "(2, 5, 11)"]),
        (lambda: ah.top_k_filter([[0.5, 1.0, -1.0]], 2), TypeError, ["logits", "torch.Tensor", "list"]),
        (
            lambda: ah.generate(small_gpt(), torch.zeros(1, 2, dtype=torch.long), 2.0),
            TypeError,
            ["max_new_tokens", "int", "2.0"],
        ),
        (
            lambda: ah.generate(small_gpt(), torch.zeros(1, 2, dtype=torch.long), 2, top_k=2.0),
            TypeError,
            ["top_k", "int", "2.0"],
        ),
    ],
    ids=[
        "float targets",
        "out-of-range targets",
        "list targets",
        "empty text",
        "3-D logits to sample",
        "list to top_k_filter",
        "max_new_tokens=2.0",
        "top_k=2.0",
    ],
)
def test_bad_arguments_fail_in_the_package_with_a_clear_error(call, error, fragments):
    with pytest.raises(Exception) as info:
        call()
    assert type(info.value) is error, repr(info.value)
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} missing from: {info.value}"


def test_generate_checks_its_arguments_once_and_the_model_calls_of_its_loop_are_trusted(monkeypatch):
    """generate is the door: it checks the prompt and sampling's arguments once; the model calls of its loop carry
    ids it checked or picked and a cache it made, so the model's own checks and sample_next_token's never run."""
    import attention_helpers.decoding as decoding
    import attention_helpers.gpt as gpt

    calls = dict.fromkeys(["prompt ids", "model ids", "cache", "logits", "temperature"], 0)

    def counting(key, function):
        def wrapper(*args, **kwargs):
            calls[key] += 1
            return function(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(decoding, "check_token_ids", counting("prompt ids", decoding.check_token_ids))
    monkeypatch.setattr(gpt, "check_token_ids", counting("model ids", gpt.check_token_ids))
    monkeypatch.setattr(gpt, "check_cache", counting("cache", gpt.check_cache))
    monkeypatch.setattr(decoding, "check_tensor", counting("logits", decoding.check_tensor))
    monkeypatch.setattr(decoding, "check_temperature", counting("temperature", decoding.check_temperature))
    model = small_gpt()
    prompt = torch.randint(0, 11, (2, 3))
    out = ah.generate(model, prompt, 8, temperature=1.0, top_k=3, generator=torch.Generator().manual_seed(0))
    assert calls == {"prompt ids": 1, "model ids": 0, "cache": 0, "logits": 0, "temperature": 1}
    uncached = ah.generate(model, prompt, 8, 1.0, 3, use_cache=False, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, uncached)


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_and_greedy_decode_read_the_ids_values_once_not_at_every_step(monkeypatch, use_cache):
    """Reading ids.min()/ids.max() is a host synchronisation on a GPU: the prompt's ids are read once at the entry
    point, and the model calls of the decoding loop skip it; a direct model call still checks them, after as before."""
    reads = []
    original_max = torch.Tensor.max

    def counting_max(self, *args, **kwargs):
        if not self.is_floating_point():  # the ids' range check; no other integer max runs while decoding
            reads.append(tuple(self.shape))
        return original_max(self, *args, **kwargs)

    model = small_gpt()
    prompt = torch.randint(0, 11, (2, 3))
    monkeypatch.setattr(torch.Tensor, "max", counting_max)
    out = ah.generate(model, prompt, 8, 1.0, generator=torch.Generator().manual_seed(0), use_cache=use_cache)
    assert reads == [(2, 3)], reads  # the prompt's, once; 8 steps read nothing
    assert out.shape == (2, 11)
    reads.clear()
    with pytest.raises(ValueError, match="token_ids must hold token ids from 0 to 10"):
        model(torch.tensor([[3, 11]]))  # out of range: a direct call checks the values
    assert reads == [(1, 2)]

    torch.manual_seed(0)
    seq2seq = ah.Seq2SeqTransformer(
        ah.Seq2SeqConfig(
            src_vocab_size=9,
            tgt_vocab_size=7,
            d_model=16,
            num_heads=2,
            num_encoder_layers=1,
            num_decoder_layers=1,
            ffn_hidden=24,
            context_length=10,
        )
    ).eval()
    reads.clear()
    ah.greedy_decode(seq2seq, torch.randint(0, 9, (2, 5)), bos_id=1, max_new_tokens=6, use_cache=use_cache)
    assert reads == [(2, 5)], reads  # the source's ids, once; 6 decoder steps read nothing
    with pytest.raises(ValueError, match="tgt_ids must hold token ids from 0 to 6"):
        seq2seq(torch.randint(0, 9, (1, 5)), torch.tensor([[1, 7]]))


def test_generated_ids_can_feed_a_training_step():
    """generate runs in inference mode; what it returns must still be a normal tensor that autograd accepts."""
    model = small_gpt().train()
    ids = ah.generate(model, torch.randint(0, 11, (2, 3)), 5, temperature=0)
    assert not ids.is_inference()
    ah.language_model_loss(model(ids[:, :-1]), ids[:, 1:]).backward()  # the embedding saves the ids for backward
    assert model.token_embedding.weight.grad is not None


@pytest.mark.parametrize("training", [True, False])
def test_eval_mode_runs_its_block_in_eval_mode_and_restores_the_mode_even_after_an_error(training):
    model = small_gpt(dropout=0.3).train(training)
    with ah.eval_mode(model):
        assert not any(m.training for m in model.modules())
    assert all(m.training == training for m in model.modules())
    with pytest.raises(RuntimeError, match="inside"), ah.eval_mode(model):
        raise RuntimeError("an error inside")
    assert all(m.training == training for m in model.modules())
