"""timm's ``MaxxVitCfg`` as build arguments of the zoo's CoAtNet, MaxViT and MaxxViT:
:func:`config_from_timm`, :func:`maxvit_config_from_timm` and
:func:`maxxvit_config_from_timm`, and the options keras-posenc does not implement, named
with their values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from keras_posenc.layers._checks import excerpt

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
    # timm's maxvit_rmlp_* compute the bias with an MLP (RelPosMlp).
    need(transformer, "rel_pos_type", ("bias_tf",) if tf_layout else ("bias", "mlp"), "bias")
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


def _convnext_options(conv: dict, need: Callable, unsupported: list) -> tuple[str, dict]:
    """``stride_on`` and the :class:`ConvNeXtBlock` options of timm's ``conv_cfg``
    (``block_type="convnext"``)."""
    need(conv, "block_type", ("convnext",), "mbconv")
    need(conv, "norm_layer", ("layernorm2d", ""), "")
    need(conv, "padding", ("",), "")
    stride_mode = need(conv, "stride_mode", ("dw", "pool"), "dw")
    activation = need(conv, "act_layer", _ACTIVATIONS, "gelu")
    if stride_mode == "pool":  # timm's shortcut pools with avg2 whatever pool_type says
        pool = conv.get("downsample_pool_type") or conv.get("pool_type", "avg2")
        if pool != "avg2":
            unsupported.append(f"conv_cfg.downsample_pool_type={pool!r} (supported: 'avg2')")
    ratio = _whole(conv.get("expand_ratio", 4.0), "conv_cfg.expand_ratio", unsupported)
    layer_scale = conv.get("init_values", 1e-6)
    return "depthwise" if stride_mode == "dw" else "pool", {
        # timm's ConvNeXtBlock is built with its own 7 x 7 kernel (conv_cfg.kernel_size
        # is MBConv's).
        "kernel_size": 7,
        "expansion_rate": ratio,
        "layer_scale": float(layer_scale) if layer_scale else None,
        "norm_epsilon": float(conv.get("norm_eps") or 1e-6),
        "activation": activation,
        "pool": "avg",
        "output_bias": bool(conv.get("output_bias", True)),
    }


def maxxvit_config_from_timm(
    cfg: Mapping[str, Any], img_size: int | tuple[int, int] = 224, name: str = "maxxvit"
) -> dict[str, Any]:
    """:func:`~keras_posenc.zoo.maxxvit.build_maxxvit` arguments for a timm ``MaxxVitCfg``
    with ConvNeXt blocks (its MaxxViT, MaxxViT v2 and CoAtNeXt configurations).

    Args:
        cfg: the ``MaxxVitCfg`` as a dict (``dataclasses.asdict``), with its
            ``conv_cfg`` (``block_type="convnext"``) and ``transformer_cfg`` dicts.
        img_size: the model's image size, an int or ``(height, width)``.
        name: the Keras model's name.

    Returns:
        The keyword arguments of ``build_maxxvit`` (no ``num_classes``).

    Raises:
        ValueError: for a ``cfg`` without ``depths`` or ``embed_dim``, and for options
            keras-posenc does not implement, each named with its value (MBConv blocks,
            stages mixing block kinds, parallel partitions, NCHW attention, ...).

    Examples:

        >>> from keras_posenc.convert import maxxvit_config_from_timm
        >>> cfg = {"embed_dim": [16, 16, 32, 32], "depths": [1, 1, 1, 1],
        ...        "block_type": ["M", "M", "M", "M"], "stem_width": [8, 16],
        ...        "conv_cfg": {"block_type": "convnext", "init_values": 1e-6},
        ...        "transformer_cfg": {"dim_head": 8, "expand_first": False,
        ...                            "no_block_attn": True, "rel_pos_type": "mlp"}}
        >>> config = maxxvit_config_from_timm(cfg, img_size=64)
        >>> config["layout"], config["partition_size"], config["conv_options"]["kernel_size"]
        ('G-G-G-G', (2, 2), 7)
    """
    who = "maxxvit_config_from_timm"
    conv, transformer, unsupported, need = _timm_sections(cfg, who)
    depths = tuple(int(d) for d in cfg["depths"])
    widths = tuple(int(w) for w in cfg["embed_dim"])
    stem = cfg.get("stem_width", 64)
    stem = (int(stem), int(stem)) if isinstance(stem, int) else tuple(int(w) for w in stem)
    grid_only = bool(transformer.get("no_block_attn", False))
    kinds = []
    for kind in cfg.get("block_type", ("C", "C", "T", "T")):
        kind = kind if isinstance(kind, str) else tuple(kind)
        if kind not in ("C", "T", "M"):
            unsupported.append(f"block_type {kind!r} (supported: 'C', 'T', 'M' per stage)")
        kinds.append("G" if kind == "M" and grid_only else str(kind))
    if len(kinds) != len(depths):
        unsupported.append("block_type (supported: one kind per stage)")
    head_hidden = cfg.get("head_hidden_size")
    if head_hidden not in (None, widths[-1]):
        unsupported.append(f"head_hidden_size={head_hidden!r} (supported: None, {widths[-1]})")
    stride_on, conv_options = _convnext_options(conv, need, unsupported)
    need(transformer, "use_nchw_attn", (False,), False)
    need(transformer, "head_first", (True,), True)
    need(transformer, "rel_pos_type", ("bias", "mlp"), "bias")
    need(transformer, "norm_layer", ("layernorm2d",), "layernorm2d")
    transformer_options = _transformer_options(
        transformer, need, unsupported, norm_key="norm_layer_cl"
    )
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
        "layout": "-".join(kinds),
        "stem_channels": stem,
        "stem_bias": bool(cfg.get("stem_bias", False)),
        "input_shape": (int(size[0]), int(size[1]), 3),
        "head_dim": int(transformer.get("dim_head", 32)),
        "partition_size": window if any(kind in "MG" for kind in kinds) else None,
        "stride_on": stride_on,
        "conv_options": conv_options,
        "transformer_options": transformer_options,
        "pre_logits": head_hidden is not None,
        "head": "pool_norm" if head_hidden is not None else "norm_pool",
        "head_norm_epsilon": transformer_options["norm_epsilon"],
        "name": name,
    }
