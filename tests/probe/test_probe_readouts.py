"""Readouts fitted on features computed once, and backbones trained from scratch."""

from __future__ import annotations

import math

import numpy as np
import pytest
from keras import ops

from keras_posenc import probe
from keras_posenc.probe.readout import LinearReadout, TrainedReadout

pytestmark = pytest.mark.contract


def conv_valid(features, kernel, bias=0.0):
    """A 'valid' k x k convolution with one output channel, written out with numpy."""
    k = kernel.shape[0]
    n, h, w, _ = features.shape
    out = np.full((n, h - k + 1, w - k + 1), bias, dtype=np.float64)
    for dy in range(k):
        for dx in range(k):
            out += np.einsum(
                "nhwc,c->nhw", features[:, dy : dy + h - k + 1, dx : dx + w - k + 1], kernel[dy, dx]
            )
    return out[..., None]


# --------------------------------------------------------------------------- least squares


@pytest.mark.parametrize("padding", [0, 1, 2])
def test_linear_readout_recovers_a_zero_padded_convolution(rng, padding):
    features = rng.standard_normal((5, 7, 7, 2))
    kernel = rng.standard_normal((3, 3, 2))
    padded = np.pad(features, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
    targets = conv_valid(padded, kernel, bias=0.5)
    assert targets.shape == (5, 5 + 2 * padding, 5 + 2 * padding, 1)
    readout = LinearReadout(kernel_size=3, ridge=0.0, padding=padding).fit(
        features[:4], targets[:4]
    )
    np.testing.assert_allclose(readout.predict(features[4:]), targets[4:], atol=1e-8)


def test_linear_readout_padding_sees_the_border_of_a_constant_input():
    """Zeros around a constant map are a border; without them there is nothing to read."""
    constant = np.full((1, 8, 8, 1), 0.7)
    for padding, expect_constant in ((0, True), (1, False)):
        size = 8 + 2 * padding - 2
        target = probe.position_patterns(size, size)["H"][None, ..., None]
        prediction = LinearReadout(padding=padding).fit(constant, target).predict(constant)
        _, flagged = probe.spc(prediction, target[0, ..., 0], return_flag=True)
        assert flagged == expect_constant, padding


# --------------------------------------------------------------------------- trained


def probe_features(padding, kinds=("noise",), size=16, seed=0):
    net = probe.probe_backbone(padding, input_shape=(size, size, 3), stages=2, width=4, seed=seed)
    posenet = probe.PosENet(net, feature_size=8)
    features = {}
    for kind in kinds:
        count = 24 if kind == "noise" else 1
        images = probe.content_free_images(kind, count, size, size, seed=seed)
        features[kind] = ops.convert_to_numpy(posenet.feature_model()(images))
    return features


def scores(maps, size, names=("H", "G")):
    targets = probe.position_patterns(size, size)
    return {name: probe.spc(maps[..., i], targets[name]) for i, name in enumerate(names)}


def test_trained_readout_decodes_zero_padding_not_circular_padding():
    readout = TrainedReadout(12, (16, 16), 8, targets=["H", "G"], steps=60)
    zeros = probe_features("zeros")["noise"]
    circular = probe_features("circular")["noise"]
    found = scores(readout.fit(zeros[:16]).predict(zeros[16:]), 16)
    assert found["H"] > 0.8 and found["G"] > 0.8, found
    missed = scores(readout.fit(circular[:16]).predict(circular[16:]), 16)
    assert abs(missed["H"]) < 0.3 and abs(missed["G"]) < 0.3, missed


def test_trained_readout_refits_from_scratch_deterministically():
    """One compiled readout serves many fits: each starts from the same fresh state."""
    features = probe_features("zeros")["noise"]
    readout = TrainedReadout(12, (16, 16), 8, targets=["H"], steps=10)
    first = readout.fit(features[:16], seed=3).predict(features[16:])
    readout.fit(features[:16] * 2.0 + 1.0, seed=4)  # something else in between
    again = readout.fit(features[:16], seed=3).predict(features[16:])
    np.testing.assert_allclose(again, first, atol=1e-6)
    assert first.shape == (8, 16, 16, 1) and 0.0 <= first.min() and first.max() <= 1.0


def test_trained_readout_is_posenets_readout():
    readout = TrainedReadout(7, (20, 20), 10, targets=["V", "HS"], readout_layers=2, kernel_size=3)
    model = readout.model
    assert model.input_shape == (None, 10, 10, 7) and model.output_shape == (None, 20, 20, 2)
    kernels = [w for w in model.trainable_weights if len(w.shape) == 4]
    assert [tuple(k.shape) for k in kernels] == [(3, 3, 7, 64), (3, 3, 64, 2)]
    assert readout.learning_rate == pytest.approx(0.1 / math.sqrt(9 * 7))


def test_trained_readout_padding_sees_the_border_of_a_constant_input():
    """The paper's Table 4 on a grey image: a 'valid' readout reads nothing, a padded one does."""
    grey = probe.content_free_images("grey", 1, 16, 16)
    image = alone_features(grey)
    results = {}
    for padding in (0, 1):
        readout = TrainedReadout(3, (16, 16), 8, targets=["H"], readout_padding=padding, steps=60)
        maps = readout.fit(image).predict(image)
        results[padding] = probe.spc(maps[..., 0], probe.position_patterns(16, 16)["H"], True)
    assert results[0] == (0.0, True)
    assert results[1][0] > 0.3 and not results[1][1], results[1]


def alone_features(images):
    """PosENet alone reads the image itself, resized to the feature grid."""
    alone = probe.PosENet(None, image_shape=images.shape[1:], feature_size=8)
    return ops.convert_to_numpy(alone.feature_model()(images))


def test_trained_readout_rejects_padding_with_several_layers():
    with pytest.raises(ValueError, match=r"TrainedReadout: `readout_padding` .* readout_layers=1"):
        TrainedReadout(3, (16, 16), 8, readout_layers=2, readout_padding=1)


def test_readout_model_shares_posenets_weights():
    backbone = probe.probe_backbone("zeros", input_shape=(16, 16, 3), stages=2, width=4)
    posenet = probe.PosENet(backbone, feature_size=8, targets=["H", "G"], readout_layers=2)
    readout = posenet.readout_model()
    assert [id(w) for w in readout.trainable_weights] == [id(w) for w in posenet.trainable_weights]
    images = probe.content_free_images("noise", 2, 16, 16)
    features = posenet.feature_model()(images)
    np.testing.assert_allclose(
        ops.convert_to_numpy(readout(features)), ops.convert_to_numpy(posenet(images)), atol=1e-6
    )


# --------------------------------------------------------------------------- pretraining


def test_grating_images_carry_no_position():
    images, labels = probe.grating_images(256, 16, seed=0)
    assert images.shape == (256, 16, 16, 3) and images.dtype == np.float32
    assert labels.dtype == np.int32 and set(labels.tolist()) == {0, 1, 2, 3}
    assert 0.0 <= images.min() and images.max() < 1.0
    # Random phases and noise: the mean image is flat, no pixel is special.
    assert np.ptp(images.mean(axis=(0, 3))) < 0.06
    again, _ = probe.grating_images(256, 16, seed=0)
    np.testing.assert_array_equal(images, again)
    with pytest.raises(ValueError, match=r"probe.grating_images: `size` must be an integer >= 8"):
        probe.grating_images(4, 4)


def test_grating_orientation_is_the_label():
    """The label is the direction along which a noise-free image would not change."""
    images, labels = probe.grating_images(64, 32, seed=2)
    horizontal = images[labels == 2]  # 90 degrees: the cosine runs along y, constant along x
    vertical = images[labels == 0]  # 0 degrees: constant along y
    along_x = np.abs(np.diff(horizontal, axis=2)).mean()
    along_y = np.abs(np.diff(horizontal, axis=1)).mean()
    assert along_y > along_x
    assert np.abs(np.diff(vertical, axis=2)).mean() > np.abs(np.diff(vertical, axis=1)).mean()


def test_pretrain_backbone_trains_the_backbone_in_place():
    net = probe.probe_backbone("zeros", input_shape=(16, 16, 3), stages=1, width=4, seed=0)
    before = [w.copy() for w in net.get_weights()]
    accuracy = probe.pretrain_backbone(net, images=64, epochs=1, batch_size=16)
    assert 0.0 <= accuracy <= 1.0
    changed = [not np.array_equal(a, b) for a, b in zip(before, net.get_weights())]
    assert all(changed)
    assert [layer.name for layer in net.layers] == [
        "images",
        "stage1_pad1",
        "stage1_conv1",
        "stage1_pad2",
        "stage1_conv2",
    ]  # the classifier head is not left on the backbone
