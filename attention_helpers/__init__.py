"""attention_helpers: the tested implementations behind the attention notebook series.

Modules, each importable on its own, depend on one another in one direction:
``data -> functional -> attention -> encoder -> training``; ``plotting``, ``plotting_training``, ``widgets``,
``interop`` and ``exercises`` (the notebooks' answer checks) sit on top.

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
from .interop import to_torch
from .parameters import ParameterError, check_parameter
from .training import (
    TASKS,
    History,
    TaskData,
    TokenClassifier,
    evaluate,
    make_task,
    reverse_targets,
    sort_targets,
    token_accuracy,
    train,
)

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
    "plotting_training": ("plot_attention_layers", "plot_history"),
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
    "TASKS",
    "WORDS",
    "CausalAttention",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "History",
    "LayerNorm",
    "MultiHeadAttention",
    "MultiHeadAttentionWrapper",
    "ParameterError",
    "PositionalEncoding",
    "SelfAttentionV1",
    "SelfAttentionV2",
    "TaskData",
    "TokenClassifier",
    "attention_scores_loop",
    "causal_mask",
    "check_answer",
    "check_function",
    "check_parameter",
    "diagram_path",
    "dropout_widget",
    "evaluate",
    "heads_widget",
    "make_task",
    "plot_attention",
    "plot_attention_heads",
    "plot_attention_layers",
    "plot_dropout",
    "plot_embeddings_3d",
    "plot_history",
    "plot_scaling",
    "plot_scores",
    "query_scores_widget",
    "random_dot_products",
    "reverse_targets",
    "rotate_embeddings_widget",
    "scaled_dot_product_attention",
    "scaling_widget",
    "show_diagram",
    "softmax_naive",
    "softmax_stable",
    "softmax_with_temperature",
    "sort_targets",
    "temperature_widget",
    "to_torch",
    "token_accuracy",
    "toy_embeddings",
    "train",
]
