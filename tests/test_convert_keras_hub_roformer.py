"""RoFormer v2 from keras-hub: `convert.from_keras_hub_roformer_v2` on ``RoformerV2Backbone`` s
with random weights gives the backbone's outputs on every backend (unpadded inputs; padded
ones on PyTorch, where keras-hub masks keys as we do); from a preset folder and a task model
too; the zoo's counts equal keras-hub's backbone of the same shape."""

from __future__ import annotations

import os

import keras
import keras_hub
import numpy as np
import pytest

from keras_posenc import zoo
from keras_posenc.convert import (
    from_keras_hub,
    from_keras_hub_preset,
    from_keras_hub_roformer_v2,
)

pytestmark = pytest.mark.contract


def numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def backbone(layers=2, heads=2, size=8, use_bias=False, seed=0):
    model = keras_hub.models.RoformerV2Backbone(
        vocabulary_size=60, num_layers=layers, num_heads=heads, hidden_dim=heads * size,
        intermediate_dim=4 * size, head_size=size, use_bias=use_bias, dropout=0.0,
    )  # fmt: skip
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        offset = 1.0 if weight.path.endswith("scale") else 0.0
        weight.assign(rng.normal(size=tuple(weight.shape)).astype("float32") * 0.5 + offset)
    return model


def inputs(length=37, pad_from=None):
    rng = np.random.default_rng(1)
    ids = rng.integers(3, 60, (2, length)).astype("int32")
    if pad_from is not None:
        ids[1, pad_from:] = 0
    return {"token_ids": ids, "segment_ids": rng.integers(0, 2, (2, length)).astype("int32")}


@pytest.mark.parametrize("options", [dict(), dict(layers=1, heads=4, size=4, use_bias=True)])
def test_equals_keras_hubs_backbone(options):
    hub = backbone(**options)
    ours = from_keras_hub_roformer_v2(hub)
    x = inputs()
    np.testing.assert_allclose(numpy(ours(x)), numpy(hub(x)), atol=2e-5, rtol=1e-5)


def test_padded_keys_are_masked():
    hub = backbone(seed=4)
    ours = from_keras_hub_roformer_v2(hub)
    padded = inputs(pad_from=25)
    trimmed = {name: value[1:, :25] for name, value in padded.items()}
    # The real positions of a padded row are those of the row without its padding.
    np.testing.assert_allclose(
        numpy(ours(padded))[1, :25], numpy(ours(trimmed))[0], atol=2e-5, rtol=1e-5
    )
    if keras.backend.backend() != "torch":
        pytest.skip(
            "keras-hub 0.32's RoformerAttention masks padded queries, not keys, on "
            "TensorFlow and JAX (its mask is (batch, 1, length, 1)): compared on PyTorch only"
        )
    real = padded["token_ids"] != 0  # padded positions' own outputs are read by nothing
    np.testing.assert_allclose(
        numpy(ours(padded))[real], numpy(hub(padded))[real], atol=2e-5, rtol=1e-5
    )


def test_a_preset_folder_and_a_task_model_convert(tmp_path):
    hub = backbone(seed=2)
    folder = os.path.join(tmp_path, "preset")
    hub.save_to_preset(folder)
    x = inputs(20)
    expected = numpy(hub(x))
    np.testing.assert_allclose(numpy(from_keras_hub_preset(folder)(x)), expected, atol=2e-5)
    classifier = keras_hub.models.RoformerV2TextClassifier(hub, num_classes=3, preprocessor=None)
    np.testing.assert_allclose(numpy(from_keras_hub(classifier)(x)), expected, atol=2e-5)


@pytest.mark.neutral
def test_round_trip_training_counts_and_errors(tmp_path):
    ours = from_keras_hub_roformer_v2(backbone(layers=1, seed=3))
    x = inputs(9)
    path = os.path.join(tmp_path, "roformer.keras")
    ours.save(path)
    np.testing.assert_allclose(numpy(keras.saving.load_model(path)(x)), numpy(ours(x)), atol=1e-6)
    kernel = ours.get_layer("encoder_block_0").self_attention.query_dense.kernel
    before = numpy(kernel).copy()
    ours.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    ours.fit(x, np.zeros((2, 9, 16), "float32"), epochs=1, verbose=0)
    assert not np.allclose(numpy(kernel), before)
    # The registered small configuration has keras-hub's count for the same shape.
    hub = keras_hub.models.RoformerV2Backbone(
        vocabulary_size=12000, num_layers=6, num_heads=6, hidden_dim=384,
        intermediate_dim=1536, head_size=64,
    )  # fmt: skip
    assert zoo.create("roformer_v2_small").count_params() == hub.count_params() == 15_230_592
    with pytest.raises(TypeError, match="from_keras_hub_roformer_v2: `backbone` must be a"):
        from_keras_hub_roformer_v2(keras.Sequential())
    with pytest.raises(ValueError, match="`num_heads \\* head_size` must equal `hidden_dim`"):
        zoo.create("roformer_v2_base", head_size=32)
