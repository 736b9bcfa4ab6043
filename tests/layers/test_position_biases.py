"""Computed position biases (ALiBi, KERPLE, FIRE, ContinuousBias) against numpy references:
the bias itself, attention with it, decoding, saving, training, mixed precision, errors."""

from __future__ import annotations

import contextlib
import os

import keras
import numpy as np
import pytest
from keras import ops
from tiers import matrix

from keras_posenc import backend, layers
from layer_checks import decode_step_by_step, relative_attention_weights
from reference import position_biases as reference
from reference.relative_attention import causal_mask, relative_attention

pytestmark = pytest.mark.contract

ATOL = 1e-5
HEADS = 3


def to_numpy(tensor):
    return ops.convert_to_numpy(tensor).astype("float64")


def weights_of(bias_layer):
    """The layer's weights by name, with the MLP's prefix dropped (the reference's names)."""
    return {
        name.removeprefix("mlp_"): to_numpy(weight)
        for name, weight in bias_layer.bias_weights.items()
    }


def expected_bias(scheme, bias_layer, query_length, key_length, offset=0):
    return reference.scheme_bias(
        type(scheme).__name__,
        scheme.get_config(),
        weights_of(bias_layer),
        bias_layer.num_heads,
        query_length,
        key_length,
        offset,
    )


# Every computed scheme; FIRE is causal-only.
SCHEMES = {
    "alibi": layers.ALiBi(),
    "kerple_log": layers.KERPLE("log"),
    "kerple_power": layers.KERPLE("power"),
    "fire": layers.FIRE(hidden_dim=8, initial_threshold=4.0),
    "continuous_cr": layers.ContinuousBias(hidden_dim=8),
    "continuous_swin": layers.ContinuousBias(hidden_dim=8, mode="swin", window=6),
}


def randomise(layer, rng, scale=0.5):
    """Random values in every weight (positive ones for KERPLE's and FIRE's scalars)."""
    for weight in layer.weights:
        values = scale * rng.standard_normal(tuple(weight.shape))
        if weight.name in ("r1", "r2", "c", "threshold"):
            values = np.abs(values) + (3.0 if weight.name == "threshold" else 0.05)
        weight.assign(values.astype("float32"))


def test_alibi_slopes_are_the_papers():
    # Published: 8 heads 1/2 ... 1/256; 16 heads interleave 1/sqrt(2), 1/2, ...
    np.testing.assert_allclose(layers.ALiBi.slopes(8), [2.0**-k for k in range(1, 9)])
    np.testing.assert_allclose(layers.ALiBi.slopes(16)[:3], [2**-0.5, 0.5, 2**-1.5], rtol=1e-6)
    for heads in (1, 3, 5, 6, 12, 24):
        np.testing.assert_allclose(
            layers.ALiBi.slopes(heads), reference.alibi_slopes(heads), rtol=1e-6
        )
    # 12 heads: the 8 slopes of 8 heads, then 4 of 16 heads' at even indices.
    np.testing.assert_allclose(layers.ALiBi.slopes(12)[8:], [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5])


@pytest.mark.parametrize("kernels", ["backend", "reference"])
@pytest.mark.parametrize(*matrix("lengths", [(4, 4, 0), (3, 7, 2), (1, 9, 8)], keep=[0, 2]))
@pytest.mark.parametrize("name", list(SCHEMES))
def test_bias_matches_reference(name, lengths, kernels, rng):
    # The backend's kernels and their references (`backend.references_only`).
    scope = backend.references_only() if kernels == "reference" else contextlib.nullcontext()
    scheme = SCHEMES[name]
    layer = layers.RelativePositionBias(HEADS, position=scheme)
    layer.build()
    randomise(layer, rng)
    query_length, key_length, offset = lengths
    expected = expected_bias(scheme, layer, query_length, key_length, offset)
    with scope:
        actual = to_numpy(layer(query_length, key_length, offset=offset))[0]
    np.testing.assert_allclose(actual, expected, atol=ATOL, err_msg=name)
    if scheme.toeplitz:
        diagonals = to_numpy(layer.diagonals(query_length, key_length, offset))
        r = np.arange(key_length)[None, :] - np.arange(query_length)[:, None]
        np.testing.assert_allclose(diagonals[:, r + query_length - 1], expected, atol=ATOL)
    else:
        with pytest.raises(ValueError, match=r"has no diagonals"):
            layer.diagonals(query_length, key_length, offset)


def test_bias_has_no_table():
    layer = layers.RelativePositionBias(2, position=layers.ALiBi())
    with pytest.raises(TypeError, match=r"computes its bias, it has no table"):
        layer.table()
    with pytest.raises(TypeError, match=r"ALiBi\(\) computes its bias: it has no table rows"):
        assert layers.ALiBi().table_size is None  # raises first


@pytest.mark.parametrize("name", list(SCHEMES))
def test_attention_with_the_bias_matches_reference(name, rng):
    scheme = SCHEMES[name]
    layer = layers.MultiHeadRelativeAttention(HEADS, 4, relative="bias", position=scheme)
    query = rng.standard_normal((2, 5, 6)).astype("float32")
    layer(query, query, use_causal_mask=True)
    randomise(layer, rng)
    mask = rng.random((2, 5, 5)) > 0.2
    output, scores = layer(
        query, query, attention_mask=mask, use_causal_mask=True, return_attention_scores=True
    )
    bias = expected_bias(scheme, layer.relative_bias, 5, 5)
    expected, probabilities = relative_attention(
        query,
        query,
        None,
        relative_attention_weights(layer),
        None,
        None,
        mask=np.logical_and(mask, causal_mask(5, 5)),
        attention_bias=bias[None],
    )
    np.testing.assert_allclose(to_numpy(output), expected, atol=ATOL)
    np.testing.assert_allclose(to_numpy(scores), probabilities, atol=ATOL)
    if not scheme.causal_only:  # bidirectional too (ALiBi's symmetric form)
        output = layer(query, query)
        expected, _ = relative_attention(
            query,
            query,
            None,
            relative_attention_weights(layer),
            None,
            None,
            attention_bias=bias[None],
        )
        np.testing.assert_allclose(to_numpy(output), expected, atol=ATOL)


def test_causal_only_schemes_need_the_causal_mask():
    layer = layers.MultiHeadRelativeAttention(2, 4, relative="bias", position=layers.FIRE())
    x = np.zeros((1, 3, 8), "float32")
    with pytest.raises(ValueError, match=r"position=FIRE\(.*\) is defined for keys at or before"):
        layer(x, x)
    assert tuple(layer(x, x, use_causal_mask=True).shape) == (1, 3, 8)


@pytest.mark.parametrize("name", list(SCHEMES))
def test_decoding_step_by_step_equals_the_full_pass(name, rng):
    layer = layers.MultiHeadRelativeAttention(2, 4, relative="bias", position=SCHEMES[name])
    x = rng.standard_normal((2, 6, 8)).astype("float32")
    layer(x, x, use_causal_mask=True)
    randomise(layer, rng)
    full = to_numpy(layer(x, x, use_causal_mask=True))
    for t, step in enumerate(decode_step_by_step(layer, x)[0]):
        np.testing.assert_allclose(step, full[:, t], atol=ATOL, err_msg=f"t={t}")


def test_schemes_round_trip_through_keras_files(tmp_path, rng):
    inputs = keras.Input((None, 8))
    x = inputs
    for name, scheme in SCHEMES.items():
        block = layers.RelativeTransformerDecoder(
            16, 2, relative="bias", position=scheme, normalize_first=True, name=name
        )
        x = block(x)
    model = keras.Model(inputs, x)
    for layer in model.layers[1:]:
        randomise(layer, rng, scale=0.3)
    data = rng.standard_normal((2, 7, 8)).astype("float32")
    path = os.path.join(tmp_path, "schemes.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    for name, scheme in SCHEMES.items():
        assert restored.get_layer(name).position == scheme
    np.testing.assert_allclose(to_numpy(restored(data)), to_numpy(model(data)), atol=ATOL)


@pytest.mark.parametrize("name", ["kerple_log", "kerple_power", "fire", "continuous_swin"])
def test_a_training_step_changes_the_learned_parameters(name, rng):
    inputs = keras.Input((6, 8))
    outputs = layers.MultiHeadRelativeAttention(2, 4, relative="bias", position=SCHEMES[name])(
        inputs, inputs, use_causal_mask=True
    )
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    bias_layer = model.layers[1].relative_bias
    before = weights_of(bias_layer)
    x = rng.standard_normal((4, 6, 8)).astype("float32")
    model.fit(x, rng.standard_normal((4, 6, 8)).astype("float32"), epochs=1, verbose=0)
    after = weights_of(bias_layer)
    changed = [key for key in before if not np.allclose(before[key], after[key])]
    assert changed, f"{name}: no weight of the bias changed"
    for key, value in after.items():
        assert np.all(np.isfinite(value)), key


def test_kerple_parameters_stay_in_range_after_updates():
    layer = layers.RelativePositionBias(2, position=layers.KERPLE("power"))
    layer.build()
    layer.bias_weights["r1"].assign(np.array([-1.0, 0.5], "float32"))
    layer.bias_weights["r2"].assign(np.array([3.0, 1e-4], "float32"))
    # The bias clamps before use, as the authors' code does ...
    expected = reference.kerple([-1.0, 0.5], [3.0, 1e-4], "power", 2, 3)
    np.testing.assert_allclose(to_numpy(layer(2, 3))[0], expected, atol=ATOL)
    # ... and the constraint projects the weights back after an update.
    for weight in (layer.bias_weights["r1"], layer.bias_weights["r2"]):
        weight.assign(weight.constraint(weight))
    np.testing.assert_allclose(to_numpy(layer.bias_weights["r1"]), [1e-2, 0.5])
    np.testing.assert_allclose(to_numpy(layer.bias_weights["r2"]), [2.0, 1e-2])


def test_kerple_power_gradient_is_finite_at_distance_zero():
    layer = layers.RelativePositionBias(2, position=layers.KERPLE("power"))
    inputs = keras.Input((4, 8))
    attention = layers.MultiHeadRelativeAttention(
        2, 4, relative="bias", position=layers.KERPLE("power")
    )
    model = keras.Model(inputs, attention(inputs, inputs))
    model.compile(optimizer="sgd", loss="mse")
    x = np.ones((2, 4, 8), "float32")
    model.fit(x, x, epochs=1, verbose=0)
    assert all(np.all(np.isfinite(to_numpy(w))) for w in model.weights)
    assert layer.position == layers.KERPLE("power")


@pytest.mark.parametrize("name", list(SCHEMES))
def test_mixed_precision(name, rng):
    keras.config.set_dtype_policy("mixed_bfloat16")
    layer = layers.MultiHeadRelativeAttention(2, 4, relative="bias", position=SCHEMES[name])
    x = rng.standard_normal((2, 9, 8)).astype("float32")
    output = to_numpy(layer(x, x, use_causal_mask=True))
    assert np.all(np.isfinite(output))
    assert keras.backend.standardize_dtype(layer.relative_bias.compute_dtype) == "bfloat16"


def test_no_table_limits_the_length(rng):
    # ALiBi and the continuous bias at a distance far beyond anything a table would hold.
    for scheme in (layers.ALiBi(), layers.ContinuousBias(hidden_dim=4)):
        layer = layers.RelativePositionBias(2, position=scheme)
        layer.build()
        randomise(layer, rng)
        far = to_numpy(layer(1, 3000))[0, :, 0]
        expected = expected_bias(scheme, layer, 1, 3000)[:, 0]
        np.testing.assert_allclose(far[:, -1], expected[:, -1], atol=1e-4)
        assert not np.allclose(far[:, -1], far[:, -2])  # no last bucket shared


@pytest.mark.parametrize(
    "build, error, message",
    [
        (lambda: layers.KERPLE("cubic"), ValueError, r"KERPLE: `kernel` must be one of 'log'"),
        (lambda: layers.FIRE(hidden_dim=0), ValueError, r"FIRE: `hidden_dim` must be"),
        (lambda: layers.FIRE(initial_c=-1.0), ValueError, r"FIRE: `initial_c` must be"),
        (
            lambda: layers.ContinuousBias(mode="swin"),
            ValueError,
            r"ContinuousBias: mode='swin' normalises distances by `window` - 1",
        ),
        (
            lambda: layers.ContinuousBias(window=8),
            ValueError,
            r"ContinuousBias: `window` is used by mode='swin' only",
        ),
        (
            lambda: layers.MultiHeadRelativeAttention(
                2, 4, relative="keys", position=layers.ALiBi()
            ),
            ValueError,
            r"MultiHeadRelativeAttention: `position=ALiBi\(\)` does not support relative='keys'",
        ),
        (
            lambda: layers.MultiHeadRelativeAttention(2, 4, relative=None, position=layers.ALiBi()),
            ValueError,
            r"relative=None adds no relative term, so it takes no `position`",
        ),
    ],
)
def test_bad_arguments(build, error, message):
    with pytest.raises(error, match=message):
        build()


@pytest.mark.skipif(
    keras.backend.backend() != "torch",
    reason="the strided view of a bias's diagonals is for PyTorch's fused kernel "
    "(`backend.toeplitz_attention`); other backends take the general path",
)
@pytest.mark.parametrize("name", ["alibi", "kerple_log", "continuous_cr"])
def test_toeplitz_schemes_take_the_strided_view_on_torch(name, rng, monkeypatch):
    import torch

    taken = []
    original = backend.toeplitz_attention

    def counting(*args, **kwargs):
        taken.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(backend, "toeplitz_attention", counting)
    scheme = SCHEMES[name]
    layer = layers.MultiHeadRelativeAttention(HEADS, 4, relative="bias", position=scheme)
    x = rng.standard_normal((2, 6, 8)).astype("float32")
    layer(x, x)
    randomise(layer, rng)
    with torch.no_grad():
        output = layer(x, x, use_causal_mask=True)
    assert taken, "the strided path was not taken"
    bias = expected_bias(scheme, layer.relative_bias, 6, 6)
    expected, _ = relative_attention(
        x,
        x,
        None,
        relative_attention_weights(layer),
        None,
        None,
        mask=causal_mask(6, 6),
        attention_bias=bias[None],
    )
    np.testing.assert_allclose(to_numpy(output), expected, atol=ATOL)


def mlp_weights_2d(layer):
    return {
        name.removeprefix("mlp_"): to_numpy(weight) for name, weight in layer.mlp_weights.items()
    }


@pytest.mark.parametrize(
    "arguments, size",
    [
        ({}, None),
        ({}, (4, 2)),
        ({"mode": "swin"}, None),
        ({"mode": "swin", "pretrained_size": (4, 5)}, (2, 3)),
    ],
)
def test_continuous_2d_bias_matches_reference(arguments, size, rng):
    layer = layers.ContinuousPositionBias2D(HEADS, size=(3, 2), hidden_dim=8, **arguments)
    randomise(layer, rng)
    height, width = size or (3, 2)
    pretrained = arguments.get("pretrained_size")
    expected = reference.continuous_2d(
        mlp_weights_2d(layer), arguments.get("mode", "cr"), height, width, pretrained
    )
    np.testing.assert_allclose(to_numpy(layer(size=size)), expected, atol=ATOL)


def test_continuous_2d_bias_in_the_coatnet_block(tmp_path, rng):
    inputs = keras.Input((4, 6, 8))
    block = layers.RelativeTransformerBlock2D(16, head_dim=8, position_bias="mlp", name="block")
    model = keras.Model(inputs, block(inputs))
    assert isinstance(block.relative_bias, layers.ContinuousPositionBias2D)
    assert block.relative_bias.hidden_dim == 512 and block.relative_bias.size == (4, 6)
    image = rng.standard_normal((2, 4, 6, 8)).astype("float32")
    path = os.path.join(tmp_path, "mlp.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    np.testing.assert_allclose(to_numpy(restored(image)), to_numpy(model(image)), atol=ATOL)
    # The same weights serve another map size, with no table to resize.
    bigger = rng.standard_normal((1, 6, 10, 8)).astype("float32")
    assert tuple(block(bigger).shape) == (1, 6, 10, 16)
    config = layers.ContinuousPositionBias2D(2, size=(2, 3), mode="swin").get_config()
    restored_bias = layers.ContinuousPositionBias2D.from_config(config)
    assert restored_bias.mode == "swin" and restored_bias.size == (2, 3)


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"mode": "swin", "size": (1, 4)}, r"mode='swin' divides the offsets by size - 1"),
        ({"pretrained_size": (4, 4)}, r"`pretrained_size` is used by mode='swin' only"),
        ({"mode": "linear"}, r"`mode` must be one of 'cr', 'swin'"),
        ({"dropout": 1.5}, r"`dropout`"),
    ],
)
def test_continuous_2d_bias_bad_arguments(arguments, message):
    with pytest.raises(ValueError, match=message):
        layers.ContinuousPositionBias2D(2, **arguments)
