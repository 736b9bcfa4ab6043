"""T5's explicit padding masks (keras-hub's `encoder_padding_mask` and `decoder_padding_mask`
inputs): equal to the masks found from the ids, left padding giving the unpadded states, the
decoder mask on keys and on the loss, `hidden_states`, `generate` with keras-hub's dict, the
optional graph inputs through fit and save, and the errors (issue 52, item 3). Equality with
keras-hub's T5Backbone under the same masks is in tests/test_convert_keras_hub.py."""

from __future__ import annotations

import os
import tempfile

import keras
import numpy as np
import pytest
from keras import ops
from tiers import matrix

from keras_posenc import generation
from keras_posenc.zoo.convs2s import ConvS2S
from keras_posenc.zoo.t5 import T5, T5PaddingMask

pytestmark = pytest.mark.contract

VOCAB = 31
LENGTH = 16  # sources; distances past 8 reach the log-spaced buckets (max_distance 12)
# Two configurations down the same code path: v1.0's (ReLU, tied head) and v1.1's.
VARIANTS = {
    "v1.0": {},
    "v1.1": {"tie_embeddings": False, "gated_activation": True, "activation": "gelu_tanh"},
}


def to_numpy(tensor):
    return np.asarray(ops.convert_to_numpy(tensor), "float64")


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
    return T5(VOCAB, **{**config, **overrides})


def pad(rows, length, side):
    """Rows of tokens padded with 0 on ``side``, and their masks (True for real tokens)."""
    ids = np.zeros((len(rows), length), "int32")
    mask = np.zeros((len(rows), length), bool)
    for i, row in enumerate(rows):
        where = slice(0, len(row)) if side == "right" else slice(length - len(row), length)
        ids[i, where], mask[i, where] = row, True
    return ids, mask


SOURCES = [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 1], [9, 10, 1]]
TARGETS = [[0, 7, 8, 9, 3, 4], [0, 3, 4]]  # the start token (0, the padding id) first


def batch(side, target_side=None):
    """The four inputs, sources and targets padded on ``side`` (targets on ``target_side``)."""
    source, source_mask = pad(SOURCES, LENGTH, side)
    target, target_mask = pad(TARGETS, 6, target_side or side)
    return {
        "encoder_token_ids": source,
        "encoder_padding_mask": source_mask,
        "decoder_token_ids": target,
        "decoder_padding_mask": target_mask,
    }


def real(array, mask):
    """Each row's values at its real positions, in order (a list of arrays)."""
    return [array[i][mask[i]] for i in range(len(mask))]


def assert_rows_close(a, b, atol=1e-5):
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, atol=atol)


def assert_loss_mask(logits, mask):
    """A Keras loss reads the logits' mask: its sum is over the positions ``mask`` marks."""
    target = np.full(mask.shape, 5, "int32")
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")
    values = to_numpy(keras.losses.sparse_categorical_crossentropy(target, logits, True))
    assert float(to_numpy(loss(target, logits))) == pytest.approx(values[mask].sum(), rel=1e-5)


# --------------------------------------------------------------------------- forward pass


def test_masks_are_optional_inputs_of_the_graph():
    model = tiny()
    assert sorted(model.input) == [
        "decoder_padding_mask",
        "decoder_token_ids",
        "encoder_padding_mask",
        "encoder_token_ids",
    ]
    # The explicit masks of right-padded ids are the masks found from them: the same logits.
    inputs = batch("right")
    ids_only = {k: inputs[k] for k in ("encoder_token_ids", "decoder_token_ids")}
    given, found = model(inputs), model(ids_only)
    # Equal at the real positions: the padded ones see fewer keys with the decoder mask.
    mask = inputs["decoder_padding_mask"]
    assert_rows_close(real(to_numpy(given), mask), real(to_numpy(found), mask), atol=1e-5)
    for logits in (given, found):
        assert_loss_mask(logits, inputs["decoder_padding_mask"])
    # A None counts as not given.
    none = model({**ids_only, "encoder_padding_mask": None, "decoder_padding_mask": None})
    np.testing.assert_allclose(to_numpy(none), to_numpy(found), atol=1e-5)


@pytest.mark.parametrize(*matrix("variant", list(VARIANTS)))
def test_left_padding_gives_the_unpadded_states(variant):
    model = tiny(seed=1, **VARIANTS[variant])
    right, left = batch("right"), batch("left")
    for name in ("encoder", "decoder"):
        assert not np.array_equal(right[f"{name}_token_ids"], left[f"{name}_token_ids"])
    states = {
        side: model.hidden_states(inputs) for side, inputs in (("right", right), ("left", left))
    }
    for key, mask in (
        ("encoder_sequence_output", "encoder_padding_mask"),
        ("decoder_sequence_output", "decoder_padding_mask"),
    ):
        # Relative positions are distances: the padding side shifts no bias.
        assert_rows_close(
            real(to_numpy(states["left"][key]), left[mask]),
            real(to_numpy(states["right"][key]), right[mask]),
        )
        assert np.isfinite(to_numpy(states["left"][key])).all()
    logits = {side: model(inputs) for side, inputs in (("right", right), ("left", left))}
    assert_rows_close(
        real(to_numpy(logits["left"]), left["decoder_padding_mask"]),
        real(to_numpy(logits["right"]), right["decoder_padding_mask"]),
    )
    assert_loss_mask(logits["left"], left["decoder_padding_mask"])
    # The encoder state `generate` decodes from holds the given mask.
    state = model.encode(
        left["encoder_token_ids"], encoder_padding_mask=left["encoder_padding_mask"]
    )
    np.testing.assert_array_equal(ops.convert_to_numpy(state[1]), left["encoder_padding_mask"])


def test_the_decoder_mask_hides_keys():
    model = tiny(seed=2)
    inputs = batch("right")
    target = np.array([[0, 7, 8, 9, 3, 4]] * 2, "int32")
    hole = np.ones((2, 6), bool)
    hole[:, 2] = False  # position 2 is padding inside the target
    with_hole = {**inputs, "decoder_token_ids": target, "decoder_padding_mask": hole}
    plain = to_numpy(model(with_hole | {"decoder_padding_mask": np.ones((2, 6), bool)}))
    masked = to_numpy(model(with_hole))
    np.testing.assert_allclose(masked[:, :2], plain[:, :2], atol=1e-5)  # causal: unchanged
    assert np.abs(masked[:, 3:] - plain[:, 3:]).max() > 1e-3  # key 2 no longer seen
    # What the masked key holds does not matter to any other position.
    changed = to_numpy(model(with_hole | {"decoder_token_ids": np.where(hole, target, 11)}))
    np.testing.assert_allclose(changed[:, hole[0]], masked[:, hole[0]], atol=1e-5)


def test_hidden_states_are_the_stacks_outputs():
    model = tiny(seed=3, **VARIANTS["v1.1"])
    inputs = batch("left")
    states = model.hidden_states(inputs)
    assert sorted(states) == ["decoder_sequence_output", "encoder_sequence_output"]
    np.testing.assert_allclose(
        to_numpy(model.logits(states["decoder_sequence_output"])),
        to_numpy(model(inputs)),
        atol=1e-5,
    )
    encoded = model.encode(
        inputs["encoder_token_ids"], encoder_padding_mask=inputs["encoder_padding_mask"]
    )
    np.testing.assert_allclose(
        to_numpy(states["encoder_sequence_output"]), to_numpy(encoded[0]), atol=1e-5
    )
    # Without masks, as the call: the encoder mask from the ids, no decoder mask.
    ids_only = batch("right")
    del ids_only["encoder_padding_mask"], ids_only["decoder_padding_mask"]
    states = model.hidden_states(ids_only)
    np.testing.assert_allclose(
        to_numpy(model.logits(states["decoder_sequence_output"])),
        to_numpy(model(ids_only)),
        atol=1e-5,
    )


def test_inside_another_functional_model():
    model = tiny(seed=6)
    inputs = {name: value.astype("int32") for name, value in batch("left").items()}
    ids_only = {name: inputs[name] for name in ("encoder_token_ids", "decoder_token_ids")}
    symbolic = {name: keras.Input((None,), dtype="int32", name=name) for name in inputs}
    # Without the masks (optional inputs left out of a symbolic call) and with them.
    outer = keras.Model(
        {name: symbolic[name] for name in ids_only},
        model({name: symbolic[name] for name in ids_only}),
    )
    np.testing.assert_allclose(
        outer.predict_on_batch(ids_only), to_numpy(model(ids_only)), atol=1e-5
    )
    states = keras.Model(symbolic, model.hidden_states(symbolic))
    expected = model.hidden_states(inputs)
    for name, value in states.predict_on_batch(inputs).items():
        np.testing.assert_allclose(value, to_numpy(expected[name]), atol=1e-5)


# --------------------------------------------------------------------------- generate


def test_generate_takes_keras_hubs_dict():
    model = tiny(seed=4)
    right, left = batch("right"), batch("left")
    source = {"encoder_token_ids": left["encoder_token_ids"]}
    masked = {**source, "encoder_padding_mask": left["encoder_padding_mask"]}
    expected = model.generate(right["encoder_token_ids"], max_length=8)
    np.testing.assert_array_equal(model.generate(masked, max_length=8), expected)
    beams = model.generate(right["encoder_token_ids"], max_length=8, beam_size=3)
    np.testing.assert_array_equal(model.generate(masked, max_length=8, beam_size=3), beams)
    # Without its mask the dict is the ids (here: left padding read as tokens, another result).
    np.testing.assert_array_equal(
        model.generate(source, max_length=8),
        model.generate(left["encoder_token_ids"], max_length=8),
    )
    uncached = generation.greedy_search(model, masked, max_length=8, use_cache=False)
    np.testing.assert_array_equal(uncached, expected)


# --------------------------------------------------------------------------- fit, save


def test_fit_and_save_with_masks():
    model = tiny(seed=5, dropout=0.1)
    inputs = batch("left")
    target = np.zeros((2, 6), "int32")
    mask = inputs["decoder_padding_mask"]
    target[mask] = np.concatenate([[7, 8, 9, 3, 4, 1], [3, 4, 1]])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss)
    # The loss counts the real positions of the decoder mask only.
    logits = model(inputs, training=False)
    values = to_numpy(keras.losses.sparse_categorical_crossentropy(target, logits, True))
    evaluated = model.evaluate(inputs, target, verbose=0)
    assert evaluated == pytest.approx(values[mask].sum() / mask.sum(), rel=1e-4)
    model.fit(inputs, target, epochs=2, verbose=0)  # JAX's stateless call included
    ids_only = {k: inputs[k] for k in ("encoder_token_ids", "decoder_token_ids")}
    model.fit(ids_only, target, epochs=1, verbose=0)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "t5.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
    for given in (inputs, ids_only):
        np.testing.assert_allclose(to_numpy(loaded(given)), to_numpy(model(given)), atol=1e-5)


# --------------------------------------------------------------------------- errors


def _float_mask(inputs):
    return {**inputs, "encoder_padding_mask": inputs["encoder_padding_mask"].astype("float32")}


def _short_mask(inputs):
    return {**inputs, "decoder_padding_mask": inputs["decoder_padding_mask"][:, :4]}


@pytest.mark.parametrize(
    *matrix(
        "call, change, error, message",
        [
            (
                "model",
                _float_mask,
                TypeError,
                r"T5\('t5\w*'\): `encoder_padding_mask` must be",
            ),
            (
                "model",
                _short_mask,
                ValueError,
                r"`decoder_padding_mask` must have shape .* \(2, 6\)",
            ),
            ("hidden_states", _float_mask, TypeError, "`encoder_padding_mask` must be boolean"),
            ("hidden_states", _short_mask, ValueError, "`decoder_padding_mask` must have shape"),
            ("predict", _float_mask, TypeError, "`encoder_padding_mask` must be boolean"),
        ],
    )
)
def test_bad_masks_in_the_call(call, change, error, message):
    model = tiny()
    inputs = change(batch("right"))
    run = {"model": model, "hidden_states": model.hidden_states}.get(call)
    with pytest.raises(error, match=message):
        if call == "predict":
            model.predict(inputs, verbose=0)
        else:
            run(inputs)


def test_bad_masks_and_dicts_elsewhere():
    model = tiny()
    inputs = batch("right")
    source, mask = inputs["encoder_token_ids"], inputs["encoder_padding_mask"]
    with pytest.raises(TypeError, match=r"T5PaddingMask\('source_mask'\): `padding_mask` must"):
        model.encode(source, encoder_padding_mask=mask.astype("float32"))
    with pytest.raises(ValueError, match=r"T5Stack\('decoder'\): `padding_mask` must have shape"):
        model.decode(inputs["decoder_token_ids"], model.encode(source), decoder_padding_mask=mask)
    with pytest.raises(TypeError, match="greedy_search: `encoder_padding_mask` must be boolean"):
        model.generate({"encoder_token_ids": source, "encoder_padding_mask": mask * 1.0})
    with pytest.raises(ValueError, match=r"greedy_search: `encoder_padding_mask` must have shape"):
        model.generate({"encoder_token_ids": source, "encoder_padding_mask": mask[:, :3]})
    with pytest.raises(ValueError, match="takes the keys encoder_token_ids, encoder_padding_mask"):
        model.generate({"encoder_token_ids": source, "decoder_token_ids": source})
    with pytest.raises(ValueError, match="encoder_token_ids required"):
        model.generate({"encoder_padding_mask": mask})
    with pytest.raises(TypeError, match=r"hidden_states: `inputs` must be a dict"):
        model.hidden_states(source)
    with pytest.raises(ValueError, match="hidden_states: `inputs` lacks decoder_token_ids"):
        model.hidden_states({"encoder_token_ids": source})
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.hidden_states({**inputs, "decoder_token_ids": np.full((2, 6), VOCAB)})
    # A model without padding-mask inputs takes the ids alone.
    convs2s = ConvS2S(12, 12, embed_dim=8, encoder_layers=[(8, 3)], decoder_layers=[(8, 3)],
                      decoder_out_embed_dim=8)  # fmt: skip
    with pytest.raises(ValueError, match=r"takes the keys encoder_token_ids \(encoder"):
        convs2s.generate(
            {"encoder_token_ids": np.array([[4, 5, 2]]), "encoder_padding_mask": [[1] * 3]}
        )


def test_padding_mask_layer():
    layer = T5PaddingMask(pad_id=0)
    ids = np.array([[0, 5, 6], [7, 0, 0]])
    np.testing.assert_array_equal(ops.convert_to_numpy(layer(ids)), ids != 0)
    # A batch of one broadcasts, as the attention layers' masks do.
    row = layer(ids, padding_mask=np.array([[0, 1, 1]]))
    np.testing.assert_array_equal(ops.convert_to_numpy(row), [[False, True, True]] * 2)
    assert T5PaddingMask.from_config(layer.get_config()).pad_id == 0
