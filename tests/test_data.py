import torch

from attention_helpers import WORDS, toy_embeddings


def test_running_example_has_one_3d_vector_per_word():
    inputs = toy_embeddings()
    assert WORDS == ("Your", "journey", "starts", "with", "one", "step")
    assert inputs.shape == (len(WORDS), 3)
    assert inputs.dtype == torch.float32
    # "journey" and "starts" were chosen to point almost the same way: the closest pair of the six.
    cos = torch.nn.functional.cosine_similarity(inputs[:, None], inputs[None], dim=-1)
    cos.fill_diagonal_(-1)
    assert divmod(int(cos.argmax()), len(WORDS)) == (1, 2)


def test_each_call_returns_a_fresh_tensor():
    first = toy_embeddings()
    first.zero_()
    assert toy_embeddings().abs().sum() > 0
    assert toy_embeddings(torch.float64).dtype == torch.float64
