"""MultiHeadRelativeAttention against the numpy reference, masks, decoding and the shared checks."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops
from tiers import matrix

import layer_checks
from keras_posenc import backend
from keras_posenc.layers import ClipPositions, LogBuckets, PiecewiseBuckets, RotaryPositions
from keras_posenc.layers.relative_attention import MultiHeadRelativeAttention
from keras_posenc.layers.relative_position import RelativePositionEmbedding
from reference.relative_attention import (
    causal_mask,
    clip_index_matrix,
    relative_attention,
)
from reference.relative_index import (
    piecewise_index,
    relative_positions,
    t5_relative_position_bucket,
)

pytestmark = pytest.mark.contract

MODES = ("keys_values", "keys", "bias")
ATOL = 1e-5


def to_numpy(tensor):
    return ops.convert_to_numpy(tensor).astype("float64")


def randomize(layer, seed=0):
    """Gives every weight (biases included) random values, so each one matters."""
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(0.5 * rng.standard_normal(tuple(weight.shape)).astype("float32"))


def layer_weights(layer):
    """The layer's weights under the reference's names."""
    weights = {}
    for name in ("query", "key", "value"):
        dense = getattr(layer, f"{name}_dense")
        weights[f"{name}_kernel"] = to_numpy(dense.kernel)
        weights[f"{name}_bias"] = to_numpy(dense.bias) if layer.use_bias else None
    weights["output_kernel"] = to_numpy(layer.output_dense.kernel)
    weights["output_bias"] = to_numpy(layer.output_dense.bias) if layer.use_bias else None
    for name in ("relative_keys", "relative_values", "relative_bias"):
        table = getattr(layer, name)
        if table is not None:
            weights[name] = to_numpy(table.embeddings)
    return weights


def built_layer(query, value, key=None, seed=0, **kwargs):
    kwargs.setdefault("num_heads", 2)
    kwargs.setdefault("key_dim", 4)
    if kwargs.get("relative", "keys_values") is not None:
        kwargs.setdefault("position", ClipPositions(3))
    layer = MultiHeadRelativeAttention(**kwargs)
    layer(query, value, key)
    randomize(layer, seed)
    return layer


def inputs(rng, batch, length, features):
    return rng.standard_normal((batch, length, features)).astype("float32")


def assert_close(actual, expected, atol=ATOL, what=""):
    actual = to_numpy(actual)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    difference = float(np.max(np.abs(actual - expected))) if actual.size else 0.0
    assert difference <= atol, f"{what}: differs from the reference by {difference:.3g}"


# --------------------------------------------------------------------------- reference


@pytest.mark.parametrize("relative", MODES)
@pytest.mark.parametrize("case", ["self", "cross_longer_keys", "cross_longer_queries"])
def test_matches_reference(relative, case, rng):
    lengths = {"self": (6, 6), "cross_longer_keys": (3, 8), "cross_longer_queries": (9, 4)}
    query_length, key_length = lengths[case]
    query = inputs(rng, 2, query_length, 5)
    value = query if case == "self" else inputs(rng, 2, key_length, 7)
    key = None if case == "self" else inputs(rng, 2, key_length, 3)
    layer = built_layer(query, value, key, relative=relative, value_dim=6, output_shape=4)
    output, scores = layer(query, value, key, return_attention_scores=True)
    index = clip_index_matrix(query_length, key_length, 3)
    expected, probabilities = relative_attention(
        query, value, key, layer_weights(layer), relative, index
    )
    assert_close(output, expected, what=f"{relative} output")
    assert_close(scores, probabilities, what=f"{relative} attention scores")


@pytest.mark.parametrize("relative", MODES)
def test_masks_match_reference(relative, rng):
    query, value = inputs(rng, 2, 5, 6), inputs(rng, 2, 7, 6)
    query_mask = np.array([[1, 1, 1, 0, 1], [1, 1, 1, 1, 1]], bool)
    value_mask = np.array([[1, 0, 1, 1, 0, 1, 1], [1, 1, 1, 1, 1, 0, 0]], bool)
    attention_mask = rng.random((2, 5, 7)) > 0.3
    layer = built_layer(query, value, relative=relative)
    output = layer(
        query,
        value,
        query_mask=query_mask,
        value_mask=value_mask,
        attention_mask=attention_mask,
    )
    mask = query_mask[:, :, None] & value_mask[:, None, :] & attention_mask
    expected, _ = relative_attention(
        query, value, None, layer_weights(layer), relative, clip_index_matrix(5, 7, 3), mask
    )
    assert_close(output, expected, what=f"{relative} masked output")


def test_log_bucket_bias_matches_t5_reference(rng):
    query = inputs(rng, 2, 40, 6)
    layer = built_layer(query, query, relative="bias", position=LogBuckets(8, 20))
    index = t5_relative_position_bucket(relative_positions(40, 40), True, 8, 20)
    expected, _ = relative_attention(query, query, None, layer_weights(layer), "bias", index)
    assert_close(layer(query, query), expected, what="log-bucket bias output")


def test_attention_bias_is_added(rng):
    query, value = inputs(rng, 2, 4, 6), inputs(rng, 2, 5, 6)
    bias = rng.standard_normal((1, 2, 4, 5)).astype("float32")
    layer = built_layer(query, value, relative="keys")
    expected, _ = relative_attention(
        query,
        value,
        None,
        layer_weights(layer),
        "keys",
        clip_index_matrix(4, 5, 3),
        attention_bias=bias,
    )
    assert_close(layer(query, value, attention_bias=bias), expected, what="attention_bias")
    plain = to_numpy(layer(query, value))
    assert np.max(np.abs(plain - expected)) > 1e-3, "the bias must change the output"


@pytest.mark.parametrize("relative", MODES)
def test_causal_mask_matches_reference(relative, rng):
    query = inputs(rng, 2, 6, 6)
    layer = built_layer(query, query, relative=relative)
    expected, _ = relative_attention(
        query,
        query,
        None,
        layer_weights(layer),
        relative,
        clip_index_matrix(6, 6, 3),
        causal_mask(6, 6),
    )
    assert_close(layer(query, query, use_causal_mask=True), expected, what="causal output")


# --------------------------------------------------------------------------- lengths, memory


def test_length_one(rng):
    query = inputs(rng, 2, 1, 6)
    layer = built_layer(query, query)
    expected, _ = relative_attention(
        query, query, None, layer_weights(layer), "keys_values", clip_index_matrix(1, 1, 3)
    )
    assert_close(layer(query, query), expected, what="length 1")


@pytest.mark.parametrize("relative", ["keys_values", "keys"])
def test_long_sequence_never_materialises_relative_vectors(relative, rng, monkeypatch):
    """At length 600 the layer matches the naive reference without calling the (L, L, d) path."""

    def refuse(*args, **kwargs):
        raise AssertionError("RelativePositionEmbedding.call builds (q_len, k_len, d)")

    monkeypatch.setattr(RelativePositionEmbedding, "call", refuse)
    query = inputs(rng, 1, 600, 4)
    layer = built_layer(query, query, relative=relative, num_heads=1, position=ClipPositions(16))
    expected, _ = relative_attention(
        query, query, None, layer_weights(layer), relative, clip_index_matrix(600, 600, 16)
    )
    assert_close(layer(query, query), expected, atol=1e-4, what="length 600")


# --------------------------------------------------------------------------- relative logits paths


def _skew_layer(query, value, key=None, relative="keys", path="skew", **kwargs):
    # max_distance 8 covers every distance of the lengths below (<= 9 keys or queries).
    kwargs.update(relative=relative, position=ClipPositions(8), relative_logits=path)
    return built_layer(query, value, key, **kwargs)


@pytest.mark.parametrize("relative", ["keys", "keys_values"])
@pytest.mark.parametrize(*matrix("lengths", [(6, 6), (3, 8), (9, 4), (1, 5)], keep=[0, 3]), ids=str)
def test_skew_matches_reference_and_gather(relative, lengths, rng, monkeypatch):
    query_length, key_length = lengths
    query, value = inputs(rng, 2, query_length, 5), inputs(rng, 2, key_length, 5)
    layer = _skew_layer(query, value, relative=relative)
    gathered = MultiHeadRelativeAttention.from_config(
        {**layer.get_config(), "relative_logits": "gather"}
    )
    gathered(query, value)
    gathered.set_weights(layer.get_weights())
    mask = rng.random((2, query_length, key_length)) > 0.2
    expected, probabilities = relative_attention(
        query,
        value,
        None,
        layer_weights(layer),
        relative,
        clip_index_matrix(query_length, key_length, 8),
        mask,
    )
    from_gather = to_numpy(gathered(query, value, attention_mask=mask))

    def refuse(*args, **kwargs):
        raise AssertionError("the skew path must not gather")

    monkeypatch.setattr(MultiHeadRelativeAttention, "_gathered_key_logits", refuse)
    output, scores = layer(query, value, attention_mask=mask, return_attention_scores=True)
    assert_close(output, expected, what="skew output")
    assert_close(scores, probabilities, what="skew attention scores")
    assert_close(output, from_gather, what="skew vs gather")


@pytest.mark.parametrize("path", ["auto", "gather", "skew"])
def test_relative_logits_paths_decode_like_full(path, rng):
    x = inputs(rng, 2, 6, 6)
    layer = _skew_layer(x, x, relative="keys_values", path=path)
    full = to_numpy(layer(x, x, use_causal_mask=True))
    expected, _ = relative_attention(
        x,
        x,
        None,
        layer_weights(layer),
        "keys_values",
        clip_index_matrix(6, 6, 8),
        causal_mask(6, 6),
    )
    np.testing.assert_allclose(full, expected, atol=ATOL)
    cache = np.zeros((2, 2, 6, 2, 4), "float32")
    prompt, cache = layer(
        x[:, :2], x[:, :2], cache=cache, cache_update_index=0, use_causal_mask=True
    )
    steps = [to_numpy(prompt)]
    for t in range(2, 6):
        step = x[:, t : t + 1]
        output, cache = layer(step, step, cache=cache, cache_update_index=t, use_causal_mask=True)
        steps.append(to_numpy(output))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=ATOL)


def test_skew_falls_back_to_gather_when_the_table_is_short(rng, monkeypatch):
    """With max_distance 8, 12 positions need clipped rows: the gather serves them."""
    x = inputs(rng, 1, 12, 6)
    layer = _skew_layer(x, x)
    calls = []
    original = MultiHeadRelativeAttention._gathered_key_logits

    def spy(self, *args):
        calls.append(tuple(args[1:3]))
        return original(self, *args)

    monkeypatch.setattr(MultiHeadRelativeAttention, "_gathered_key_logits", spy)
    expected, _ = relative_attention(
        x, x, None, layer_weights(layer), "keys", clip_index_matrix(12, 12, 8)
    )
    assert_close(layer(x, x), expected, what="fallback output")
    assert calls == [(12, 12)]


@pytest.mark.parametrize(
    *matrix(
        "position, index",
        [
            (LogBuckets(8, 20), lambda r: t5_relative_position_bucket(r, True, 8, 20)),
            (
                LogBuckets(8, 20, bidirectional=False),
                lambda r: t5_relative_position_bucket(r, False, 8, 20),
            ),
            (PiecewiseBuckets(8), lambda r: piecewise_index(r, 8)),
        ],
    ),
    ids=["log_bidirectional", "log_causal", "piecewise"],
)
def test_value_term_with_other_schemes_matches_reference(position, index, rng):
    """The cumulative-sum value term relies on every bucket being an interval of distances."""
    query, value = inputs(rng, 2, 30, 6), inputs(rng, 2, 37, 6)
    layer = built_layer(query, value, relative="keys_values", position=position)
    mask = rng.random((2, 30, 37)) > 0.3
    expected, _ = relative_attention(
        query,
        value,
        None,
        layer_weights(layer),
        "keys_values",
        index(relative_positions(30, 37)),
        mask,
    )
    assert_close(layer(query, value, attention_mask=mask), expected, what=repr(position))


@pytest.mark.parametrize("path", ["gather", "skew"])
def test_mixed_precision_paths_finite_with_masked_rows(path, rng):
    query = inputs(rng, 2, 5, 6)
    layer = _skew_layer(query, query, relative="keys_values", path=path)
    query_mask = np.array([[1, 1, 0, 1, 1], [1, 1, 1, 1, 1]], bool)
    value_mask = np.array([[1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], bool)
    kwargs = dict(query_mask=query_mask, value_mask=value_mask, use_causal_mask=True)
    expected = to_numpy(layer(query, query, **kwargs))
    low = MultiHeadRelativeAttention.from_config({**layer.get_config(), "dtype": "mixed_bfloat16"})
    low(query, query)
    low.set_weights(layer.get_weights())
    actual = to_numpy(low(query, query, **kwargs))
    assert np.isfinite(actual).all()
    np.testing.assert_allclose(actual, expected, atol=1e-1, rtol=5e-2)
    output_bias = to_numpy(layer.output_dense.bias)
    np.testing.assert_allclose(actual[1], np.broadcast_to(output_bias, (5, 6)), atol=2e-2)


def test_two_dimensional_attention_mask_broadcasts(rng):
    query, value = inputs(rng, 2, 4, 6), inputs(rng, 2, 5, 6)
    mask = rng.random((4, 5)) > 0.3
    mask[:, 0] = True
    layer = built_layer(query, value, relative="bias")
    expected, _ = relative_attention(
        query, value, None, layer_weights(layer), "bias", clip_index_matrix(4, 5, 3), mask[None]
    )
    assert_close(layer(query, value, attention_mask=mask), expected, what="(q_len, k_len) mask")


# --------------------------------------------------------------------------- query blocks


def _blocked_pair(query, value, relative, **kwargs):
    """The same weights with queries in blocks of 3 and all at once (small inputs: no blocking)."""
    whole = built_layer(query, value, relative=relative, **kwargs)
    blocked = MultiHeadRelativeAttention.from_config({**whole.get_config(), "query_block_size": 3})
    blocked(query, value)
    blocked.set_weights(whole.get_weights())
    return whole, blocked


def _count_blocks(layer, monkeypatch):
    calls = []
    attend = MultiHeadRelativeAttention._attend

    def counting(self, q, *args, **kwargs):
        calls.append(int(q.shape[1]))
        return attend(self, q, *args, **kwargs)

    monkeypatch.setattr(MultiHeadRelativeAttention, "_attend", counting)
    return calls


@pytest.mark.parametrize("relative", MODES)
def test_query_blocks_equal_one_block(relative, rng, monkeypatch):
    """7 queries in blocks of 3 (3 + 3 + 1) against 9 keys: masks, bias, causal, scores."""
    query, value = inputs(rng, 2, 7, 6), inputs(rng, 2, 9, 6)
    whole, blocked = _blocked_pair(query, value, relative)
    query_mask = np.ones((2, 7), bool)
    query_mask[1, 4] = False
    value_mask = np.array([[1] * 9, [1, 1, 0, 1, 1, 1, 1, 0, 1]], bool)
    attention_mask = rng.random((2, 7, 9)) > 0.2
    attention_mask[0, 5] = False  # a fully masked row in the last full block
    attention_bias = rng.standard_normal((2, 2, 7, 9)).astype("float32")
    kwargs = dict(
        query_mask=query_mask,
        value_mask=value_mask,
        attention_mask=attention_mask,
        attention_bias=attention_bias,
        return_attention_scores=True,
    )
    for causal in (False, True):
        expected, expected_scores = whole(query, value, use_causal_mask=causal, **kwargs)
        calls = _count_blocks(blocked, monkeypatch)
        output, scores = blocked(query, value, use_causal_mask=causal, **kwargs)
        monkeypatch.undo()
        assert calls == [3, 3, 1]
        assert_close(output, to_numpy(expected), what=f"blocked output, causal={causal}")
        assert_close(scores, to_numpy(expected_scores), what=f"blocked scores, causal={causal}")
    assert np.all(to_numpy(scores)[0, :, 5] == 0)


@pytest.mark.parametrize("relative", ["keys_values", "bias"])  # "keys" is in "keys_values"
def test_query_blocks_with_cache_offset(relative, rng):
    """A prompt of 7 written at position 2 of a cache of 9 (offset 2), then one step."""
    x = inputs(rng, 1, 9, 6)
    whole, blocked = _blocked_pair(x, x, relative)
    full = to_numpy(whole(x, x, use_causal_mask=True))
    cache = np.zeros((1, 2, 9, 2, 4), "float32")
    _, cache = blocked(x[:, :2], x[:, :2], cache=cache, cache_update_index=0, use_causal_mask=True)
    prompt, cache = blocked(
        x[:, 2:], x[:, 2:], cache=cache, cache_update_index=2, use_causal_mask=True
    )
    assert_close(prompt, full[:, 2:], what="blocked prompt at offset 2")
    step, _ = blocked(x[:, 8:], x[:, 8:], cache=cache, cache_update_index=8, use_causal_mask=True)
    assert_close(step, full[:, 8:], what="step after the blocked prompt")


def test_query_blocks_mixed_precision_and_dropout(rng):
    query, value = inputs(rng, 2, 7, 6), inputs(rng, 2, 9, 6)
    whole, _ = _blocked_pair(query, value, "keys_values")
    config = {**whole.get_config(), "dtype": "mixed_bfloat16", "dropout": 0.5}
    low, low_blocked = (
        MultiHeadRelativeAttention.from_config({**config, "query_block_size": size})
        for size in (None, 3)
    )
    query_mask = np.ones((2, 7), bool)
    query_mask[0, 6] = False  # fully masked row in the one-query block
    kwargs = dict(query_mask=query_mask, use_causal_mask=True)
    for layer in (low, low_blocked):
        layer(query, value)
        layer.set_weights(whole.get_weights())
    expected = to_numpy(low(query, value, **kwargs))
    actual = to_numpy(low_blocked(query, value, **kwargs))
    assert np.isfinite(actual).all()
    np.testing.assert_allclose(actual, expected, atol=2e-2, rtol=2e-2)
    output_bias = to_numpy(whole.output_dense.bias)
    np.testing.assert_allclose(actual[0, 6], output_bias, atol=2e-2)
    dropped = to_numpy(low_blocked(query, value, training=True, **kwargs))
    assert np.isfinite(dropped).all()
    assert not np.allclose(dropped, actual, atol=1e-3), "dropout inactive in the blocked path"


def test_automatic_query_block_size(monkeypatch):
    # With 32 MiB blocks (the per-backend sizes: test_attention_workspace.py).
    monkeypatch.setattr(backend, "query_block_bytes", lambda: 32 * 2**20)
    layer = MultiHeadRelativeAttention(8, 64)
    assert layer._query_block(1024, 1024, None, None) is None  # 32 MiB of logits: one block
    assert layer._query_block(2048, 2048, None, None) == 512
    assert layer._query_block(4096, 4096, None, None) == 256
    assert layer._query_block(1, 100_000, None, None) is None  # decoding step
    assert layer._query_block(2048, None, None, None) is None  # unknown key length
    assert layer._query_block(None, 2048, None, None) is None
    assert (
        MultiHeadRelativeAttention(8, 64, query_block_size=600)._query_block(2048, 7, None, None)
        == 512
    )  # 4 even blocks rather than 600 + 600 + 600 + 248


# --------------------------------------------------------------------------- unknown lengths


@pytest.mark.parametrize("relative, block", [(mode, None) for mode in MODES] + [("keys_values", 2)])
def test_functional_model_with_unknown_length(relative, block, rng):
    """keras.Input(shape=(None, dim)): one model, called at two lengths, on every backend.

    With ``query_block_size`` the symbolic call runs unblocked and concrete
    lengths may block (eager JAX/PyTorch calls see the real length).
    """
    layer = MultiHeadRelativeAttention(
        2, 4, relative=relative, position=ClipPositions(3), query_block_size=block
    )
    token_input = keras.Input(shape=(None, 6))
    model = keras.Model(token_input, layer(token_input, token_input, use_causal_mask=True))
    randomize(layer)
    for length in (5, 9):
        x = inputs(rng, 2, length, 6)
        expected, _ = relative_attention(
            x,
            x,
            None,
            layer_weights(layer),
            relative,
            clip_index_matrix(length, length, 3),
            causal_mask(length, length),
        )
        assert_close(model(x), expected, what=f"length {length}")
        assert_close(model.predict(x, verbose=0), expected, what=f"predict, length {length}")


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="tf.function with an input_signature of unknown length is TensorFlow-only; "
    "test_functional_model_with_unknown_length covers the other backends",
)
@pytest.mark.parametrize("path", ["auto", "skew"])
def test_tensorflow_graph_with_unknown_length(path, rng):
    import tensorflow as tf

    x = inputs(rng, 2, 7, 6)
    layer = _skew_layer(x, x, relative="keys_values", path=path)
    signature = [tf.TensorSpec((None, None, 6), tf.float32)]
    graph = tf.function(lambda t: layer(t, t, use_causal_mask=True), input_signature=signature)
    for length in (4, 7):
        x = inputs(rng, 2, length, 6)
        expected, _ = relative_attention(
            x,
            x,
            None,
            layer_weights(layer),
            "keys_values",
            clip_index_matrix(length, length, 8),
            causal_mask(length, length),
        )
        assert_close(graph(x), expected, what=f"graph, length {length}")


# --------------------------------------------------------------------------- masks


@pytest.mark.parametrize("mask_argument", ["value_mask", "attention_mask"])
@pytest.mark.parametrize("relative", MODES)
def test_padded_keys_are_ignored(relative, mask_argument, rng):
    query = inputs(rng, 2, 6, 5)
    mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 0, 1, 1, 0]], bool)
    layer = built_layer(query, query, relative=relative)
    call_mask = mask if mask_argument == "value_mask" else mask[:, None, :] & mask[:, :, None]
    call_kwargs = {mask_argument: call_mask}
    # The perturbed positions are padding for both the queries and the keys.
    layer_checks.check_padding_invariance(
        layer, [query, query], mask, call_kwargs, mask_argument=None
    )


def test_query_mask_padding_invariance(rng):
    query, value = inputs(rng, 2, 5, 6), inputs(rng, 2, 4, 6)
    mask = np.array([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1]], bool)
    layer = built_layer(query, value)
    layer_checks.check_padding_invariance(
        layer, [query, value], mask, mask_argument="query_mask", sequence_inputs=[0]
    )


@pytest.mark.parametrize("relative", MODES)
def test_fully_masked_rows_give_zeros_not_nan(relative, rng):
    query = inputs(rng, 2, 4, 6)
    layer = built_layer(query, query, relative=relative)
    query_mask = np.array([[1, 0, 1, 1], [1, 1, 1, 1]], bool)
    value_mask = np.array([[1, 1, 1, 1], [0, 0, 0, 0]], bool)
    output, scores = layer(
        query, query, query_mask=query_mask, value_mask=value_mask, return_attention_scores=True
    )
    output, scores = to_numpy(output), to_numpy(scores)
    assert np.isfinite(output).all() and np.isfinite(scores).all()
    output_bias = to_numpy(layer.output_dense.bias)
    # No attention weight, no relative value term: only the output projection's bias.
    np.testing.assert_allclose(output[0, 1], output_bias, atol=ATOL)
    np.testing.assert_allclose(output[1], np.broadcast_to(output_bias, (4, 6)), atol=ATOL)
    assert np.all(scores[0, :, 1] == 0) and np.all(scores[1] == 0)
    np.testing.assert_allclose(scores[0, :, 0].sum(-1), 1.0, atol=ATOL)


def test_keras_mask_propagates_through_functional_model(rng):
    tokens = np.array([[3, 4, 5, 0, 0], [1, 2, 3, 4, 0]])
    embedding = keras.layers.Embedding(10, 6, mask_zero=True)
    attention = MultiHeadRelativeAttention(2, 4, position=ClipPositions(2))
    token_input = keras.Input((None,), dtype="int32")
    embedded = embedding(token_input)
    attended = attention(embedded, embedded)
    # GlobalAveragePooling1D averages over the positions the incoming Keras mask marks real.
    pooled = keras.layers.GlobalAveragePooling1D()(attended)
    model = keras.Model(token_input, [attended, pooled])

    real = tokens != 0
    vectors = to_numpy(embedding.embeddings)[tokens].astype("float32")
    explicit = to_numpy(attention(vectors, vectors, query_mask=real, value_mask=real))
    output, pooled_output = (to_numpy(t) for t in model(tokens))
    np.testing.assert_allclose(output[real], explicit[real], atol=ATOL)
    expected_pooled = np.stack([explicit[b][real[b]].mean(axis=0) for b in range(2)])
    np.testing.assert_allclose(pooled_output, expected_pooled, atol=ATOL)

    # Trailing padding changes nothing: the unpadded sequence gives the same outputs.
    unpadded, unpadded_pooled = (to_numpy(t) for t in model(tokens[1:, :4]))
    np.testing.assert_allclose(unpadded[0], output[1, :4], atol=ATOL)
    np.testing.assert_allclose(unpadded_pooled[0], pooled_output[1], atol=ATOL)


# --------------------------------------------------------------------------- causal, decoding


@pytest.mark.parametrize("relative", MODES)
def test_causal_no_leak(relative, rng):
    query = inputs(rng, 2, 7, 6)
    layer = built_layer(query, query, relative=relative, rotary=RotaryPositions(max_wavelength=100))
    layer_checks.check_causal(layer, [query, query], {"use_causal_mask": True})


@pytest.mark.parametrize(
    "relative, rotary", [("keys_values", None), ("keys", 100), ("bias", None), ("bias", 50)]
)
def test_incremental_decoding_equals_full(relative, rotary, rng):
    length = 6
    x = inputs(rng, 2, length, 6)
    rotary = None if rotary is None else RotaryPositions(max_wavelength=rotary)
    layer = built_layer(x, x, relative=relative, rotary=rotary)
    full = to_numpy(layer(x, x, use_causal_mask=True))
    cache = np.zeros((2, 2, length, 2, 4), "float32")
    steps = []
    for t in range(length):
        step = x[:, t : t + 1]
        output, cache = layer(step, step, cache=cache, cache_update_index=t, use_causal_mask=True)
        steps.append(to_numpy(output))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=ATOL)


def test_prefill_then_decode(rng):
    """Writing several positions at once (a prompt), then one step, equals the full pass."""
    x = inputs(rng, 1, 5, 6)
    layer = built_layer(x, x, relative="keys_values")
    full = to_numpy(layer(x, x, use_causal_mask=True))
    cache = np.zeros((1, 2, 5, 2, 4), "float32")
    prompt, cache = layer(
        x[:, :4], x[:, :4], cache=cache, cache_update_index=0, use_causal_mask=True
    )
    step, cache = layer(x[:, 4:], x[:, 4:], cache=cache, cache_update_index=4, use_causal_mask=True)
    np.testing.assert_allclose(to_numpy(prompt), full[:, :4], atol=ATOL)
    np.testing.assert_allclose(to_numpy(step), full[:, 4:], atol=ATOL)


# --------------------------------------------------------------------------- fused attention


def _fused_pair(query, value, relative, **kwargs):
    """The same weights with the default path and with ``fused_attention=True``."""
    default = built_layer(query, value, relative=relative, **kwargs)
    fused = MultiHeadRelativeAttention.from_config(
        {**default.get_config(), "fused_attention": True}
    )
    fused(query, value)
    fused.set_weights(default.get_weights())
    return default, fused


def _count_fused_calls(monkeypatch):
    """Counts the calls of `keras.ops.dot_product_attention` (the fused path)."""
    calls = []
    original = ops.dot_product_attention

    def counting(*args, **kwargs):
        calls.append(kwargs.get("bias"))
        return original(*args, **kwargs)

    monkeypatch.setattr(ops, "dot_product_attention", counting)
    return calls


@pytest.mark.parametrize("relative", ["keys", "bias"])
def test_fused_attention_equals_default(relative, rng, monkeypatch):
    query, value = inputs(rng, 2, 5, 6), inputs(rng, 2, 7, 6)
    default, fused = _fused_pair(query, value, relative)
    calls = _count_fused_calls(monkeypatch)
    query_mask = np.array([[1, 1, 1, 0, 1], [1, 1, 1, 1, 1]], bool)
    value_mask = np.array([[1, 0, 1, 1, 0, 1, 1], [1, 1, 1, 1, 1, 0, 0]], bool)
    cases = {
        "no mask": {},
        "masks and bias": dict(
            query_mask=query_mask,
            value_mask=value_mask,
            attention_mask=rng.random((2, 5, 7)) > 0.3,
            attention_bias=rng.standard_normal((2, 2, 5, 7)).astype("float32"),
        ),
        "causal, q_len != k_len": dict(use_causal_mask=True, value_mask=value_mask),
        "dropout rate 0 in training": dict(training=True, query_mask=query_mask),
    }
    for what, kwargs in cases.items():
        expected = to_numpy(default(query, value, **kwargs))
        assert_close(fused(query, value, **kwargs), expected, what=f"fused {relative}, {what}")
    assert len(calls) == len(cases)
    assert all(bias is not None for bias in calls)

    # A fully masked query row (query mask) and example (value mask): zeros, not NaN.
    value_mask = np.array([[1] * 7, [0] * 7], bool)
    output = to_numpy(fused(query, value, query_mask=query_mask, value_mask=value_mask))
    assert np.isfinite(output).all()
    output_bias = to_numpy(fused.output_dense.bias)
    np.testing.assert_allclose(output[0, 3], output_bias, atol=ATOL)
    np.testing.assert_allclose(output[1], np.broadcast_to(output_bias, (5, 6)), atol=ATOL)


@pytest.mark.parametrize("relative", ["keys", "bias"])
def test_fused_attention_blocks_and_decoding_equal_full(relative, rng, monkeypatch):
    x = inputs(rng, 2, 6, 6)
    default, fused = _fused_pair(x, x, relative)
    calls = _count_fused_calls(monkeypatch)
    full = to_numpy(default(x, x, use_causal_mask=True))
    blocked = MultiHeadRelativeAttention.from_config({**fused.get_config(), "query_block_size": 4})
    blocked(x, x)
    blocked.set_weights(default.get_weights())
    calls.clear()
    assert_close(blocked(x, x, use_causal_mask=True), full, what="fused query blocks")
    assert len(calls) == 2  # blocks of 3 queries
    cache = np.zeros((2, 2, 6, 2, 4), "float32")
    steps = []
    for t in range(6):
        step = x[:, t : t + 1]
        output, cache = fused(step, step, cache=cache, cache_update_index=t, use_causal_mask=True)
        steps.append(to_numpy(output))
    assert len(calls) == 8
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=ATOL)


def test_fused_attention_falls_back_where_it_cannot_apply(rng, monkeypatch):
    query, value = inputs(rng, 2, 5, 6), inputs(rng, 2, 7, 6)
    pairs = [_fused_pair(query, value, relative) for relative in ("keys_values", "bias")]
    pairs.append(_fused_pair(query, value, "keys", value_dim=3))
    config = {**pairs[-1][1].get_config(), "value_dim": None, "dropout": 0.5}
    dropping = MultiHeadRelativeAttention.from_config(config)
    dropping(query, value)
    calls = _count_fused_calls(monkeypatch)

    default, fused = pairs[0]
    assert_close(fused(query, value), to_numpy(default(query, value)), what="keys_values")
    default, fused = pairs[1]
    output, scores = fused(query, value, use_causal_mask=True, return_attention_scores=True)
    expected, expected_scores = default(
        query, value, use_causal_mask=True, return_attention_scores=True
    )
    assert_close(output, to_numpy(expected), what="scores requested")
    assert_close(scores, to_numpy(expected_scores), what="scores")
    default, fused = pairs[2]
    assert_close(fused(query, value), to_numpy(default(query, value)), what="value_dim != key_dim")
    assert not calls
    dropped = to_numpy(dropping(query, value, training=True))
    assert not calls, "dropout in training must use the default path"
    assert np.isfinite(dropped).all()
    assert_close(dropping(query, value), to_numpy(dropping(query, value)), what="inference")
    assert len(calls) == 2, "dropout inactive at inference: the fused path"


@pytest.mark.parametrize("relative", ["keys", "bias"])
def test_fused_attention_mixed_precision_close_to_float32(relative, rng):
    query, value = inputs(rng, 2, 5, 6), inputs(rng, 2, 7, 6)
    default, fused = _fused_pair(query, value, relative)
    query_mask = np.array([[1, 1, 0, 1, 1], [1, 1, 1, 1, 1]], bool)
    value_mask = np.array([[1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0]], bool)
    kwargs = dict(query_mask=query_mask, value_mask=value_mask, use_causal_mask=True)
    expected = to_numpy(default(query, value, **kwargs))
    low = MultiHeadRelativeAttention.from_config({**fused.get_config(), "dtype": "mixed_bfloat16"})
    low(query, value)
    low.set_weights(default.get_weights())
    actual = to_numpy(low(query, value, **kwargs))
    assert np.isfinite(actual).all()
    np.testing.assert_allclose(actual, expected, atol=5e-2, rtol=5e-2)
    output_bias = to_numpy(default.output_dense.bias)
    np.testing.assert_allclose(actual[1], np.broadcast_to(output_bias, (5, 6)), atol=2e-2)


# --------------------------------------------------------------------------- standard checks


@pytest.mark.parametrize(
    "kwargs",
    [
        {"relative": "keys_values"},
        {"relative": "keys", "rotary": RotaryPositions(max_wavelength=100)},
        {"relative": "bias", "position": LogBuckets(8, 20)},
    ],
    ids=["keys_values", "keys_rotary", "bias_log"],
)
def test_standard_checks(kwargs, rng):
    query, value = inputs(rng, 2, 5, 6), inputs(rng, 2, 4, 6)

    def make_layer():
        # use_bias=False: a key bias adds q_i . b to every logit of row i, which
        # the softmax cancels, so it never gets a gradient (as in any attention).
        return MultiHeadRelativeAttention(
            2,
            4,
            value_dim=3,
            use_bias=False,
            dropout=0.1,
            **{"position": ClipPositions(2), **kwargs},
        )

    layer_checks.run_standard_checks(make_layer, [query, value])


def test_mixed_precision_close_to_float32(rng):
    query = inputs(rng, 2, 5, 6)
    layer = built_layer(query, query)
    expected = to_numpy(layer(query, query, use_causal_mask=True))
    low = MultiHeadRelativeAttention.from_config({**layer.get_config(), "dtype": "mixed_bfloat16"})
    low(query, query)
    low.set_weights(layer.get_weights())
    actual = to_numpy(low(query, query, use_causal_mask=True))
    assert np.isfinite(actual).all()
    # bfloat16 keeps 8 bits of mantissa: outputs of size ~3 agree to about 5e-2.
    np.testing.assert_allclose(actual, expected, atol=1e-1, rtol=5e-2)


def test_config_has_every_argument():
    layer = MultiHeadRelativeAttention(
        3,
        8,
        value_dim=5,
        dropout=0.2,
        output_shape=7,
        relative="bias",
        position=LogBuckets(16, 40, bidirectional=False),
        rotary=RotaryPositions(max_wavelength=500),
        relative_logits="gather",
        query_block_size=128,
        fused_attention=True,
    )
    config = layer.get_config()
    restored = MultiHeadRelativeAttention.from_config(config)
    assert restored.get_config() == config
    assert config["relative"] == "bias" and restored.rotary.max_wavelength == 500
    assert restored.position == LogBuckets(16, 40, bidirectional=False)
    assert config["relative_logits"] == "gather" and config["query_block_size"] == 128
    assert config["fused_attention"] is True and restored.fused_attention is True
    assert MultiHeadRelativeAttention(2, 4).get_config()["fused_attention"] == "auto"
    assert tuple(restored.compute_output_shape((2, 4, 6), (2, 9, 5))) == (2, 4, 7)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs, error, pattern",
    [
        ({"relative": "values"}, ValueError, r"MultiHeadRelativeAttention: `relative`.*'values'"),
        ({"key_dim": 0}, ValueError, r"MultiHeadRelativeAttention: `key_dim` must be.*>= 1.*0"),
        ({"key_dim": 2.5}, TypeError, r"MultiHeadRelativeAttention: `key_dim` must be an integer"),
        ({"num_heads": 0}, ValueError, r"`num_heads` must be an integer >= 1, got 0"),
        ({"dropout": 1.5}, ValueError, r"`dropout` must be in \[0, 1\), got 1.5"),
        ({"position": "nearest"}, ValueError, r"`position`.*registered names.*'nearest'"),
        ({"key_dim": 3, "rotary": RotaryPositions()}, ValueError, r"even `key_dim`, got 3"),
        ({"relative_logits": "roll"}, ValueError, r"`relative_logits` must be one of.*'roll'"),
        ({"query_block_size": 0}, ValueError, r"`query_block_size` must be an integer >= 1"),
        (
            {"fused_attention": "yes"},
            TypeError,
            r"MultiHeadRelativeAttention: `fused_attention` must be True, False or 'auto', "
            r"got 'yes'",
        ),
        (
            {"fused_attention": 1},
            TypeError,
            r"`fused_attention` must be True, False or 'auto', got 1",
        ),
        (
            {"relative_logits": "skew", "relative": "bias"},
            ValueError,
            r"relative_logits='skew' needs.*relative='bias', position=ClipPositions",
        ),
        (
            {"relative_logits": "skew", "position": "t5"},
            ValueError,
            r"relative_logits='skew' needs.*position=LogBuckets",
        ),
    ],
)
def test_bad_constructor_arguments(kwargs, error, pattern):
    arguments = {"num_heads": 2, "key_dim": 4, **kwargs}
    with pytest.raises(error, match=pattern):
        MultiHeadRelativeAttention(**arguments)


def test_bad_call_inputs(rng):
    layer = MultiHeadRelativeAttention(2, 4, name="attention")
    with pytest.raises(ValueError, match=r"'attention'.*`query` must have rank 3.*\(2, 6\)"):
        layer(np.zeros((2, 6), "float32"), np.zeros((2, 5, 6), "float32"))
    with pytest.raises(ValueError, match=r"`key` and `value` must have the same length"):
        layer(
            np.zeros((2, 3, 6), "float32"),
            np.zeros((2, 5, 6), "float32"),
            np.zeros((2, 4, 6), "float32"),
        )
    x = inputs(rng, 2, 3, 6)
    layer(x, x)
    with pytest.raises(ValueError, match=r"last axis of `query` must be 6.*got 5"):
        layer(np.zeros((2, 3, 5), "float32"), x)
    with pytest.raises(ValueError, match=r"`cache` must have shape.*got shape \(2, 2, 5, 3, 4\)"):
        layer(x[:, :1], x[:, :1], cache=np.zeros((2, 2, 5, 3, 4), "float32"), cache_update_index=0)


def test_a_cache_update_index_outside_the_cache_is_refused(rng):
    # A step at 9 of a cache of 5 wrote nothing and returned an output; -1 gave zeros.
    layer = MultiHeadRelativeAttention(2, 4, position=ClipPositions(4))
    cache = np.zeros((1, 2, 5, 2, 4), "float32")
    step, two = rng.standard_normal((1, 1, 8)), rng.standard_normal((1, 2, 8))
    for index, rows, name in ((9, step, "9"), (-1, step, "-1"), (4, two, "4")):
        with pytest.raises(
            ValueError, match=r"MultiHeadRelativeAttention\(.*`cache_update_index`"
        ) as e:
            layer(rows, rows, cache=cache, cache_update_index=index)
        assert f"inside the cache of 5 positions, got {name}." in str(e.value)
    # The last positions that fit, as Python and NumPy ints.
    output, _ = layer(two, two, cache=cache, cache_update_index=3)
    assert output.shape == (1, 2, 8)
    output, _ = layer(step, step, cache=cache, cache_update_index=np.int64(4))
    assert output.shape == (1, 1, 8)
