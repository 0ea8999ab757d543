"""attention_helpers: the tested implementations behind the attention notebook series.

Modules, each importable on its own, depend on one another in one direction:
``data -> functional -> rope -> attention -> (decoding, encoder) -> (training, pretrained, gpt, encoder_decoder)``,
with ``efficient`` (attention without the full score matrix) beside ``attention``, ``text`` (the text lesson 10 trains
on) beside ``gpt`` and ``dates`` (lesson 12's task and its trained translator) after ``encoder_decoder``; ``viz``
(figures, diagrams and widgets: the only part that imports Matplotlib and ipywidgets, on first use), ``interop`` and
``lessons`` (the notebooks' exercise and parameter checks) sit on top. The names in ``viz.__all__`` are
reachable from here too (``attention_helpers.plot_attention``) but are not in this module's ``__all__``, so that
``from attention_helpers import *`` stays light.
"""

# The imports below are re-exports, listed once: __all__ is built from them at the end.
# ruff: noqa: F401
from inspect import ismodule as _ismodule

from . import viz  # light: its names import Matplotlib and ipywidgets on first use
from .attention import (
    CausalAttention,
    GroupedQueryAttention,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    SelfAttentionV1,
    SelfAttentionV2,
)
from .data import WORDS, toy_embeddings
from .dates import pretrained_date_translator, translate_dates
from .decoding import KVCache, generate, sample_next_token, top_k_filter
from .efficient import (
    merge_partial_attention,
    online_softmax,
    partial_attention,
    tiled_attention,
    tiled_attention_blocks,
)
from .encoder import Encoder, EncoderLayer, FeedForward, LayerNorm, PositionalEncoding
from .encoder_decoder import DecoderLayer, EncoderDecoder, Seq2SeqTransformer, greedy_decode
from .functional import (
    attention_scores_loop,
    causal_mask,
    random_dot_products,
    scaled_dot_product_attention,
    softmax_naive,
    softmax_stable,
    softmax_with_temperature,
)
from .gpt import GPT, GPTBlock
from .interop import from_torch, to_torch
from .lessons.parameters import ParameterError, check_parameter
from .pretrained import (
    BertEmbeddings,
    SentenceEncoder,
    attention_mask_to_key_padding_mask,
    key_padding_mask_to_attention_mask,
    load_sentence_transformer,
    mean_pool,
    shipped_model_path,
)
from .rope import rope_rotate
from .text import (
    BigramLanguageModel,
    CharTokenizer,
    evaluate_loss,
    language_model_loss,
    next_token_batch,
    shakespeare_text,
)
from .training import (
    TokenClassifier,
    evaluate,
    make_task,
    reverse_targets,
    token_accuracy,
    train,
    warmup_cosine_lr,
)


def __getattr__(name: str):
    if name not in viz.__all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(viz, name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(viz.__all__))


__version__ = "0.1.0"

# The names imported above, without the submodules (and without viz's lazy names).
__all__ = sorted(name for name, value in globals().items() if not name.startswith("_") and not _ismodule(value))
