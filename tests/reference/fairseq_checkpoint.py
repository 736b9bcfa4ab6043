"""fairseq ``fconv`` checkpoints with random weights, and a numpy forward pass that reads them.

``fconv_checkpoint`` builds what fairseq's ``checkpoint_utils.save_state`` writes for
an ``FConvModel``: ``{"args": argparse.Namespace(...), "model": state_dict, ...}``, the
state dict with fairseq's key names, its registration order and shapes, and the
weight-norm split of ``torch.nn.utils.weight_norm``: every Linear as ``weight_g``
``(out, 1)`` / ``weight_v`` ``(out, in)`` / ``bias``; every ConvTBC / LinearizedConvolution
as ``weight_g`` ``(1, 1, 2C)`` / ``weight_v`` ``(k, in, 2C)`` (dim 2; dim 0, ``g``
``(k, 1, 1)``, in decoders older than ``decoder.version`` 2) / ``bias``. The ``g`` are
random, not ``||v||``, so a converter that ignores them fails.

``fconv_forward`` is fairseq's FConvModel forward pass (teacher forcing) in numpy float64,
written from fconv.py's formulas, reading the fairseq tensors directly: fairseq token ids
(``<s>`` 0, ``<pad>`` 1, ``</s>`` 2), its position numbering (``padding_idx + 1`` onwards,
real tokens only) and its own weight-norm fold. It shares nothing with keras_posenc.
"""

from __future__ import annotations

import argparse
import ast
import math
import os
from collections import OrderedDict

import numpy as np

from reference.convs2s import convs2s_attention, glu_conv1d

PAD = 1
EOS = 2

# A small configuration with every feature of the layer specs: width changes
# (projections), a residual from two layers back, no residual, even and 1-wide kernels.
TINY = {
    "src_vocab": 13,
    "tgt_vocab": 11,
    "embed_dim": 8,
    "encoder_layers": "[(8, 3)] * 2 + [(12, 2)] + [(12, 1, 0)]",
    "decoder_layers": "[(8, 3)] + [(12, 3)] + [(12, 2, 2)]",
    "decoder_out_embed_dim": 8,  # = embed_dim, so fairseq's share_input_output_embed is possible
    "max_positions": 16,
}


def parse_specs(text: str) -> list[tuple[int, int, int]]:
    """The spec string as (channels, kernel, residual): each ``[...] * n`` term expanded."""
    specs = []
    for term in text.split(" + "):
        literal, _, repeat = term.partition("] * ")
        items = ast.literal_eval(literal + "]" if repeat else literal)
        specs += list(items) * (int(repeat) if repeat else 1)
    return [(spec[0], spec[1], spec[2] if len(spec) == 3 else 1) for spec in specs]


def fconv_args(config: dict, arch: str = "fconv", share: bool = False) -> argparse.Namespace:
    """The args fairseq stores for ``--arch fconv`` (after ``base_architecture``)."""
    return argparse.Namespace(
        arch=arch,
        task="translation",
        source_lang="en",
        target_lang="fr",
        left_pad_source=True,
        left_pad_target=False,
        dropout=0.1,
        encoder_embed_dim=config["embed_dim"],
        encoder_embed_path=None,
        encoder_layers=config["encoder_layers"],
        decoder_embed_dim=config["embed_dim"],
        decoder_embed_path=None,
        decoder_layers=config["decoder_layers"],
        decoder_out_embed_dim=config["decoder_out_embed_dim"],
        decoder_attention="True",
        share_input_output_embed=share,
        max_source_positions=config["max_positions"],
        max_target_positions=config["max_positions"],
        optimizer="nag",
        lr=[0.25],
        clip_norm=0.1,
        seed=1,
    )


def fconv_state_dict(
    config: dict, seed: int = 0, share: bool = False, decoder_version: int | None = 2
) -> OrderedDict:
    """Random fairseq-layout tensors (numpy float32), in fairseq's state-dict order."""
    rng = np.random.default_rng(seed)
    state: OrderedDict = OrderedDict()
    embed = config["embed_dim"]

    def normal(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def gain(*shape: int) -> np.ndarray:
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)

    def linear(prefix: str, fan_in: int, fan_out: int) -> None:
        # nn.utils.weight_norm removes `weight` and appends weight_g, weight_v after bias.
        state[f"{prefix}.bias"] = normal(fan_out, scale=0.1)
        state[f"{prefix}.weight_g"] = gain(fan_out, 1)
        state[f"{prefix}.weight_v"] = normal(fan_out, fan_in)

    def embeddings(side: str, vocab: int) -> None:
        tokens = normal(vocab, embed, scale=0.5)
        tokens[PAD] = 0.0  # nn.Embedding(padding_idx=1): the row stays zero
        positions = normal(config["max_positions"], embed, scale=0.5)
        positions[PAD] = 0.0
        state[f"{side}.embed_tokens.weight"] = tokens
        state[f"{side}.embed_positions.weight"] = positions

    def stack(side: str, specs: list, conv_dim: int) -> int:
        layer_in = [specs[0][0]]
        in_channels = specs[0][0]
        projections, convolutions = [], []
        for index, (channels, kernel, residual) in enumerate(specs):
            residual_dim = channels if residual == 0 else layer_in[-residual]
            if residual_dim != channels:
                projections.append((index, residual_dim, channels))
            convolutions.append((index, kernel, in_channels, channels))
            layer_in.append(channels)
            in_channels = channels
        for index, fan_in, fan_out in projections:
            linear(f"{side}.projections.{index}", fan_in, fan_out)
        for index, kernel, fan_in, channels in convolutions:
            prefix = f"{side}.convolutions.{index}"
            state[f"{prefix}.bias"] = normal(2 * channels, scale=0.1)
            g_shape = [1, 1, 1]
            g_shape[conv_dim] = (kernel, fan_in, 2 * channels)[conv_dim]
            state[f"{prefix}.weight_g"] = gain(*g_shape)
            state[f"{prefix}.weight_v"] = normal(kernel, fan_in, 2 * channels)
        if side == "decoder":
            for index, (channels, _, _) in enumerate(specs):
                linear(f"decoder.attention.{index}.in_projection", channels, embed)
                linear(f"decoder.attention.{index}.out_projection", embed, channels)
        return in_channels

    encoder_specs = parse_specs(config["encoder_layers"])
    decoder_specs = parse_specs(config["decoder_layers"])
    embeddings("encoder", config["src_vocab"])
    linear("encoder.fc1", embed, encoder_specs[0][0])
    last = stack("encoder", encoder_specs, 2)
    linear("encoder.fc2", last, embed)
    if decoder_version is not None:
        state["decoder.version"] = np.array([decoder_version], np.float32)
    embeddings("decoder", config["tgt_vocab"])
    linear("decoder.fc1", embed, decoder_specs[0][0])
    last = stack("decoder", decoder_specs, 2 if (decoder_version or 1) >= 2 else 0)
    out = config["decoder_out_embed_dim"]
    linear("decoder.fc2", last, out)
    if share:
        # nn.Linear(bias=False) whose weight is the target embedding (saved under both names).
        state["decoder.fc3.weight"] = state["decoder.embed_tokens.weight"]
    else:
        linear("decoder.fc3", out, config["tgt_vocab"])
    return state


def fconv_checkpoint(
    config: dict = TINY,
    seed: int = 0,
    share: bool = False,
    decoder_version: int | None = 2,
    arch: str = "fconv",
) -> dict:
    """A fairseq checkpoint dict (torch tensors), as ``checkpoint_utils.save_state`` writes it."""
    import torch

    state = fconv_state_dict(config, seed, share, decoder_version)
    tensors = OrderedDict((key, torch.from_numpy(np.array(value))) for key, value in state.items())
    if share:
        tensors["decoder.fc3.weight"] = tensors["decoder.embed_tokens.weight"]
    return {
        "args": fconv_args(config, arch, share),
        "model": tensors,
        "optimizer_history": [
            {
                "criterion_name": "CrossEntropyCriterion",
                "optimizer_name": "FairseqNAG",
                "lr_scheduler_state": {"best": 3.2},
                "num_updates": 10,
            }
        ],
        "extra_state": {"epoch": 1, "batch_offset": 0, "val_loss": 3.2},
        "last_optimizer_state": {},
    }


def write_fconv_checkpoint(path: str | os.PathLike, **kwargs) -> str:
    """``torch.save`` of :func:`fconv_checkpoint` at ``path``; returns the path."""
    import torch

    torch.save(fconv_checkpoint(**kwargs), path)
    return os.fspath(path)


# --------------------------------------------------------------------------- forward pass


def _array(state: dict, key: str) -> np.ndarray:
    value = state[key]
    value = value.numpy() if hasattr(value, "numpy") else value
    return np.asarray(value, np.float64)


def fold_weight_norm(v: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``g * v / ||v||``, the norm over the axes where ``g`` has size 1 (torch's layout)."""
    axes = tuple(axis for axis in range(v.ndim) if g.shape[axis] == 1)
    return g * v / np.sqrt((v**2).sum(axis=axes, keepdims=True))


def _weight(state: dict, prefix: str) -> np.ndarray:
    if f"{prefix}.weight" in state:
        return _array(state, f"{prefix}.weight")
    return fold_weight_norm(
        _array(state, f"{prefix}.weight_v"), _array(state, f"{prefix}.weight_g")
    )


def _linear(state: dict, prefix: str, x: np.ndarray) -> np.ndarray:
    y = x @ _weight(state, prefix).T  # torch Linear: weight (out, in)
    if f"{prefix}.bias" in state:
        y = y + _array(state, f"{prefix}.bias")
    return y


def make_positions(tokens: np.ndarray) -> np.ndarray:
    """fairseq's positions: from ``padding_idx + 1`` over real tokens; ``padding_idx`` on pads."""
    real = tokens != PAD
    return np.cumsum(real, axis=1) * real + PAD


def _stack(state: dict, side: str, specs: list, x: np.ndarray, **kwargs) -> np.ndarray:
    residuals = [x]
    for index, (_, _, residual_layer) in enumerate(specs):
        residual = None
        if residual_layer > 0:
            residual = residuals[-residual_layer]
            if f"{side}.projections.{index}.weight_v" in state:
                residual = _linear(state, f"{side}.projections.{index}", residual)
        prefix = f"{side}.convolutions.{index}"
        kernel = _weight(state, prefix)  # (k, in, 2C), ConvTBC's layout
        x = glu_conv1d(
            x,
            kernel,
            _array(state, f"{prefix}.bias"),
            causal=side == "decoder",
            mask=kwargs.get("mask"),
        )
        if side == "decoder":
            attention = f"decoder.attention.{index}"
            weights = {
                "in_kernel": _weight(state, f"{attention}.in_projection").T,
                "in_bias": _array(state, f"{attention}.in_projection.bias"),
                "out_kernel": _weight(state, f"{attention}.out_projection").T,
                "out_bias": _array(state, f"{attention}.out_projection.bias"),
            }
            x, _ = convs2s_attention(
                x,
                kwargs["target_embedding"],
                kwargs["keys"],
                kwargs["values"],
                weights,
                kwargs["encoder_mask"],
            )
        if residual is not None:
            x = (x + residual) * math.sqrt(0.5)
        residuals.append(x)
    return x


def fconv_forward(
    state: dict, args: argparse.Namespace, src_tokens: np.ndarray, prev_output_tokens: np.ndarray
) -> np.ndarray:
    """fairseq FConvModel logits ``(batch, target_time, tgt_vocab)`` for fairseq token ids."""
    src_tokens = np.asarray(src_tokens)
    prev_output_tokens = np.asarray(prev_output_tokens)
    # Encoder.
    e = _array(state, "encoder.embed_tokens.weight")[src_tokens]
    e = e + _array(state, "encoder.embed_positions.weight")[make_positions(src_tokens)]
    x = _linear(state, "encoder.fc1", e)
    mask = src_tokens != PAD
    x = _stack(state, "encoder", parse_specs(args.encoder_layers), x, mask=mask)
    keys = _linear(state, "encoder.fc2", x) * mask[..., None]
    values = (keys + e) * math.sqrt(0.5)
    # Decoder.
    g = _array(state, "decoder.embed_tokens.weight")[prev_output_tokens]
    g = g + _array(state, "decoder.embed_positions.weight")[make_positions(prev_output_tokens)]
    x = _linear(state, "decoder.fc1", g)
    x = _stack(
        state,
        "decoder",
        parse_specs(args.decoder_layers),
        x,
        target_embedding=g,
        keys=keys,
        values=values,
        encoder_mask=mask,
    )
    x = _linear(state, "decoder.fc2", x)
    return _linear(state, "decoder.fc3", x)
