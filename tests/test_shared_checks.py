"""One rule per kind of argument, whichever function takes it: temperatures and token ids."""

import pytest
import torch
from conftest import small_gpt_config, small_seq2seq_config

import attention_helpers as ah
from attention_helpers.training import evaluate


def small_gpt():
    torch.manual_seed(0)
    return ah.GPT(small_gpt_config()).eval()


# --- temperature ----------------------------------------------------------------------------------------------

TEMPERATURE_USERS = {
    "softmax_with_temperature": lambda t: ah.softmax_with_temperature(torch.randn(2, 5), t),
    "sample_next_token": lambda t: ah.sample_next_token(torch.randn(2, 11), t),
    "generate": lambda t: ah.generate(small_gpt(), torch.zeros(1, 2, dtype=torch.long), 3, t),
}
BAD_TEMPERATURES = [
    (-1.0, ValueError, "-1.0"),
    (float("nan"), ValueError, "nan"),
    (float("inf"), ValueError, "inf"),
    (1e-320, ValueError, "1e-320"),  # a denormal: logits / 1e-320 overflow to inf
    (1e-3, ValueError, "0.001"),  # below the floor: as good as greedy, and logits / T overflow in float16
    ("1.0", TypeError, "'1.0'"),
    (True, TypeError, "True"),
]


@pytest.mark.parametrize(("temperature", "error", "shown"), BAD_TEMPERATURES, ids=lambda v: repr(v))
@pytest.mark.parametrize("user", list(TEMPERATURE_USERS), ids=str)
def test_every_function_rejects_a_bad_temperature_alike(user, temperature, error, shown):
    with pytest.raises((TypeError, ValueError)) as info:
        TEMPERATURE_USERS[user](temperature)
    assert type(info.value) is error
    message = str(info.value)
    assert message.startswith("temperature must be") and shown in message, message


def test_temperature_zero_is_greedy_for_sampling_and_rejected_by_softmax():
    logits = torch.randn(4, 11)
    assert torch.equal(ah.sample_next_token(logits, 0), logits.argmax(-1, keepdim=True))
    assert torch.equal(ah.sample_next_token(logits, 0.0, top_k=3), logits.argmax(-1, keepdim=True))
    with pytest.raises(ValueError, match=r"temperature must be .* got 0\.0"):
        ah.softmax_with_temperature(logits, 0.0)  # softmax(x / 0) has no value: there is no greedy softmax


@pytest.mark.parametrize("user", list(TEMPERATURE_USERS), ids=str)
def test_the_smallest_accepted_temperature_works_everywhere(user):
    TEMPERATURE_USERS[user](0.01)


# --- token ids ------------------------------------------------------------------------------------------------


def _seq2seq():
    torch.manual_seed(0)
    return ah.Seq2SeqTransformer(small_seq2seq_config(context_length=16)).eval()


def _classifier():
    torch.manual_seed(0)
    return ah.TokenClassifier(vocab_size=11, d_model=12, num_heads=2, num_layers=1, ffn_hidden=20).eval()


def _bert_embeddings():
    torch.manual_seed(0)
    return ah.BertEmbeddings(11, 12, 16).eval()


IDS = torch.tensor([[1, 8, 4, 1, 5], [3, 2, 6, 5, 3]])  # (batch, num_tokens); row 0 holds the min and max
TOKEN_ID_USERS = {
    "GPT": lambda ids: small_gpt()(ids),
    "generate": lambda ids: ah.generate(small_gpt(), ids, 3, temperature=0),
    "BigramLanguageModel": lambda ids: ah.BigramLanguageModel(11)(ids),
    "BigramLanguageModel.from_counts": lambda ids: ah.BigramLanguageModel.from_counts(ids[0], 11).logits,
    "language_model_loss targets": lambda ids: ah.language_model_loss(torch.randn(2, 5, 11), ids),
    "TokenClassifier": lambda ids: _classifier()(ids),
    "evaluate": lambda ids: torch.tensor(evaluate(_classifier(), ids, IDS)),
    "Seq2SeqTransformer src": lambda ids: _seq2seq()(ids, IDS[:, :3]),
    "Seq2SeqTransformer tgt": lambda ids: _seq2seq()(IDS, ids),
    "greedy_decode": lambda ids: ah.greedy_decode(_seq2seq(), ids, 1, 4),
    "BertEmbeddings": lambda ids: _bert_embeddings()(ids),
}


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.uint8, torch.float32, torch.bool], ids=str)
@pytest.mark.parametrize("user", list(TOKEN_ID_USERS), ids=str)
def test_token_ids_of_a_dtype_embedding_cannot_index_are_a_type_error(user, dtype):
    with pytest.raises((TypeError, ValueError, RuntimeError)) as info:
        torch.manual_seed(0)
        TOKEN_ID_USERS[user](IDS.to(dtype))
    assert type(info.value) is TypeError, info.value
    assert str(dtype) in str(info.value) and "torch.int64" in str(info.value)


@pytest.mark.parametrize("user", list(TOKEN_ID_USERS), ids=str)
def test_int32_and_int64_token_ids_give_identical_results(user):
    torch.manual_seed(0)
    expected = TOKEN_ID_USERS[user](IDS)
    torch.manual_seed(0)
    assert torch.equal(TOKEN_ID_USERS[user](IDS.int()), expected)


@pytest.mark.parametrize("user", list(TOKEN_ID_USERS), ids=str)
def test_out_of_range_token_ids_name_the_values_and_the_vocabulary(user):
    for bad, shown in ((IDS + 20, "to 28"), (IDS - 4, "from -3")):
        with pytest.raises((TypeError, ValueError, RuntimeError, IndexError)) as info:
            torch.manual_seed(0)
            TOKEN_ID_USERS[user](bad)
        assert type(info.value) is ValueError, info.value
        assert shown in str(info.value) and "vocab_size=" in str(info.value), info.value


# --- notebook parameters: both bounds belong to the range ---------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "low", "high", "kind"),
    [
        (1, 1, 8, int),
        (8, 1, 8, int),
        (0.0, 0.0, 0.5, float),
        (0.5, 0.0, 0.5, float),
        (3, 3, None, int),
        (2, None, 2, int),
    ],
)
def test_check_parameter_accepts_its_own_bounds(value, low, high, kind):
    assert ah.check_parameter("p", value, low=low, high=high, kind=kind) == value


@pytest.mark.parametrize(("value", "low", "high"), [(0, 1, 8), (9, 1, 8), (-1e-9, 0.0, None), (2.5, None, 2)])
def test_check_parameter_rejects_a_value_just_outside(value, low, high):
    kind = float if isinstance(value, float) else int
    with pytest.raises(ah.ParameterError, match=r"Parameter p must be .* got"):
        ah.check_parameter("p", value, low=low, high=high, kind=kind)
