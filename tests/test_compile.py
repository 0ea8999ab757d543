"""Forward passes free of host synchronisation: ``torch.compile(..., fullgraph=True)`` captures ``GPT`` and
``MultiHeadAttention`` in one graph (a check that reads a tensor's values, such as ``ids.max()`` or
``mask.any()``, would break it) and computes what eager mode computes.

The ``aot_eager`` backend traces the graph as inductor would but runs it with PyTorch's own kernels, so no C++
compiler is needed.
"""

import sys

import pytest
import torch
import torch._dynamo
from conftest import perturb_, small_gpt_config

import attention_helpers as ah
from attention_helpers._checks import is_compiling

if not torch._dynamo.is_dynamo_supported():  # e.g. torch < 2.4 on Python 3.12
    pytest.skip(
        f"torch.compile is unavailable with torch {torch.__version__}, Python {sys.version.split()[0]} "
        f"on {sys.platform}",
        allow_module_level=True,
    )


def compiled(module):
    torch._dynamo.reset()  # each test compiles afresh, so no cached graph or recompile limit carries over
    return torch.compile(module, fullgraph=True, backend="aot_eager")


def close(actual, expected):
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-4)


def small_gpt():
    """vocab_size != context_length != d_model != head_dim; weights larger than GPT-2's 0.02 initialisation, so
    that the logits differ clearly between tokens."""
    model = ah.GPT(small_gpt_config())
    return perturb_(model).eval()


def small_mha():
    # d_in != d_out != head_dim (2 heads of 4)
    return perturb_(ah.MultiHeadAttention(6, 8, 10, 0.0, num_heads=2)).eval()


def test_gpt_forward_compiles_in_one_graph_with_the_eager_logits():
    model = small_gpt()
    token_ids = torch.randint(0, 11, (2, 5))
    with torch.no_grad():
        close(compiled(model)(token_ids), model(token_ids))


def test_gpt_forward_with_the_kv_cache_compiles_in_one_graph():
    """A prompt of 3 tokens, then two steps of 1 token each, continuing from the cache."""
    model = small_gpt()
    token_ids = torch.randint(0, 11, (2, 5))
    chunks = (token_ids[:, :3], token_ids[:, 3:4], token_ids[:, 4:5])
    with torch.no_grad():
        cache = model.new_cache(batch=2)
        expected = [model(chunk, cache) for chunk in chunks]
        compiled_model, compiled_cache = compiled(model), model.new_cache(batch=2)
        actual = [compiled_model(chunk, compiled_cache) for chunk in chunks]
    assert compiled_cache.num_tokens == 5
    for got, want in zip(compiled_cache.keys, cache.keys, strict=True):
        close(got, want)
    for got, want in zip(actual, expected, strict=True):
        close(got, want)


@pytest.mark.parametrize("return_weights", [False, True], ids=["fused", "explicit"])
def test_causal_attention_with_padding_compiles_in_one_graph(return_weights):
    """``return_weights=False`` takes the fused kernel, ``True`` the written-out path. The second sequence's
    first key is padding, so its first query has every key hidden (the all-masked-row rule of the explicit
    path, a ``mask.any()`` in eager mode)."""
    module = small_mha()
    x = torch.randn(2, 5, 6)
    key_padding_mask = torch.tensor([[False] * 4 + [True], [True] + [False] * 4])
    with torch.no_grad():
        expected = module(x, key_padding_mask, return_weights=return_weights)
        actual = compiled(module)(x, key_padding_mask, return_weights=return_weights)
    if return_weights:
        close(actual[1], expected[1])
        actual, expected = actual[0], expected[0]
    close(actual, expected)


def test_causal_attention_without_mask_compiles_in_one_graph():
    """No padding: the fused kernel with ``is_causal=True``."""
    module = small_mha()
    x = torch.randn(2, 5, 6)
    with torch.no_grad():
        close(compiled(module)(x), module(x))


@pytest.mark.parametrize("return_weights", [False, True], ids=["fused", "explicit"])
def test_cross_attention_compiles_in_one_graph(return_weights):
    """Queries from x (3 tokens), keys and values from a memory of 5 tokens whose last is padding."""
    module = perturb_(ah.MultiHeadAttention(6, 8, None, 0.0, num_heads=4, causal=False)).eval()
    x, memory = torch.randn(2, 3, 6), torch.randn(2, 5, 6)
    key_padding_mask = torch.tensor([False] * 4 + [True])  # (num_keys,): the same for every sequence
    with torch.no_grad():
        expected = module(x, key_padding_mask, return_weights, memory=memory)
        actual = compiled(module)(x, key_padding_mask, return_weights, memory=memory)
    close(actual, expected)


@pytest.mark.parametrize("return_weights", [False, True], ids=["fused", "explicit"])
def test_grouped_query_attention_compiles_in_one_graph(return_weights):
    """4 query heads share 2 key/value heads; the second sequence's last key is padding."""
    module = perturb_(ah.GroupedQueryAttention(6, 8, 10, 0.0, num_heads=4, num_kv_heads=2)).eval()
    x, key_padding_mask = torch.randn(2, 5, 6), torch.tensor([[False] * 5, [False] * 4 + [True]])
    with torch.no_grad():
        expected = module(x, key_padding_mask, return_weights)
        actual = compiled(module)(x, key_padding_mask, return_weights)
    close(actual, expected)


def test_generate_on_a_compiled_gpt_runs_the_compiled_module():
    """generate calls the model it is given, so a torch.compile'd GPT runs its compiled graphs (a backend that
    counts its calls sees every step) and gives the eager model's tokens."""
    calls = []

    def counting_backend(graph_module, example_inputs):
        def run(*args):
            calls.append(len(args))
            return graph_module(*args)

        return run

    torch._dynamo.reset()
    model = small_gpt()
    prompt = torch.randint(0, 11, (2, 3))
    tokens = ah.generate(torch.compile(model, backend=counting_backend), prompt, 6, temperature=0)
    assert len(calls) >= 6, f"the compiled graphs ran {len(calls)} times for 6 steps"
    assert torch.equal(tokens, ah.generate(model, prompt, 6, temperature=0))


def test_is_compiling_is_true_only_while_tracing(monkeypatch):
    def add_one_when_compiled(x):
        return x + 1 if is_compiling() else x

    x = torch.zeros(2)
    assert add_one_when_compiled(x).tolist() == [0.0, 0.0]
    assert compiled(add_one_when_compiled)(x).tolist() == [1.0, 1.0]
    monkeypatch.delattr(torch.compiler, "is_compiling")  # a torch without it: the checks run, as in eager mode
    assert not is_compiling()


def test_the_checks_still_run_in_eager_mode():
    assert not is_compiling()
    model = ah.GPT(ah.GPTConfig(vocab_size=11, context_length=12, d_model=16, num_heads=4, num_layers=1, dropout=0.0))
    with pytest.raises(ValueError, match=r"token ids from 0 to 10 \(vocab_size=11\), got values from 0 to 11"):
        model(torch.tensor([[0, 11]]))
