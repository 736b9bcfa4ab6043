"""DeBERTa's disentangled self-attention (`DisentangledSelfAttention`) and its log buckets
(`DebertaBuckets`, `relative_index.deberta_index`): against the numpy references written
from the paper and Hugging Face's published bucket function (tests/reference/), and
against keras-hub's own ``DisentangledSelfAttention`` on copied random weights."""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc import layers
from reference import disentangled_attention as reference
from reference import relative_index as index_reference

pytestmark = pytest.mark.contract

R = np.arange(-10_000, 10_001, dtype=np.int32)
BUCKETS = [(256, 512), (64, 128), (8, 40), (4, 10), (5, 7)]


def numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


@pytest.mark.parametrize(("position_buckets", "max_position"), BUCKETS)
def test_deberta_index_equals_the_published_buckets(position_buckets, max_position):
    expected = index_reference.deberta_relative_position_row(R, position_buckets, max_position)
    got = numpy(layers.deberta_index(R, position_buckets, max_position))
    np.testing.assert_array_equal(got, expected)
    scheme = layers.DebertaBuckets(position_buckets, max_position)
    np.testing.assert_array_equal(numpy(scheme.index(R)), expected)
    assert got.min() >= 0 and got.max() < scheme.table_size == 2 * position_buckets


def _random_weights(layer, rng):
    for weight in layer.weights:
        weight.assign(rng.normal(size=tuple(weight.shape)).astype("float32") * 0.5)


def _weights_of(layer, shared):
    """The layer's projections as the reference's (kernel, bias) pairs."""

    def pair(dense):
        return numpy(dense.kernel), numpy(dense.bias)

    weights = {name: pair(getattr(layer, f"{name}_dense")) for name in ("query", "key", "value")}
    for name, content in (("position_query", "query"), ("position_key", "key")):
        dense = getattr(layer, f"{name}_dense", None)
        weights[name] = weights[content] if shared or dense is None else pair(dense)
    weights["output"] = pair(layer.output_dense)
    return weights


CASES = {
    "v3": {},
    "separate_projections": {"share_position_projections": False},
    "c2p_only": {"terms": ["c2p"]},
    "p2c_only": {"terms": ("p2c",), "share_position_projections": False},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_equals_the_numpy_reference(case):
    options = CASES[case]
    rng = np.random.default_rng(0)
    layer = layers.DisentangledSelfAttention(
        3, 4, position=layers.DebertaBuckets(8, 20), output_shape=6, **options
    )
    # Longer than the exact range (4) and than max_position: every kind of row.
    x = rng.standard_normal((2, 23, 10)).astype("float32")
    layer.build(x.shape)
    _random_weights(layer, rng)
    padding = np.ones((2, 23), bool)
    padding[1, 17:] = False
    mask = np.broadcast_to(padding[:, None, :], (2, 23, 23))
    expected = reference.disentangled_self_attention(
        x,
        _weights_of(layer, layer.share_position_projections),
        numpy(layer.relative_embeddings),
        8,
        20,
        terms=layer.terms,
        mask=mask,
    )
    got = numpy(layer(x, padding_mask=padding))
    np.testing.assert_allclose(got, expected, atol=2e-5, rtol=1e-5)


def test_an_attention_bias_and_an_attention_mask_add_to_the_logits():
    rng = np.random.default_rng(1)
    layer = layers.DisentangledSelfAttention(2, 4, position=layers.DebertaBuckets(4, 8))
    x = rng.standard_normal((2, 6, 8)).astype("float32")
    layer.build(x.shape)
    _random_weights(layer, rng)
    # An ALiBi bias added to the disentangled logits (another scheme's "bias" term) and a
    # causal attention mask.
    alibi = layers.RelativePositionBias(2, position="alibi")
    bias = numpy(alibi(6, 6))  # (1, heads, 6, 6)
    attention_mask = np.tril(np.ones((6, 6), bool))[None].repeat(2, 0)
    with_bias = numpy(layer(x, attention_mask=attention_mask, attention_bias=bias))
    without = numpy(layer(x, attention_mask=attention_mask))
    assert not np.allclose(with_bias, without)
    expected = reference.disentangled_self_attention(
        x, _weights_of(layer, True), numpy(layer.relative_embeddings), 4, 8, mask=attention_mask
    )
    np.testing.assert_allclose(without, expected, atol=2e-5, rtol=1e-5)
    # softmax(e + b) is softmax(e) times exp(b), renormalised: the log-ratio of the
    # probabilities minus the bias is constant along each row.
    _, scores = layer(x, attention_bias=bias, return_attention_scores=True)
    _, plain = layer(x, return_attention_scores=True)
    log_ratio = np.log(numpy(scores)) - np.log(numpy(plain))
    shifted = log_ratio - bias  # equal up to each row's normaliser
    np.testing.assert_allclose(shifted, np.broadcast_to(shifted[..., :1], shifted.shape), atol=1e-3)


def test_equals_keras_hubs_disentangled_self_attention():
    from keras_hub.src.models.deberta_v3.disentangled_self_attention import (
        DisentangledSelfAttention as HubAttention,
    )

    rng = np.random.default_rng(2)
    heads, hidden, buckets, max_position, length = 4, 16, 8, 32, 21
    hub = HubAttention(
        num_heads=heads,
        hidden_dim=hidden,
        max_position_embeddings=max_position,
        bucket_size=buckets,
        dropout=0.0,
    )
    x = rng.standard_normal((2, length, hidden)).astype("float32")
    hub.build(x.shape)
    _random_weights(hub, rng)
    table = rng.standard_normal((1, 2 * buckets, hidden)).astype("float32")
    padding = np.ones((2, length), bool)
    padding[1, 15:] = False
    expected = numpy(
        hub(x, rel_embeddings=table, attention_mask=padding[:, None, :].repeat(length, 1))
    )
    ours = layers.DisentangledSelfAttention(
        heads,
        hidden // heads,
        position=layers.DebertaBuckets(buckets, max_position),
        shared_table=True,
    )
    ours.build(x.shape)
    for name, theirs in (("query", hub._query_dense), ("key", hub._key_dense)):
        getattr(ours, f"{name}_dense").kernel.assign(theirs.kernel)
        getattr(ours, f"{name}_dense").bias.assign(theirs.bias)
    ours.value_dense.kernel.assign(hub._value_dense.kernel)
    ours.value_dense.bias.assign(hub._value_dense.bias)
    kernel = ops.reshape(hub._output_dense.kernel, (heads, hidden // heads, hidden))
    ours.output_dense.kernel.assign(kernel)
    ours.output_dense.bias.assign(hub._output_dense.bias)
    got = numpy(ours(x, relative_embeddings=table[0], padding_mask=padding))
    np.testing.assert_allclose(got, expected, atol=2e-5, rtol=1e-5)


@pytest.mark.neutral
def test_keras_round_trip_and_keras_mask(tmp_path):
    inputs = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(30, 8, mask_zero=True)(inputs)
    x = layers.DisentangledSelfAttention(
        2, 4, position=layers.DebertaBuckets(4, 12), share_position_projections=False
    )(x)
    model = keras.Model(inputs, x)
    ids = np.array([[3, 4, 5, 6, 0, 0], [7, 8, 9, 10, 11, 12]], "int32")
    before = numpy(model(ids))
    path = os.path.join(tmp_path, "disentangled.keras")
    model.save(path)
    after = numpy(keras.saving.load_model(path)(ids))
    np.testing.assert_allclose(after, before, atol=1e-6)
    # The Embedding's mask is the padding mask: the padded keys change nothing.
    inner = model.layers[-1]
    embedded = model.layers[1](ids)
    explicit = numpy(inner(embedded, padding_mask=ids != 0))
    np.testing.assert_allclose(before, explicit, atol=1e-6)
    assert layers.DisentangledSelfAttention.from_config(inner.get_config()).get_config() == (
        inner.get_config()
    )


@pytest.mark.neutral
@pytest.mark.parametrize(
    ("make", "call", "error", "message"),
    [
        (lambda: layers.DisentangledSelfAttention(2, 4, terms=["c2c"]), None, ValueError,
         r"`terms` must be a non-empty list of 'c2p', 'p2c'"),
        (lambda: layers.DisentangledSelfAttention(2, 4, position="alibi"), None, ValueError,
         r"`position` must index a table by the distance"),
        (lambda: layers.DisentangledSelfAttention(2, 4, shared_table=True),
         lambda layer, x: layer(x), ValueError, r"needs `relative_embeddings`"),
        (lambda: layers.DisentangledSelfAttention(2, 4, shared_table=True),
         lambda layer, x: layer(x, relative_embeddings=np.zeros((5, 8), "float32")),
         ValueError, r"`relative_embeddings` must have shape \(512, 8\)"),
        (lambda: layers.DisentangledSelfAttention(2, 4),
         lambda layer, x: layer(x, relative_embeddings=np.zeros((512, 8), "float32")),
         ValueError, r"has its own table; make it with shared_table=True"),
        (lambda: layers.DebertaBuckets(256, 100), None, ValueError,
         r"DebertaBuckets: `max_position` must be > 129"),
        (lambda: layers.deberta_index(0, position_buckets=2), None, ValueError,
         r"deberta_index: `position_buckets` must be"),
    ],
)  # fmt: skip
def test_bad_arguments_give_one_clear_error(make, call, error, message):
    x = np.zeros((2, 5, 8), "float32")
    if call is None:
        with pytest.raises(error, match=message):
            make()
        return
    layer = make()
    with pytest.raises(error, match=message):
        call(layer, x)


@pytest.mark.neutral
def test_with_relative_bias_of_multi_head_relative_attention():
    # The scheme serves MultiHeadRelativeAttention's modes too: a bias per head and bucket.
    attention = layers.MultiHeadRelativeAttention(2, 4, relative="bias", position="deberta")
    assert attention.relative_bias.position == layers.DebertaBuckets()
    x = np.random.default_rng(3).standard_normal((1, 300, 8)).astype("float32")
    assert tuple(attention(x, x).shape) == (1, 300, 8)
