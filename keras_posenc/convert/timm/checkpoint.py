"""timm's state dicts: reading them from a file or a mapping, and inferring the
registered variant (CoAtNet or MaxViT) whose shapes and kinds of layers one has.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from keras_posenc.convert._io import read_safetensors, to_numpy, torch_load
from keras_posenc.zoo import coatnet

_OWNER = "from_timm_coatnet"
# Buffers timm's state dicts may hold that the Keras model does not need.
_IGNORED_SUFFIXES = ("num_batches_tracked", "relative_position_index")
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
        # The official code's models (the paper's and timm's _tf ports) have TensorFlow's
        # padding (the MBConv builders' default) and a biased stem; the ConvNeXt models
        # (no padding option, no stem bias) are timm's own.
        "layout": "tf"
        if config.get("conv_options", {}).get("padding", "same") == "same"
        and config.get("stem_bias", True)
        else "rw",
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
