"""The converters: :func:`from_timm_coatnet`, :func:`from_timm_maxvit` and
:func:`from_timm_maxxvit` build the
model and load a checkpoint into it, each key used once and each shape checked;
:func:`to_timm_state_dict` goes back.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc.convert.timm.checkpoint import _OWNER, _infer_name, load_timm_state_dict
from keras_posenc.convert.timm.mapping import _plan
from keras_posenc.layers._checks import excerpt
from keras_posenc.zoo import coatnet, maxvit, maxxvit
from keras_posenc.zoo.coatnet import build_coatnet
from keras_posenc.zoo.config import ZooConfig
from keras_posenc.zoo.maxvit import build_maxvit
from keras_posenc.zoo.maxxvit import build_maxxvit

# Keys of timm models the converter was not asked for or keras-posenc does not implement,
# and what to tell the user.
_UNSUPPORTED_MARKERS = (
    (
        ".attn_grid.",
        "The checkpoint is a MaxViT: convert it with from_timm_maxvit.",
    ),
    (
        ".conv_dw.",
        "The checkpoint has ConvNeXt blocks (timm's coatnext_* / maxxvit_* variants): "
        "convert it with from_timm_maxxvit.",
    ),
)


def from_timm_coatnet(
    source: str | os.PathLike | Mapping,
    name: str | None = None,
    *,
    config: Mapping[str, Any] | ZooConfig | None = None,
    input_shape: tuple[int, int, int] | None = None,
) -> keras.Model:
    """A timm CoAtNet checkpoint as a keras-posenc CoAtNet (a functional ``keras.Model``).

    Args:
        source: the state dict, as a ``.safetensors`` or PyTorch file or a mapping
            of names to tensors/arrays (see :func:`load_timm_state_dict`).
        name: the timm variant, one of ``zoo.coatnet.TIMM_CONFIGS`` (``"coatnet_0_rw_224"``, ...);
            default: inferred from the stem, stage depths and widths.
        config: instead of ``name``, the :func:`~keras_posenc.zoo.coatnet.build_coatnet`
            arguments of a custom timm configuration (a mapping, or a ``CoAtNetConfig``).
        input_shape: ``(height, width, 3)`` to build the model for; default the
            configuration's (224 x 224). The relative position tables are resized
            bilinearly when it differs from the checkpoint's, as timm does.

    Returns:
        The model with the checkpoint's weights, its class count taken from
        ``head.fc`` (timm's ImageNet-12k checkpoints have 11821 classes).

    Raises:
        ValueError: an unknown variant, a state dict whose keys do not match the
            architecture (the missing and unexpected keys are listed, e.g. the
            keys of a MaxViT or of ConvNeXt blocks, named as such), or a
            tensor of another shape than timm's for this architecture (the file,
            key, expected and given shapes named; relative position tables of
            another square grid are resized instead).
        ImportError: a PyTorch file and no PyTorch installed.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.convert import from_timm_coatnet
        >>> from_timm_coatnet({"stem.conv1.weight": np.zeros((8, 3, 3, 3))})
        Traceback (most recent call last):
        ...
        ValueError: from_timm_coatnet: the state dict (stem widths (8, None), ...
    """
    return _convert(source, name, config, input_shape, _OWNER, _COATNET_CONFIGS, build_coatnet)


def from_timm_maxvit(
    source: str | os.PathLike | Mapping,
    name: str | None = None,
    *,
    config: Mapping[str, Any] | ZooConfig | None = None,
    input_shape: tuple[int, int, int] | None = None,
) -> keras.Model:
    """A timm MaxViT checkpoint as a keras-posenc MaxViT (a functional ``keras.Model``).

    timm's ``maxvit_*_tf_*`` models are the official weights' port: their qkv heads are
    interleaved as ours and their relative tables (``RelPosBiasTf``) are indexed by key
    minus query, which the converter flips; timm's own ``maxvit_*_rw_*`` models have
    head-first qkv rows (reordered) and ``RelPosBias`` tables, as its CoAtNets. Which of
    the two a model is follows from its padding (TensorFlow's in the ``_tf`` ports).

    Args:
        source: the state dict, as a ``.safetensors`` or PyTorch file or a mapping
            of names to tensors/arrays (see :func:`load_timm_state_dict`).
        name: the timm variant, one of ``zoo.maxvit.TIMM_CONFIGS``
            (``"maxvit_tiny_tf_224"``, ``"maxvit_nano_rw_256"``, ...); default:
            inferred from the stem, stage depths and widths.
        config: instead of ``name``, the :func:`~keras_posenc.zoo.maxvit.build_maxvit`
            arguments of a custom configuration (:func:`maxvit_config_from_timm`, or a
            ``MaxViTConfig``).
        input_shape: ``(height, width, 3)`` to build the model for; default the
            configuration's. The windows follow it (input / 32), and the relative
            position tables are resized bilinearly when they differ, as timm does.

    Returns:
        The model with the checkpoint's weights, its class count taken from ``head.fc``.

    Raises:
        ValueError: an unknown variant, a state dict whose keys do not match the
            architecture (the missing and unexpected keys listed), or a tensor of
            another shape than timm's for this architecture.
        ImportError: a PyTorch file and no PyTorch installed.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.convert import from_timm_maxvit
        >>> from_timm_maxvit({"stem.conv1.weight": np.zeros((8, 3, 3, 3))})
        Traceback (most recent call last):
        ...
        ValueError: from_timm_maxvit: the state dict (stem widths (8, None), ...
    """
    return _convert(
        source, name, config, input_shape, "from_timm_maxvit", _MAXVIT_CONFIGS, build_maxvit
    )


def from_timm_maxxvit(
    source: str | os.PathLike | Mapping,
    name: str | None = None,
    *,
    config: Mapping[str, Any] | ZooConfig | None = None,
    input_shape: tuple[int, int, int] | None = None,
) -> keras.Model:
    """A timm MaxxViT or CoAtNeXt checkpoint (ConvNeXt blocks) as a keras-posenc model.

    timm's ``maxxvit_rmlp_*``, ``maxxvitv2_*`` and ``coatnext_*`` models
    (:func:`~keras_posenc.zoo.maxxvit.build_maxxvit`): the ConvNeXt blocks' depthwise
    convs (``(out, 1, k, k)``, ``out / in`` outputs per input) become Keras' depthwise
    kernels, their 1 x 1 conv MLPs dense layers; the attention is timm's own
    (head-first qkv, ``RelPosBias`` tables or ``RelPosMlp``), as in its ``_rw`` MaxViTs.

    Args:
        source: the state dict, as a ``.safetensors`` or PyTorch file or a mapping
            of names to tensors/arrays (see :func:`load_timm_state_dict`).
        name: the timm variant, one of ``zoo.maxxvit.TIMM_CONFIGS``
            (``"maxxvit_rmlp_nano_rw_256"``, ...); default: inferred from the stem,
            stage depths and widths.
        config: instead of ``name``, the :func:`~keras_posenc.zoo.maxxvit.build_maxxvit`
            arguments of a custom configuration (:func:`maxxvit_config_from_timm`, or a
            ``MaxxViTConfig``).
        input_shape: ``(height, width, 3)`` to build the model for; default the
            configuration's. The windows follow it (input / 32), and the relative
            position tables are resized bilinearly when they differ, as timm does.

    Returns:
        The model with the checkpoint's weights, its class count taken from ``head.fc``.

    Raises:
        ValueError: an unknown variant, a state dict whose keys do not match the
            architecture (the missing and unexpected keys listed), or a tensor of
            another shape than timm's for this architecture.
        ImportError: a PyTorch file and no PyTorch installed.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.convert import from_timm_maxxvit
        >>> from_timm_maxxvit({"stem.conv1.weight": np.zeros((8, 3, 3, 3))})
        Traceback (most recent call last):
        ...
        ValueError: from_timm_maxxvit: the state dict (stem widths (8, None), ...
    """
    return _convert(
        source, name, config, input_shape, "from_timm_maxxvit", _MAXXVIT_CONFIGS, build_maxxvit
    )


_COATNET_CONFIGS = coatnet.TIMM_CONFIGS
_MAXVIT_CONFIGS = maxvit.TIMM_CONFIGS
_MAXXVIT_CONFIGS = maxxvit.TIMM_CONFIGS


def _convert(
    source: str | os.PathLike | Mapping,
    name: str | None,
    config: Mapping[str, Any] | ZooConfig | None,
    input_shape: tuple[int, int, int] | None,
    who: str,
    configs: Mapping[str, Any],
    builder: Callable[..., keras.Model],
) -> keras.Model:
    """Builds the model of ``name`` / ``config`` and loads the checkpoint into it."""
    state = load_timm_state_dict(source)
    # Errors about the tensors say where they come from.
    origin = "the state dict" if isinstance(source, Mapping) else repr(os.fspath(source))
    if config is not None and name is not None:
        raise ValueError(f"{who}: pass `name` or `config`, not both.")
    if config is None:
        if name is None:
            name = _infer_name(state, configs, who)
        if name not in configs:
            raise ValueError(
                f"{who}: unknown timm variant {name!r}; expected one of {sorted(configs)}"
            )
        config = configs[name]
    config = dict(config.arguments() if isinstance(config, ZooConfig) else config)
    if input_shape is not None:
        config["input_shape"] = tuple(input_shape)
    if "head.fc.weight" not in state:
        raise ValueError(
            f"{who}: the state dict has no classifier (`head.fc.weight`); timm models "
            "made with num_classes=0 are not supported: convert the full checkpoint and "
            "take features from the model (e.g. build with features=True)."
        )
    config["num_classes"] = int(np.shape(state["head.fc.weight"])[0])
    config.setdefault("include_top", True)
    blocks = config.get("blocks")
    if blocks is None or blocks[0] != 2:
        raise ValueError(
            f"{who}: timm's stem has two convolutions; the configuration has blocks={blocks!r}."
        )
    model = builder(**config)
    plan = _plan(model, blocks[0])

    expected = {key for _, key, _, _ in plan.entries}
    missing = sorted(expected - set(state))
    unexpected = sorted(set(state) - expected)
    if missing or unexpected:
        # Variants with the shapes of a supported one but other layers, named for the user.
        hints = [
            hint
            for marker, hint in _UNSUPPORTED_MARKERS
            if any(marker in key for key in unexpected)
        ]
        raise ValueError(
            f"{who}: {origin} does not match the {config.get('name', 'timm')} "
            f"architecture; missing keys: {excerpt(missing)}; unexpected keys: "
            f"{excerpt(unexpected)}." + "".join(f" {hint}" for hint in hints)
        )
    values = []
    for variable, key, transform, inverse in plan.entries:
        given = tuple(np.shape(state[key]))
        # timm's shape of the variable; a transform alone could drop or miss rows
        # (the qkv reordering indexes rows) instead of failing.
        needed = tuple(np.shape(inverse(np.zeros(variable.shape, np.float32))))
        if given != needed and key not in plan.resizable:
            raise ValueError(
                f"{who}: {origin}: {key!r} must have shape {needed} for this "
                f"architecture, got {given}."
            )
        try:
            values.append(np.asarray(transform(np.asarray(state[key], dtype=np.float32))))
        except ValueError as error:  # a relative position table that cannot be resized
            raise ValueError(f"{who}: {origin}: {error}") from error
    for (variable, *_), value in zip(plan.entries, values):
        variable.assign(value.astype(variable.dtype))
    return model


def to_timm_state_dict(model: keras.Model) -> dict[str, np.ndarray]:
    """A keras-posenc CoAtNet's or MaxViT's weights as a timm state dict (the converters'
    inverse).

    For a model built with timm's options (a ``coatnet_*_rw_*`` or ``maxvit_*`` zoo
    model, or one built from :func:`config_from_timm` / :func:`maxvit_config_from_timm`),
    e.g. after fine-tuning it with Keras: the
    result loads into the matching timm model with
    ``timm_model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})``
    (timm regenerates its ``relative_position_index`` buffers itself).

    A MaxViT with TensorFlow's padding (the paper's and the ``_tf`` models) gets the
    official code's layouts (interleaved qkv, ``RelPosBiasTf`` tables), any other
    timm's own (head-first qkv, ``RelPosBias`` tables), as :func:`from_timm_maxvit` reads.

    Args:
        model: a CoAtNet from :func:`~keras_posenc.zoo.coatnet.build_coatnet` or a
            MaxViT from :func:`~keras_posenc.zoo.maxvit.build_maxvit`, with a
            two-convolution stem and its classifier (``include_top=True``).

    Returns:
        timm's tensor names mapped to float32 numpy arrays in timm's layouts.

    Raises:
        ValueError: a model that is not such a CoAtNet or MaxViT.

    Examples:

        >>> from keras_posenc import zoo
        >>> from keras_posenc.convert import from_timm_coatnet, to_timm_state_dict
        >>> model = zoo.create("coatnet_0_rw_224", input_shape=(64, 64, 3), num_classes=10,
        ...                    blocks=(2, 1, 1, 1, 1), channels=(16, 16, 32, 64, 64),
        ...                    stem_channels=(8, 16))
        >>> state = to_timm_state_dict(model)
        >>> state["stages.2.blocks.0.attn.qkv.weight"].shape  # timm's 1 x 1 conv layout
        (96, 32, 1, 1)
    """
    who = "to_timm_state_dict"
    names = {layer.name for layer in getattr(model, "layers", ())}
    stem_convs = sum(1 for name in names if name.startswith("stem_conv"))
    if stem_convs != 2 or "predictions" not in names:
        raise ValueError(
            f"{who}: expected a CoAtNet or MaxViT built by build_coatnet / build_maxvit with "
            "a two-convolution stem "
            f"and its classifier; received {getattr(model, 'name', model)!r} with "
            f"{stem_convs} stem convolutions and "
            f"{'a' if 'predictions' in names else 'no'} classifier."
        )
    return {
        key: np.ascontiguousarray(inverse(np.asarray(ops.convert_to_numpy(variable), np.float32)))
        for variable, key, _, inverse in _plan(model, stem_convs).entries
    }
