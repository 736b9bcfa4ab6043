"""Convert timm's CoAtNet checkpoints (``maxxvit.py``) into keras-posenc CoAtNet models.

timm's trained CoAtNets are its ``coatnet_*_rw_*`` variants, which differ from the
paper in ways our :func:`~keras_posenc.zoo.coatnet.build_coatnet` describes as
configuration (see :data:`~keras_posenc.zoo.coatnet.RW_CONFIGS` and
:func:`~keras_posenc.zoo.coatnet.rw_config`). The converter builds the matching
model and copies every tensor in, checking that each key of the state dict is used
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
  does when the model is built for another input size.

timm's pretrained CoAtNets expect RGB images scaled to [-1, 1] (mean and std 0.5),
channels last here (``(batch, height, width, 3)``), at 224 x 224 (bicubic resize,
crop ratio 0.9 or 0.95).

Checkpoint files are untrusted: ``.safetensors`` files (what the Hugging Face hub
serves) are read by a small reader of the format, without any dependency, and
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
from keras_posenc.layers.relative_position_2d import RelativePositionBias2D
from keras_posenc.zoo.coatnet import RW_CONFIGS, build_coatnet, rw_config

__all__ = ["config_from_timm", "from_timm_coatnet", "load_timm_state_dict", "to_timm_state_dict"]

_OWNER = "from_timm_coatnet"
# Buffers timm's state dicts may hold that the Keras model does not need.
_IGNORED_SUFFIXES = ("num_batches_tracked", "relative_position_index")
# Keys of timm variants keras-posenc does not implement, and what to tell the user.
_UNSUPPORTED_MARKERS = (
    (
        "rel_pos.mlp",
        "The checkpoint computes its relative position bias with an MLP (timm's "
        "coatnet_rmlp_* variants), which keras-posenc does not implement.",
    ),
    (
        ".running_mean",
        "The checkpoint has BatchNorm in its Transformer blocks (timm's coatnet_bn_* "
        "variants), which keras-posenc does not implement.",
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
    """The stage depths and widths a timm CoAtNet state dict implies."""

    def width(key: str) -> int | None:
        value = state.get(key)
        return None if value is None else int(np.shape(value)[0])

    depths = _stage_depths(state)
    widths = []
    for stage, depth in enumerate(depths):
        last = f"stages.{stage}.blocks.{depth - 1}"
        widths.append(width(f"{last}.conv3_1x1.weight") or width(f"{last}.mlp.fc2.weight"))
    return {
        "stem_channels": (width("stem.conv1.weight"), width("stem.conv2.weight")),
        "depths": tuple(depths),
        "widths": tuple(widths),
    }


def _infer_name(state: Mapping) -> str:
    found = _describe(state)
    for name in RW_CONFIGS:
        config = rw_config(name)
        if (
            tuple(config["stem_channels"]) == found["stem_channels"]
            and tuple(config["blocks"][1:]) == found["depths"]
            and tuple(config["channels"][1:]) == found["widths"]
        ):
            return name
    raise ValueError(
        f"{_OWNER}: the state dict (stem widths {found['stem_channels']}, stage depths "
        f"{found['depths']}, stage widths {found['widths']}) is none of the supported timm "
        f"variants {sorted(RW_CONFIGS)}; pass `name=` if it is one of them with another "
        "head, or `config=` (build_coatnet arguments) for a custom configuration."
    )


_ACTIVATIONS = ("gelu", "silu", "relu")
_POOLS = {"avg2": "avg", "max2": "max"}
_STRIDE_MODES = {"pool": "pool", "1x1": "expand", "dw": "depthwise"}


def config_from_timm(
    cfg: Mapping[str, Any], img_size: int | tuple[int, int] = 224, name: str = "coatnet"
) -> dict[str, Any]:
    """:func:`~keras_posenc.zoo.coatnet.build_coatnet` arguments for a timm ``MaxxVitCfg``.

    For CoAtNet configurations of timm's ``maxxvit.py`` other than the registered
    ones (:data:`~keras_posenc.zoo.coatnet.RW_CONFIGS`): pass
    ``dataclasses.asdict(cfg)`` (or the same as plain JSON) and the image size.

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
            its value (ConvNeXt blocks, MaxViT partition attention, MLP relative
            positions, BatchNorm in the Transformer blocks, grouped convolutions,
            interleaved heads, ...).

    Examples:

        >>> from keras_posenc.convert import config_from_timm
        >>> cfg = {"embed_dim": [16, 16, 24, 24], "depths": [1, 2, 1, 2],
        ...        "stem_width": [8, 8], "block_type": ["C", "C", "T", "T"],
        ...        "stem_bias": False, "head_hidden_size": None,
        ...        "conv_cfg": {"stride_mode": "dw", "pool_type": "avg2", "act_layer": "gelu"},
        ...        "transformer_cfg": {"dim_head": 8, "expand_first": True}}
        >>> config = config_from_timm(cfg, img_size=64)
        >>> config["blocks"], config["channels"], config["stride_on"], config["head"]
        ((2, 1, 2, 1, 2), (8, 16, 16, 24, 24), 'depthwise', 'norm_pool')
    """
    who = "config_from_timm"
    missing = [key for key in ("depths", "embed_dim") if key not in cfg]
    if missing:
        raise ValueError(
            f"{who}: `cfg` has no {' or '.join(map(repr, missing))} (a MaxxVitCfg's stage "
            f"depths and widths); it has {excerpt(sorted(map(str, cfg)))}."
        )
    conv = dict(cfg.get("conv_cfg") or {})
    transformer = dict(cfg.get("transformer_cfg") or {})
    unsupported = []

    sections = {id(cfg): "", id(conv): "conv_cfg.", id(transformer): "transformer_cfg."}

    def need(section: Mapping, key: str, allowed: tuple, default: Any) -> Any:
        value = section.get(key, default)
        value = tuple(value) if isinstance(value, list) else value
        if value not in allowed:
            label = sections[id(section)] + key
            unsupported.append(f"{label}={value!r} (supported: {allowed})")
        return value

    depths = tuple(int(d) for d in cfg["depths"])
    widths = tuple(int(w) for w in cfg["embed_dim"])
    stem = cfg.get("stem_width", 64)
    stem = (int(stem), int(stem)) if isinstance(stem, int) else tuple(int(w) for w in stem)
    kinds = []
    for kind in cfg.get("block_type", ("C", "C", "T", "T")):
        kind = kind if isinstance(kind, str) else tuple(kind)
        if kind not in ("C", "T"):
            unsupported.append(f"block_type {kind!r} (supported: 'C', 'T' per stage)")
        kinds.append(str(kind))
    need(cfg, "stem_bias", (False,), False)
    head_hidden = cfg.get("head_hidden_size")
    if head_hidden not in (None, widths[-1]):
        unsupported.append(f"head_hidden_size={head_hidden!r} (supported: None, {widths[-1]})")

    need(conv, "block_type", ("mbconv",), "mbconv")
    need(conv, "group_size", (1,), 1)
    need(conv, "attn_layer", ("se",), "se")
    need(conv, "norm_layer", ("batchnorm2d", ""), "")
    need(conv, "padding", ("", "same"), "")
    pool = need(conv, "pool_type", tuple(_POOLS), "avg2")
    need(conv, "downsample_pool_type", (pool, "", None), pool)
    stride_mode = need(conv, "stride_mode", tuple(_STRIDE_MODES), "dw")
    activation = need(conv, "act_layer", _ACTIVATIONS, "gelu")
    se_activation = need(conv, "attn_act_layer", _ACTIVATIONS, "silu")
    expand_output = bool(conv.get("expand_output", True))
    ratio = float(conv.get("expand_ratio", 4.0))
    if ratio != int(ratio):
        unsupported.append(f"conv_cfg.expand_ratio={ratio} (supported: whole numbers)")

    need(transformer, "head_first", (True,), True)
    need(transformer, "attn_bias", (True,), True)
    need(transformer, "rel_pos_type", ("bias",), "bias")
    need(transformer, "norm_layer", ("layernorm2d",), "layernorm2d")
    need(transformer, "act_layer", ("gelu",), "gelu")
    need(transformer, "window_size", (None,), None)
    transformer_pool = need(transformer, "pool_type", tuple(_POOLS), "avg2")
    transformer_ratio = float(transformer.get("expand_ratio", 4.0))
    if transformer_ratio != int(transformer_ratio):
        unsupported.append(
            f"transformer_cfg.expand_ratio={transformer_ratio} (supported: whole numbers)"
        )
    if unsupported:
        raise ValueError(
            f"{who}: the timm configuration uses options keras-posenc does not "
            f"implement: {'; '.join(unsupported)}."
        )
    transformer_eps = float(transformer.get("norm_eps", 1e-6))
    size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
    return {
        "blocks": (2, *depths),
        "channels": (stem[-1], *widths),
        "stem_channels": stem,
        "layout": "-".join(kinds),
        "input_shape": (int(size[0]), int(size[1]), 3),
        "head_dim": int(transformer.get("dim_head", 32)),
        "stride_on": _STRIDE_MODES[stride_mode],
        "conv_options": {
            "activation": activation,
            "pre_activation": bool(conv.get("pre_norm_act", False)),
            "pool": _POOLS[pool],
            "expansion_rate": int(ratio),
            "expand_from": "output" if expand_output else "input",
            "se_ratio": float(conv.get("attn_ratio", 0.25)),
            "se_from": "output" if expand_output else "hidden",
            "se_activation": se_activation,
            "se_position": "before_norm" if conv.get("attn_early", False) else "after_activation",
            "output_bias": bool(conv.get("output_bias", True)),
            "kernel_size": int(conv.get("kernel_size", 3)),
            "padding": "symmetric",
            "norm_epsilon": float(conv.get("norm_eps") or 1e-5),
            "norm_momentum": 0.9,  # PyTorch's BatchNorm momentum 0.1
        },
        "transformer_options": {
            "pool": _POOLS[transformer_pool],
            "attention_width": "output" if transformer.get("expand_first", True) else "input",
            "expansion_rate": int(transformer_ratio),
            "shortcut_bias": bool(transformer.get("shortcut_bias", True)),
            "layer_scale": transformer.get("init_values"),
            "norm_epsilon": transformer_eps,
        },
        "pre_logits": head_hidden is not None,
        "head": "pool_norm" if head_hidden is not None else "norm_pool",
        "head_norm_epsilon": transformer_eps,
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

    def transformer(self, block: RelativeTransformerBlock2D, prefix: str) -> None:
        self.shortcut(block, prefix)
        norm = f"{prefix}.norm1.norm" if block.strides == 2 else f"{prefix}.norm1"
        self.layer_norm(block.attention_norm, norm)
        order = _head_first_order(block.num_heads, block.head_dim)
        back = np.argsort(order)  # our column of each of timm's rows
        self.add(
            block.qkv_dense.kernel,
            f"{prefix}.attn.qkv.weight",
            lambda w: _dense(w)[:, order],
            lambda kernel: _dense_back(kernel[:, back]),
        )
        self.add(
            block.qkv_dense.bias,
            f"{prefix}.attn.qkv.bias",
            lambda b: b[order],
            lambda b: b[back],
        )
        bias = block.relative_bias
        self.resizable.add(f"{prefix}.attn.rel_pos.relative_position_bias_table")
        self.add(
            bias.table,
            f"{prefix}.attn.rel_pos.relative_position_bias_table",
            lambda table: _relative_table(table, bias, f"{prefix}.attn.rel_pos"),
            lambda table: table.reshape(table.shape[0], -1).T,
        )
        self.dense(block.output_dense, f"{prefix}.attn.proj")
        if block.layer_scale is not None:
            self.add(block.attention_scale, f"{prefix}.ls1.gamma")
            self.add(block.ffn_scale, f"{prefix}.ls2.gamma")
        self.layer_norm(block.ffn_norm, f"{prefix}.norm2")
        self.dense(block.ffn_hidden, f"{prefix}.mlp.fc1")
        self.dense(block.ffn_output, f"{prefix}.mlp.fc2")


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


def _plan(model: keras.Model, stem_convs: int) -> _Plan:
    plan = _Plan()
    for index in range(1, stem_convs + 1):
        plan.conv(model.get_layer(f"stem_conv{index}"), f"stem.conv{index}")
        if index < stem_convs:
            plan.batch_norm(model.get_layer(f"stem_norm{index}"), f"stem.norm{index}")
    for layer in model.layers:
        if isinstance(layer, MBConv | RelativeTransformerBlock2D):
            stage, block = layer.name[len("stage") :].split("_block")
            prefix = f"stages.{int(stage) - 1}.blocks.{int(block) - 1}"
            if isinstance(layer, MBConv):
                plan.mbconv(layer, prefix)
            else:
                plan.transformer(layer, prefix)
    names = {layer.name for layer in model.layers}
    if "pre_logits" in names:  # timm's NormMlpClassifierHead (its paper configurations)
        plan.layer_norm(model.get_layer("head_norm"), "head.norm")
        plan.dense(model.get_layer("pre_logits"), "head.pre_logits.fc", linear=True)
    elif "head_norm" in names:
        plan.layer_norm(model.get_layer("head_norm"), "norm")
    if "predictions" in names:
        plan.dense(model.get_layer("predictions"), "head.fc", linear=True)
    return plan


# --------------------------------------------------------------------------- conversion


def from_timm_coatnet(
    source: str | os.PathLike | Mapping,
    name: str | None = None,
    *,
    config: Mapping[str, Any] | None = None,
    input_shape: tuple[int, int, int] | None = None,
) -> keras.Model:
    """A timm CoAtNet checkpoint as a keras-posenc CoAtNet (a functional ``keras.Model``).

    Args:
        source: the state dict, as a ``.safetensors`` or PyTorch file or a mapping
            of names to tensors/arrays (see :func:`load_timm_state_dict`).
        name: the timm variant, one of ``RW_CONFIGS`` (``"coatnet_0_rw_224"``, ...);
            default: inferred from the stem, stage depths and widths.
        config: instead of ``name``, the :func:`~keras_posenc.zoo.coatnet.build_coatnet`
            arguments of a custom timm configuration.
        input_shape: ``(height, width, 3)`` to build the model for; default the
            configuration's (224 x 224). The relative position tables are resized
            bilinearly when it differs from the checkpoint's, as timm does.

    Returns:
        The model with the checkpoint's weights, its class count taken from
        ``head.fc`` (timm's ImageNet-12k checkpoints have 11821 classes).

    Raises:
        ValueError: an unknown variant, a state dict whose keys do not match the
            architecture (the missing and unexpected keys are listed, e.g. the
            unsupported ``coatnet_rmlp_*`` / ``coatnet_bn_*`` variants), or a
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
    state = load_timm_state_dict(source)
    # Errors about the tensors say where they come from.
    origin = "the state dict" if isinstance(source, Mapping) else repr(os.fspath(source))
    if config is not None and name is not None:
        raise ValueError(f"{_OWNER}: pass `name` or `config`, not both.")
    if config is None:
        config = rw_config(name if name is not None else _infer_name(state))
    config = dict(config)
    if input_shape is not None:
        config["input_shape"] = tuple(input_shape)
    if "head.fc.weight" not in state:
        raise ValueError(
            f"{_OWNER}: the state dict has no classifier (`head.fc.weight`); timm models "
            "made with num_classes=0 are not supported: convert the full checkpoint and "
            "take features from the model (e.g. build with features=True)."
        )
    config["num_classes"] = int(np.shape(state["head.fc.weight"])[0])
    config.setdefault("include_top", True)
    blocks = config.get("blocks")
    if blocks is None or blocks[0] != 2:
        raise ValueError(
            f"{_OWNER}: timm's CoAtNet stem has two convolutions; the configuration has "
            f"blocks={blocks!r}."
        )
    model = build_coatnet(**config)
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
            f"{_OWNER}: {origin} does not match the {config.get('name', 'CoAtNet')} "
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
                f"{_OWNER}: {origin}: {key!r} must have shape {needed} for this "
                f"architecture, got {given}."
            )
        try:
            values.append(np.asarray(transform(np.asarray(state[key], dtype=np.float32))))
        except ValueError as error:  # a relative position table that cannot be resized
            raise ValueError(f"{_OWNER}: {origin}: {error}") from error
    for (variable, *_), value in zip(plan.entries, values):
        variable.assign(value.astype(variable.dtype))
    return model


def to_timm_state_dict(model: keras.Model) -> dict[str, np.ndarray]:
    """A keras-posenc CoAtNet's weights as a timm state dict (the converter's inverse).

    For a model built with timm's options (a ``coatnet_*_rw_224`` zoo model, or one
    built from :func:`config_from_timm`), e.g. after fine-tuning it with Keras: the
    result loads into the matching timm model with
    ``timm_model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})``
    (timm regenerates its ``relative_position_index`` buffers itself).

    Args:
        model: a CoAtNet from :func:`~keras_posenc.zoo.coatnet.build_coatnet` with a
            two-convolution stem and its classifier (``include_top=True``).

    Returns:
        timm's tensor names mapped to float32 numpy arrays in timm's layouts.

    Raises:
        ValueError: a model that is not such a CoAtNet.

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
            f"{who}: expected a CoAtNet built by build_coatnet with a two-convolution stem "
            f"and its classifier; received {getattr(model, 'name', model)!r} with "
            f"{stem_convs} stem convolutions and "
            f"{'a' if 'predictions' in names else 'no'} classifier."
        )
    return {
        key: np.ascontiguousarray(inverse(np.asarray(ops.convert_to_numpy(variable), np.float32)))
        for variable, key, _, inverse in _plan(model, stem_convs).entries
    }
