"""Convert timm's CoAtNet and MaxViT checkpoints (``maxxvit.py``) into keras-posenc models.

timm's trained CoAtNets are its ``coatnet_*_rw_*``, ``coatnet_bn_*`` and
``coatnet_rmlp_*`` variants, which differ from the paper in ways our
:func:`~keras_posenc.zoo.coatnet.build_coatnet` describes as configuration (see
:data:`~keras_posenc.zoo.coatnet.TIMM_CONFIGS`); its MaxViTs are the official weights'
port (``maxvit_*_tf_*``) and its own ``maxvit_*_rw_*``
(:func:`~keras_posenc.zoo.maxvit.build_maxvit`). The converters build the matching
model and copy every tensor in, checking that each key of the state dict is used
exactly once and has the shape the architecture needs:

- convolutions ``(out, in, kh, kw)`` -> Keras ``(kh, kw, in, out)``; depthwise
  ``(C, 1, kh, kw)`` -> ``(kh, kw, C, 1)``; the 1 x 1 convolutions timm uses as
  dense layers (squeeze-excitation, attention, MLP) -> ``(in, out)``;
- BatchNorm ``weight``/``bias``/``running_mean``/``running_var`` -> gamma, beta
  and the moving statistics (``num_batches_tracked`` is not needed);
- the attention's ``qkv`` rows are timm's head-first layout (per head ``q``, ``k``,
  ``v``), reordered to ours (``q`` of all heads, then ``k``, then ``v``);
- the relative position table ``((2h-1)(2w-1), heads)`` -> ``(heads, 2h-1, 2w-1)``
  (both index offsets query minus key, row-major), resized bilinearly as timm
  does when the model is built for another input size; the official MaxViT code's
  ``(heads, 2h-1, 2w-1)`` tables (timm's ``RelPosBiasTf``) index key minus query and
  are flipped, and its ``qkv`` rows are already ours;
- the MLP of a ``RelPosMlp`` (``coatnet_rmlp_*``): ``Linear`` weights transposed into
  :class:`~keras_posenc.layers.ContinuousPositionBias2D`'s kernels.

timm's pretrained CoAtNets expect RGB images scaled to [-1, 1] (mean and std 0.5),
channels last here (``(batch, height, width, 3)``), at 224 x 224 (bicubic resize,
crop ratio 0.9 or 0.95).

Checkpoint files are untrusted: ``.safetensors`` files (what the Hugging Face hub
serves) are read by the ``safetensors`` library's numpy API (no code runs), and
PyTorch files (``.pth``, ``.pt``, ``.bin``) with ``torch.load(...,
weights_only=True)``, which executes no pickled code.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc.convert._io import read_safetensors, to_numpy, torch_load
from keras_posenc.layers._checks import excerpt
from keras_posenc.layers.coatnet import MBConv, RelativeTransformerBlock2D
from keras_posenc.layers.position_biases import ContinuousPositionBias2D
from keras_posenc.layers.relative_position_2d import RelativePositionBias2D
from keras_posenc.zoo import coatnet, maxvit
from keras_posenc.zoo.coatnet import build_coatnet
from keras_posenc.zoo.config import ZooConfig
from keras_posenc.zoo.maxvit import build_maxvit

__all__ = [
    "config_from_timm",
    "from_timm_coatnet",
    "from_timm_maxvit",
    "load_timm_state_dict",
    "maxvit_config_from_timm",
    "to_timm_state_dict",
]

_OWNER = "from_timm_coatnet"
# Buffers timm's state dicts may hold that the Keras model does not need.
_IGNORED_SUFFIXES = ("num_batches_tracked", "relative_position_index")
# Keys of timm models the converter was not asked for or keras-posenc does not implement,
# and what to tell the user.
_UNSUPPORTED_MARKERS = (
    (
        ".attn_grid.",
        "The checkpoint is a MaxViT: convert it with from_timm_maxvit.",
    ),
    (
        ".conv_dw.",
        "The checkpoint has ConvNeXt blocks (timm's coatnext_* / maxxvit_* variants), "
        "which keras-posenc does not implement.",
    ),
)
# Keys under which training checkpoints nest the weights (timm's train.py writes
# "state_dict" and "state_dict_ema"; others use "model").
_NESTED = ("state_dict_ema", "state_dict", "model")


def load_timm_state_dict(source: str | os.PathLike | Mapping) -> dict[str, np.ndarray]:
    """A timm state dict, from a file or a mapping, as float numpy arrays.

    Args:
        source: a ``.safetensors`` file, a PyTorch file (``.pth``/``.pt``/``.bin``,
            read with ``weights_only=True``; a training checkpoint's
            ``state_dict_ema``, ``state_dict`` or ``model`` entry is used, in that
            order), or a mapping of names to tensors or arrays.

    Returns:
        The tensors by name, without a ``module.`` prefix (DistributedDataParallel)
        and without the buffers the Keras model does not need.

    Raises:
        ValueError: a file that is not a state dict, or holds pickled objects
            other than tensors and plain containers.
        ImportError: a PyTorch file and no PyTorch installed.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.convert import load_timm_state_dict
        >>> state = load_timm_state_dict({"module.head.fc.bias": np.zeros(3),
        ...                               "module.stem.norm1.num_batches_tracked": 0})
        >>> sorted(state)
        ['head.fc.bias']
    """
    who = "load_timm_state_dict"
    if isinstance(source, Mapping):
        state = dict(source)
    else:
        path = os.fspath(source)
        if path.endswith(".safetensors"):
            state = read_safetensors(path, who)
        else:
            state = torch_load(path, who)
        if not isinstance(state, Mapping):
            raise ValueError(f"{who}: {path!r} must hold a dict, got {type(state).__name__}.")
        for key in _NESTED:
            if isinstance(state.get(key), Mapping):
                state = state[key]
                break
    result = {}
    for key, value in state.items():
        if not isinstance(key, str):
            raise ValueError(f"{who}: state dict keys must be strings, got {key!r}.")
        name = key[len("module.") :] if key.startswith("module.") else key
        if name.endswith(_IGNORED_SUFFIXES):
            continue
        result[name] = to_numpy(value)
    return result


# --------------------------------------------------------------------------- architecture


def _stage_depths(state: Mapping) -> list[int]:
    depths: dict[int, int] = {}
    for key in state:
        parts = key.split(".")
        if len(parts) > 3 and parts[0] == "stages" and parts[2] == "blocks":
            stage, block = int(parts[1]), int(parts[3])
            depths[stage] = max(depths.get(stage, 0), block + 1)
    return [depths.get(stage, 0) for stage in range(max(depths, default=-1) + 1)]


def _describe(state: Mapping) -> dict[str, Any]:
    """What a timm CoAtNet or MaxViT state dict implies: stem, stage depths and widths, and
    how the Transformer blocks compute their relative bias and normalise."""

    def width(key: str) -> int | None:
        value = state.get(key)
        return None if value is None else int(np.shape(value)[0])

    depths = _stage_depths(state)
    widths = []
    for stage, depth in enumerate(depths):
        last = f"stages.{stage}.blocks.{depth - 1}"
        widths.append(
            width(f"{last}.conv3_1x1.weight")
            or width(f"{last}.mlp.fc2.weight")
            or width(f"{last}.attn_grid.mlp.fc2.weight")
        )
    mlp = {int(np.shape(v)[0]) for k, v in state.items() if k.endswith("rel_pos.mlp.fc1.weight")}
    return {
        "stem_channels": (width("stem.conv1.weight"), width("stem.conv2.weight")),
        "depths": tuple(depths),
        "widths": tuple(widths),
        "position_bias_dim": mlp.pop() if len(mlp) == 1 else None,
        # coatnet_bn's final norm is a BatchNorm, as its Transformer blocks'.
        "norm": "batch" if "norm.running_mean" in state else "layer",
        # The official MaxViT code's stem has biases (timm's _tf ports); timm's own not.
        "layout": "tf" if "stem.conv1.bias" in state else "rw",
    }


def _signature(config: Mapping[str, Any]) -> dict[str, Any]:
    """The part of :func:`_describe` a registered configuration fixes."""
    transformer = config.get("transformer_options", {})
    return {
        "stem_channels": tuple(config.get("stem_channels") or (config["channels"][0],) * 2),
        "depths": tuple(config["blocks"][1:]),
        "widths": tuple(config["channels"][1:]),
        "position_bias_dim": transformer.get("position_bias_dim")
        if transformer.get("position_bias") == "mlp"
        else None,
        "norm": transformer.get("norm", "layer"),
        # TensorFlow's padding (the builders' default) marks the official code's models.
        "layout": "tf" if config.get("conv_options", {}).get("padding", "same") == "same" else "rw",
    }


def _infer_name(state: Mapping, configs: Mapping[str, Any] | None = None, who: str = _OWNER) -> str:
    """The registered timm variant whose shapes and kinds of layers ``state`` has.

    ``configs``: timm's names -> zoo configurations, default the CoAtNets'. Of variants that
    differ only in their input size (``coatnet_rmlp_2_rw_224`` / ``_384``) the first wins.
    """
    configs = configs or coatnet.TIMM_CONFIGS
    found = _describe(state)
    for name, config in configs.items():
        if _signature(config.arguments()) == found:
            return name
    raise ValueError(
        f"{who}: the state dict (stem widths {found['stem_channels']}, stage depths "
        f"{found['depths']}, stage widths {found['widths']}) is none of the supported timm "
        f"variants {sorted(configs)}; pass `name=` if it is one of them with another "
        "head, or `config=` (build arguments) for a custom configuration."
    )


_ACTIVATIONS = ("gelu", "gelu_tanh", "silu", "relu")
_POOLS = {"avg2": "avg", "max2": "max", "max": "max3"}
_STRIDE_MODES = {"pool": "pool", "1x1": "expand", "dw": "depthwise"}


def _timm_sections(cfg: Mapping[str, Any], who: str) -> tuple[dict, dict, list, Callable]:
    """The conv and transformer sections of a ``MaxxVitCfg`` dict, the list collecting the
    options keras-posenc does not implement, and ``need(section, key, allowed, default)``,
    which reads an option and records it there when it is not ``allowed``."""
    missing = [key for key in ("depths", "embed_dim") if key not in cfg]
    if missing:
        raise ValueError(
            f"{who}: `cfg` has no {' or '.join(map(repr, missing))} (a MaxxVitCfg's stage "
            f"depths and widths); it has {excerpt(sorted(map(str, cfg)))}."
        )
    conv = dict(cfg.get("conv_cfg") or {})
    transformer = dict(cfg.get("transformer_cfg") or {})
    unsupported: list[str] = []
    sections = {id(cfg): "", id(conv): "conv_cfg.", id(transformer): "transformer_cfg."}

    def need(section: Mapping, key: str, allowed: tuple, default: Any) -> Any:
        value = section.get(key, default)
        value = tuple(value) if isinstance(value, list) else value
        if value not in allowed:
            label = sections[id(section)] + key
            unsupported.append(f"{label}={value!r} (supported: {allowed})")
        return value

    return conv, transformer, unsupported, need


def _whole(value: Any, label: str, unsupported: list) -> int:
    ratio = float(value)
    if ratio != int(ratio):
        unsupported.append(f"{label}={ratio} (supported: whole numbers)")
    return int(ratio)


def _conv_options(conv: dict, need: Callable, unsupported: list) -> tuple[str, dict]:
    """``stride_on`` and the :class:`MBConv` options of timm's ``conv_cfg``."""
    need(conv, "block_type", ("mbconv",), "mbconv")
    need(conv, "group_size", (1,), 1)
    need(conv, "attn_layer", ("se",), "se")
    need(conv, "norm_layer", ("batchnorm2d", ""), "")
    padding = need(conv, "padding", ("", "same"), "")
    pool = need(conv, "pool_type", tuple(_POOLS), "avg2")
    stride_pool = need(conv, "downsample_pool_type", (*_POOLS, "", None), pool) or pool
    stride_mode = need(conv, "stride_mode", tuple(_STRIDE_MODES), "dw")
    activation = need(conv, "act_layer", _ACTIVATIONS, "gelu")
    se_activation = need(conv, "attn_act_layer", _ACTIVATIONS, "silu")
    expand_output = bool(conv.get("expand_output", True))
    ratio = _whole(conv.get("expand_ratio", 4.0), "conv_cfg.expand_ratio", unsupported)
    if stride_pool not in _POOLS or pool not in _POOLS:
        return "", {}
    options = {
        "activation": activation,
        "pre_activation": bool(conv.get("pre_norm_act", False)),
        "pool": _POOLS[pool],
        "expansion_rate": ratio,
        "expand_from": "output" if expand_output else "input",
        "se_ratio": float(conv.get("attn_ratio", 0.25)),
        "se_from": "output" if expand_output else "hidden",
        "se_activation": se_activation,
        "se_position": "before_norm" if conv.get("attn_early", False) else "after_activation",
        "output_bias": bool(conv.get("output_bias", True)),
        "kernel_size": int(conv.get("kernel_size", 3)),
        # timm's "same" is TensorFlow's (its _tf ports), "" PyTorch's symmetric padding.
        "padding": "same" if padding == "same" else "symmetric",
        "norm_epsilon": float(conv.get("norm_eps") or 1e-5),
        "norm_momentum": 0.9,  # PyTorch's BatchNorm momentum 0.1
    }
    if stride_pool != pool:  # timm's coatnet_rmlp_1_rw
        options["stride_pool"] = _POOLS[stride_pool]
    return _STRIDE_MODES.get(stride_mode, ""), options


def _transformer_options(
    transformer: dict, need: Callable, unsupported: list, norm_key: str = "norm_layer"
) -> dict:
    """The :class:`RelativeTransformerBlock2D` options of timm's ``transformer_cfg``.

    ``norm_key``: the norm the blocks use (``"norm_layer"`` in CoAtNet's blocks,
    ``"norm_layer_cl"`` in MaxViT's channels-last ones).
    """
    need(transformer, "attn_bias", (True,), True)
    rel_pos = need(transformer, "rel_pos_type", ("bias", "mlp", "bias_tf"), "bias")
    norms = ("layernorm2d", "batchnorm2d") if norm_key == "norm_layer" else ("layernorm",)
    norm = need(transformer, norm_key, norms, norms[0])
    activation = need(transformer, "act_layer", ("gelu", "gelu_tanh"), "gelu")
    pool = need(transformer, "pool_type", tuple(_POOLS), "avg2")
    ratio = _whole(
        transformer.get("expand_ratio", 4.0), "transformer_cfg.expand_ratio", unsupported
    )
    options = {
        "pool": _POOLS.get(pool, "avg"),
        "attention_width": "output" if transformer.get("expand_first", True) else "input",
        "expansion_rate": ratio,
        "shortcut_bias": bool(transformer.get("shortcut_bias", True)),
        "layer_scale": transformer.get("init_values"),
        "norm_epsilon": float(transformer.get("norm_eps", 1e-6)),
        "activation": activation,
    }
    if rel_pos == "mlp":  # timm's RelPosMlp, with its dropout 0.125
        options.update(
            position_bias="mlp",
            position_bias_dim=int(transformer.get("rel_pos_dim", 512)),
            position_bias_dropout=0.125,
        )
    if norm == "batchnorm2d":  # timm's coatnet_bn: PyTorch's momentum 0.1
        options.update(norm="batch", norm_momentum=0.9)
    return options


def config_from_timm(
    cfg: Mapping[str, Any], img_size: int | tuple[int, int] = 224, name: str = "coatnet"
) -> dict[str, Any]:
    """:func:`~keras_posenc.zoo.coatnet.build_coatnet` arguments for a timm ``MaxxVitCfg``.

    For CoAtNet configurations of timm's ``maxxvit.py`` other than the registered
    ones (:data:`~keras_posenc.zoo.coatnet.TIMM_CONFIGS`): pass
    ``dataclasses.asdict(cfg)`` (or the same as plain JSON) and the image size.
    MaxViT configurations go to :func:`maxvit_config_from_timm`.

    Args:
        cfg: the ``MaxxVitCfg`` as a dict, with its ``conv_cfg`` and
            ``transformer_cfg`` dicts.
        img_size: the model's image size, an int or ``(height, width)``.
        name: the Keras model's name.

    Returns:
        The keyword arguments of ``build_coatnet`` (no ``num_classes``: the
        converter takes it from the checkpoint).

    Raises:
        ValueError: for a ``cfg`` without ``depths`` or ``embed_dim``, and for
            options keras-posenc does not implement, each named with
            its value (ConvNeXt blocks, MaxViT blocks (see
            :func:`maxvit_config_from_timm`), grouped convolutions, interleaved
            heads, ...).

    Examples:

        >>> from keras_posenc.convert import config_from_timm
        >>> cfg = {"embed_dim": [16, 16, 24, 24], "depths": [1, 2, 1, 2],
        ...        "stem_width": [8, 8], "block_type": ["C", "C", "T", "T"],
        ...        "stem_bias": False, "head_hidden_size": None,
        ...        "conv_cfg": {"stride_mode": "dw", "pool_type": "avg2", "act_layer": "gelu"},
        ...        "transformer_cfg": {"dim_head": 8, "expand_first": True,
        ...                            "rel_pos_type": "mlp", "rel_pos_dim": 32}}
        >>> config = config_from_timm(cfg, img_size=64)
        >>> config["blocks"], config["channels"], config["stride_on"], config["head"]
        ((2, 1, 2, 1, 2), (8, 16, 16, 24, 24), 'depthwise', 'norm_pool')
        >>> config["transformer_options"]["position_bias_dim"]
        32
    """
    who = "config_from_timm"
    conv, transformer, unsupported, need = _timm_sections(cfg, who)
    depths = tuple(int(d) for d in cfg["depths"])
    widths = tuple(int(w) for w in cfg["embed_dim"])
    stem = cfg.get("stem_width", 64)
    stem = (int(stem), int(stem)) if isinstance(stem, int) else tuple(int(w) for w in stem)
    kinds = []
    for kind in cfg.get("block_type", ("C", "C", "T", "T")):
        kind = kind if isinstance(kind, str) else tuple(kind)
        if kind not in ("C", "T"):
            hint = " (MaxViT: maxvit_config_from_timm)" if kind == "M" else ""
            unsupported.append(f"block_type {kind!r} (supported: 'C', 'T' per stage){hint}")
        kinds.append(str(kind))
    need(cfg, "stem_bias", (False,), False)
    head_hidden = cfg.get("head_hidden_size")
    if head_hidden not in (None, widths[-1]):
        unsupported.append(f"head_hidden_size={head_hidden!r} (supported: None, {widths[-1]})")
    stride_on, conv_options = _conv_options(conv, need, unsupported)
    need(transformer, "head_first", (True,), True)
    need(transformer, "rel_pos_type", ("bias", "mlp"), "bias")
    need(transformer, "window_size", (None,), None)
    transformer_options = _transformer_options(transformer, need, unsupported)
    if unsupported:
        raise ValueError(
            f"{who}: the timm configuration uses options keras-posenc does not "
            f"implement: {'; '.join(unsupported)}."
        )
    size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
    return {
        "blocks": (2, *depths),
        "channels": (stem[-1], *widths),
        "stem_channels": stem,
        "layout": "-".join(kinds),
        "input_shape": (int(size[0]), int(size[1]), 3),
        "head_dim": int(transformer.get("dim_head", 32)),
        "stride_on": stride_on,
        "conv_options": conv_options,
        "transformer_options": transformer_options,
        "pre_logits": head_hidden is not None,
        "head": "pool_norm" if head_hidden is not None else "norm_pool",
        "head_norm_epsilon": transformer_options["norm_epsilon"],
        # timm's final norm is its Transformer blocks' (BatchNorm in coatnet_bn).
        "head_norm": transformer_options.get("norm", "layer"),
        "name": name,
    }


def maxvit_config_from_timm(
    cfg: Mapping[str, Any], img_size: int | tuple[int, int] = 224, name: str = "maxvit"
) -> dict[str, Any]:
    """:func:`~keras_posenc.zoo.maxvit.build_maxvit` arguments for a timm MaxViT ``MaxxVitCfg``.

    For MaxViT configurations of timm's ``maxxvit.py`` (every stage of ``"M"`` blocks)
    other than the registered ones: pass ``dataclasses.asdict(cfg)`` (or the same as
    plain JSON) and the image size.

    Args:
        cfg: the ``MaxxVitCfg`` as a dict, with its ``conv_cfg`` and
            ``transformer_cfg`` dicts.
        img_size: the model's image size, an int or ``(height, width)``.
        name: the Keras model's name.

    Returns:
        The keyword arguments of ``build_maxvit`` (no ``num_classes``: the converter
        takes it from the checkpoint).

    Raises:
        ValueError: for a ``cfg`` without ``depths`` or ``embed_dim``, and for options
            keras-posenc does not implement, each named with its value (ConvNeXt
            blocks, parallel or grid-only partitions, NCHW attention, a qkv head
            order or bias table layout other than timm's ``_tf`` / ``_rw`` pairs, ...).

    Examples:

        >>> from keras_posenc.convert import maxvit_config_from_timm
        >>> cfg = {"embed_dim": [16, 16, 16, 16], "depths": [1, 1, 1, 1],
        ...        "block_type": ["M", "M", "M", "M"], "stem_width": 16, "stem_bias": True,
        ...        "head_hidden_size": 16,
        ...        "conv_cfg": {"padding": "same", "act_layer": "gelu_tanh", "norm_eps": 1e-3},
        ...        "transformer_cfg": {"dim_head": 8, "head_first": False,
        ...                            "rel_pos_type": "bias_tf", "act_layer": "gelu_tanh",
        ...                            "norm_eps": 1e-5}}
        >>> config = maxvit_config_from_timm(cfg, img_size=64)
        >>> config["blocks"], config["partition_size"], config["pre_logits"]
        ((2, 1, 1, 1, 1), (2, 2), True)
    """
    who = "maxvit_config_from_timm"
    conv, transformer, unsupported, need = _timm_sections(cfg, who)
    depths = tuple(int(d) for d in cfg["depths"])
    widths = tuple(int(w) for w in cfg["embed_dim"])
    stem = cfg.get("stem_width", 64)
    stem = (int(stem), int(stem)) if isinstance(stem, int) else tuple(int(w) for w in stem)
    for kind in cfg.get("block_type", ()):
        kind = kind if isinstance(kind, str) else tuple(kind)
        if kind != "M":
            unsupported.append(f"block_type {kind!r} (supported: 'M' in every stage)")
    if len(tuple(cfg.get("block_type", ()))) != len(depths):
        unsupported.append("block_type (supported: one 'M' per stage)")
    stem_bias = bool(cfg.get("stem_bias", False))
    head_hidden = cfg.get("head_hidden_size")
    if head_hidden not in (None, widths[-1]):
        unsupported.append(f"head_hidden_size={head_hidden!r} (supported: None, {widths[-1]})")
    stride_on, conv_options = _conv_options(conv, need, unsupported)
    need(transformer, "use_nchw_attn", (False,), False)
    need(transformer, "no_block_attn", (False,), False)
    need(transformer, "norm_layer", ("layernorm2d",), "layernorm2d")  # the final norm
    # The pairs timm's _tf and _rw configurations use; the converter reads the layout
    # from the padding (TensorFlow's in the _tf ports).
    tf_layout = conv_options.get("padding") == "same"
    need(transformer, "head_first", (not tf_layout,), True)
    need(transformer, "rel_pos_type", ("bias_tf",) if tf_layout else ("bias",), "bias")
    transformer_options = _transformer_options(
        transformer, need, unsupported, norm_key="norm_layer_cl"
    )
    del transformer_options["shortcut_bias"], transformer_options["pool"]  # unused: stride 1
    del transformer_options["attention_width"]  # partitioned attention keeps the width
    size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
    window = transformer.get("window_size")
    if window is not None:
        window = tuple(int(v) for v in window)
        grid = tuple(int(v) for v in transformer.get("grid_size") or window)
        if grid != window:
            unsupported.append(
                f"transformer_cfg.grid_size={grid} (supported: the window_size, {window})"
            )
    else:
        ratio = int(transformer.get("partition_ratio", 32))
        window = (int(size[0]) // ratio, int(size[1]) // ratio)
    if unsupported:
        raise ValueError(
            f"{who}: the timm configuration uses options keras-posenc does not "
            f"implement: {'; '.join(unsupported)}."
        )
    return {
        "blocks": (2, *depths),
        "channels": (stem[-1], *widths),
        "stem_channels": stem,
        "stem_bias": stem_bias,
        "input_shape": (int(size[0]), int(size[1]), 3),
        "head_dim": int(transformer.get("dim_head", 32)),
        "partition_size": window,
        "stride_on": stride_on,
        "conv_options": conv_options,
        "transformer_options": transformer_options,
        "pre_logits": head_hidden is not None,
        "head": "pool_norm" if head_hidden is not None else "norm_pool",
        "head_norm_epsilon": float(transformer.get("norm_eps", 1e-6)),
        "name": name,
    }


# --------------------------------------------------------------------------- the mapping


def _same(weight: np.ndarray) -> np.ndarray:
    return weight


def _conv(weight: np.ndarray) -> np.ndarray:
    return weight.transpose(2, 3, 1, 0)


def _conv_back(kernel: np.ndarray) -> np.ndarray:
    return kernel.transpose(3, 2, 0, 1)


def _depthwise(weight: np.ndarray) -> np.ndarray:
    """``(C, 1, kh, kw)`` <-> ``(kh, kw, C, 1)``: the same permutation both ways."""
    return weight.transpose(2, 3, 0, 1)


def _dense(weight: np.ndarray) -> np.ndarray:
    """A Linear ``(out, in)`` or 1 x 1 conv ``(out, in, 1, 1)`` weight as a Keras kernel."""
    return weight.reshape(weight.shape[0], -1).T


def _dense_back(kernel: np.ndarray) -> np.ndarray:
    """A Keras kernel as timm's 1 x 1 conv weight ``(out, in, 1, 1)``."""
    return kernel.T[:, :, None, None]


def _linear_back(kernel: np.ndarray) -> np.ndarray:
    return kernel.T


def _head_first_order(heads: int, head_dim: int) -> np.ndarray:
    """For each of our qkv columns (q, k, v of all heads), timm's head-first row."""
    part, head, dim = np.meshgrid(
        np.arange(3), np.arange(heads), np.arange(head_dim), indexing="ij"
    )
    return (head * 3 * head_dim + part * head_dim + dim).reshape(-1)


class _Plan:
    """The (variable, timm key, transform, inverse) entries of a model, built by walking
    its layers: ``transform`` turns timm's tensor into the variable's value, ``inverse``
    the variable's value back into timm's tensor."""

    def __init__(self) -> None:
        self.entries: list[tuple[Any, str, Callable, Callable]] = []
        # Keys whose tensors may have another shape: the relative position tables, resized
        # to the model's grid. Every other tensor must have the exact shape of timm's layout.
        self.resizable: set[str] = set()

    def add(
        self, variable: Any, key: str, transform: Callable = _same, inverse: Callable = _same
    ) -> None:
        self.entries.append((variable, key, transform, inverse))

    def conv(
        self, layer: Any, prefix: str, transform: Callable = _conv, inverse: Callable = _conv_back
    ) -> None:
        self.add(layer.kernel, f"{prefix}.weight", transform, inverse)
        if layer.use_bias:
            self.add(layer.bias, f"{prefix}.bias")

    def dense(self, layer: Any, prefix: str, linear: bool = False) -> None:
        """A Keras Dense layer that is a 1 x 1 conv in timm, or a Linear (``linear``)."""
        self.conv(layer, prefix, _dense, _linear_back if linear else _dense_back)

    def batch_norm(self, layer: Any, prefix: str) -> None:
        for variable, name in (
            (layer.gamma, "weight"),
            (layer.beta, "bias"),
            (layer.moving_mean, "running_mean"),
            (layer.moving_variance, "running_var"),
        ):
            self.add(variable, f"{prefix}.{name}")

    def layer_norm(self, layer: Any, prefix: str) -> None:
        self.add(layer.gamma, f"{prefix}.weight")
        self.add(layer.beta, f"{prefix}.bias")

    def norm(self, layer: Any, prefix: str) -> None:
        """A LayerNorm, or a BatchNorm (timm's coatnet_bn Transformer blocks and head)."""
        if isinstance(layer, keras.layers.BatchNormalization):
            self.batch_norm(layer, prefix)
        else:
            self.layer_norm(layer, prefix)

    def shortcut(self, block: Any, prefix: str) -> None:
        if block.shortcut_projection is not None:
            self.conv(block.shortcut_projection, f"{prefix}.shortcut.expand")

    def mbconv(self, block: MBConv, prefix: str) -> None:
        self.shortcut(block, prefix)
        self.batch_norm(block.pre_norm, f"{prefix}.pre_norm")
        self.conv(block.expand_conv, f"{prefix}.conv1_1x1")
        self.batch_norm(block.expand_norm, f"{prefix}.norm1")
        self.conv(block.depthwise_conv, f"{prefix}.conv2_kxk", _depthwise, _depthwise)
        self.batch_norm(block.depthwise_norm, f"{prefix}.norm2")
        if block.squeeze_excite is not None:
            se = "se_early" if block.se_position == "before_norm" else "se"
            self.dense(block.squeeze_excite.squeeze, f"{prefix}.{se}.fc1")
            self.dense(block.squeeze_excite.excite, f"{prefix}.{se}.fc2")
        self.conv(block.project_conv, f"{prefix}.conv3_1x1")

    def transformer(
        self, block: RelativeTransformerBlock2D, prefix: str, layout: str = "rw"
    ) -> None:
        """A Transformer block: CoAtNet's (1 x 1 convs in timm) or, with ``partition``,
        one of MaxViT's attention layers (``Linear`` layers in timm). ``layout``: ``"rw"``
        (timm's head-first qkv, its ``RelPosBias`` table) or ``"tf"`` (the official
        code's interleaved qkv, which is ours, and ``RelPosBiasTf`` tables)."""
        linear = block.partition is not None
        self.shortcut(block, prefix)
        norm = f"{prefix}.norm1.norm" if block.strides == 2 else f"{prefix}.norm1"
        self.norm(block.attention_norm, norm)
        columns = 3 * block.attention_dim
        order = (
            np.arange(columns)
            if layout == "tf"
            else _head_first_order(block.num_heads, block.head_dim)
        )
        back = np.argsort(order)  # our column of each of timm's rows
        kernel_back = _linear_back if linear else _dense_back
        self.add(
            block.qkv_dense.kernel,
            f"{prefix}.attn.qkv.weight",
            lambda w: _dense(w)[:, order],
            lambda kernel: kernel_back(kernel[:, back]),
        )
        self.add(
            block.qkv_dense.bias,
            f"{prefix}.attn.qkv.bias",
            lambda b: b[order],
            lambda b: b[back],
        )
        self.relative_bias(block.relative_bias, f"{prefix}.attn.rel_pos", layout)
        self.dense(block.output_dense, f"{prefix}.attn.proj", linear)
        if block.layer_scale is not None:
            self.add(block.attention_scale, f"{prefix}.ls1.gamma")
            self.add(block.ffn_scale, f"{prefix}.ls2.gamma")
        self.norm(block.ffn_norm, f"{prefix}.norm2")
        self.dense(block.ffn_hidden, f"{prefix}.mlp.fc1", linear)
        self.dense(block.ffn_output, f"{prefix}.mlp.fc2", linear)

    def relative_bias(self, bias: Any, prefix: str, layout: str) -> None:
        if isinstance(bias, ContinuousPositionBias2D):
            # timm's RelPosMlp: Linear 2 -> hidden -> heads of the (rows, columns) offsets.
            weights = bias.mlp_weights
            for ours, theirs in (("hidden", "fc1"), ("output", "fc2")):
                self.add(
                    weights[f"mlp_{ours}_kernel"],
                    f"{prefix}.mlp.{theirs}.weight",
                    _dense,
                    _linear_back,
                )
                self.add(weights[f"mlp_{ours}_bias"], f"{prefix}.mlp.{theirs}.bias")
            return
        key = f"{prefix}.relative_position_bias_table"
        self.resizable.add(key)
        if layout == "tf":
            # (heads, 2h - 1, 2w - 1) indexed by key minus query: ours, flipped.
            self.add(
                bias.table,
                key,
                lambda table: _relative_table_tf(table, bias, prefix),
                lambda table: table[:, ::-1, ::-1],
            )
        else:
            self.add(
                bias.table,
                key,
                lambda table: _relative_table(table, bias, prefix),
                lambda table: table.reshape(table.shape[0], -1).T,
            )


def _relative_table(table: np.ndarray, layer: RelativePositionBias2D, where: str) -> np.ndarray:
    """timm's ``((2h-1)(2w-1), heads)`` table as ours, resized to the layer's grid.

    Its errors start with the key: the converter adds where the tensor comes from.
    """
    if table.ndim != 2 or table.shape[1] != layer.num_heads:
        raise ValueError(
            f"{where}.relative_position_bias_table must have shape "
            f"(positions, {layer.num_heads}), got {table.shape}."
        )
    rows, cols = 2 * layer.size[0] - 1, 2 * layer.size[1] - 1
    if table.shape[0] == rows * cols:
        return table.T.reshape(layer.num_heads, rows, cols)
    side = int(round(np.sqrt(table.shape[0])))
    if side * side != table.shape[0] or side % 2 == 0:
        raise ValueError(
            f"{where}.relative_position_bias_table has {table.shape[0]} offsets; "
            f"the model needs {rows} x {cols} for its {layer.size} grid, and a table of "
            "another grid can only be resized when it is square."
        )
    stored = table.T.reshape(layer.num_heads, side, side)
    return RelativePositionBias2D.resize_table(stored, layer.size)


def _relative_table_tf(table: np.ndarray, layer: RelativePositionBias2D, where: str) -> np.ndarray:
    """timm's ``RelPosBiasTf`` table ``(heads, 2h-1, 2w-1)``, indexed by key minus query,
    as ours (query minus key: both axes flipped), resized to the layer's grid."""
    if table.ndim != 3 or table.shape[0] != layer.num_heads:
        raise ValueError(
            f"{where}.relative_position_bias_table must have shape "
            f"({layer.num_heads}, rows, columns), got {table.shape}."
        )
    flipped = np.ascontiguousarray(table[:, ::-1, ::-1])
    try:
        return RelativePositionBias2D.resize_table(flipped, layer.size)
    except ValueError as error:
        raise ValueError(f"{where}.relative_position_bias_table: {error}") from error


_MAXVIT_PARTS = {"mbconv": "conv", "block_attention": "attn_block", "grid_attention": "attn_grid"}


def _layout(model: keras.Model) -> str:
    """``"tf"`` for a model with the official MaxViT code's TensorFlow padding (timm's
    ``_tf`` ports: interleaved qkv, ``RelPosBiasTf`` tables), else ``"rw"``."""
    for layer in model.layers:
        if isinstance(layer, MBConv):
            return "tf" if layer.padding == "same" else "rw"
    return "rw"


def _plan(model: keras.Model, stem_convs: int) -> _Plan:
    plan = _Plan()
    layout = _layout(model)
    for index in range(1, stem_convs + 1):
        plan.conv(model.get_layer(f"stem_conv{index}"), f"stem.conv{index}")
        if index < stem_convs:
            plan.batch_norm(model.get_layer(f"stem_norm{index}"), f"stem.norm{index}")
    for layer in model.layers:
        if isinstance(layer, MBConv | RelativeTransformerBlock2D):
            stage, rest = layer.name[len("stage") :].split("_block", 1)
            block, _, part = rest.partition("_")
            prefix = f"stages.{int(stage) - 1}.blocks.{int(block) - 1}"
            if part:  # a MaxViT block's layer
                prefix = f"{prefix}.{_MAXVIT_PARTS[part]}"
            if isinstance(layer, MBConv):
                plan.mbconv(layer, prefix)
            else:
                plan.transformer(layer, prefix, layout)
    names = {layer.name for layer in model.layers}
    if "pre_logits" in names:  # timm's NormMlpClassifierHead (its paper configurations)
        plan.layer_norm(model.get_layer("head_norm"), "head.norm")
        plan.dense(model.get_layer("pre_logits"), "head.pre_logits.fc", linear=True)
    elif "head_norm" in names:
        plan.norm(model.get_layer("head_norm"), "norm")
    if "predictions" in names:
        plan.dense(model.get_layer("predictions"), "head.fc", linear=True)
    return plan


# --------------------------------------------------------------------------- conversion


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


_COATNET_CONFIGS = coatnet.TIMM_CONFIGS
_MAXVIT_CONFIGS = maxvit.TIMM_CONFIGS


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
