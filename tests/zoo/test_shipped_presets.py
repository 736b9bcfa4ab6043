"""The presets shipped in the package (keras_posenc/zoo/weights/): loaded by name with no
network, the same predictions on every backend, and refused tags named.

tests/fixtures/shipped_presets.npz holds, for each preset, inputs and what the preset
computed on them when it was trained (JAX, the recipes' ``--save`` run): 32 held-out digits
(8 x 8, 0-16) with their labels and logits, and reversal sources of the training lengths and
longer with their greedy outputs and teacher-forced logits. Written by
``python tests/zoo/test_shipped_presets.py --write`` (scikit-learn needed for the digits).
The recipes themselves are run in tests/zoo/test_shipped_recipes.py (full tier).
"""

from __future__ import annotations

import os
import sys
import warnings

import keras
import numpy as np
import pytest
from repository import fixtures_path

from keras_posenc import zoo
from keras_posenc.experiments import reverse_task
from keras_posenc.experiments.digits import to_inputs
from keras_posenc.generation import greedy_search

pytestmark = pytest.mark.contract

FIXTURE = "shipped_presets.npz"


def _reversal_sources() -> tuple[np.ndarray, np.ndarray]:
    """4 held-out sources of the training lengths (3-12 distinct words of 37) and 4 longer
    (13-24), padded to one width, with their targets."""
    short, short_targets = reverse_task(4, 3, 12, vocab_size=40, seed=7, distinct=True)
    long, long_targets = reverse_task(4, 13, 24, vocab_size=40, seed=8, distinct=True)
    width = long_targets.shape[1]

    def pad(array: np.ndarray) -> np.ndarray:
        return np.pad(array, ((0, 0), (0, width - array.shape[1])))

    sources = np.concatenate([pad(short["encoder_token_ids"]), long["encoder_token_ids"]])
    decoder = np.concatenate([pad(short["decoder_token_ids"]), long["decoder_token_ids"]])
    targets = np.concatenate([pad(short_targets), long_targets])
    return sources.astype("int32"), decoder.astype("int32"), targets.astype("int32")


def _outputs(images: np.ndarray) -> dict[str, np.ndarray]:
    """What the two presets compute on the fixture's inputs."""
    digits = zoo.create("coatnet_0", weights="digits")
    reverse = zoo.create("shaw_transformer_base", weights="reverse")
    sources, decoder, _ = _reversal_sources()
    inputs = {"encoder_token_ids": sources, "decoder_token_ids": decoder}
    return {
        "digits_logits": keras.ops.convert_to_numpy(digits(to_inputs(images), training=False)),
        "reverse_logits": keras.ops.convert_to_numpy(reverse(inputs, training=False)),
        # Greedy decoding of the 4 of the training lengths (13 steps: each step is a call,
        # which PyTorch runs eagerly; the logits above cover the longer ones).
        "reverse_greedy": keras.ops.convert_to_numpy(
            greedy_search(reverse, sources[:4, :13], max_length=13)
        ),
    }


def test_every_shipped_preset_has_its_file_and_card_numbers():
    presets = zoo.shipped_presets()
    assert sorted(presets) == ["coatnet_0/digits", "shaw_transformer_base/reverse"]
    for key, entry in presets.items():
        assert os.path.isfile(entry["weights"]), key
        assert os.path.getsize(entry["weights"]) < 2_000_000, key  # the wheel stays small
        assert entry["recipe"].startswith("python zoo/"), key
        assert entry["metrics"] and entry["train_seconds"] > 0, key


def test_the_presets_load_by_name_and_predict_as_when_trained():
    fixture = np.load(fixtures_path(FIXTURE))
    outputs = _outputs(fixture["digits_images"])
    # Float32 on another backend: the kernels' summation orders differ by rounding only.
    np.testing.assert_allclose(outputs["digits_logits"], fixture["digits_logits"], atol=2e-4)
    predicted = np.argmax(outputs["digits_logits"], axis=-1)
    np.testing.assert_array_equal(predicted, np.argmax(fixture["digits_logits"], axis=-1))
    # A trained classifier, not random weights: these held-out digits are mostly right.
    assert np.mean(predicted == fixture["digits_labels"]) >= 0.9
    np.testing.assert_allclose(outputs["reverse_logits"], fixture["reverse_logits"], atol=2e-4)
    np.testing.assert_array_equal(outputs["reverse_greedy"], fixture["reverse_greedy"])
    # The sources of the training lengths are reversed exactly (greedy decoding).
    _, _, targets = _reversal_sources()
    for guess, truth in zip(outputs["reverse_greedy"], targets[:4], strict=True):
        end = int(np.flatnonzero(truth == 2)[0])
        np.testing.assert_array_equal(guess[: end + 1], truth[: end + 1])


def test_a_tag_that_is_not_shipped_is_refused_with_those_that_are():
    with pytest.raises(ValueError, match=r"no shipped weights 'digit' for 'coatnet_0' "
                       r"\(shipped for it: 'digits'\)"):  # fmt: skip
        zoo.create("coatnet_0", weights="digit")
    with pytest.raises(ValueError, match=r"Shipped presets: coatnet_0 \(digits\)"):
        zoo.create("coatnet_1", weights="digits")


def test_overrides_still_apply_over_the_presets_fields():
    model = zoo.create("coatnet_0", weights="digits", classifier_activation="softmax")
    fixture = np.load(fixtures_path(FIXTURE))
    probabilities = keras.ops.convert_to_numpy(model(to_inputs(fixture["digits_images"][:2])))
    np.testing.assert_allclose(probabilities.sum(axis=-1), 1.0, atol=1e-5)
    # A field that changes the weights' shapes is Keras' to refuse (it warns first about
    # the containers it skipped).
    with pytest.raises(ValueError), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zoo.create("coatnet_0", weights="digits", num_classes=11)


@pytest.mark.neutral
def test_without_scikit_learn_the_digits_name_the_extra(monkeypatch):
    from keras_posenc.experiments import digits_split

    monkeypatch.setitem(sys.modules, "sklearn", None)  # an import of it raises ImportError
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ImportError, match=r"digits_split: the digits data set comes with "
                       r"scikit-learn.*pip install \"keras-posenc\[data\]\""):  # fmt: skip
        digits_split()


def write_fixture() -> None:
    """Writes tests/fixtures/shipped_presets.npz from the shipped weights (scikit-learn)."""
    from keras_posenc.experiments import load_digits

    images, labels = load_digits()
    seed = zoo.shipped_presets()["coatnet_0/digits"]["seed"]
    order = np.random.default_rng(seed).permutation(len(labels))[:32]  # held out
    outputs = _outputs(images[order])
    path = os.path.join(fixtures_path(), FIXTURE)
    np.savez_compressed(path, digits_images=images[order], digits_labels=labels[order], **outputs)
    print(f"wrote {os.path.normpath(path)} on {keras.backend.backend()}")


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    write_fixture()
