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


def small_mha(causal=True):
    torch.manual_seed(0)
    # d_in != d_out != head_dim (2 heads of 4)
    return ah.MultiHeadAttention(6, 8, 10, 0.0, num_heads=2, causal=causal).eval()


def test_gpt_forward_compiles_in_one_graph_with_the_eager_logits():
    torch.manual_seed(0)
    model = ah.GPT(vocab_size=11, context_length=12, d_model=16, num_heads=4, num_layers=2, drop_prob=0.0).eval()
    token_ids = torch.randint(0, 11, (2, 5))
    with torch.no_grad():
        close(compiled(model)(token_ids), model(token_ids))


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


def test_the_checks_still_run_in_eager_mode():
    assert not is_compiling()
    model = ah.GPT(vocab_size=11, context_length=12, d_model=16, num_heads=4, num_layers=1, drop_prob=0.0)
    with pytest.raises(ValueError, match=r"token ids from 0 to 10 \(vocab_size=11\), got values from 0 to 11"):
        model(torch.tensor([[0, 11]]))
