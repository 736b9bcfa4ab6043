"""Position-scheme transplant (issue 51): every untouched weight kept bit for bit, the new
weights under their documented names, RoPE to RoPE at scale 1 identical outputs, a rescaled
rotary equal to a model built with it, fine-tuning the new weights only, and the errors."""

from __future__ import annotations

import numpy as np
import pytest
from keras import ops

from keras_posenc import zoo
from keras_posenc.layers import RotaryPositions
from keras_posenc.zoo.transplant import changes_of, equal_weights, transplant

pytestmark = pytest.mark.contract

IDS = np.array([[1, 72, 101, 108, 108, 111, 32, 119], [1, 84, 104, 101, 32, 113, 117, 105]])
TEXT = "The quick brown fox jumps over the lazy dog. " * 12


def trained_like(model):
    """The model's weights drawn again (norm scales about 1), so that a copied weight and a
    freshly initialised one cannot agree by chance."""
    rng = np.random.default_rng(0)
    for weight in model.weights:
        value = rng.normal(size=tuple(weight.shape)).astype("float32") * 0.2
        weight.assign(value + (1.0 if weight.path.endswith("scale") else 0.0))
    return model


def numpy(x):
    return ops.convert_to_numpy(x)


# The documented new weights (keras_posenc/zoo/transplant.py): per layer of decoder_lm_tiny.
NEW_NAMES = {
    "alibi": [],
    "kerple": ["r1", "r2"],
    "t5_decoder": ["table"],
    "fire": ["c", "threshold", "mlp_hidden_kernel", "mlp_hidden_bias", "mlp_output_kernel",
             "mlp_output_bias"],
    "continuous": ["mlp_hidden_kernel", "mlp_hidden_bias", "mlp_output_kernel",
                   "mlp_output_bias"],
    "nope": [],
}  # fmt: skip


@pytest.mark.parametrize(
    "scheme",
    ["kerple", *(pytest.param(s, marks=pytest.mark.matrix) for s in NEW_NAMES if s != "kerple")],
)
def test_untouched_weights_are_copied_bit_for_bit_and_new_ones_named(scheme):
    model = trained_like(zoo.create("decoder_lm_tiny"))
    result = transplant(model, scheme)
    expected = [
        f"transformer_layer_{i}/attention/relative_bias/{name}"
        for i in range(2)
        for name in NEW_NAMES[scheme]
    ]
    assert sorted(result.new_weights) == sorted(expected)
    assert result.removed_weights == []
    assert sorted(result.copied_weights) == sorted(w.path for w in model.weights)
    assert equal_weights(model, result.model, result.copied_weights)
    assert result.model.transformer_layers[0].attention.rotary is None
    logits = numpy(result.model(IDS))
    assert logits.shape == (2, 8, 259) and np.all(np.isfinite(logits))
    assert not np.allclose(logits, numpy(model(IDS)))  # the positions did change
    assert numpy(model(IDS)).shape == (2, 8, 259)  # and the source still runs


def test_rope_to_rope_at_scale_one_is_the_same_model_and_a_scaled_rope_is_the_built_one():
    model = trained_like(zoo.create("decoder_lm_tiny"))
    same = transplant(model, RotaryPositions())
    assert same.new_weights == [] and same.removed_weights == []
    np.testing.assert_array_equal(numpy(same.model(IDS)), numpy(model(IDS)))
    yarn = RotaryPositions(scaling="yarn", scaling_factor=4.0, training_length=8)
    scaled = transplant(model, yarn)
    built = zoo.create("decoder_lm_tiny", rotary=yarn)
    for target, source in zip(built.weights, model.weights, strict=True):
        target.assign(source)
    np.testing.assert_array_equal(numpy(scaled.model(IDS)), numpy(built(IDS)))
    assert not np.allclose(numpy(scaled.model(IDS)), numpy(model(IDS)))


@pytest.mark.neutral
def test_a_bias_model_back_to_rope_removes_its_tables_and_keeps_the_rest():
    model = zoo.create("decoder_lm_tiny", rotary=None, relative="bias", position="t5_decoder")
    result = transplant(model, "rope")
    assert result.removed_weights == [
        "transformer_layer_0/attention/relative_bias/table",
        "transformer_layer_1/attention/relative_bias/table",
    ]
    assert result.new_weights == []
    assert equal_weights(model, result.model, result.copied_weights)
    assert "removed (2)" in result.summary() and "copied 20 weights" in result.summary()
    assert result.model.name == "decoder_lm_tiny_transplant"


@pytest.mark.neutral
def test_explicit_arguments_gemma3s_global_rotary_and_the_tokenizer_carry_over():
    model = zoo.create("decoder_lm_tiny", sliding_window=4, global_every=2,
                       global_rotary=RotaryPositions(max_wavelength=1e6))  # fmt: skip
    result = transplant(model, "alibi")
    assert result.changes["global_rotary"] is None
    assert all(block.attention.rotary is None for block in result.model.transformer_layers)
    scaled = transplant(model, RotaryPositions(scaling="linear", scaling_factor=2.0))
    assert scaled.model.global_rotary.max_wavelength == 1e6  # only the local one rescaled
    keys = transplant(model, relative="keys", position="shaw", name="keys")
    assert keys.model.name == "keys" and keys.model.transformer_layers[0].attention.rotary
    assert keys.model.tokenizer is model.tokenizer
    assert changes_of(None) == {}


def test_fine_tuning_trains_the_new_weights_only_then_all(tmp_path):
    model = trained_like(zoo.create("decoder_lm_tiny", num_layers=1))
    result = transplant(model, "kerple")
    (tmp_path / "text.txt").write_text(TEXT)  # a text file, read with the model's tokenizer
    history = result.fine_tune(
        tmp_path / "text.txt", sequence_length=16, train="new", epochs=2, verbose=0
    )
    assert len(history.history["loss"]) == 2
    assert equal_weights(model, result.model, result.copied_weights)  # frozen during the fit
    assert all(w.trainable for w in result.model.weights)  # and trainable again after
    new = {w.path: numpy(w) for w in result.model.weights if w.path in result.new_weights}
    result.fine_tune(TEXT, sequence_length=16, train="all", epochs=1, verbose=0)
    assert not equal_weights(model, result.model, result.copied_weights)
    assert any(
        not np.array_equal(numpy(w), new[w.path]) for w in result.model.weights if w.path in new
    )


@pytest.mark.neutral
def test_bad_transplants_say_what_is_wrong():
    model = zoo.create("decoder_lm_tiny")
    with pytest.raises(ValueError, match=r"transplant: `scheme` must be 'nope', 'rope', a Rotary"):
        transplant(model, "alibii")
    with pytest.raises(TypeError, match=r"transplant: say what changes"):
        transplant(model)
    with pytest.raises(
        TypeError, match=r"ConvS2SLanguageModel has no 'rotary'.* takes no position"
    ):
        transplant(zoo.create("convs2s_lm", vocab_size=30), "nope")
    alibi = transplant(model, "alibi")
    with pytest.raises(ValueError, match=r"train='new' needs new weights.*pass train='all'"):
        alibi.fine_tune(TEXT, sequence_length=8)
    with pytest.raises(ValueError, match=r"Transplant.fine_tune: `train` must be one of"):
        alibi.fine_tune(TEXT, sequence_length=8, train="some")
    ids_only = transplant(zoo.create("decoder_lm_tiny", vocab_size=40, tokenizer=None), "kerple")
    with pytest.raises(TypeError, match=r"`tokenizer` must be given for a model without one"):
        ids_only.fine_tune(TEXT, sequence_length=8)


def small(name, **kwargs):
    sizes = dict(hidden_dim=16, intermediate_dim=32, num_heads=2, num_layers=1)
    return trained_like(zoo.create(name, **sizes, **kwargs))


def test_the_music_transformer_takes_any_scheme_and_its_steps_equal_the_full_pass():
    model = small("music_transformer_base", num_events=20, max_distance=8)
    result = transplant(model, "kerple")
    assert result.removed_weights == ["decoder_layer_0/self_attention/relative_keys/table"]
    assert result.new_weights == [
        "decoder_layer_0/self_attention/relative_bias/r1",
        "decoder_layer_0/self_attention/relative_bias/r2",
    ]
    assert equal_weights(model, result.model, result.copied_weights)
    ids = np.array([[1, 5, 6, 7, 8, 9]])
    full = numpy(result.model(ids))
    cache = result.model.init_cache(1, 6)
    for t in range(6):
        logits, cache = result.model.decode_step(ids[:, t], cache, t)
        np.testing.assert_allclose(numpy(logits), full[:, t], atol=2e-5)


@pytest.mark.neutral
def test_shaws_transformer_and_t5_take_a_scheme_and_keep_it_in_their_configs(tmp_path):
    shaw = small("shaw_transformer_base", vocabulary_size=30, max_distance=4)
    result = transplant(shaw, "alibi")
    assert sorted(result.removed_weights) == sorted(
        f"{stack}_layer_0/self_attention/relative_{kind}/table"
        for stack in ("encoder", "decoder")
        for kind in ("keys", "values")
    )
    assert result.model.get_config()["relative"] == "bias"
    t5 = small("t5_small", vocabulary_size=30)
    kerple = transplant(t5, "kerple")
    assert kerple.removed_weights == ["encoder/position_bias/table", "decoder/position_bias/table"]
    assert kerple.new_weights == [f"{s}/position_bias/{w}" for s in ("encoder", "decoder")
                                  for w in ("r1", "r2")]  # fmt: skip
    assert equal_weights(t5, kerple.model, kerple.copied_weights)
    kerple.model.save(tmp_path / "t5.keras")
    inputs = {"encoder_token_ids": np.array([[5, 6, 7, 1]]), "decoder_token_ids": IDS[:1, :3] % 30}
    loaded = zoo_load(tmp_path / "t5.keras")
    np.testing.assert_array_equal(numpy(loaded(inputs)), numpy(kerple.model(inputs)))
    with pytest.raises(ValueError, match=r"T5Stack: position=FIRE.* an encoder stack attends"):
        transplant(t5, "fire")
    with pytest.raises(TypeError, match=r"transplant: T5 has no 'relative' .* takes 'position'"):
        transplant(t5, "nope")


def zoo_load(path):
    import keras

    return keras.saving.load_model(path)
