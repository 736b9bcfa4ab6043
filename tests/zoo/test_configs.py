"""The zoo's named configurations (issue 47): frozen dataclasses, one per family, checked by
``zoo.create``; the builder arguments of every name as before the change
(tests/fixtures/zoo_configs_before.json: each registered name's ``spec.config`` with its
builder's defaults filled in, written from the commit before the change); timm's names;
JSON and back."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import pickle
from collections.abc import Mapping

import keras
import pytest
from repository import fixtures_path

from keras_posenc import zoo
from keras_posenc.layers.coatnet import ConvNeXtBlock, MBConv, RelativeTransformerBlock2D
from keras_posenc.zoo import (
    coatnet,
    convs2s,
    deberta,
    decoder_lm,
    maxvit,
    maxxvit,
    muse,
    posenet,
    relative_transformers,
    roformer,
    swin,
    t5,
)
from keras_posenc.zoo.coatnet import ConvBlockConfig, TransformerBlockConfig
from keras_posenc.zoo.config import REQUIRED, BlockOptions, ZooConfig

pytestmark = pytest.mark.neutral

BEFORE = json.loads(fixtures_path("zoo_configs_before.json").read_text())
TABLES = {
    "coatnet": coatnet.CONFIGS,
    "maxvit": maxvit.CONFIGS,
    "maxxvit": maxxvit.CONFIGS,
    "convs2s": convs2s.CONFIGS,
    "muse": muse.CONFIGS,
    "posenet": posenet.CONFIGS,
    "t5": t5.CONFIGS,
    "shaw_transformer": relative_transformers.SHAW_CONFIGS,
    "music_transformer": relative_transformers.MUSIC_CONFIGS,
    "decoder_lm": decoder_lm.DECODER_LM_CONFIGS,
    "deberta_v3": deberta.CONFIGS,
    "roformer_v2": roformer.CONFIGS,
    "swin": swin.CONFIGS,
}
# Families registered after the fixture was written (the configurations of then, before
# the tables): their names are not in it.
NEWER = set(decoder_lm.DECODER_LM_CONFIGS) | set(deberta.CONFIGS) | set(roformer.CONFIGS)
NEWER |= set(swin.CONFIGS)
# timm's maxxvit.py names added after the maxvit_*_tf_224 ports: the rmlp MaxViTs, the
# official ports at 384 and 512 and MaxViT-XL, the ConvNeXt models.
NEWER |= {name for name in maxvit.CONFIGS if name not in BEFORE} | set(maxxvit.CONFIGS)


def plain(value):
    """``value`` as the fixture holds it: mappings as dicts, sequences as lists."""
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


def called_with(spec_or_config, builder):
    """The arguments ``builder`` is called with, its defaults filled in, as the fixture's."""
    arguments = dict(spec_or_config.arguments())
    target = builder.__init__ if isinstance(builder, type) else builder
    for parameter in inspect.signature(target).parameters.values():
        if parameter.default is not inspect.Parameter.empty:
            arguments.setdefault(parameter.name, parameter.default)
    return plain(arguments)


def same_as_before(name, arguments):
    before = dict(BEFORE[name]["arguments"])
    for options in ("conv_options", "transformer_options"):  # None then, no options now
        if options in before and before[options] is None:
            before[options] = {}
    # A builder argument added since keeps its default: only the arguments of then compare.
    return {key: arguments.get(key) for key in before} == before


# --------------------------------------------------------------------------- the tables


def test_every_registered_name_is_in_its_familys_table():
    tables = {name: config for table in TABLES.values() for name, config in table.items()}
    assert set(tables) == set(zoo.list_models()) == set(BEFORE) | NEWER
    for name, config in tables.items():
        spec = zoo.get_spec(name)
        assert spec.config is config and config.zoo_name == name
        assert dataclasses.is_dataclass(config) and isinstance(config, ZooConfig)
        with pytest.raises(dataclasses.FrozenInstanceError):
            config.name = "changed"


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_every_name_calls_its_builder_with_the_arguments_of_before(name):
    spec = zoo.get_spec(name)
    assert spec.builder.__qualname__ == BEFORE[name]["builder"]
    assert same_as_before(name, called_with(spec, spec.builder)), (
        called_with(spec, spec.builder),
        BEFORE[name]["arguments"],
    )
    assert list(spec.required_arguments()) == BEFORE[name]["required"]


@pytest.mark.parametrize(
    "module, names",
    [
        (coatnet, [n for n in BEFORE if n.startswith("coatnet_") and "_rw" in n]),
        (maxvit, [n for n in BEFORE if n.startswith("maxvit_") and n.count("_") == 3]),
    ],
)
def test_one_timm_name_map_gives_what_the_twin_functions_gave(module, names):
    # coatnet.rw_config(name) and maxvit.tf_config / rw_config(name) were these names' configs
    # (timm's names added since are NEWER).
    assert sorted(set(module.TIMM_CONFIGS) - NEWER) == sorted(names)
    builder = coatnet.build_coatnet if module is coatnet else maxvit.build_maxvit
    for name in names:
        assert same_as_before(name, called_with(module.TIMM_CONFIGS[name], builder)), name


def test_maxvit_tf_ports_are_the_papers_models_with_timms_momentum():
    for ours, paper in (("maxvit_tiny_tf_224", "maxvit_t"), ("maxvit_large_tf_224", "maxvit_l")):
        port = maxvit.TIMM_CONFIGS[ours]
        assert port == dataclasses.replace(
            maxvit.CONFIGS[paper], zoo_name=ours, name=ours, conv_options={"norm_momentum": 0.9}
        )


def family_builders():
    """Each configuration class of the zoo with the builder its names call."""
    found = {}
    for name in zoo.list_models():
        spec = zoo.get_spec(name)
        found[type(spec.config)] = spec.builder
    return sorted(found.items(), key=lambda item: item[0].__name__)


@pytest.mark.parametrize("config_class, builder", family_builders())
def test_fields_are_the_builders_arguments_with_its_defaults(config_class, builder):
    target = builder.__init__ if isinstance(builder, type) else builder
    parameters = {
        p.name: p
        for p in inspect.signature(target).parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
    }
    fields = {f.name: f for f in dataclasses.fields(config_class) if f.name != "zoo_name"}
    if isinstance(builder, type):  # a keras.Model class: `name` goes in **kwargs
        assert "name" in fields
        fields.pop("name")
    for extra in ("dtype", "trainable"):
        # keras.Model's arguments, which a builder may take besides its fields (zoo.create
        # passes them on: _MODEL_ARGUMENTS in keras_posenc/zoo/registry.py).
        if extra not in fields:
            parameters.pop(extra, None)
    assert set(fields) == set(parameters)
    for name, field in fields.items():
        default = parameters[name].default
        if default is inspect.Parameter.empty:  # required: no default or REQUIRED
            assert field.default in (dataclasses.MISSING, REQUIRED), name
        elif field.default is not dataclasses.MISSING and not isinstance(
            field.default, BlockOptions
        ):
            assert field.default == default, name


@pytest.mark.parametrize(
    "options, layer, set_by_builder",
    [
        (ConvBlockConfig, MBConv, coatnet._SET_BY_BUILDER),
        (TransformerBlockConfig, RelativeTransformerBlock2D, coatnet._SET_BY_BUILDER),
        (maxxvit.ConvNeXtBlockConfig, ConvNeXtBlock, coatnet._SET_BY_BUILDER),
    ],
)
def test_block_options_are_the_layers_options(options, layer, set_by_builder):
    allowed = set(inspect.signature(layer.__init__).parameters) - set_by_builder
    assert set(options.option_names()) == allowed


def test_block_options_are_a_mapping_of_the_options_set():
    options = ConvBlockConfig(activation="silu", norm_momentum=0.9)
    assert dict(options) == {"activation": "silu", "norm_momentum": 0.9} and len(options) == 2
    assert options.get("pool", "max") == "max" and "pool" not in options
    assert {**ConvBlockConfig()} == {}
    config = dataclasses.replace(coatnet.CONFIGS["coatnet_0"], conv_options={"pool": "avg"})
    assert config.conv_options == ConvBlockConfig(pool="avg")


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_configurations_go_to_json_and_back(name):
    config = zoo.get_spec(name).config
    text = json.dumps(config.to_dict())
    back = type(config).from_dict(json.loads(text))
    assert back == config and back.arguments().keys() == config.arguments().keys()


def test_from_dict_names_unknown_keys():
    data = {**coatnet.CONFIGS["coatnet_0"].to_dict(), "num_clases": 3}
    with pytest.raises(ValueError, match=r"CoAtNetConfig: unknown field 'num_clases' \(did you"):
        coatnet.CoAtNetConfig.from_dict(data)


def test_required_survives_copies_and_pickles():
    assert copy.deepcopy(REQUIRED) is REQUIRED and pickle.loads(pickle.dumps(REQUIRED)) is REQUIRED
    config = copy.deepcopy(convs2s.CONFIGS["convs2s_small"])
    assert config.required() == ("src_vocab_size", "tgt_vocab_size")


# --------------------------------------------------------------------------- zoo.create


def test_a_typo_names_the_model_and_the_field():
    with pytest.raises(ValueError, match=r"zoo model 'coatnet_0': unknown override 'num_clases'\. "
                       r"Did you mean 'num_classes'\?"):  # fmt: skip
        zoo.create("coatnet_0", num_clases=10)
    with pytest.raises(ValueError, match=r"zoo model 'muse_tiny': .*'dtyp'\. Did you mean 'dtype'"):
        zoo.create("muse_tiny", dtyp="float16")
    # keras.Model's own arguments where the builder takes them: build_coatnet takes no dtype.
    with pytest.raises(ValueError, match=r"zoo model 'coatnet_0': unknown override 'dtype'"):
        zoo.create("coatnet_0", dtype="float16")


def test_a_typo_in_nested_block_options_is_named():
    message = (
        r"zoo.create\('coatnet_0'\): CoAtNetConfig: `conv_options`: unknown option 'activaton' "
        r"\(did you mean 'activation'"
    )
    with pytest.raises(ValueError, match=message):
        zoo.create("coatnet_0", conv_options={"activaton": "relu"})


@pytest.mark.parametrize(
    "name, missing",
    [("convs2s_small", "'src_vocab_size', 'tgt_vocab_size'"), ("convs2s_lm", "'vocab_size'")],
)
def test_missing_required_fields_are_named(name, missing):
    example = ", ".join(f"{field.strip(chr(39))}=..." for field in missing.split(", "))
    with pytest.raises(TypeError) as raised:
        zoo.create(name)
    message = str(raised.value)
    assert f"zoo.create({name!r}): the model needs {missing}" in message
    assert f"zoo.create({name!r}, {example})" in message
    with pytest.raises(TypeError, match="the model needs 'tgt_vocab_size'"):
        zoo.create("convs2s_small", src_vocab_size=10)


@pytest.mark.parametrize(
    "name, overrides, error, message",
    [
        ("coatnet_0", {"blocks": (2, 2)}, ValueError,
         r"zoo.create\('coatnet_0'\): CoAtNetConfig: `blocks` must have 5 entries, one per stage"),
        ("coatnet_0", {"head_dim": "32"}, TypeError,
         r"CoAtNetConfig: `head_dim` must be an integer, got '32'"),
        ("coatnet_0", {"layout": "C-T"}, ValueError, r"CoAtNetConfig: unknown `layout` 'C-T'"),
        ("maxvit_t", {"input_shape": (100, 96, 3)}, ValueError,
         r"MaxViTConfig: the input height and width must be divisible by 32"),
        ("maxvit_t", {"conv_options": 3}, TypeError,
         r"MaxViTConfig: `conv_options` must be a ConvBlockConfig or a dict of MBConv options"),
        ("convs2s_small", {"encoder_layers": [(64, 0)]}, ValueError,
         r"ConvS2SConfig: `encoder_layers\[0\]` must be \(channels > 0, kernel_size > 0"),
        ("muse_tiny", {"hidden_dim": 66}, ValueError,
         r"MUSEConfig: `hidden_dim` must be a multiple of `num_heads`"),
        ("posenet_vgg16", {"backbone": "vgg17"}, ValueError,
         r"PosENetConfig: `backbone` must be one of 'vgg16', 'resnet50', 'coatnet_0'"),
        ("t5_small", {"num_buckets": 0}, ValueError,
         r"T5Config: `num_buckets` must be an integer >= 1, got 0"),
        ("shaw_transformer_base", {"max_distance": 1.5}, TypeError,
         r"ShawTransformerConfig: `max_distance` must be an integer"),
        ("music_transformer_base", {"num_heads": 0}, ValueError,
         r"MusicTransformerConfig: `num_heads` must be an integer >= 1"),
    ],
)  # fmt: skip
def test_bad_values_are_refused_by_the_configuration(name, overrides, error, message):
    with pytest.raises(error, match=message):
        zoo.create(name, **overrides)


def test_a_configuration_needs_the_fields_without_a_default():
    with pytest.raises(TypeError, match="channels"):
        coatnet.CoAtNetConfig(blocks=(2, 2, 3, 5, 2))


# --------------------------------------------------------------------------- registering


@dataclasses.dataclass(frozen=True, kw_only=True)
class DenseConfig(ZooConfig):
    units: int = REQUIRED
    activation: str | None = None


def build_dense(units: int, activation: str | None = None) -> keras.Model:
    inputs = keras.Input((3,))
    return keras.Model(inputs, keras.layers.Dense(units, activation=activation)(inputs))


def test_a_users_dataclass_configuration():
    config = DenseConfig(zoo_name="test_dense")
    zoo.register_model("test_dense", build_dense, family="test_dense", config=config)
    try:
        assert zoo.create("test_dense", units=4).output_shape == (None, 4)
        with pytest.raises(TypeError, match=r"zoo.create\('test_dense', units=\.\.\.\)"):
            zoo.create("test_dense")
        with pytest.raises(ValueError, match="Did you mean 'units'"):
            zoo.create("test_dense", unit=4)
    finally:
        zoo.unregister_model("test_dense")


def test_register_model_refuses_a_configuration_named_otherwise_or_a_foreign_field():
    with pytest.raises(ValueError, match="the configuration is named 'test_a', registered as"):
        zoo.register_model("test_b", build_dense, family="t", config=DenseConfig(zoo_name="test_a"))

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Wrong(ZooConfig):
        width: int = 3

    with pytest.raises(ValueError, match=r"unknown config key 'width'"):
        zoo.register_model("test_wrong", build_dense, family="t", config=Wrong())
    assert "test_b" not in zoo.list_models() and "test_wrong" not in zoo.list_models()
