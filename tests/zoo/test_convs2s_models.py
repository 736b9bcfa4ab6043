"""ConvS2S zoo models and keras_posenc.generation: parameter counts, padding, cached
decoding, greedy and beam search against a plain-Python reference, save/load, training
and the errors of the Python wrappers."""

from __future__ import annotations

import os
import tempfile

import keras
import numpy as np
import pytest
from keras import ops
from keras.src.backend.common import global_state  # see shape_only
from markov_models import markov

from keras_posenc import generation, zoo
from keras_posenc.zoo.convs2s import ConvS2S, ConvS2SLanguageModel
from keras_posenc.zoo.seq2seq import Seq2SeqModel
from reference import search

pytestmark = pytest.mark.contract

NAMES = [
    "convs2s_small",
    "convs2s_iwslt_de_en",
    "convs2s_wmt_en_ro",
    "convs2s_wmt_en_de",
    "convs2s_wmt_en_fr",
]
VOCAB = (1000, 1200)  # source, target: any sizes, the counts below follow them


def to_numpy(tensor):
    return ops.convert_to_numpy(tensor).astype("float64")


def small_model(seed=0, **overrides):
    keras.utils.set_random_seed(seed)
    config = dict(
        embed_dim=12,
        encoder_layers=[(12, 3), (16, 2), (16, 3, 2)],
        decoder_layers=[(12, 3), (16, 2, 0), (16, 3, 2)],
        decoder_out_embed_dim=10,
        max_source_positions=16,
        max_target_positions=16,
        dropout=0.0,
    )
    config.update(overrides)
    return ConvS2S(23, 29, **config)


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


def hand_count(embed, encoder, decoder, out_embed, src_vocab, tgt_vocab, positions=1024):
    """Parameters from the spec, as fairseq's fconv lays them out (weight-normalised convs:
    kernel, bias and one gain per output channel; Dense layers: kernel and bias)."""

    def stack(specs, attention):
        total, widths = 0, [specs[0][0]]
        in_channels = specs[0][0]
        for spec in specs:
            channels, kernel = spec[0], spec[1]
            residual = spec[2] if len(spec) == 3 else 1
            total += kernel * in_channels * 2 * channels + 2 * channels + 2 * channels
            residual_dim = channels if residual == 0 else widths[-residual]
            if residual_dim != channels:
                total += residual_dim * channels + channels
            if attention:
                total += channels * embed + embed + embed * channels + channels
            widths.append(channels)
            in_channels = channels
        return total, in_channels

    encoder_stack, encoder_out = stack(encoder, attention=False)
    decoder_stack, decoder_out = stack(decoder, attention=True)
    encoder_total = (
        src_vocab * embed + positions * embed  # token and position tables
        + embed * encoder[0][0] + encoder[0][0]  # fc1
        + encoder_stack
        + encoder_out * embed + embed  # fc2
    )  # fmt: skip
    decoder_total = (
        tgt_vocab * embed + positions * embed
        + embed * decoder[0][0] + decoder[0][0]
        + decoder_stack
        + decoder_out * out_embed + out_embed  # fc2
        + out_embed * tgt_vocab + tgt_vocab  # fc3
    )  # fmt: skip
    return encoder_total + decoder_total


def shape_only(name, **arguments):
    """The named model built without initialising its weights (fast on every backend);
    the deferred variables are dropped from Keras' pending list afterwards."""
    with keras.StatelessScope(initialize_variables=False):
        model = zoo.create(name, **arguments)
    global_state.set_global_attribute("uninitialized_variables", [])
    return model


def expected_count(name, positions=1024):
    config = zoo.get_spec(name).arguments()
    return hand_count(
        config["embed_dim"],
        config["encoder_layers"],
        config["decoder_layers"],
        config["decoder_out_embed_dim"],
        *VOCAB,
        positions=positions,
    )


def test_registered_names():
    assert set(zoo.list_models("convs2s")) == set(NAMES) | {"convs2s_lm"}


@pytest.mark.parametrize("name", NAMES[:2])
def test_small_and_iwslt_parameter_counts_match_the_spec(name):
    model = shape_only(name, src_vocab_size=VOCAB[0], tgt_vocab_size=VOCAB[1])
    positions = zoo.get_spec(name).config.max_source_positions
    assert model.count_params() == expected_count(name, positions)


@pytest.mark.large
@pytest.mark.parametrize("name", NAMES[2:])
def test_wmt_parameter_counts_match_the_spec(name):
    model = shape_only(name, src_vocab_size=VOCAB[0], tgt_vocab_size=VOCAB[1])
    assert model.count_params() == expected_count(name)


@pytest.mark.large
def test_lm_parameter_count_matches_the_spec():
    # No encoder, no attention, no position table: embedding, fc1, the stack, fc2, fc3.
    model = shape_only("convs2s_lm", vocab_size=1000)
    expected = 1000 * 128 + 128 * 1268 + 1268
    expected += 13 * (4 * 1268 * 2 * 1268 + 4 * 1268)
    expected += 1268 * 128 + 128 + 128 * 1000 + 1000
    assert model.count_params() == expected


def test_small_model_count_matches_the_spec():
    model = small_model()
    config = model.get_config()
    expected = hand_count(
        12, config["encoder_layers"], config["decoder_layers"], 10, 23, 29, positions=16
    )
    assert model.count_params() == expected


# --------------------------------------------------------------------------- forward pass


def test_outputs_do_not_depend_on_padding_side():
    model = small_model()
    right, left, lengths = sources()
    keys_r, values_r, mask_r = model.encode(right)
    keys_l, values_l, mask_l = model.encode(left)
    for row, length in enumerate(lengths):
        for a, b in ((keys_r, keys_l), (values_r, values_l)):
            np.testing.assert_allclose(
                to_numpy(a)[row, :length], to_numpy(b)[row, 6 - length :], atol=1e-5, rtol=0
            )
    target_in = np.array([[1, 7, 8, 9], [1, 3, 4, 0]], "int32")
    logits_r = model({"encoder_token_ids": right, "decoder_token_ids": target_in})
    logits_l = model({"encoder_token_ids": left, "decoder_token_ids": target_in})
    assert tuple(logits_r.shape) == (2, 4, 29)
    assert ops.convert_to_numpy(logits_r).dtype == np.float32
    np.testing.assert_allclose(to_numpy(logits_r), to_numpy(logits_l), atol=1e-5, rtol=0)


def test_decoder_is_causal():
    model = small_model()
    right, _, _ = sources()
    target_in = np.array([[1, 7, 8, 9, 10], [1, 3, 4, 5, 6]], "int32")
    changed = target_in.copy()
    changed[:, 3:] = [[11, 12], [13, 14]]
    a = to_numpy(model({"encoder_token_ids": right, "decoder_token_ids": target_in}))
    b = to_numpy(model({"encoder_token_ids": right, "decoder_token_ids": changed}))
    np.testing.assert_allclose(a[:, :3], b[:, :3], atol=1e-6, rtol=0)
    assert np.abs(a[:, 3:] - b[:, 3:]).max() > 1e-4


def test_cached_steps_equal_the_full_decoder_also_after_reordering():
    model = small_model()
    right, _, _ = sources()
    source = np.concatenate([right, right[::-1]])  # batch 4
    rng = np.random.default_rng(1)
    state = model.encode(source)
    cache = model.init_cache(state, 6)
    rows = np.arange(4)  # which source each row decodes
    # Each step: reorder the batch (as beam search does), then feed the next token.
    prefixes = np.ones((4, 1), "int32")
    for index in range(6):
        order = rng.permutation(4) if index % 2 else rng.integers(0, 4, 4)
        cache = Seq2SeqModel.reorder_cache(cache, ops.convert_to_tensor(order, "int32"))
        prefixes, rows = prefixes[order], rows[order]
        if index:
            prefixes = np.concatenate([prefixes, rng.integers(3, 29, (4, 1))], axis=1)
        step_logits, cache = model.decode_step(prefixes[:, -1], cache, index)
        full = model.decode(prefixes, Seq2SeqModel.reorder_cache(state, rows))
        np.testing.assert_allclose(to_numpy(step_logits), to_numpy(full)[:, -1], atol=1e-5, rtol=0)
    assert len(set(rows.tolist())) < 4  # some rows were dropped and others duplicated


# --------------------------------------------------------------------------- search


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_matches_the_reference(seed):
    model, log_probs = markov(seed, eos_bias=3.0)
    source = np.ones((1, 3), "int32") * 3
    for min_length in (0, 3):
        tokens = generation.greedy_search(model, source, max_length=8, min_length=min_length)
        expected = search.greedy(log_probs, 8, 0, 1, 2, min_length)
        assert tokens[0, : len(expected)].tolist() == expected
        assert (tokens[0, len(expected) :] == 0).all()


@pytest.mark.parametrize("seed", [0, 3, 4])
@pytest.mark.parametrize("length_penalty", [0.0, 1.0, 2.0])
def test_beam_matches_the_reference(seed, length_penalty):
    model, log_probs = markov(seed, eos_bias=3.0)
    source = np.ones((2, 3), "int32") * 3  # two identical sentences: same answer twice
    tokens, scores = generation.beam_search(
        model, source, beam_size=3, max_length=8, length_penalty=length_penalty
    )
    expected, score = search.beam(log_probs, 3, 8, length_penalty, 0, 1, 2)
    for row in range(2):
        assert tokens[row, : len(expected)].tolist() == expected
        assert (tokens[row, len(expected) :] == 0).all()
        assert scores[row] == pytest.approx(score, abs=1e-5)


def test_beam_can_beat_greedy_and_min_length_holds():
    # Find a table where the greedy path is not the most likely finished sequence.
    for seed in range(40):
        model, log_probs = markov(seed, eos_bias=4.0)
        greedy = search.greedy(log_probs, 8, 0, 1, 2)
        best, _ = search.beam(log_probs, 4, 8, 0.0, 0, 1, 2)
        if best != greedy:
            break
    tokens, _ = generation.beam_search(
        model, np.ones((1, 2), "int32") * 3, beam_size=4, max_length=8, length_penalty=0.0
    )
    assert tokens[0, : len(best)].tolist() == best != greedy
    tokens, _ = generation.beam_search(
        model, np.ones((1, 2), "int32") * 3, beam_size=2, max_length=8, min_length=5
    )
    assert 2 not in tokens[0, :4].tolist()


def test_search_on_convs2s_is_the_same_with_and_without_the_cache():
    model = small_model(seed=3)
    right, left, _ = sources()
    greedy = generation.greedy_search(model, right, max_length=10)
    assert greedy.shape == (2, 10)
    np.testing.assert_array_equal(
        greedy, generation.greedy_search(model, right, max_length=10, use_cache=False)
    )
    np.testing.assert_array_equal(greedy, generation.greedy_search(model, left, max_length=10))
    tokens, scores = generation.beam_search(model, right, beam_size=3, max_length=10)
    tokens_full, scores_full = generation.beam_search(
        model, right, beam_size=3, max_length=10, use_cache=False
    )
    np.testing.assert_array_equal(tokens, tokens_full)
    np.testing.assert_allclose(scores, scores_full, atol=1e-5)
    np.testing.assert_array_equal(model.generate(right, max_length=10), greedy)


def test_searches_fold_the_weight_normalisation_once():
    """Every decoding step of greedy and beam search reads the effective kernels computed once
    per search (step_constants), not g * v / ||v|| again; after the search the layers compute
    their kernels as before."""
    model = small_model(seed=4)
    convolutions = model.decoder_stack.convolutions
    assert all(conv.weight_norm for conv in convolutions)
    constants = model.step_constants()
    assert len(constants) == len(convolutions)
    for conv, kernel in zip(convolutions, constants, strict=True):
        np.testing.assert_allclose(to_numpy(kernel), to_numpy(conv.kernel), atol=1e-6)
    seen = []
    decode_step = model.decode_step

    def recording_step(token_ids, cache, index):
        seen.append(all(conv._folded_kernel is not None for conv in convolutions))
        return decode_step(token_ids, cache, index)

    model.decode_step = recording_step
    right, _, _ = sources()
    generation.greedy_search(model, right, max_length=4)
    generation.beam_search(model, right, beam_size=2, max_length=4)
    assert seen and all(seen)
    assert all(conv._folded_kernel is None for conv in convolutions)
    # Without weight normalisation there is nothing to fold.
    assert small_model(seed=4, weight_norm=False).step_constants() == ()


# --------------------------------------------------------------------------- errors


def test_wrapper_errors_come_before_the_graph():
    model = small_model()
    with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 23\): e\.g\. 23"):
        generation.greedy_search(model, np.array([[4, 23]]))
    with pytest.raises(ValueError, match="more than the model's max_source_length = 16"):
        generation.greedy_search(model, np.ones((1, 17), "int32"))
    with pytest.raises(ValueError, match="max_target_length = 16"):
        generation.beam_search(model, np.ones((1, 3), "int32"), max_length=17)
    with pytest.raises(TypeError, match="integer token ids"):
        generation.greedy_search(model, np.ones((1, 3), "float32"))
    with pytest.raises(ValueError, match="shape \\(batch, time\\)"):
        generation.greedy_search(model, np.ones((3,), "int32"))
    with pytest.raises(ValueError, match="`beam_size` must be an integer >= 1"):
        generation.beam_search(model, np.ones((1, 3), "int32"), beam_size=0)
    with pytest.raises(ValueError, match="`length_penalty` must be a finite number >= 0"):
        generation.beam_search(model, np.ones((1, 3), "int32"), length_penalty=-1.0)
    with pytest.raises(ValueError, match="`min_length` = 9 is larger"):
        generation.greedy_search(model, np.ones((1, 3), "int32"), max_length=8, min_length=9)
    with pytest.raises(TypeError, match="decoding contract"):
        generation.greedy_search(keras.Sequential([keras.layers.Dense(2)]), np.ones((1, 3)))


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"encoder_layers": [(16, 0)]}, r"`encoder_layers\[0\]` must be"),
        ({"decoder_layers": [(16, 3), (16, 3, 3)]}, r"`decoder_layers\[1\]` must be"),
        ({"decoder_layers": []}, "non-empty sequence"),
        ({"embed_dim": 0}, "`embed_dim` must be an integer >= 1"),
        ({"dropout": 1.0}, r"`dropout` must be in \[0, 1\)"),
        ({"eos_id": 0}, "must differ"),
        ({"bos_id": 40}, "below both vocabulary sizes"),
    ],
)
def test_bad_configurations(overrides, message):
    with pytest.raises(ValueError, match=message):
        small_model(**overrides)


def test_create_needs_the_vocabulary_sizes():
    with pytest.raises(TypeError, match="src_vocab_size"):
        zoo.create("convs2s_iwslt_de_en")
    with pytest.raises(ValueError, match="`src_vocab_size` must be an integer >= 3"):
        zoo.create("convs2s_iwslt_de_en", src_vocab_size=2, tgt_vocab_size=10)


# --------------------------------------------------------------------------- save, train


def test_save_load_round_trip():
    model = small_model(seed=5)
    right, _, _ = sources()
    inputs = {"encoder_token_ids": right, "decoder_token_ids": np.array([[1, 4, 5]] * 2)}
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "convs2s.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
    assert isinstance(loaded, ConvS2S)
    assert loaded.get_config() == model.get_config()
    np.testing.assert_allclose(to_numpy(loaded(inputs)), to_numpy(model(inputs)), atol=1e-6)
    np.testing.assert_array_equal(
        generation.greedy_search(loaded, right, max_length=6),
        generation.greedy_search(model, right, max_length=6),
    )


def test_language_model_is_causal_and_round_trips():
    keras.utils.set_random_seed(0)
    model = ConvS2SLanguageModel(
        30, embed_dim=8, decoder_layers=[(12, 4), (10, 2, 0)], decoder_out_embed_dim=6
    )
    tokens = np.array([[3, 4, 5, 6, 7]])
    changed = tokens.copy()
    changed[0, 3:] = [20, 21]
    a, b = to_numpy(model(tokens)), to_numpy(model(changed))
    np.testing.assert_allclose(a[:, :3], b[:, :3], atol=1e-6, rtol=0)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "lm.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
    np.testing.assert_allclose(to_numpy(loaded(tokens)), a, atol=1e-6)


def test_training_lowers_the_loss():
    model = small_model(seed=7, dropout=0.1)
    rng = np.random.default_rng(0)
    source = rng.integers(3, 23, (32, 6)).astype("int32")
    target = np.concatenate([source[:, ::-1] % 20 + 3, np.full((32, 1), 2)], axis=1)
    target_in = np.concatenate([np.ones((32, 1), "int32"), target[:, :-1]], axis=1)
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    inputs = {"encoder_token_ids": source, "decoder_token_ids": target_in}
    before = model.evaluate(inputs, target, verbose=0)
    model.fit(inputs, target, epochs=10, batch_size=8, verbose=0)
    after = model.evaluate(inputs, target, verbose=0)
    assert after < 0.85 * before, (before, after)


# The documented training example (zoo/convs2s/train_reverse.py) is the code of
# docs/guides/convs2s.md: tests/test_guides.py runs it and checks its 95% exact match.


def test_embedding_against_numpy():
    # e = token_table[id] + position_table[p], p = real tokens before it; zero at padding.
    from keras_posenc.zoo.convs2s_layers import ConvS2SEmbedding

    layer = ConvS2SEmbedding(vocab_size=9, embed_dim=4, max_positions=6)
    ids = np.array([[0, 0, 5, 6, 7], [3, 4, 0, 0, 0]], "int32")
    layer(ids)
    tokens = to_numpy(layer.token_embedding.embeddings)
    positions = to_numpy(layer.position_embedding.embeddings)
    assert np.all(tokens[0] == 0)  # fairseq's padding row
    expected = np.zeros((2, 5, 4))
    for row in range(2):
        count = 0
        for column, token in enumerate(ids[row]):
            if token != 0:
                expected[row, column] = tokens[token] + positions[count]
                count += 1
    np.testing.assert_allclose(to_numpy(layer(ids)), expected, atol=1e-6, rtol=0)
    step = layer(ids[:1, 3:4], position_offset=3)  # decoding: position given explicitly
    np.testing.assert_allclose(to_numpy(step)[0, 0], tokens[6] + positions[3], atol=1e-6)
