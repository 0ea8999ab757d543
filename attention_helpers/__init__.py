"""attention_helpers: the tested implementations behind the attention notebook series.

Modules, each importable on its own, depend on one another in one direction:
``data -> functional -> attention -> encoder -> gpt``; ``text`` holds the text lesson 10 trains on;
``plotting``, ``widgets``, ``interop`` and ``exercises`` (the notebooks' answer checks) sit on top.

"Seed 001" and "seed 004" in the docstrings name two of the reference notebooks this series was written
from (not random seeds): the classes keep their constructor arguments, so that the same
``torch.manual_seed`` reproduces their printed numbers.
"""

from .attention import (
    CausalAttention,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    SelfAttentionV1,
    SelfAttentionV2,
)
from .data import WORDS, toy_embeddings
from .encoder import Encoder, EncoderLayer, FeedForward, LayerNorm, PositionalEncoding
from .exercises import check_answer, check_function
from .functional import (
    attention_scores_loop,
    causal_mask,
    random_dot_products,
    scaled_dot_product_attention,
    softmax_naive,
    softmax_stable,
    softmax_with_temperature,
)
from .gpt import (
    GPT,
    BigramLanguageModel,
    DecoderBlock,
    evaluate_loss,
    generate,
    language_model_loss,
    next_token_batch,
    sample_next_token,
    top_k_filter,
)
from .interop import to_torch
from .parameters import ParameterError, check_parameter
from .text import CharTokenizer, shakespeare_text

# Plotting and widgets need matplotlib, IPython and ipywidgets, which take seconds to import and which a
# training script or a test never uses: they are imported the first time one of their names is used.
_LAZY = {
    "plotting": (
        "diagram_path",
        "plot_attention",
        "plot_attention_heads",
        "plot_dropout",
        "plot_embeddings_3d",
        "plot_scaling",
        "plot_scores",
        "show_diagram",
    ),
    "widgets": (
        "dropout_widget",
        "heads_widget",
        "query_scores_widget",
        "rotate_embeddings_widget",
        "scaling_widget",
        "temperature_widget",
    ),
}
_LAZY_MODULE = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str):
    module = _LAZY_MODULE.get(name)
    if module is None:
        raise AttributeError(f"module 'attention_helpers' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_MODULE))


__version__ = "0.1.0"

__all__ = [
    "BigramLanguageModel",
    "CausalAttention",
    "CharTokenizer",
    "DecoderBlock",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "GPT",
    "LayerNorm",
    "MultiHeadAttention",
    "MultiHeadAttentionWrapper",
    "ParameterError",
    "PositionalEncoding",
    "SelfAttentionV1",
    "SelfAttentionV2",
    "WORDS",
    "attention_scores_loop",
    "causal_mask",
    "check_answer",
    "check_function",
    "check_parameter",
    "diagram_path",
    "dropout_widget",
    "evaluate_loss",
    "generate",
    "heads_widget",
    "language_model_loss",
    "next_token_batch",
    "plot_attention",
    "plot_attention_heads",
    "plot_dropout",
    "plot_embeddings_3d",
    "plot_scaling",
    "plot_scores",
    "query_scores_widget",
    "random_dot_products",
    "rotate_embeddings_widget",
    "sample_next_token",
    "scaled_dot_product_attention",
    "scaling_widget",
    "shakespeare_text",
    "show_diagram",
    "softmax_naive",
    "softmax_stable",
    "softmax_with_temperature",
    "temperature_widget",
    "to_torch",
    "top_k_filter",
    "toy_embeddings",
]
