"""Submodules are called as modules: forward hooks on every attention and layer module inside GPT, Encoder and
EncoderDecoder fire once per call (lesson 08 teaches hooks; profilers and summaries rely on the same calls)."""

import pytest
import torch
from conftest import perturb_, small_gpt_config

import attention_helpers as ah


def count_calls(model, kinds):
    """Register a forward hook on every submodule of ``kinds``; returns {qualified name: calls} and the handles."""
    calls, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, kinds):
            calls[name] = 0

            def hook(module, inputs, output, name=name):
                calls[name] += 1

            handles.append(module.register_forward_hook(hook))
    return calls, handles


def test_every_gpt_block_and_attention_fires_its_hook_once_per_call_and_per_cached_step():
    model = perturb_(
        ah.GPT(ah.GPTConfig(vocab_size=11, context_length=12, d_model=16, num_heads=4, num_layers=3, dropout=0.0))
    ).eval()
    calls, _ = count_calls(model, (ah.MultiHeadAttention, ah.GPTBlock, ah.FeedForward))
    assert len(calls) == 3 * 3  # 3 blocks, each with one attention and one feed-forward
    with torch.no_grad():
        model(torch.randint(0, 11, (2, 5)))
    assert set(calls.values()) == {1}, calls
    ah.generate(model, torch.randint(0, 11, (2, 3)), 4, temperature=0)  # the prompt, then 3 one-token steps
    assert set(calls.values()) == {1 + 4}, calls


def test_every_encoder_layer_and_attention_fires_its_hook():
    encoder = ah.Encoder(ah.EncoderConfig(d_model=16, ffn_hidden=24, num_heads=4, num_layers=5, final_norm=True)).eval()
    calls, _ = count_calls(encoder, (ah.MultiHeadAttention, ah.EncoderLayer, ah.FeedForward, ah.LayerNorm))
    assert len(calls) == 5 * 5 + 1  # per layer: attention, feed-forward, two norms, the layer; the final norm
    with torch.no_grad():
        encoder(torch.randn(2, 6, 16), torch.zeros(2, 6, dtype=torch.bool))
    assert set(calls.values()) == {1}, calls


def test_every_encoder_decoder_layer_and_attention_fires_its_hook():
    torch.manual_seed(0)
    model = ah.Seq2SeqTransformer(
        ah.Seq2SeqConfig(
            src_vocab_size=20,
            tgt_vocab_size=20,
            d_model=16,
            num_heads=4,
            num_encoder_layers=2,
            num_decoder_layers=3,
            ffn_hidden=24,
        )
    ).eval()
    kinds = (ah.MultiHeadAttention, ah.EncoderLayer, ah.DecoderLayer, ah.FeedForward)
    calls, handles = count_calls(model, kinds)
    assert len(calls) == 2 * 3 + 3 * 4  # encoder layers: layer, attention, ffn; decoder: layer, 2 attentions, ffn
    src = torch.randint(1, 20, (2, 7))
    with torch.no_grad():
        model(src, torch.randint(1, 20, (2, 5)))
    assert set(calls.values()) == {1}, calls
    ah.greedy_decode(model, src, 1, 4)  # the encoder once, the decoder once per step
    for name, count in calls.items():
        assert count == (2 if name.startswith("transformer.encoder") else 1 + 4), (name, count)
    for handle in handles:
        handle.remove()


def test_a_layer_run_alone_checks_its_input_again_after_a_model_call_that_failed_inside_it():
    """Inside a model, which checked its input at its entry point, the layers skip re-checking it (in generation,
    at every token); a layer called on its own afterwards, even after the model call raised, checks again."""
    model = ah.GPT(small_gpt_config()).eval()

    def fail(module, inputs, output):
        raise RuntimeError("a hook that fails")

    handle = model.blocks[1].register_forward_hook(fail)
    with pytest.raises(RuntimeError, match="a hook that fails"):
        model(torch.randint(0, 11, (2, 5)))
    handle.remove()
    attention, ffn = model.blocks[0].attention, model.blocks[0].ffn
    with pytest.raises(ValueError, match="d_in"):
        attention(torch.randn(2, 5, 15))
    with pytest.raises(ValueError, match="d_model"):
        ffn(torch.randn(2, 5, 15))
    cache = model.new_cache(2)
    with pytest.raises(ValueError, match="layer_idx=2"):
        attention(torch.randn(2, 5, 16), cache=cache, layer_idx=2)


def test_inside_a_model_a_layer_still_refuses_to_write_the_cache_twice():
    model = ah.GPT(small_gpt_config()).eval()
    model.blocks[1].register_forward_pre_hook(lambda module, args: (args[0], args[1], 0))  # both write layer 0
    with pytest.raises(ValueError, match="layer 0 already wrote"):
        model(torch.randint(0, 11, (1, 3)), cache=model.new_cache(1))
