"""The zoo registry: registration, listing, creation, overrides, weights and errors."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_posenc import zoo

pytestmark = pytest.mark.neutral


def build_mlp(hidden: int = 8, num_classes: int = 3, activation: str = "relu") -> keras.Model:
    inputs = keras.Input((4,))
    x = keras.layers.Dense(hidden, activation=activation)(inputs)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(x), name="mlp")


@pytest.fixture
def registered():
    names = ["test_mlp_small", "test_mlp_wide"]
    zoo.register_model(names[0], build_mlp, family="test_mlp", config={"hidden": 4})
    zoo.register_model(
        names[1],
        build_mlp,
        family="test_mlp",
        config={"hidden": 32},
        description="a wide MLP",
        paper_parameters=291,
        reference="nobody 2026",
    )
    yield names
    for name in names:
        if name in zoo.list_models():
            zoo.unregister_model(name)


def test_list_models_is_sorted_and_filters_by_family(registered):
    assert set(registered) <= set(zoo.list_models())
    assert zoo.list_models() == sorted(zoo.list_models())
    assert zoo.list_models(family="test_mlp") == registered
    assert zoo.list_models(family="no_such_family") == []


def test_create_uses_the_named_config_and_overrides(registered):
    small = zoo.create("test_mlp_small")
    assert small.layers[1].units == 4 and small.output_shape == (None, 3)
    wide = zoo.create("test_mlp_wide", num_classes=7)
    assert wide.layers[1].units == 32 and wide.output_shape == (None, 7)
    assert wide.count_params() == 4 * 32 + 32 + 32 * 7 + 7
    spec = zoo.get_spec("test_mlp_wide")
    assert (spec.family, spec.paper_parameters, spec.description) == ("test_mlp", 291, "a wide MLP")


@pytest.mark.contract
@pytest.mark.parametrize("suffix", [".weights.h5", ".keras"])
def test_create_loads_weights(registered, tmp_path, suffix):
    trained = zoo.create("test_mlp_small")
    path = str(tmp_path / f"mlp{suffix}")
    if suffix == ".keras":
        trained.save(path)
    else:
        trained.save_weights(path)
    x = np.random.default_rng(0).standard_normal((5, 4)).astype("float32")
    fresh = zoo.create("test_mlp_small")
    assert not np.allclose(
        keras.ops.convert_to_numpy(fresh(x)), keras.ops.convert_to_numpy(trained(x))
    )
    loaded = zoo.create("test_mlp_small", weights=path)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(x)), keras.ops.convert_to_numpy(trained(x)), atol=1e-6
    )


def test_unknown_name_lists_close_matches(registered):
    expected = r"unknown model 'test_mlp_smal'\. Did you mean 'test_mlp_small'"
    with pytest.raises(ValueError, match=expected):
        zoo.create("test_mlp_smal")


def test_unknown_override_lists_close_matches(registered):
    expected = r"unknown override 'num_clases'.*'num_classes'.*Accepted: hidden"
    with pytest.raises(ValueError, match=expected):
        zoo.create("test_mlp_small", num_clases=5)


def test_bad_weights_paths(registered, tmp_path):
    expected = r"`weights` must be a path ending in \.weights\.h5 or \.keras"
    with pytest.raises(ValueError, match=expected):
        zoo.create("test_mlp_small", weights=str(tmp_path / "weights.npz"))
    with pytest.raises(ValueError, match=r"posenc convert timm\|fairseq SRC"):
        zoo.create("test_mlp_small", weights=str(tmp_path / "model.safetensors"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        zoo.create("test_mlp_small", weights=str(tmp_path / "missing.weights.h5"))


def test_registration_errors(registered):
    with pytest.raises(ValueError, match="already registered"):
        zoo.register_model("test_mlp_small", build_mlp, family="test_mlp")
    with pytest.raises(ValueError, match="lower case letters"):
        zoo.register_model("Bad-Name", build_mlp, family="test_mlp")
    with pytest.raises(TypeError, match="`builder` must be callable"):
        zoo.register_model("test_not_callable", 3, family="test_mlp")
    with pytest.raises(ValueError, match="unknown config key 'hiden'.*'hidden'"):
        zoo.register_model("test_bad_config", build_mlp, family="test_mlp", config={"hiden": 3})
    assert "test_bad_config" not in zoo.list_models()


def test_builder_must_return_a_model(registered):
    zoo.register_model("test_returns_layer", lambda: keras.layers.Dense(3), family="test_mlp")
    try:
        with pytest.raises(TypeError, match="returned Dense, expected a keras.Model"):
            zoo.create("test_returns_layer")
    finally:
        zoo.unregister_model("test_returns_layer")


def test_unknown_override_of_a_model_class_is_refused():
    # Model classes pass **kwargs to keras.Model, whose functional constructor ignored
    # unknown ones: muse_tiny with vocab_size=40000 built a vocabulary of 1,000.
    expected = r"zoo model 'muse_tiny': unknown override 'vocab_size'. Did you mean"
    with pytest.raises(ValueError, match=expected):
        zoo.create("muse_tiny", vocab_size=40000)
    assert "dtype" in zoo.get_spec("muse_tiny").builder_arguments()


def test_a_model_class_built_directly_refuses_an_unknown_argument():
    from keras_posenc.zoo.relative_transformers import ShawTransformer

    arguments = {"vocabulary_size": 20, "hidden_dim": 8, "intermediate_dim": 16, "num_heads": 2}
    with pytest.raises(TypeError, match=r"ShawTransformer: unknown argument\(s\) 'num_layer';"):
        ShawTransformer(**arguments, num_layer=1)
    model = ShawTransformer(**arguments, num_layers=1, name="shaw", trainable=False)
    assert model.name == "shaw" and not model.trainable


def test_unregister_unknown_name():
    with pytest.raises(ValueError, match="unknown model"):
        zoo.unregister_model("never_registered")


# Small variants of the families whose blocks hold a weightless sublayer (KerasMask, which
# reads a Keras mask) that a model giving its masks as arguments never calls.
MODELS_WITH_UNCALLED_SUBLAYERS = {
    "shaw_transformer_base": {"vocabulary_size": 20, "hidden_dim": 16, "intermediate_dim": 32,
                              "num_heads": 2, "num_layers": 1, "max_distance": 4},
    "music_transformer_base": {"num_events": 20, "hidden_dim": 16, "intermediate_dim": 32,
                               "num_heads": 2, "num_layers": 1, "max_distance": 4},
    "muse_tiny": {"src_vocab_size": 20, "tgt_vocab_size": 20, "hidden_dim": 16,
                  "intermediate_dim": 32, "num_heads": 2, "num_encoder_layers": 1,
                  "num_decoder_layers": 1},
    "muse_encoder_small": {"vocab_size": 20, "hidden_dim": 16, "intermediate_dim": 32,
                           "num_heads": 2, "num_layers": 1},
}  # fmt: skip


@pytest.mark.contract
@pytest.mark.parametrize("name", sorted(MODELS_WITH_UNCALLED_SUBLAYERS))
def test_created_models_have_every_layer_built(name):
    # Keras' JAX `predict_on_batch` (and each `predict`) first calls the model eagerly when
    # any layer is unbuilt: an unbuilt mask reader made `predict_on_batch` of
    # shaw_transformer_base and muse_tiny 6x and 29x slower there (docs/benchmark-notes.md,
    # "`predict_on_batch` of models with an uncalled sublayer").
    model = zoo.create(name, **MODELS_WITH_UNCALLED_SUBLAYERS[name])
    unbuilt = sorted({type(layer).__name__ for layer in model._flatten_layers() if not layer.built})
    assert not unbuilt, f"{name}: unbuilt layers {unbuilt}"


def test_required_overrides_are_named_before_building():
    # Called without them, the builder failed with Python's "missing 1 required positional
    # argument" naming a private builder.
    expected = (
        r"zoo.create\('convs2s_small'\): the model needs 'src_vocab_size', 'tgt_vocab_size', "
        r"which its named configuration does not set: "
        r"zoo.create\('convs2s_small', src_vocab_size=\.\.\., tgt_vocab_size=\.\.\.\)"
    )
    with pytest.raises(TypeError, match=expected):
        zoo.create("convs2s_small")
    with pytest.raises(TypeError, match=r"needs 'tgt_vocab_size', which"):
        zoo.create("convs2s_small", src_vocab_size=20)
    assert zoo.get_spec("convs2s_lm").required_arguments() == ("vocab_size",)
    assert zoo.get_spec("coatnet_0").required_arguments() == ()


def test_presets_are_reached_through_the_hubs_registration(registered, tmp_path, monkeypatch):
    # The zoo imports nothing of keras_posenc.hub (above it): the hub hands the registry its
    # functions when imported (keras_posenc/hub/__init__.py), and zoo.create finds them.
    from keras_posenc import hub
    from keras_posenc.zoo import registry

    assert registry.preset_function("load_preset") is hub.load_preset
    model = zoo.create("test_mlp_small")
    folder = zoo.save_preset(model, tmp_path / "preset")
    assert hub.load_preset(folder).metadata["num_classes"] == 3
    loaded = zoo.create("test_mlp_small", weights=folder)
    np.testing.assert_allclose(loaded.get_weights()[0], model.get_weights()[0])
    with pytest.raises(TypeError, match="set_preset_functions: `weights` must be callable"):
        registry.set_preset_functions(weights="hub")

    # Without the registration (the hub not yet imported), the registering packages are
    # imported: the hub registers again.
    def hub_registers():
        registry.set_preset_functions(weights=hub.preset_weights)

    monkeypatch.setattr(registry, "_PRESET_FUNCTIONS", {})
    monkeypatch.setattr("keras_posenc._registration.register_all", hub_registers)
    assert registry.preset_function("weights") is hub.preset_weights
    monkeypatch.setattr(registry, "_PRESET_FUNCTIONS", {})
    monkeypatch.setattr("keras_posenc._registration.register_all", lambda: None)
    with pytest.raises(ValueError, match="zoo: no preset function 'from_preset'"):
        zoo.from_preset(folder)
