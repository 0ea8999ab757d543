"""all-MiniLM-L6-v2 in the series' classes equals sentence-transformers and transformers' BertModel."""

import subprocess
import sys

import pytest
import torch

import attention_helpers as ah
from attention_helpers.pretrained import _series_names

LONG = "attention " * 300  # about 300 word pieces: more than the model's 256, so it is cut
SENTENCES = [
    "A cat sits on the mat.",
    "The animal didn't cross the street because it was too tired.",
    "Hi",
    "Transformers read a whole sentence at once; recurrent networks read it word by word.",
    LONG,
]


@pytest.fixture(scope="module")
def model():
    return ah.SentenceEncoder.from_pretrained()


@pytest.fixture(scope="module")
def reference():
    return ah.load_sentence_transformer()


@pytest.fixture(scope="module")
def bert(reference):
    from transformers import BertModel

    # eager: the attention implementation that can return its weights
    return BertModel.from_pretrained(str(ah.shipped_model_path()), attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def hf_batch(reference):
    """The reference tokenizer's batch, as sentence-transformers calls it: padded to the longest, cut at 256."""
    tokenizer = reference.tokenizer
    return tokenizer(SENTENCES, padding=True, truncation=True, max_length=reference.max_seq_length, return_tensors="pt")


def test_the_model_is_lesson_07s_encoder_with_real_sizes(model):
    assert isinstance(model.encoder, ah.Encoder) and len(model.encoder.layers) == 6
    layer = model.encoder.layers[0]
    assert layer.attention.num_heads == 12 and layer.attention.d_out == 384 and not layer.norm_first
    assert layer.ffn.linear1.out_features == 1536 and layer.norm1.eps == 1e-12
    assert model.context_length == 256 and model.normalize


def test_every_checkpoint_weight_is_used_but_the_pooler(model):
    from safetensors.torch import load_file

    state = load_file(str(ah.shipped_model_path() / "model.safetensors"))
    used = sum(
        t.numel() for name, t in state.items() if not name.startswith("pooler.") and name != "embeddings.position_ids"
    )
    assert sum(p.numel() for p in model.parameters()) == used
    word = state["embeddings.word_embeddings.weight"]
    assert torch.equal(model.embeddings.word_embeddings.weight, word)
    assert torch.equal(model.encoder.layers[5].norm2.gamma, state["encoder.layer.5.output.LayerNorm.weight"])


def test_tokens_equal_the_reference_tokenizer(model, hf_batch, reference):
    token_ids, key_padding_mask = model.tokenize(SENTENCES)
    assert torch.equal(token_ids, hf_batch["input_ids"])
    assert torch.equal(key_padding_mask, hf_batch["attention_mask"] == 0)
    assert token_ids.shape[1] == 256  # the long sentence was cut at the model's maximum length
    assert len(reference.tokenizer(LONG)["input_ids"]) > 256
    assert bool(key_padding_mask[2].any())  # the short sentences are padded


def test_encode_equals_sentence_transformers(model, reference):
    ours = model.encode(SENTENCES)
    theirs = reference.encode(SENTENCES, convert_to_tensor=True)
    assert ours.shape == theirs.shape == (len(SENTENCES), 384)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.norm(dim=1), torch.ones(len(SENTENCES)))


def test_hidden_states_equal_bert_model(model, bert, hf_batch):
    token_ids, key_padding_mask = model.tokenize(SENTENCES)
    with torch.no_grad():
        ours = model(token_ids, key_padding_mask)
        theirs = bert(input_ids=hf_batch["input_ids"], attention_mask=hf_batch["attention_mask"]).last_hidden_state
    real = ~key_padding_mask
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=0)


def test_a_tokenizers_attention_mask_gives_the_same_output_as_the_key_padding_mask(model, hf_batch):
    """The Hugging Face mask (1 = token) is converted once, at the model's door; the result is the same as the
    series' mask (True = padding), and giving both is refused."""
    token_ids, attention_mask = hf_batch["input_ids"], hf_batch["attention_mask"]
    assert bool((attention_mask == 0).any())  # the batch is padded, so the mask matters
    with torch.no_grad():
        from_hf = model(token_ids, attention_mask=attention_mask)
        from_ours = model(token_ids, attention_mask == 0)
    assert torch.equal(from_hf, from_ours)
    with pytest.raises(ValueError, match="not both"):
        model(token_ids, attention_mask == 0, attention_mask=attention_mask)
    with pytest.raises(TypeError, match="attention_mask must hold integers"):
        model(token_ids, attention_mask=attention_mask == 0)


def test_embedding_layer_equals_bert_embeddings(model, bert, hf_batch):
    with torch.no_grad():
        ours = model.embeddings(hf_batch["input_ids"])
        theirs = bert.embeddings(input_ids=hf_batch["input_ids"])
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_attention_weights_equal_bert_output_attentions(model, bert):
    sentence = SENTENCES[1]
    tokens, weights = model.attention_weights(sentence)
    encoded = model.tokenizer.encode(sentence)
    with torch.no_grad():
        out = bert(input_ids=torch.tensor([encoded.ids]), output_attentions=True)
    theirs = torch.stack(out.attentions)[:, 0]  # (num_layers, num_heads, num_tokens, num_tokens)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and "animal" in tokens
    assert weights.shape == (6, 12, len(tokens), len(tokens))
    torch.testing.assert_close(weights, theirs, atol=1e-5, rtol=0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(6, 12, len(tokens)))


def test_padded_batch_weights_equal_bert_and_ignore_padding(model, bert, hf_batch):
    token_ids, key_padding_mask = model.tokenize(SENTENCES[:3])
    with torch.no_grad():
        _, ours = model(token_ids, key_padding_mask, return_weights=True)
        out = bert(input_ids=token_ids, attention_mask=(~key_padding_mask).long(), output_attentions=True)
    theirs = torch.stack(out.attentions)  # (num_layers, batch, num_heads, num_tokens, num_tokens)
    real_queries = ~key_padding_mask  # padding queries' rows are never used
    for b in range(3):
        torch.testing.assert_close(ours[:, b, :, real_queries[b]], theirs[:, b, :, real_queries[b]], atol=1e-5, rtol=0)
    assert bool((ours[:, 2, :, :, key_padding_mask[2]] == 0).all())  # no query looks at padding


def test_padded_batch_equals_one_by_one(model):
    batch = model.encode(SENTENCES)
    one_by_one = torch.cat([model.encode([s]) for s in SENTENCES])
    torch.testing.assert_close(batch, one_by_one, atol=1e-5, rtol=0)


def test_from_a_folder_equals_the_shipped_model(model, tmp_path):
    source = ah.shipped_model_path()
    for path in source.rglob("*"):
        if path.is_file():
            (tmp_path / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path.relative_to(source)).symlink_to(path)
    copy = ah.SentenceEncoder.from_pretrained(tmp_path)
    torch.testing.assert_close(copy.encode(SENTENCES[:2]), model.encode(SENTENCES[:2]), atol=0, rtol=0)
    (tmp_path / "1_Pooling" / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="config.json is missing"):
        ah.SentenceEncoder.from_pretrained(tmp_path)


@pytest.mark.slow
def test_loading_needs_no_network():
    """Load both models and encode with every socket connection refused."""
    code = """
import socket
def refuse(*args, **kwargs):
    raise OSError("network used")
socket.socket.connect = refuse
socket.create_connection = refuse
import attention_helpers as ah
sentences = ["no network needed"]
ours = ah.SentenceEncoder.from_pretrained().encode(sentences)
theirs = ah.load_sentence_transformer().encode(sentences, convert_to_tensor=True)
assert (ours - theirs).abs().max() < 1e-5
"""
    subprocess.run([sys.executable, "-c", code], check=True, env={"PATH": "/usr/bin:/bin"})


def test_mask_conversions_round_trip():
    attention_mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    key_padding_mask = ah.attention_mask_to_key_padding_mask(attention_mask)
    assert key_padding_mask.dtype == torch.bool and key_padding_mask.tolist() == [[False] * 3, [False, False, True]]
    assert torch.equal(ah.key_padding_mask_to_attention_mask(key_padding_mask), attention_mask)


def test_the_wrong_mask_gets_a_clear_error():
    attention_mask = torch.tensor([[1, 1, 0]])
    with pytest.raises(TypeError, match="key_padding_mask already"):
        ah.attention_mask_to_key_padding_mask(attention_mask == 0)
    with pytest.raises(ValueError, match="only 0 and 1"):
        ah.attention_mask_to_key_padding_mask(torch.tensor([[1, 2]]))
    with pytest.raises(TypeError, match="integer tensor, got torch.float32"):
        ah.attention_mask_to_key_padding_mask(attention_mask.float())
    with pytest.raises(TypeError, match="attention_mask"):
        ah.key_padding_mask_to_attention_mask(attention_mask)
    encoder = ah.Encoder(ah.EncoderConfig(d_model=8, ffn_hidden=16, num_heads=2, num_layers=1))
    with pytest.raises(
        TypeError, match=r"key_padding_mask = attention_mask == 0; \.bool\(\) would hide the real tokens"
    ):
        encoder(torch.randn(1, 3, 8), attention_mask)


def test_mean_pool_ignores_padding():
    hidden = torch.randn(2, 4, 5)
    key_padding_mask = torch.tensor([[False, False, True, True], [False, False, False, False]])
    pooled = ah.mean_pool(hidden, key_padding_mask)
    torch.testing.assert_close(pooled[0], hidden[0, :2].mean(0))
    torch.testing.assert_close(pooled[1], hidden[1].mean(0))
    with pytest.raises(TypeError, match="attention_mask == 0"):
        ah.mean_pool(hidden, key_padding_mask.long())
    with pytest.raises(ValueError, match=r"does not broadcast to the expected shape \(2, 4\)"):
        ah.mean_pool(hidden, key_padding_mask[:, :3])


def test_unknown_checkpoint_weights_are_named():
    state = {"encoder.layer.0.attention.self.query.weight": torch.zeros(1), "classifier.weight": torch.zeros(1)}
    with pytest.raises(ValueError, match="classifier.weight"):
        _series_names(state, num_layers=1)


def test_bad_input_gets_clear_errors(model):
    with pytest.raises(TypeError, match=r"wrap one sentence in a list"):
        model.encode("one sentence")
    with pytest.raises(ValueError, match="empty"):
        model.encode([])
    with pytest.raises(TypeError, match="must all be strings, got int"):
        model.encode(["fine", 3])
    with pytest.raises(TypeError, match="token_ids must have dtype torch.int64 or torch.int32 .*got torch.float32"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"from 0 to 30521 \(vocab_size=30522\), got values from 101 to 30522"):
        model(torch.tensor([[101, 30522]]))
    with pytest.raises(ValueError, match="num_tokens=513 but the model knows only 512 positions"):
        model(torch.zeros(1, 513, dtype=torch.long))
    with pytest.raises(FileNotFoundError, match="no model folder"):
        ah.SentenceEncoder.from_pretrained("/no/such/folder")
