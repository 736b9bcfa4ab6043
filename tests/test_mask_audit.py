"""Every mask argument of every public layer goes through the one mask check
(`_checks.check_mask`): a floating mask (perhaps additive, 0 / -1e9) is a
`TypeError` and a mask of the wrong shape a `ValueError`, each naming the layer and
the argument. The list of mask arguments is read from the layers' signatures, so a
new one fails here until it is covered."""

from __future__ import annotations

import inspect

import keras
import numpy as np
import pytest

from keras_posenc import layers

pytestmark = pytest.mark.neutral

B, T, S, C = 2, 5, 4, 16


def x(length=T, width=C):
    return np.zeros((B, length, width), "float32")


# Per layer: a factory, its call's positional inputs, and each mask argument's shape.
CALLS = {
    "ConvS2SAttention": (
        lambda: layers.ConvS2SAttention(C, 8),
        lambda: (x(), x(width=8), (x(S, 8), x(S, 8))),
        {"encoder_mask": (B, S)},
    ),
    "DecoderBlock": (
        lambda: layers.DecoderBlock(32, 2, rotary=layers.RotaryPositions()),
        lambda: (x(),),
        {"padding_mask": (B, T)},
    ),
    "ContextualPositionAttention": (
        lambda: layers.ContextualPositionAttention(2, 8),
        lambda: (x(),),
        {"padding_mask": (B, T), "mask": (B, T)},
    ),
    "DisentangledSelfAttention": (
        lambda: layers.DisentangledSelfAttention(2, 8, position=layers.DebertaBuckets(4, 8)),
        lambda: (x(),),
        {"padding_mask": (B, T), "attention_mask": (B, T, T), "mask": (B, T)},
    ),
    "GLUConv1D": (lambda: layers.GLUConv1D(8, 3), lambda: (x(),), {"mask": (B, T)}),
    "MUSEAttention": (lambda: layers.MUSEAttention(2, 8), lambda: (x(),), {"mask": (B, T)}),
    "MUSEEncoderLayer": (
        lambda: layers.MUSEEncoderLayer(32, 2),
        lambda: (x(),),
        {"padding_mask": (B, T)},
    ),
    "MUSEDecoderLayer": (
        lambda: layers.MUSEDecoderLayer(32, 2),
        lambda: (x(), x(S)),
        {"decoder_padding_mask": (B, T), "encoder_padding_mask": (B, S)},
    ),
    "MultiHeadRelativeAttention": (
        lambda: layers.MultiHeadRelativeAttention(2, 8),
        lambda: (x(), x(S)),
        {
            "query_mask": (B, T),
            "value_mask": (B, S),
            "key_mask": (B, S),
            "attention_mask": (B, T, S),
        },
    ),
    "RelativeTransformerEncoder": (
        lambda: layers.RelativeTransformerEncoder(32, 2),
        lambda: (x(),),
        {"padding_mask": (B, T), "attention_mask": (B, T, T)},
    ),
    "RelativeTransformerDecoder": (
        lambda: layers.RelativeTransformerDecoder(32, 2),
        lambda: (x(), x(S)),
        {
            "decoder_padding_mask": (B, T),
            "decoder_attention_mask": (B, T, T),
            "encoder_padding_mask": (B, S),
            "encoder_attention_mask": (B, T, S),
        },
    ),
}


def mask_arguments() -> dict:
    found = {}
    for name in layers.__all__:
        layer = getattr(layers, name)
        if isinstance(layer, type) and issubclass(layer, keras.layers.Layer):
            parameters = inspect.signature(layer.call).parameters
            masks = [p for p in parameters if p.endswith("_mask") or p == "mask"]
            masks = [p for p in masks if p != "use_causal_mask"]  # a flag, not a tensor
            if masks:
                found[name] = masks
    return found


def test_every_mask_argument_is_covered():
    assert {name: sorted(masks) for name, masks in mask_arguments().items()} == {
        name: sorted(shapes) for name, (_, _, shapes) in CALLS.items()
    }


@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_mask_goes_through_the_one_check(name):
    make, inputs, shapes = CALLS[name]
    layer = make()
    layer(*inputs())  # built; the masks' checks do not depend on it
    for argument, shape in shapes.items():
        owner = rf"{name}(\('.*'\))?: `{argument}`"
        with pytest.raises(TypeError, match=owner + " must be boolean or integer 0/1"):
            layer(*inputs(), **{argument: np.zeros(shape, "float32")})
        wrong = shape[:-1] + (shape[-1] + 1,)
        with pytest.raises(ValueError, match=owner + " must have "):
            layer(*inputs(), **{argument: np.ones(wrong, bool)})
        # An integer 0/1 mask is taken.
        layer(*inputs(), **{argument: np.ones(shape, "int32")})
