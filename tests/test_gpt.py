"""The GPT decoder (with the KV cache), the bigram baseline and the tokenizer."""

import copy
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import check_calls, perturb_, small_gpt, small_gpt_config
from test_decoding import tensors_kept

import attention_helpers as ah


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, expected, atol=atol, rtol=1e-4)


# --- the model ----------------------------------------------------------------------------------------------


def test_logits_have_shape_batch_tokens_vocab():
    model = small_gpt()
    assert model(torch.randint(0, 11, (3, 7))).shape == (3, 7, 11)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_no_logit_depends_on_a_later_token(mode):
    """In train mode with dropout, which takes the explicit attention path: both passes draw the same dropout
    masks (same seed, same shapes), so any difference in an earlier row can only come from a later token."""
    model = small_gpt(dropout=0.3).train(mode == "train")
    ids = torch.randint(0, 11, (2, 10))

    def run(token_ids, seed=1):
        torch.manual_seed(seed)
        return model(token_ids)

    logits = run(ids)
    if mode == "train":
        assert not torch.allclose(run(ids, seed=2), logits)  # dropout is really on
    for i in range(9):
        changed = ids.clone()
        changed[:, i + 1 :] = (changed[:, i + 1 :] + torch.randint(1, 11, changed[:, i + 1 :].shape)) % 11
        new_logits = run(changed)
        close(new_logits[:, : i + 1], logits[:, : i + 1])
        assert not torch.allclose(new_logits[:, i + 1], logits[:, i + 1])  # the later rows do see the change


@pytest.mark.parametrize(
    "site", ["dropout", "blocks.1.attention.dropout", "blocks.1.dropout1", "blocks.1.dropout2", "blocks.1.ffn.dropout"]
)
def test_every_dropout_drops_in_training_and_none_in_eval(site):
    """Only the dropout at ``site`` is on (p = 0.5, the others 0): in train mode two passes differ, so that site
    drops; in eval mode they equal, to the last bit, the outputs of the model without any dropout."""
    model, ids = small_gpt(), torch.randint(0, 11, (2, 6))
    expected = model(ids)
    model.get_submodule(site).p = 0.5
    model.train()
    assert not torch.allclose(model(ids), model(ids))
    model.eval()
    torch.testing.assert_close(model(ids), expected, atol=0, rtol=0)


def test_output_head_is_tied_to_the_token_embedding():
    model = small_gpt()
    assert model.lm_head.weight is model.token_embedding.weight
    assert sum(p.numel() for p in model.parameters()) == sum(
        p.numel() for name, p in model.named_parameters() if not name.startswith("lm_head")
    )
    ids = torch.randint(0, 11, (2, 5))
    x = model.token_embedding(ids) + model.position_embedding.weight[:5]
    final = model.final_norm(model.blocks[1](model.blocks[0](x)))
    close(model(ids), final @ model.token_embedding.weight.T)


def test_the_cache_gives_the_same_logits_as_the_full_pass():
    model = small_gpt()
    ids = torch.randint(0, 11, (2, 12))
    full = model(ids)
    cache = model.new_cache(batch=2)
    pieces = []
    for start, end in [(0, 5)] + [(i, i + 1) for i in range(5, 12)]:
        pieces.append(model(ids[:, start:end], cache))
        assert cache.num_tokens == end  # the cache moved itself on
    close(torch.cat(pieces, dim=1), full)
    assert len(cache.keys) == 2 and cache.keys[0].shape == (2, 4, 12, 4)  # per layer: (batch, kv heads, capacity, d)


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_a_gpt_with_grouped_heads_caches_its_kv_heads_only(num_kv_heads):
    model = ah.GPT(small_gpt_config(num_kv_heads=num_kv_heads)).eval()
    ids = torch.randint(0, 11, (2, 9))
    cache = model.new_cache(batch=2, capacity=9)
    assert cache.keys[0].shape == (2, num_kv_heads, 9, 4)
    pieces = [model(ids[:, :3], cache)] + [model(ids[:, i : i + 1], cache) for i in range(3, 9)]
    close(torch.cat(pieces, dim=1), model(ids))
    assert torch.equal(ah.generate(model, ids[:, :3], 6, 0), ah.generate(model, ids[:, :3], 6, 0, use_cache=False))


def test_a_gpt_copies_after_a_cached_call_with_gradients():
    """The cache lives outside the model, so a cached call that builds an autograd graph leaves nothing behind:
    deepcopy works and the copy computes the same logits (a cache inside the modules broke both)."""
    model = small_gpt()
    ids = torch.randint(0, 11, (1, 6))
    logits = model(ids, model.new_cache(batch=1))
    assert logits.requires_grad
    clone = copy.deepcopy(model)
    close(clone(ids), model(ids))
    assert tensors_kept(model) == []


def test_the_model_learns_a_repeating_pattern():
    """A real training check: a short periodic sequence is easy to predict once the model sees a period."""
    torch.manual_seed(0)
    model = ah.GPT(ah.GPTConfig(vocab_size=5, context_length=16, d_model=32, num_heads=4, num_layers=1, dropout=0.0))
    data = torch.tensor([0, 1, 2, 3, 4, 2, 1] * 40)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(0)
    for _ in range(150):
        inputs, targets = ah.next_token_batch(data, 8, 16, generator)
        loss = ah.language_model_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert ah.evaluate_loss(model, data, 16) < 0.3  # the bigram table cannot go below ln(2)/7 * 3 ≈ 0.3
    assert ah.evaluate_loss(ah.BigramLanguageModel.from_counts(data, 5), data, 16) > 0.25


@pytest.mark.parametrize(
    ("call", "error", "fragments"),
    [
        (lambda m: m(torch.zeros(2, 3)), TypeError, ["torch.int64", "torch.float32"]),
        (lambda m: m(torch.zeros(2, 3, dtype=torch.int16)), TypeError, ["torch.int16", "torch.int32"]),
        (lambda m: m(torch.tensor([[1, 11]])), ValueError, ["vocab_size=11", "11"]),
        (lambda m: m(torch.tensor([[-1, 2]])), ValueError, ["vocab_size=11", "-1"]),
        (lambda m: m(torch.zeros(2, 13, dtype=torch.long)), ValueError, ["num_tokens=13", "context_length=12"]),
        (lambda m: m(torch.zeros(5, dtype=torch.long)), ValueError, ["2 dimensions", "(5,)"]),
        (lambda m: m([[1, 2]]), TypeError, ["torch.Tensor", "list"]),
        (
            lambda m: ah.GPT(
                ah.GPTConfig(vocab_size=11, context_length=12, d_model=10, num_heads=4, num_layers=2, dropout=0.0)
            ),
            ValueError,
            ["d_model=10", "num_heads=4"],
        ),
        (
            lambda m: ah.GPT(
                ah.GPTConfig(vocab_size=11, context_length=12, d_model=16, num_heads=4, num_layers=0, dropout=0.0)
            ),
            ValueError,
            ["num_layers"],
        ),
    ],
    ids=["float ids", "int16 ids", "id too large", "negative id", "too many tokens", "1-D", "list", "heads", "layers"],
)
def test_bad_input_names_what_is_wrong(call, error, fragments):
    with pytest.raises(error) as info:
        call(small_gpt())
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} missing from: {info.value}"


def test_the_cache_cannot_outgrow_the_context():
    model = small_gpt()
    cache = model.new_cache(batch=1)
    model(torch.zeros(1, 10, dtype=torch.long), cache)
    with pytest.raises(ValueError, match=r"holds 10 tokens and the input adds 3, more than its capacity=12"):
        model(torch.zeros(1, 3, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="the cache holds batch=1 but the input has batch=2"):
        model(torch.zeros(2, 1, dtype=torch.long), cache)
    with pytest.raises(TypeError, match="cache must be a KVCache .*, got tuple"):
        model(torch.zeros(1, 1, dtype=torch.long), (cache.keys, cache.values))


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_cached_generation_equals_uncached_with_either_kind_of_positions(positions):
    """RoPE rotates each block's queries and keys by their position, which the cache's offset supplies: cached
    logits and tokens equal the full pass."""
    torch.manual_seed(0)
    model = perturb_(ah.GPT(small_gpt_config(positions=positions))).eval()
    ids = torch.randint(0, 11, (2, 9))
    cache = model.new_cache(batch=2)
    pieces = [model(ids[:, :4], cache)] + [model(ids[:, i : i + 1], cache) for i in range(4, 9)]
    close(torch.cat(pieces, dim=1), model(ids))
    for temperature in (0, 1.0):
        runs = [
            ah.generate(model, ids[:, :3], 12, temperature, use_cache=c, generator=torch.Generator().manual_seed(1))
            for c in (True, False)
        ]
        assert torch.equal(*runs)


def test_rope_rotates_the_queries_and_keys_of_every_block_instead_of_a_position_table():
    """With positions="rope" there is no position embedding; every block's attention rotates its queries and keys,
    which changes the logits (the same weights with the rotation off give others)."""
    torch.manual_seed(0)
    model = perturb_(ah.GPT(small_gpt_config(positions="rope"))).eval()
    assert model.position_embedding is None and all(block.attention.rope for block in model.blocks)
    ids = torch.randint(0, 11, (2, 6))
    with torch.no_grad():
        rotated = model(ids)
        for block in model.blocks:
            block.attention.rope = False
        assert not torch.allclose(rotated[:, 1:], model(ids)[:, 1:], atol=1e-4)
        close(rotated[:, 0], model(ids)[:, 0])  # position 0 is not rotated at all
    with pytest.raises(ValueError, match=r"positions must be one of \['learned', 'rope'\], got 'sinusoidal'"):
        ah.GPT(small_gpt_config(positions="sinusoidal"))


# --- training pieces and the baseline -----------------------------------------------------------------------


def test_next_token_batch_targets_are_the_inputs_shifted_by_one():
    data = torch.arange(100)  # each token's id is its position, so windows are easy to read
    inputs, targets = ah.next_token_batch(data, 6, 8, torch.Generator().manual_seed(0))
    assert inputs.shape == targets.shape == (6, 8)
    assert torch.equal(targets, inputs + 1)
    assert torch.equal(inputs - inputs[:, :1], torch.arange(8).expand(6, 8))  # contiguous windows


def test_bigram_counts_recover_a_known_markov_chain():
    transitions = torch.tensor([[0.1, 0.9, 0.0], [0.5, 0.0, 0.5], [0.3, 0.3, 0.4]])
    generator = torch.Generator().manual_seed(0)
    ids = [0]
    for _ in range(20000):
        ids.append(torch.multinomial(transitions[ids[-1]], 1, generator=generator).item())
    ids = torch.tensor(ids)
    model = ah.BigramLanguageModel.from_counts(ids, 3)
    close(torch.softmax(model.logits, -1), transitions, atol=0.02)
    # its loss is the cross-entropy of the chain, whose rows' entropies are known
    expected = -(transitions[ids[:-1], ids[1:]].log()).mean().item()
    assert abs(ah.evaluate_loss(model, ids, 100) - expected) < 0.01


def test_evaluate_loss_scores_every_window_once():
    model = small_gpt()
    data = torch.randint(0, 11, (50,))
    windows = data[:48].view(4, 12)
    expected = F.cross_entropy(model(windows).flatten(0, 1), data[1:49]).item()
    assert abs(ah.evaluate_loss(model, data, 12, batch_size=3) - expected) < 1e-5


# --- the text and the tokenizer -----------------------------------------------------------------------------


def test_shipped_text_is_plain_shakespeare_without_the_gutenberg_licence():
    text = ah.shakespeare_text()
    assert 500_000 < len(text) <= 1_000_000 and text.isascii()
    assert "gutenberg" not in text.lower() and "*** START" not in text
    assert "To be, or not to be" in text and "Out, damned spot" in text


def test_tokenizer_round_trips_the_text_and_names_unknown_characters():
    text = ah.shakespeare_text()
    tokenizer = ah.CharTokenizer(text)
    assert tokenizer.chars == sorted(set(text)) and tokenizer.vocab_size == len(set(text))
    ids = tokenizer.encode(text[:5000])
    assert ids.dtype == torch.long and tokenizer.decode(ids) == text[:5000]
    with pytest.raises(ValueError, match="'é'"):
        tokenizer.encode("café")
    with pytest.raises(ValueError, match=r"\[0, 73\)"):
        tokenizer.decode([0, 73])
    with pytest.raises(TypeError, match="integer"):
        tokenizer.decode(torch.tensor([1.0]))


def test_a_built_wheel_ships_the_text(tmp_path):
    """A non-editable install must carry the text (package data), since nothing is downloaded at run time."""
    root = Path(__file__).resolve().parent.parent
    command = [sys.executable, "-m", "pip", "wheel", str(root), "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*command, "-w", str(tmp_path)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "attention_helpers/texts/shakespeare.txt" in names and "attention_helpers/texts/SOURCE.md" in names


# --- RoPE inside the model, against attention written from the paper -------------------------------------------


def rotary_from_paper(x, base=10000.0):
    """RoPE as Su et al. (2021) write it: dimensions (2i, 2i + 1) of the vector at position m, read as the complex
    number x_2i + j x_(2i+1), are multiplied by exp(j m theta_i), theta_i = base^(-2i / d). ``x`` (batch, heads,
    num_tokens, d) in that interleaved order."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d / 2,)
    angles = torch.arange(x.shape[-2], dtype=torch.float64)[:, None] * theta  # (num_tokens, d / 2)
    pairs = torch.view_as_complex(x.double().unflatten(-1, (d // 2, 2)).contiguous())  # (..., num_tokens, d / 2)
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)).flatten(-2)


def llama_attention_from_paper(attention, x):
    """Causal attention with rotated queries and keys, from the formulas, in float64, on ``attention``'s weights.
    A model may pair dimension i with i + d/2 instead of 2i with 2i + 1 (Llama does): the same permutation of the
    query's and the key's dimensions leaves every dot product unchanged, so the weights' rows are reordered here."""
    batch, num_tokens, _ = x.shape
    heads, kv_heads, d = attention.num_heads, attention.num_kv_heads, attention.head_dim
    interleave = torch.stack([torch.arange(d // 2), torch.arange(d // 2, d)], dim=1).flatten()  # 0, d/2, 1, ...

    def project(linear, num):
        out = x.double() @ linear.weight.double().T  # (batch, num_tokens, num * d)
        return out.view(batch, num_tokens, num, d).transpose(1, 2)  # (batch, num, num_tokens, d)

    q = rotary_from_paper(project(attention.W_query, heads)[..., interleave])
    k = rotary_from_paper(project(attention.W_key, kv_heads)[..., interleave])
    v = project(attention.W_value, kv_heads)
    group = heads // kv_heads  # query head h reads key/value head h // group
    k, v = k[:, torch.arange(heads) // group], v[:, torch.arange(heads) // group]
    scores = q @ k.transpose(-2, -1) / d**0.5  # (batch, heads, num_tokens, num_tokens)
    future = torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1)
    weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    context_vec = (weights @ v).transpose(1, 2).flatten(2)  # (batch, num_tokens, heads * d)
    return context_vec @ attention.out_proj.weight.double().T + attention.out_proj.bias.double()


def gpt_from_paper(model, ids, attend=llama_attention_from_paper):
    """The GPT's forward pass with every block's attention replaced by ``attend`` (float64)."""
    model = copy.deepcopy(model).double()
    x = model.token_embedding(ids)
    for block in model.blocks:
        x = x + attend(block.attention, block.norm1(x))
        x = x + block.ffn(block.norm2(x))
    return model.lm_head(model.final_norm(x))


ROPE_GPTS = {"4 heads": {}, "4 query heads, 2 key/value heads": {"num_kv_heads": 2}, "multi-query": {"num_kv_heads": 1}}


@pytest.mark.parametrize("options", list(ROPE_GPTS.values()), ids=list(ROPE_GPTS))
def test_rope_gpt_equals_llama_attention_from_the_paper_cached_and_not(options):
    torch.manual_seed(0)
    model = perturb_(
        ah.GPT(
            ah.GPTConfig(
                vocab_size=13,
                context_length=10,
                d_model=24,
                num_heads=4,
                num_layers=2,
                dropout=0.0,
                positions="rope",
                **options,
            )
        ),
        std=0.2,
    ).eval()
    ids = torch.randint(0, 13, (2, 9))
    with torch.no_grad():
        expected = gpt_from_paper(model, ids).float()  # (2, 9, 13)
        close(model(ids), expected, atol=2e-5)
        cache = model.new_cache(2)
        token_by_token = torch.cat([model(ids[:, i : i + 1], cache) for i in range(9)], dim=1)
        close(token_by_token, expected, atol=2e-5)
        cache = model.new_cache(2)
        prompt_then_tokens = torch.cat(
            [model(ids[:, :4], cache), model(ids[:, 4:6], cache), model(ids[:, 6:], cache)], 1
        )
        close(prompt_then_tokens, expected, atol=2e-5)


def test_rope_gpt_attention_equals_transformers_llama_attention():
    """The same block attention against Hugging Face's LlamaAttention with the weights copied (a second,
    independent reference; Llama has no bias on the output projection here, so ours is zeroed)."""
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig

    torch.manual_seed(0)
    attention = perturb_(ah.MultiHeadAttention(24, 24, 10, 0.0, 4, num_kv_heads=2, rope=True), std=0.2).eval()
    with torch.no_grad():
        attention.out_proj.bias.zero_()
    config = LlamaConfig(
        hidden_size=24,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=6,
        max_position_embeddings=10,
        attention_bias=False,
    )
    config._attn_implementation = "eager"
    reference = llama.LlamaAttention(config, layer_idx=0).eval()
    with torch.no_grad():
        for theirs, ours in (("q_proj", "W_query"), ("k_proj", "W_key"), ("v_proj", "W_value"), ("o_proj", "out_proj")):
            getattr(reference, theirs).weight.copy_(getattr(attention, ours).weight)
        x = torch.randn(2, 7, 24)
        position_ids = torch.arange(7)[None].expand(2, 7)
        cos_sin = llama.LlamaRotaryEmbedding(config=config)(x, position_ids)
        causal = torch.zeros(7, 7).masked_fill(torch.ones(7, 7, dtype=torch.bool).triu(1), float("-inf"))
        expected, _ = reference(x, position_embeddings=cos_sin, attention_mask=causal[None, None])
        close(attention(x), expected)
        cache = ah.KVCache(1, 2, 2, 10, 6)
        close(torch.cat([attention(x[:, i : i + 1], cache=cache) for i in range(7)], dim=1), expected)


# --- checks at the door ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_a_cached_step_of_a_four_layer_gpt_makes_at_most_four_check_calls(positions):
    """The model checks its ids and the cache once at its door and trusts its blocks with what it hands them: no
    check per layer (29 calls per step before: 13 checks and a context-variable switch, rope or not). generate's
    own loop, which checked the prompt and made the cache, makes none per step."""
    model = ah.GPT(
        ah.GPTConfig(
            vocab_size=50, context_length=64, d_model=32, num_heads=4, num_layers=4, dropout=0.0, positions=positions
        )
    ).eval()
    ids = torch.randint(0, 50, (1, 6))
    with torch.no_grad():
        cache = model.new_cache(1)
        model(ids[:, :5], cache)
        calls = check_calls(lambda: model(ids[:, 5:], cache))
    assert len(calls) <= 4, calls
    assert {"check_token_ids", "check_cache"} <= set(calls), "the door checks the ids and the cache"
    short, longer = (check_calls(lambda n=n: ah.generate(model, ids, n, temperature=0)) for n in (3, 7))
    assert short and longer == short, "generate checks its arguments, then each step of its loop runs no check"


# --- the config -----------------------------------------------------------------------------------------------

SIZES = dict(vocab_size=11, context_length=12, d_model=16, num_heads=4, num_layers=2)


def test_a_config_takes_its_fields_by_name_only_so_that_no_two_can_be_swapped():
    with pytest.raises(TypeError, match="positional"):
        ah.GPTConfig(11, 12, 16, 4, 2)
    config = ah.GPTConfig(**SIZES)
    model = ah.GPT(config)
    assert model.config is config and len(model.blocks) == 2 and model.blocks[0].attention.num_heads == 4
    with pytest.raises(AttributeError):
        config.num_layers = 3  # frozen: a model's config stays what built it
    with pytest.raises(TypeError, match="positional"):
        ah.GPT(11, 12, 16, 4, 2, 0.0)
    with pytest.raises(TypeError, match="GPTConfig"):
        ah.GPT(SIZES)


@pytest.mark.parametrize(
    "field, value, error, fragments",
    [
        ("num_layers", 2.0, TypeError, ["num_layers", "float", "2.0"]),
        ("num_layers", 0, ValueError, ["num_layers", "0"]),
        ("vocab_size", True, TypeError, ["vocab_size", "bool"]),
        ("num_heads", 3, ValueError, ["d_model=16", "num_heads=3"]),
        ("num_kv_heads", 3, ValueError, ["num_heads=4", "num_kv_heads=3"]),
        ("dropout", 1.0, ValueError, ["dropout", "1.0"]),
        ("positions", "sinusoidal", ValueError, ["positions", "sinusoidal", "learned", "rope"]),
        ("d_model", 12, ValueError, ["head_dim", "3", "even"]),  # with positions="rope" and 4 heads
    ],
)
def test_a_config_checks_every_field_once_and_names_it_with_its_value(field, value, error, fragments):
    fields = {**SIZES, "positions": "rope" if field == "d_model" else "learned", field: value}
    with pytest.raises(error) as info:
        ah.GPTConfig(**fields)
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} missing from: {info.value}"
