"""MUSE zoo models: parameter counts derived by hand, forward pass, padding invariance,
cached decoding against the full decoder, generation, save/load, training, the encoder-only
model and the errors."""

from __future__ import annotations

import os
import tempfile

import keras
import numpy as np
import pytest
from keras import ops
from keras.src.backend.common import global_state  # see shape_only

from keras_posenc import generation, zoo
from keras_posenc.zoo import muse
from keras_posenc.zoo.muse import MUSE, MUSEEmbedding, build_muse_encoder, sinusoidal_positions
from keras_posenc.zoo.seq2seq import Seq2SeqModel

pytestmark = pytest.mark.contract

SEQ2SEQ = ["muse_iwslt_de_en", "muse_small", "muse_tiny", "muse_wmt_large"]
ENCODERS = ["muse_encoder_base", "muse_encoder_small"]
SRC_VOCAB, TGT_VOCAB = 23, 29


def to_numpy(tensor):
    return ops.convert_to_numpy(tensor).astype("float64")


def predict(model, inputs):
    """The functional call through the compiled predict step: one compilation of the whole
    graph, much faster on JAX than eager op-by-op dispatch (each op compiled on first use)."""
    return ops.convert_to_numpy(model.predict_on_batch(inputs))


def small_model(seed=0, **overrides):
    keras.utils.set_random_seed(seed)
    config = dict(
        hidden_dim=8,
        intermediate_dim=12,
        num_heads=2,
        num_encoder_layers=1,
        num_decoder_layers=2,
        kernel_sizes=(3, 5),
        dropout=0.0,
        weight_dropout=0.0,
        max_source_positions=16,
        max_target_positions=16,
    )
    config.update(overrides)
    return MUSE(SRC_VOCAB, TGT_VOCAB, **config)


def sources():
    """Two right-padded sources and the same two left-padded (pad id 0)."""
    real = [[5, 6, 7, 8, 2], [9, 10, 2]]
    right = np.zeros((2, 6), "int32")
    left = np.zeros((2, 6), "int32")
    for row, tokens in enumerate(real):
        right[row, : len(tokens)] = tokens
        left[row, 6 - len(tokens) :] = tokens
    return right, left, [len(t) for t in real]


# --------------------------------------------------------------------------- parameter counts


def block_count(c, f, h, kernels, conv="dynamic", cross=False):
    """One block from its sizes: MUSEAttention (q, k, v; kernel predictors with biases or
    depthwise + pointwise; the gate; the 2C -> C output), the FFN, one layer norm and, in
    the decoder, the cross-attention (q, k, v, output)."""
    if conv == "dynamic":
        convolutions = sum(c * h * k + h * k for k in kernels)
    else:
        convolutions = sum((k * c if k > 1 else 0) + c * c + c for k in kernels)
    gate = len(kernels) if len(kernels) > 1 else 0
    attention = 3 * (c * c + c) + convolutions + gate + (2 * c * c + c)
    feedforward = (c * f + f) + (f * c + c)
    return attention + feedforward + 2 * c + (4 * (c * c + c) if cross else 0)


def hand_count(config):
    c, f, h = config["hidden_dim"], config["intermediate_dim"], config["num_heads"]
    kernels = tuple(config.get("kernel_sizes", (3, 15)))
    conv = config.get("conv", "dynamic")
    share = config.get("share_embeddings", False)
    tie = config.get("tie_output_embedding") or share
    total = config["num_encoder_layers"] * block_count(c, f, h, kernels, conv)
    total += config["num_decoder_layers"] * block_count(c, f, h, kernels, conv, cross=True)
    total += config["tgt_vocab_size"] * c  # target embedding
    total += 0 if share else config["src_vocab_size"] * c
    total += 0 if tie else config["tgt_vocab_size"] * c  # output projection, no bias
    return total


def encoder_hand_count(config, vocab=32000, classes=2):
    c, f, h = config["hidden_dim"], config["intermediate_dim"], config["num_heads"]
    blocks = config["num_layers"] * block_count(c, f, h, (3, 15))
    return vocab * c + blocks + c * classes + classes


def shape_only(name, **arguments):
    """The named model built without initialising its weights (fast on every backend);
    the deferred variables are dropped from Keras' pending list afterwards."""
    with keras.StatelessScope(initialize_variables=False):
        model = zoo.create(name, **arguments)
    global_state.set_global_attribute("uninitialized_variables", [])
    return model


def test_registered_names():
    assert zoo.list_models("muse") == sorted(SEQ2SEQ + ENCODERS)
    spec = zoo.get_spec("muse_iwslt_de_en")
    assert spec.builder is MUSE and spec.paper_parameters == 48_200_000
    assert "Zhao et al. 2019" in spec.reference
    assert spec.config.src_vocab_size == 8848 and spec.config.tgt_vocab_size == 6632
    assert zoo.get_spec("muse_wmt_large").config.share_embeddings is True


def test_iwslt_parameter_count():
    """48.2M: fairseq's IWSLT'14 De-En dictionaries (8,848 / 6,632), separate output matrix."""
    model = shape_only("muse_iwslt_de_en")
    config = zoo.get_spec("muse_iwslt_de_en").arguments()
    assert model.count_params() == hand_count(config) == 48_186_096
    # The official layout: no kernel-predictor biases (24 layers x 4 heads x (3 + 15)),
    # plus an unused encoder_attn_layer_norm (2 x 384) in each of the 12 decoder layers.
    official = model.count_params() - 24 * 4 * 18 + 12 * 2 * 384
    assert official == 48_193_584 and round(official / 1e6, 1) == 48.2


@pytest.mark.parametrize("name", ["muse_small", "muse_tiny", "muse_encoder_small"])
def test_small_configurations_count(name):
    config = zoo.get_spec(name).arguments()
    expected = hand_count(config) if name in SEQ2SEQ else encoder_hand_count(config)
    assert shape_only(name).count_params() == expected


@pytest.mark.large
@pytest.mark.parametrize("name", ["muse_wmt_large", "muse_encoder_base"])
def test_large_configurations_count(name):
    config = zoo.get_spec(name).arguments()
    expected = hand_count(config) if name in SEQ2SEQ else encoder_hand_count(config)
    assert shape_only(name).count_params() == expected


def test_small_model_count_and_sharing():
    model = small_model()
    assert model.count_params() == hand_count({**model.get_config(), "kernel_sizes": (3, 5)})
    shared = MUSE(TGT_VOCAB, TGT_VOCAB, 8, 12, 2, 1, 1, kernel_sizes=(3, 5), share_embeddings=True)
    # One table: source tokens, target tokens and the output projection use it.
    assert shared.source_embedding is shared.target_embedding
    assert shared.count_params() == hand_count({**shared.get_config(), "kernel_sizes": (3, 5)})


# --------------------------------------------------------------------------- forward pass


def test_sinusoids_match_the_formula():
    positions = np.array([[0, 3, 7]])
    table = to_numpy(sinusoidal_positions(positions, 6))
    frequencies = 10000.0 ** (-np.arange(3) / 2)
    angles = positions[..., None] * frequencies
    np.testing.assert_allclose(table, np.concatenate([np.sin(angles), np.cos(angles)], -1), 1e-6)


def test_embedding_scales_and_adds_positions():
    embedding = MUSEEmbedding(11, 6, pad_id=0)
    ids = np.array([[0, 4, 5, 0]])
    output = to_numpy(embedding(ids))
    table = to_numpy(embedding.token_embedding.embeddings)
    expected = np.sqrt(6) * table[[4, 5]] + to_numpy(sinusoidal_positions(np.array([0, 1]), 6))
    np.testing.assert_allclose(output[0, 1:3], expected, atol=1e-5)
    assert np.all(output[0, [0, 3]] == 0)
    hidden = np.random.default_rng(0).standard_normal((1, 2, 6)).astype("float32")
    logits = embedding(hidden, reverse=True)
    assert ops.convert_to_numpy(logits).dtype == np.float32
    np.testing.assert_allclose(to_numpy(logits), hidden @ table.T, atol=1e-5)


def test_forward_pass_and_padding_side():
    model = small_model()
    right, left, lengths = sources()
    out_r, mask_r, *crosses_r = model.encode(right)
    out_l, _, *crosses_l = model.encode(left)
    assert len(crosses_r) == 2 and tuple(crosses_r[0].shape) == (2, 2, 6, 2, 4)
    for row, length in enumerate(lengths):
        np.testing.assert_allclose(
            to_numpy(out_r)[row, :length], to_numpy(out_l)[row, 6 - length :], atol=1e-5
        )
        # The cross-attention caches are the projections of those outputs.
        np.testing.assert_allclose(
            to_numpy(crosses_r[1])[row, :, :length],
            to_numpy(crosses_l[1])[row, :, 6 - length :],
            atol=1e-5,
        )
    np.testing.assert_array_equal(to_numpy(mask_r), right != 0)
    target_in = np.array([[1, 7, 8, 9], [1, 3, 4, 0]], "int32")
    logits_r = predict(model, {"encoder_token_ids": right, "decoder_token_ids": target_in})
    logits_l = predict(model, {"encoder_token_ids": left, "decoder_token_ids": target_in})
    assert logits_r.shape == (2, 4, TGT_VOCAB) and logits_r.dtype == np.float32
    np.testing.assert_allclose(logits_r, logits_l, atol=1e-5)
    assert np.abs(logits_r[0] - logits_r[1]).max() > 1e-3


def test_cached_steps_equal_the_full_decoder_also_after_reordering():
    model = small_model()
    right, _, _ = sources()
    source = np.concatenate([right, right[::-1]])  # batch 4
    rng = np.random.default_rng(1)
    state = model.encode(source)
    cache = model.init_cache(state, 6)
    rows = np.arange(4)  # which source each row decodes
    # The full decoder runs on a fixed-length buffer whose positions after the prefix hold
    # random tokens: equal logits also show that no position sees a later one (causality).
    tokens = np.concatenate([np.ones((4, 1)), rng.integers(3, TGT_VOCAB, (4, 5))], axis=1)
    tokens = tokens.astype("int32")
    for index in range(6):
        # Reorder the batch as beam search does (a permutation, or rows duplicated).
        order = rng.permutation(4) if index % 2 else rng.integers(0, 4, 4)
        cache = Seq2SeqModel.reorder_cache(cache, ops.convert_to_tensor(order, "int32"))
        rows = rows[order]
        # Rows reordered keep their prefix; the rest of the buffer is new random content.
        tokens = np.concatenate(
            [tokens[order, : index + 1], rng.integers(3, TGT_VOCAB, (4, 5 - index))], axis=1
        ).astype("int32")
        step_logits, cache = model.decode_step(tokens[:, index], cache, index)
        full = model.decode(tokens, Seq2SeqModel.reorder_cache(state, rows))
        np.testing.assert_allclose(to_numpy(step_logits), to_numpy(full)[:, index], atol=1e-5)
    assert len(set(rows.tolist())) < 4  # some rows were dropped and others duplicated


def test_logits_carry_the_target_mask_for_losses():
    model = small_model()
    right, _, _ = sources()
    target_in = np.array([[1, 7, 8, 9], [1, 3, 0, 0]], "int32")
    target = np.array([[7, 8, 9, 2], [3, 2, 0, 0]], "int32")
    logits = model({"encoder_token_ids": right, "decoder_token_ids": target_in})
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")
    values = to_numpy(keras.losses.sparse_categorical_crossentropy(target, logits, True))
    real = target_in != 0
    assert float(to_numpy(loss(target, logits))) == pytest.approx(values[real].sum(), rel=1e-5)


# Heavy on JAX (every op compiled again for bfloat16, ~10 s); the blocks' bfloat16 checks
# run on every backend in tests/layers/test_muse_layers.py.
@pytest.mark.large
def test_mixed_precision_forward():
    model = small_model(dtype="mixed_bfloat16")
    right, _, _ = sources()
    array = predict(model, {"encoder_token_ids": right, "decoder_token_ids": np.ones((2, 4))})
    assert array.dtype == np.float32 and np.isfinite(array).all()


# --------------------------------------------------------------------------- generation


def test_generation_through_the_shared_search():
    """Greedy with and without the cache agree; beam search runs on the reordered cache
    (each reordered step is checked against the full decoder above)."""
    model = small_model(seed=3)
    right, _, _ = sources()
    greedy = generation.greedy_search(model, right, max_length=8)
    assert greedy.shape == (2, 8)
    np.testing.assert_array_equal(
        greedy, generation.greedy_search(model, right, max_length=8, use_cache=False)
    )
    np.testing.assert_array_equal(model.generate(right, max_length=8), greedy)
    tokens, scores = generation.beam_search(model, right, beam_size=3, max_length=8)
    assert tokens.shape == (2, 8) and np.isfinite(scores).all()
    assert not np.isin(tokens, [model.bos_id]).any()


# --------------------------------------------------------------------------- save, train


def test_save_load_round_trip():
    # Fused attention here: the same numbers as the explicit path (the layers' tests check
    # it against the reference), through the model, save/load and generation.
    model = small_model(
        seed=5, dropout=0.1, weight_dropout=0.1, tie_output_embedding=True, fused_attention=True
    )
    right, _, _ = sources()
    inputs = {"encoder_token_ids": right, "decoder_token_ids": np.array([[1, 4, 5]] * 2)}
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "muse.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
    assert isinstance(loaded, MUSE)
    assert loaded.get_config() == model.get_config()
    assert loaded.decoder_blocks[0].self_attention.fused_attention is True
    np.testing.assert_allclose(to_numpy(loaded(inputs)), to_numpy(model(inputs)), atol=1e-6)
    np.testing.assert_array_equal(
        generation.greedy_search(loaded, right, max_length=6),
        generation.greedy_search(model, right, max_length=6),
    )


def test_training_lowers_the_loss():
    model = small_model(seed=7, dropout=0.1, weight_dropout=0.1)
    rng = np.random.default_rng(0)
    source = rng.integers(3, SRC_VOCAB, (32, 6)).astype("int32")
    target = np.concatenate([source[:, ::-1] % 20 + 3, np.full((32, 1), 2)], axis=1)
    target_in = np.concatenate([np.ones((32, 1), "int32"), target[:, :-1]], axis=1)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    inputs = {"encoder_token_ids": source, "decoder_token_ids": target_in}
    before = model.evaluate(inputs, target, verbose=0)
    model.fit(inputs, target, epochs=6, batch_size=16, verbose=0)
    after = model.evaluate(inputs, target, verbose=0)
    assert after < 0.85 * before, (before, after)


# --------------------------------------------------------------------------- encoder-only


def tiny_encoder(task="classification", seed=0):
    keras.utils.set_random_seed(seed)
    return build_muse_encoder(
        vocab_size=30,
        num_classes=3,
        task=task,
        hidden_dim=8,
        intermediate_dim=12,
        num_heads=2,
        num_layers=1,
        kernel_sizes=(3, 5),
        dropout=0.0,
        weight_dropout=0.0,
    )


def test_encoder_models_ignore_padding_and_round_trip():
    right, left, lengths = sources()
    classifier = tiny_encoder()
    assert classifier.count_params() == 30 * 8 + block_count(8, 12, 2, (3, 5)) + 8 * 3 + 3
    np.testing.assert_allclose(to_numpy(classifier(right)), to_numpy(classifier(left)), atol=1e-5)
    tagger = tiny_encoder("tagging")
    tags_r, tags_l = to_numpy(tagger(right)), to_numpy(tagger(left))
    assert tags_r.shape == (2, 6, 3)
    for row, length in enumerate(lengths):
        np.testing.assert_allclose(tags_r[row, :length], tags_l[row, 6 - length :], atol=1e-5)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "tagger.keras")
        tagger.save(path)
        loaded = keras.models.load_model(path)
    np.testing.assert_allclose(to_numpy(loaded(right)), tags_r, atol=1e-6)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "overrides, error, message",
    [
        ({"hidden_dim": 10, "num_heads": 4}, ValueError, "`hidden_dim` must be a multiple of"),
        ({"kernel_sizes": (3, 4)}, ValueError, "MUSE: .*`kernel_sizes` must hold odd"),
        ({"kernel_sizes": (1, 3)}, ValueError, "conv='dynamic' needs kernel sizes >= 3"),
        ({"kernel_sizes": (0, 3)}, ValueError, "`kernel_sizes` must hold positive"),
        ({"num_decoder_layers": 0}, ValueError, "`num_decoder_layers` must be an integer >= 1"),
        ({"share_embeddings": True}, ValueError, "share_embeddings=True needs one vocabulary"),
        ({"dropout": 1.0}, ValueError, r"`dropout` must be in \[0, 1\)"),
        ({"eos_id": 0}, ValueError, "must differ"),
        ({"share_embeddings": 1}, TypeError, "`share_embeddings` must be True or False"),
    ],
)
def test_bad_configurations(overrides, error, message):
    with pytest.raises(error, match=message):
        small_model(**overrides)


def test_bad_encoder_arguments_and_tie_conflict():
    with pytest.raises(ValueError, match="`task` must be one of"):
        build_muse_encoder(task="ranking")
    with pytest.raises(ValueError, match="build_muse_encoder: `hidden_dim` must be a multiple"):
        build_muse_encoder(hidden_dim=30, num_heads=4)
    with pytest.raises(ValueError, match="`tie_output_embedding` must be True or None"):
        MUSE(20, 20, share_embeddings=True, tie_output_embedding=False)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        small_model().generate(np.array([[4, SRC_VOCAB]]))
    assert muse.TASKS == ("classification", "tagging")
