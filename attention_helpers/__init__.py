"""attention_helpers: the tested implementations behind the attention notebook series.

Every public name is reachable from here (``ah.MultiHeadAttention``, ``ah.plot_attention``), but its module is
imported the first time the name is used (PEP 562): ``import attention_helpers`` imports none of the package's
modules, and ``import attention_helpers.rope`` imports only what ``rope`` needs, never the lessons, figures,
pretrained weights or training code. The modules form layers, each importing only the layers below it: the
README's section "Reading the package" names them, and the import-linter contracts in ``pyproject.toml`` check them.

The names in ``viz.__all__`` (figures and widgets) are reachable here too but are not in this module's
``__all__``, so that ``from attention_helpers import *`` never imports Matplotlib or ipywidgets.
"""

import importlib
import importlib.util

# Where each public name is defined; the one list of the package's public names.
_DEFINED_IN = {
    "attention": (
        "CausalAttention",
        "GroupedQueryAttention",
        "MultiHeadAttention",
        "MultiHeadAttentionWrapper",
        "SelfAttentionV1",
        "SelfAttentionV2",
    ),
    "data": ("WORDS", "toy_embeddings"),
    "dates": ("pretrained_date_translator", "translate_dates"),
    "decoding": ("KVCache", "eval_mode", "generate", "sample_next_token", "top_k_filter"),
    "efficient": (
        "merge_partial_attention",
        "online_softmax",
        "partial_attention",
        "tiled_attention",
        "tiled_attention_blocks",
    ),
    "encoder": ("Encoder", "EncoderConfig", "EncoderLayer", "FeedForward", "LayerNorm", "PositionalEncoding"),
    "encoder_decoder": (
        "DecoderLayer",
        "EncoderDecoder",
        "EncoderDecoderConfig",
        "Seq2SeqConfig",
        "Seq2SeqTransformer",
        "greedy_decode",
    ),
    "functional": (
        "attention_scores_loop",
        "causal_mask",
        "random_dot_products",
        "attention_with_weights",
        "softmax_naive",
        "softmax_stable",
        "softmax_with_temperature",
    ),
    "gpt": ("GPT", "GPTBlock", "GPTConfig"),
    "interop": ("from_torch", "to_torch"),
    "lessons.parameters": ("ParameterError", "check_parameter"),
    "pretrained": (
        "BertEmbeddings",
        "SentenceEncoder",
        "attention_mask_to_key_padding_mask",
        "key_padding_mask_to_attention_mask",
        "load_sentence_transformer",
        "mean_pool",
        "shipped_model_path",
    ),
    "rope": ("rope_rotate",),
    "text": (
        "BigramLanguageModel",
        "CharTokenizer",
        "evaluate_loss",
        "language_model_loss",
        "next_token_batch",
        "shakespeare_text",
    ),
    "training": (
        "TokenClassifier",
        "evaluate",
        "make_task",
        "reverse_targets",
        "token_accuracy",
        "train",
        "warmup_cosine_lr",
    ),
}
_MODULE_OF = {name: module for module, names in _DEFINED_IN.items() for name in names}

__all__ = sorted(_MODULE_OF)
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _MODULE_OF:
        value = getattr(importlib.import_module(f".{_MODULE_OF[name]}", __name__), name)
    elif _is_submodule(name):
        return importlib.import_module(f".{name}", __name__)  # ah.dates, ah.viz: importing sets the attribute
    elif name in _viz().__all__:
        value = getattr(_viz(), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_viz().__all__))


def _is_submodule(name: str) -> bool:
    """A public module or subpackage of the package (not a data folder such as texts/, a namespace to Python)."""
    spec = None if name.startswith("_") else importlib.util.find_spec(f"{__name__}.{name}")
    return spec is not None and spec.origin is not None


def _viz():
    """The viz subpackage: light, as it imports its submodules, and Matplotlib with them, on first use."""
    return importlib.import_module(".viz", __name__)
