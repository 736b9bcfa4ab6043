"""Convert a keras-hub ``SwinTransformerBackbone`` into the zoo's Swin Transformer
(`keras_posenc.zoo.swin.build_swin`).

keras-hub's ``SwinTransformerBackbone`` (from a preset, or a folder written by
``save_to_preset``) becomes our model tensor by tensor, every shape checked: the patch
embedding's convolution and norm, per block the two norms, the qkv projection (laid out
``[q | k | v]``, each ``(heads, head_dim)``, as ours), the output projection, the
feed-forward and the relative bias table (keras-hub's ``((2w - 1)^2, heads)``, indexed
row-major by the offsets, is ours transposed: ``(heads, 2w - 1, 2w - 1)``), each patch
merging's norm and reduction, and the final norm.

Images whose sides are not multiples of the patch and of the windows at every stage are
refused here where keras-hub pads them; at the sizes of keras-hub's presets (224 with
windows of 7, 384 with windows of 12) nothing is padded, and the outputs are equal.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from keras_posenc.zoo.swin import build_swin

__all__ = ["from_keras_hub_swin"]

_OWNER = "from_keras_hub_swin"


def _copy(target: keras.Variable, array: Any, what: str) -> None:
    array = np.asarray(keras.ops.convert_to_numpy(array))
    if tuple(array.shape) != tuple(target.shape):
        raise ValueError(
            f"{_OWNER}: {what} has shape {tuple(array.shape)}, the converted model's "
            f"{target.path} needs {tuple(target.shape)}."
        )
    target.assign(array.astype(keras.backend.standardize_dtype(target.dtype)))


def _copy_layer(ours: Any, theirs: Any, names: tuple, what: str) -> None:
    for name in names:
        _copy(getattr(ours, name), getattr(theirs, name), f"{what} {name}")


def _copy_block(block: Any, layer: Any, what: str) -> None:
    norm, dense = ("gamma", "beta"), ("kernel", "bias")
    attention = layer.attn
    _copy_layer(block.attention_norm, layer.norm1, norm, f"{what} norm1")
    _copy_layer(block.ffn_norm, layer.norm2, norm, f"{what} norm2")
    _copy_layer(block.qkv_dense, attention.qkv, dense, f"{what} qkv")
    _copy_layer(block.output_dense, attention.proj, dense, f"{what} projection")
    _copy_layer(block.ffn_hidden, layer.mlp.fc1, dense, f"{what} fc1")
    _copy_layer(block.ffn_output, layer.mlp.fc2, dense, f"{what} fc2")
    table = np.asarray(keras.ops.convert_to_numpy(attention.relative_position_bias_table))
    target = tuple(block.relative_bias.table.shape)
    if table.ndim != 2 or table.shape != (target[1] * target[2], target[0]):
        raise ValueError(
            f"{_OWNER}: {what} relative_position_bias_table has shape {table.shape}, the "
            f"converted model's needs ({target[1] * target[2]}, {target[0]})."
        )
    _copy(block.relative_bias.table, table.T.reshape(target), f"{what} bias table")


def from_keras_hub_swin(backbone: Any, name: str | None = None) -> keras.Model:
    """The zoo's Swin Transformer with the weights of a keras-hub Swin backbone or classifier.

    Args:
        backbone: a ``keras_hub.models.SwinTransformerBackbone``, or a
            ``SwinTransformerImageClassifier`` (its backbone and head convert; its
            preprocessor does not: the converted model takes the images the backbone takes),
            or another keras-hub task holding a Swin backbone (its backbone converts).
        name: the model's name; default the backbone's (the classifier's, for one).

    Returns:
        The converted ``keras.Model`` (`keras_posenc.zoo.swin.build_swin`): images in, the
        last stage's normalised cells ``(batch, tokens, width)`` out, as the backbone; for a
        classifier, its logits ``(batch, num_classes)``.

    Raises:
        TypeError: for another kind of backbone.
        ValueError: for a configuration the zoo's Swin does not build (channels first, a
            feed-forward ratio that is not an int, no qkv bias, maps not in whole windows)
            or a weight whose shape differs from the model built from it.

    Examples:

        >>> import keras_hub
        >>> import numpy as np
        >>> from keras import ops
        >>> from keras_posenc.convert import from_keras_hub_swin
        >>> backbone = keras_hub.models.SwinTransformerBackbone(
        ...     image_shape=(32, 32, 3), embed_dim=8, depths=(2, 2), num_heads=(1, 2),
        ...     window_size=4)
        >>> model = from_keras_hub_swin(backbone)
        >>> images = np.random.default_rng(0).random((1, 32, 32, 3), "float32")
        >>> ours, theirs = (ops.convert_to_numpy(m(images)) for m in (model, backbone))
        >>> bool(np.allclose(ours, theirs, atol=1e-5)), ours.shape
        (True, (1, 16, 16))
    """
    names = [cls.__name__ for cls in type(backbone).__mro__]
    head = None
    if "SwinTransformerImageClassifier" in names:
        head = backbone
        name = name or head.name
    if head is not None and head.output_dense.activation not in (None, keras.activations.linear):
        raise ValueError(
            f"{_OWNER}: the zoo's Swin classifier returns logits; received a classifier with "
            f"activation={keras.activations.serialize(head.output_dense.activation)!r}"
        )
    if "SwinTransformerBackbone" not in names:
        inner = getattr(backbone, "backbone", None)
        kinds = [c.__name__ for c in type(inner).__mro__]
        if inner is None or "SwinTransformerBackbone" not in kinds:
            raise TypeError(
                f"{_OWNER}: `backbone` must be a keras_hub SwinTransformerBackbone (or a task "
                f"holding one), got {type(backbone).__name__}."
            )
        backbone = inner
    config = backbone.get_config()
    if config.get("data_format", "channels_last") != "channels_last":
        raise ValueError(
            f"{_OWNER}: the zoo's Swin takes channels-last images; received a backbone with "
            f"data_format={config['data_format']!r}"
        )
    if not config.get("qkv_bias", True):
        raise ValueError(f"{_OWNER}: the zoo's Swin has qkv biases; received qkv_bias=False")
    ratio = config.get("mlp_ratio", 4.0)
    if float(ratio) != int(ratio):
        raise ValueError(
            f"{_OWNER}: the zoo's Swin takes an int `mlp_ratio`; received mlp_ratio={ratio!r}"
        )
    model = build_swin(
        input_shape=tuple(config["image_shape"]),
        embed_dim=config["embed_dim"],
        depths=tuple(config["depths"]),
        num_heads=tuple(config["num_heads"]),
        window_size=config["window_size"],
        patch_size=config.get("patch_size", 4),
        mlp_ratio=int(ratio),
        dropout_rate=config.get("dropout_rate", 0.0),
        drop_path=config.get("drop_path", 0.1),
        patch_norm=config.get("patch_norm", True),
        num_classes=None if head is None else head.output_dense.units,
        head_dropout=0.0 if head is None else float(head.output_dropout.rate),
        name=name or backbone.name,
    )
    embedding = backbone.patch_embedding
    _copy_layer(model.get_layer("patch_embedding"), embedding.proj, ("kernel", "bias"), "patch")
    if embedding.norm is not None:
        _copy_layer(model.get_layer("patch_norm"), embedding.norm, ("gamma", "beta"), "patch norm")
    for index, stage in enumerate(backbone.stages):
        for number, layer in enumerate(stage.blocks):
            block = model.get_layer(f"stage_{index}_block_{number}")
            _copy_block(block, layer, f"stage {index} block {number}")
        if stage.downsample is not None:
            merging = model.get_layer(f"stage_{index}_merging")
            what = f"stage {index} patch merging"
            _copy_layer(merging.norm, stage.downsample.norm, ("gamma", "beta"), f"{what} norm")
            _copy(merging.reduction.kernel, stage.downsample.reduction.kernel, f"{what} kernel")
    _copy_layer(model.get_layer("norm"), backbone.norm, ("gamma", "beta"), "final norm")
    if head is not None:
        _copy_layer(model.get_layer("predictions"), head.output_dense, ("kernel", "bias"), "head")
    return model
