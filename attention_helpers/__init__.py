"""attention_helpers: the tested implementations behind the attention notebook series.

Modules, each importable on its own, depend on one another in one direction:
``data -> functional -> attention -> encoder -> (training, pretrained, gpt, encoder_decoder)``, with ``efficient``
(attention without the full score matrix) beside ``attention``, ``text`` (the text lesson 10 trains on) beside
``gpt`` and ``dates`` (lesson 12's task) beside ``encoder_decoder``;
``plotting`` (and ``plotting_training``, ``plotting_pretrained``), ``widgets``, ``interop`` and ``exercises``
(the notebooks' answer checks) sit on top.

The attention classes keep the constructor arguments of chapter 3 of Sebastian Raschka's *Build a Large
Language Model (From Scratch)* (code: rasbt/LLMs-from-scratch), so that the same ``torch.manual_seed``
reproduces the book's numbers.
"""

from .attention import (
    CausalAttention,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    SelfAttentionV1,
    SelfAttentionV2,
)
from .data import WORDS, toy_embeddings
from .efficient import online_softmax, tiled_attention, tiled_attention_blocks
from .encoder import Encoder, EncoderLayer, FeedForward, LayerNorm, PositionalEncoding, rope_rotate
from .encoder_decoder import DecoderLayer, EncoderDecoder, Seq2SeqTransformer, greedy_decode
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
from .pretrained import (
    BertEmbeddings,
    SentenceEncoder,
    attention_mask_to_key_padding_mask,
    key_padding_mask_to_attention_mask,
    load_sentence_transformer,
    mean_pool,
    shipped_model_path,
)
from .text import CharTokenizer, shakespeare_text
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
        "plot_context_vector",
        "plot_dot_product_2d",
        "plot_dropout",
        "plot_embeddings_3d",
        "plot_scaling",
        "plot_scores",
        "show_diagram",
    ),
    "plotting_pretrained": (
        "layer_head_widget",
        "plot_attention_received",
        "plot_layer_head",
        "plot_similarities",
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
    "GPT",
    "TASKS",
    "WORDS",
    "BertEmbeddings",
    "BigramLanguageModel",
    "CausalAttention",
    "CharTokenizer",
    "DecoderBlock",
    "DecoderLayer",
    "Encoder",
    "EncoderDecoder",
    "EncoderLayer",
    "FeedForward",
    "History",
    "LayerNorm",
    "MultiHeadAttention",
    "MultiHeadAttentionWrapper",
    "ParameterError",
    "PositionalEncoding",
    "Seq2SeqTransformer",
    "SelfAttentionV1",
    "SelfAttentionV2",
    "SentenceEncoder",
    "TaskData",
    "TokenClassifier",
    "attention_mask_to_key_padding_mask",
    "attention_scores_loop",
    "causal_mask",
    "check_answer",
    "check_function",
    "check_parameter",
    "diagram_path",
    "dropout_widget",
    "evaluate",
    "evaluate_loss",
    "generate",
    "greedy_decode",
    "heads_widget",
    "key_padding_mask_to_attention_mask",
    "language_model_loss",
    "layer_head_widget",
    "load_sentence_transformer",
    "make_task",
    "mean_pool",
    "next_token_batch",
    "online_softmax",
    "plot_attention",
    "plot_attention_heads",
    "plot_attention_layers",
    "plot_attention_received",
    "plot_context_vector",
    "plot_dot_product_2d",
    "plot_dropout",
    "plot_embeddings_3d",
    "plot_history",
    "plot_layer_head",
    "plot_scaling",
    "plot_scores",
    "plot_similarities",
    "query_scores_widget",
    "random_dot_products",
    "reverse_targets",
    "rope_rotate",
    "rotate_embeddings_widget",
    "sample_next_token",
    "scaled_dot_product_attention",
    "scaling_widget",
    "shakespeare_text",
    "shipped_model_path",
    "show_diagram",
    "softmax_naive",
    "softmax_stable",
    "softmax_with_temperature",
    "sort_targets",
    "temperature_widget",
    "tiled_attention",
    "tiled_attention_blocks",
    "to_torch",
    "token_accuracy",
    "top_k_filter",
    "toy_embeddings",
    "train",
]
