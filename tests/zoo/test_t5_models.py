"""T5 zoo models: parameter counts (the released checkpoints', and by hand), padding, cached
decoding against the full decoder, the decoder start token equal to the padding id, the loss
mask, generation, save/load, training and the errors. Equality with keras-hub's T5 on the same
weights is in tests/test_convert_keras_hub.py."""

from __future__ import annotations

import os
import tempfile

import keras
import numpy as np
import pytest
from keras import ops
from keras.src.backend.common import global_state  # see shape_only

from keras_posenc import generation, zoo
from keras_posenc.zoo.seq2seq import Seq2SeqModel
from keras_posenc.zoo.t5 import T5, T5TargetMask

pytestmark = pytest.mark.contract

NAMES = ["t5_1.1_base", "t5_1.1_small", "t5_base", "t5_small"]
VOCAB = 31
RELEASED = {
    "t5_small": 60_506_624,
    "t5_base": 222_903_552,
    "t5_1.1_small": 76_961_152,
    "t5_1.1_base": 247_577_856,
}


def to_numpy(tensor):
    return ops.convert_to_numpy(tensor).astype("float64")


def tiny(seed=0, **overrides):
    keras.utils.set_random_seed(seed)
    config = dict(
        hidden_dim=8,
        intermediate_dim=12,
        num_heads=2,
        num_layers=1,
        num_decoder_layers=2,
        dropout=0.0,
        num_buckets=8,
        max_distance=12,
    )
    config.update(overrides)
    return T5(VOCAB, **config)


def shape_only(name, **arguments):
    """The named model built without initialising its weights (fast on every backend)."""
    with keras.StatelessScope(initialize_variables=False):
        model = zoo.create(name, **arguments)
    global_state.set_global_attribute("uninitialized_variables", [])
    return model


def hand_count(config, vocab=32128):
    """Embedding (+ separate output matrix), per layer: norms, q/k/v/o (no biases), the
    feed-forward (+ gate); a bias table and a final norm per stack."""
    d, f, h, kv = (
        config[k] for k in ("hidden_dim", "intermediate_dim", "num_heads", "key_value_dim")
    )
    layers = config["num_layers"]
    attention = 4 * d * h * kv
    feedforward = (3 if config["gated_activation"] else 2) * d * f
    encoder = layers * (attention + feedforward + 2 * d) + 32 * h + d
    decoder = layers * (2 * attention + feedforward + 3 * d) + 32 * h + d
    embeddings = vocab * d * (1 if config["tie_embeddings"] else 2)
    return embeddings + encoder + decoder


def sources():
    """Two right-padded sources and the same two left-padded (pad id 0, eos 1)."""
    real = [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 1], [9, 10, 1]]
    length = 16
    right = np.zeros((2, length), "int32")
    left = np.zeros((2, length), "int32")
    for row, tokens in enumerate(real):
        right[row, : len(tokens)] = tokens
        left[row, length - len(tokens) :] = tokens
    return right, left, [len(t) for t in real]


# --------------------------------------------------------------------------- counts


def test_registered_names():
    assert zoo.list_models("t5") == NAMES
    spec = zoo.get_spec("t5_1.1_small")
    assert spec.builder is T5 and spec.paper_parameters == 76_961_152
    assert spec.config.activation == "gelu_tanh" and not spec.config.tie_embeddings
    assert "Raffel et al. 2020" in spec.reference


@pytest.mark.parametrize("name", NAMES)
def test_released_parameter_counts(name):
    model = shape_only(name)
    assert model.count_params() == hand_count(zoo.get_spec(name).arguments()) == RELEASED[name]


def test_tiny_count_and_tying():
    config = dict(hidden_dim=8, intermediate_dim=12, num_heads=2, key_value_dim=4, num_layers=1)
    for gated, tied in ((False, True), (True, False)):
        model = T5(VOCAB, **config, gated_activation=gated, tie_embeddings=tied)
        expected = hand_count({**config, "gated_activation": gated, "tie_embeddings": tied}, VOCAB)
        assert model.count_params() == expected


# --------------------------------------------------------------------------- forward pass


def test_padding_side_and_the_shared_bias():
    model = tiny()
    right, left, lengths = sources()
    out_r, mask_r, *crosses_r = model.encode(right)
    out_l, _, *crosses_l = model.encode(left)
    assert len(crosses_r) == 2 and tuple(crosses_r[0].shape) == (2, 2, 16, 2, 4)
    np.testing.assert_array_equal(to_numpy(mask_r), right != 0)
    for row, length in enumerate(lengths):
        # Relative positions only: real tokens see the same distances on either side.
        np.testing.assert_allclose(
            to_numpy(out_r)[row, :length], to_numpy(out_l)[row, 16 - length :], atol=1e-5
        )
    # One bias table per stack, read by every layer (distances beyond 12 share a bucket).
    assert len(model.encoder.position_bias.weights) == 1
    assert model.encoder.position_bias.position.bidirectional
    assert not model.decoder.position_bias.position.bidirectional
    target_in = np.array([[0, 7, 8, 9], [0, 3, 4, 0]], "int32")
    logits_r = model.predict_on_batch({"encoder_token_ids": right, "decoder_token_ids": target_in})
    logits_l = model.predict_on_batch({"encoder_token_ids": left, "decoder_token_ids": target_in})
    assert logits_r.shape == (2, 4, VOCAB) and logits_r.dtype == np.float32
    np.testing.assert_allclose(logits_r, logits_l, atol=1e-5)


def test_cached_steps_equal_the_full_decoder_also_after_reordering():
    model = tiny(tie_embeddings=False, gated_activation=True, activation="gelu_tanh")
    right, _, _ = sources()
    source = np.concatenate([right, right[::-1]])  # batch 4
    rng = np.random.default_rng(1)
    length = 14  # distances beyond max_distance = 12: the causal log buckets saturate
    state = model.encode(source)
    cache = model.init_cache(state, length)
    rows = np.arange(4)
    # The full decoder reads a buffer whose positions after the prefix hold random tokens:
    # equal logits also show that no position sees a later one.
    tokens = np.concatenate([np.zeros((4, 1)), rng.integers(2, VOCAB, (4, length - 1))], 1)
    tokens = tokens.astype("int32")
    for index in range(length):
        order = rng.permutation(4) if index % 2 else rng.integers(0, 4, 4)
        cache = Seq2SeqModel.reorder_cache(cache, ops.convert_to_tensor(order, "int32"))
        rows = rows[order]
        tokens = np.concatenate(
            [tokens[order, : index + 1], rng.integers(2, VOCAB, (4, length - 1 - index))], axis=1
        ).astype("int32")
        step_logits, cache = model.decode_step(tokens[:, index], cache, index)
        full = model.decode(tokens, Seq2SeqModel.reorder_cache(state, rows))
        np.testing.assert_allclose(to_numpy(step_logits), to_numpy(full)[:, index], atol=1e-5)


def test_decoder_start_is_the_padding_id_and_counts_in_the_loss():
    model = tiny()
    assert model.bos_id == model.pad_id == 0 and model.eos_id == 1
    right, _, _ = sources()
    target_in = np.array([[0, 7, 8, 9], [0, 3, 0, 0]], "int32")
    target = np.array([[7, 8, 9, 1], [3, 1, 0, 0]], "int32")
    logits = model({"encoder_token_ids": right, "decoder_token_ids": target_in})
    real = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], bool)  # position 0 holds the start token
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")
    values = to_numpy(keras.losses.sparse_categorical_crossentropy(target, logits, True))
    assert float(to_numpy(loss(target, logits))) == pytest.approx(values[real].sum(), rel=1e-5)
    mask = T5TargetMask(0).compute_mask([logits, target_in])
    np.testing.assert_array_equal(ops.convert_to_numpy(mask), real)


def test_generation_through_the_shared_search():
    model = tiny(seed=3)
    right, _, _ = sources()
    greedy = generation.greedy_search(model, right, max_length=8)
    np.testing.assert_array_equal(
        greedy, generation.greedy_search(model, right, max_length=8, use_cache=False)
    )
    tokens, scores = generation.beam_search(model, right, beam_size=3, max_length=8)
    assert tokens.shape == (2, 8) and np.isfinite(scores).all()
    # The start token (the padding id) is never generated; padding only after eos.
    for row in (*greedy, *tokens):
        ended = np.flatnonzero(row == model.eos_id)
        body = row[: ended[0]] if len(ended) else row
        assert (body != 0).all()


# --------------------------------------------------------------------------- save, train


def test_save_load_round_trip():
    model = tiny(seed=5, dropout=0.1, tie_embeddings=False, gated_activation=True,
                 activation="gelu_tanh", max_source_length=20)  # fmt: skip
    right, _, _ = sources()
    inputs = {"encoder_token_ids": right, "decoder_token_ids": np.array([[0, 4, 5]] * 2)}
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "t5.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
    assert isinstance(loaded, T5) and loaded.get_config() == model.get_config()
    np.testing.assert_allclose(to_numpy(loaded(inputs)), to_numpy(model(inputs)), atol=1e-6)
    np.testing.assert_array_equal(
        generation.greedy_search(loaded, right, max_length=6),
        generation.greedy_search(model, right, max_length=6),
    )


def test_training_lowers_the_loss():
    model = tiny(seed=7, dropout=0.1)
    rng = np.random.default_rng(0)
    source = rng.integers(2, VOCAB, (32, 6)).astype("int32")
    target = np.concatenate([source[:, ::-1], np.ones((32, 1), "int32")], axis=1)
    target_in = np.concatenate([np.zeros((32, 1), "int32"), target[:, :-1]], axis=1)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    inputs = {"encoder_token_ids": source, "decoder_token_ids": target_in}
    before = model.evaluate(inputs, target, verbose=0)
    model.fit(inputs, target, epochs=6, batch_size=16, verbose=0)
    after = model.evaluate(inputs, target, verbose=0)
    assert after < 0.85 * before, (before, after)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "overrides, error, message",
    [
        ({"hidden_dim": 10, "num_heads": 4}, ValueError, "`hidden_dim` must be a multiple of"),
        ({"num_layers": 0}, ValueError, "`num_layers` must be an integer >= 1"),
        ({"eos_id": 0}, ValueError, "T5: `eos_id` must differ from `pad_id`"),
        ({"decoder_start_id": 1}, ValueError, "`eos_id` must differ .* decoder start"),
        ({"dropout": 1.0}, ValueError, r"T5: T5Block: `dropout` must be in \[0, 1\)"),
        ({"activation": "no_such"}, ValueError, "T5: T5Block: `activation` must be a Keras"),
        ({"num_buckets": 2}, ValueError, "T5: LogBuckets: `num_buckets` must be >= 4"),
        ({"tie_embeddings": 1}, TypeError, "`tie_embeddings` must be True or False"),
    ],
)
def test_bad_configurations(overrides, error, message):
    with pytest.raises(error, match=message):
        tiny(**overrides)


def test_bad_inputs():
    model = tiny()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.generate(np.array([[4, VOCAB]]))
    with pytest.raises(ValueError, match="decoder block needs `encoder_output`"):
        model.decoder.blocks[0](np.zeros((1, 2, 8), "float32"))
    with pytest.raises(ValueError, match="needs a decoder block"):
        model.encoder.blocks[0].cross_attention_cache(np.zeros((1, 2, 8), "float32"))
