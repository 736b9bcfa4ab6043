"""Bad inputs and faults a careless or hostile user tries, each with the outcome it must have.

One section per case of the hardening issue (#19); every parametrised id is one bad input
tried, so ``pytest tests/test_bad_inputs.py --collect-only -q`` counts them:

1. a second ``generate`` with another output length (crashed on TensorFlow);
2. export verification of NaN outputs and bad tolerances (passed, or divided by zero);
3. exports that fail verification, or land on an existing target (left or merged files);
4. fairseq layer specs that expand to millions of layers (gigabytes, huge messages);
5. converter tensors of the wrong shape or with zero weight-norm vectors (truncated, NaN);
6. weights of a bigger configuration loaded into a smaller one (silently);
7. beam search with NaN logits or a NaN length penalty (all padding, score -inf);
8. empty batches and sequences, and CLI failures that printed tracebacks;
9. ``backbone_weights="imagenet"`` offline (an unexplained download failure).

Export cases run on TensorFlow only (see ``ONLY_ON_TENSORFLOW``); CLI cases run the
``posenc`` command in subprocesses, started together so they overlap.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_posenc import layers
from keras_posenc.generation import beam_search, greedy_search
from keras_posenc.zoo.convs2s import ConvS2S


def tiny_convs2s() -> ConvS2S:
    """The same tiny ConvS2S at every call (same seed, same weights)."""
    keras.utils.set_random_seed(0)
    return ConvS2S(
        12,
        12,
        embed_dim=8,
        encoder_layers=[(8, 3)],
        decoder_layers=[(8, 3)],
        decoder_out_embed_dim=8,
        max_source_positions=16,
        max_target_positions=32,
        dropout=0.0,
    )


# --------------------------------------------------------------------------- 1. generate twice


def test_generate_again_with_another_output_length_gives_the_right_tokens():
    # 3 source tokens: max_length 16; 5 tokens: 20 (2 * length + 10). A first call is
    # right (the generation tests check it): 5 tokens after 3 must give what a fresh,
    # identical model gives, and 3 tokens again what they gave first.
    short, long = np.array([[5, 6, 2]]), np.array([[5, 6, 7, 8, 2]])
    model = tiny_convs2s()
    first = model.generate(short)
    np.testing.assert_array_equal(model.generate(long), tiny_convs2s().generate(long))
    np.testing.assert_array_equal(model.generate(short), first)


# --------------------------------------------------------------------------- 7. beam search


@pytest.mark.parametrize("penalty", [np.nan, np.inf, -np.inf, -1.0], ids=str)
def test_length_penalty_must_be_finite(penalty):
    model = tiny_convs2s()
    with pytest.raises(ValueError, match="beam_search: `length_penalty` must be a finite number"):
        beam_search(model, np.array([[4, 5, 2]]), length_penalty=penalty)


@pytest.fixture(scope="module")
def nan_convs2s():
    model = tiny_convs2s()
    model.decoder_fc3.bias.assign(np.full(12, np.nan, "float32"))
    return model


@pytest.mark.parametrize("search", ["beam", "greedy", "greedy-no-cache"])
def test_nan_logits_raise(nan_convs2s, search):
    source = np.array([[4, 5, 2], [6, 7, 2]])
    name = "beam_search" if search == "beam" else "greedy_search"
    with pytest.raises(ValueError, match=rf"{name}: the model's logits are not finite"):
        if search == "beam":
            beam_search(nan_convs2s, source, beam_size=2)
        else:
            greedy_search(nan_convs2s, source, use_cache=search == "greedy")


# --------------------------------------------------------------------------- 8. empty inputs


def attention(relative, **options):
    return lambda: layers.MultiHeadRelativeAttention(2, 4, relative=relative, **options)


def encoder():
    return layers.RelativeTransformerEncoder(16, 2)


def glu():
    return layers.GLUConv1D(6, 3)


# The layer, its input shapes and the output shape it must give.
EMPTY_CALLS = {
    "attention-kv-no-queries": (attention("keys_values"), [(2, 0, 8), (2, 3, 8)], (2, 0, 8)),
    "attention-kv-no-keys": (attention("keys_values"), [(2, 3, 8), (2, 0, 8)], (2, 3, 8)),
    "attention-kv-batch-0": (attention("keys_values"), [(0, 3, 8), (0, 3, 8)], (0, 3, 8)),
    "attention-keys-batch-0": (attention("keys"), [(0, 3, 8), (0, 3, 8)], (0, 3, 8)),
    "attention-bias-nothing": (attention("bias", bucketing="log"), [(2, 0, 8)] * 2, (2, 0, 8)),
    "encoder-no-tokens": (encoder, [(2, 0, 8)], (2, 0, 8)),
    "encoder-batch-0": (encoder, [(0, 3, 8)], (0, 3, 8)),
    "glu-conv-no-tokens": (glu, [(2, 0, 8)], (2, 0, 6)),
    "glu-conv-batch-0": (glu, [(0, 4, 8)], (0, 4, 6)),
}  # fmt: skip


@pytest.mark.parametrize("case", list(EMPTY_CALLS))
def test_empty_batches_and_sequences_give_empty_outputs(case):
    make, shapes, expected = EMPTY_CALLS[case]
    output = keras.ops.convert_to_numpy(make()(*[np.zeros(s, "float32") for s in shapes]))
    assert output.shape == expected and np.isfinite(output).all()


def test_generation_of_an_empty_batch_is_empty():
    model = tiny_convs2s()
    assert greedy_search(model, np.zeros((0, 4), "int32")).shape == (0, 18)
    tokens, scores = beam_search(model, np.zeros((0, 4), "int32"), beam_size=2)
    assert tokens.shape == (0, 18) and scores.shape == (0,)


@pytest.mark.parametrize("search", [greedy_search, beam_search], ids=lambda f: f.__name__)
def test_generation_from_an_empty_source_is_refused(search):
    expected = rf"{search.__name__}: `encoder_token_ids` must hold at least one token per row"
    with pytest.raises(ValueError, match=expected):
        search(tiny_convs2s(), np.zeros((2, 0), "int32"))
