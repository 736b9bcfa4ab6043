"""DeBERTa v3 from keras-hub: `convert.from_keras_hub_deberta_v3` on ``DebertaV3Backbone`` s
with random weights gives the backbone's outputs on every backend, for inputs longer than
the log buckets' end, one row padded; from a preset folder and a task model too. The zoo's
configurations' counts equal keras-hub's presets' (the card's front matter,
tests/test_zoo_docs.py)."""

from __future__ import annotations

import os

import keras
import keras_hub
import numpy as np
import pytest

from keras_posenc import zoo
from keras_posenc.convert import from_keras_hub, from_keras_hub_deberta_v3, from_keras_hub_preset

pytestmark = pytest.mark.contract


def numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def backbone(layers=2, heads=4, hidden=16, buckets=8, max_length=32, seed=0):
    model = keras_hub.models.DebertaV3Backbone(
        vocabulary_size=60, num_layers=layers, num_heads=heads, hidden_dim=hidden,
        intermediate_dim=2 * hidden, max_sequence_length=max_length, bucket_size=buckets,
        dropout=0.0,
    )  # fmt: skip
    rng = np.random.default_rng(seed)
    for weight in model.weights:  # every weight drawn (keras-hub's biases start at zero)
        offset = 1.0 if weight.path.endswith("gamma") else 0.0
        weight.assign(rng.normal(size=tuple(weight.shape)).astype("float32") * 0.5 + offset)
    return model


def inputs(length=45):
    rng = np.random.default_rng(1)
    ids = rng.integers(3, 60, (2, length)).astype("int32")
    mask = np.ones((2, length), "int32")
    mask[1, 30:] = 0
    ids[1, 30:] = 0
    return {"token_ids": ids, "padding_mask": mask}


# Not (4, 12): there keras-hub's own buckets differ between backends (TensorFlow's float32
# log puts the distance 11, exactly on a level's boundary, a row away from JAX's and
# PyTorch's; relative_index.deberta_index's docstring).
@pytest.mark.parametrize(
    "shape", [dict(), dict(layers=1, heads=2, hidden=8, buckets=4, max_length=16)]
)
def test_equals_keras_hubs_backbone(shape):
    hub = backbone(**shape)
    ours = from_keras_hub_deberta_v3(hub)
    x = inputs()
    expected, got = numpy(hub(x)), numpy(ours(x))
    real = x["padding_mask"].astype(bool)
    np.testing.assert_allclose(got[real], expected[real], atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)


def test_a_preset_folder_and_a_task_model_convert(tmp_path):
    hub = backbone(seed=2)
    folder = os.path.join(tmp_path, "preset")
    hub.save_to_preset(folder)
    x = inputs(20)
    expected = numpy(hub(x))
    np.testing.assert_allclose(numpy(from_keras_hub_preset(folder)(x)), expected, atol=1e-5)
    classifier = keras_hub.models.DebertaV3TextClassifier(hub, num_classes=3, preprocessor=None)
    np.testing.assert_allclose(numpy(from_keras_hub(classifier)(x)), expected, atol=1e-5)


@pytest.mark.neutral
def test_converted_model_round_trips_and_trains(tmp_path):
    ours = from_keras_hub_deberta_v3(backbone(layers=1, heads=2, hidden=8, buckets=4, seed=3))
    x = inputs(9)
    path = os.path.join(tmp_path, "deberta.keras")
    ours.save(path)
    np.testing.assert_allclose(numpy(keras.saving.load_model(path)(x)), numpy(ours(x)), atol=1e-6)
    # fit reaches every weight, the shared table through both relative terms included.
    table = ours.get_layer("relative_embedding").embeddings
    before = numpy(table).copy()
    ours.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    ours.fit(x, np.zeros((2, 9, 8), "float32"), epochs=1, verbose=0)
    assert not np.allclose(numpy(table), before)


@pytest.mark.neutral
def test_errors_and_zoo_names():
    with pytest.raises(TypeError, match="from_keras_hub_deberta_v3: `backbone` must be a"):
        from_keras_hub_deberta_v3(keras.Sequential())
    with pytest.raises(ValueError, match="build_deberta_v3: `hidden_dim` must be a multiple"):
        zoo.create("deberta_v3_base", hidden_dim=30, num_heads=4)
    model = zoo.create(
        "deberta_v3_extra_small", vocabulary_size=50, num_layers=1, hidden_dim=8, num_heads=2,
        intermediate_dim=16, bucket_size=4, max_sequence_length=16,
    )  # fmt: skip
    ids = np.array([[1, 5, 6, 2, 0]])
    out = model({"token_ids": ids, "padding_mask": ids != 0})
    assert tuple(out.shape) == (1, 5, 8)
    with pytest.raises(TypeError, match="`padding_mask` must be boolean or integer"):
        model({"token_ids": ids, "padding_mask": np.ones((1, 5), "float32") * 0.5})
