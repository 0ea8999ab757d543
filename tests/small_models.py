"""The small model configurations several test files build (imported as ``small_models``: pytest puts tests/ on the
path, as for ``book_reference``)."""

import attention_helpers as ah


def small_seq2seq_config(**changes) -> ah.Seq2SeqConfig:
    """A sequence-to-sequence model small enough for a unit test, with ``d_model != ffn_hidden`` and three heads;
    ``changes`` overrides any field."""
    sizes = dict(
        src_vocab_size=13,
        tgt_vocab_size=9,
        d_model=12,
        num_heads=3,
        num_encoder_layers=1,
        num_decoder_layers=1,
        ffn_hidden=20,
    )
    return ah.Seq2SeqConfig(**{**sizes, **changes})
