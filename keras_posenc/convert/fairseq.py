"""Convert fairseq ``fconv`` (ConvS2S) checkpoints into :class:`~keras_posenc.zoo.convs2s.ConvS2S`.

A fairseq checkpoint is a pickled dict: ``"model"`` holds the state dict (torch
tensors) and the architecture is in ``"args"`` (an ``argparse.Namespace``, older
checkpoints) or ``"cfg"["model"]`` (newer ones). Every Linear and convolution
is weight-normalised (``weight_g`` / ``weight_v``); the converter folds each into
one weight ``w = g * v / ||v||`` with the norm over fairseq's dimensions.

Token ids: fairseq's dictionaries put ``<s>`` = 0, ``<pad>`` = 1, ``</s>`` = 2,
``<unk>`` = 3 before the words of ``dict.txt``; keras-posenc uses pad 0, bos 1,
eos 2. The converter swaps ids 0 and 1 (embedding rows and output rows), so
our ids are fairseq's with 0 and 1 exchanged (:func:`fairseq_to_posenc_ids`),
and the words keep their ids. fairseq starts every target with ``</s>``, not
``<s>``; the converted decoder's ``bos_id`` (1) row is therefore fairseq's
``</s>`` embedding, so ``generate`` feeds exactly what fairseq feeds.

Checkpoints are untrusted files: they are read with ``torch.load(...,
weights_only=True)``, which executes no pickled code, with ``argparse.Namespace``
the only class allowed beyond tensors and plain containers.
"""

from __future__ import annotations

import argparse
import ast
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from keras_posenc.convert._io import to_numpy, torch_load
from keras_posenc.layers._checks import excerpt
from keras_posenc.zoo.convs2s import ConvS2S

__all__ = [
    "FAIRSEQ_SPECIALS",
    "MAX_LAYERS",
    "SUPPORTED_ARCHITECTURES",
    "fairseq_to_posenc_ids",
    "from_fairseq_archive",
    "from_fairseq_fconv",
    "load_fairseq_checkpoint",
    "parse_fairseq_layers",
    "posenc_to_fairseq_ids",
    "read_fairseq_dictionary",
]

_OWNER = "from_fairseq_fconv"
# The most layers a spec may describe, in total (fairseq's deepest fconv has 20 a side).
# Checked before a list is repeated or joined: `[(8, 3)] * 10000 * 300` in a 50 KB
# checkpoint would otherwise expand to 3,000,000 layers and gigabytes.
MAX_LAYERS = 1000
FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
"""fairseq's special symbols, in its id order (``<s>`` = 0, ``<pad>`` = 1, ...)."""
_FAIRSEQ_PAD, _FAIRSEQ_EOS = 1, 2

# fairseq's architecture defaults (fconv.py's named architectures), used only for
# fields a checkpoint's args lack.
_EN_DE = "[(512, 3)] * 9 + [(1024, 3)] * 4 + [(2048, 1)] * 2"
_EN_FR = "[(512, 3)] * 6 + [(768, 3)] * 4 + [(1024, 3)] * 3 + [(2048, 1)] * 1 + [(4096, 1)] * 1"
SUPPORTED_ARCHITECTURES: dict[str, dict[str, Any]] = {
    "fconv": {"encoder_layers": "[(512, 3)] * 20", "decoder_layers": "[(512, 3)] * 20"},
    "fconv_iwslt_de_en": {"encoder_layers": "[(256, 3)] * 4", "decoder_layers": "[(256, 3)] * 3"},
    "fconv_wmt_en_ro": {"encoder_layers": "[(512, 3)] * 20", "decoder_layers": "[(512, 3)] * 20"},
    "fconv_wmt_en_de": {"encoder_layers": _EN_DE, "decoder_layers": _EN_DE},
    "fconv_wmt_en_fr": {"encoder_layers": _EN_FR, "decoder_layers": _EN_FR},
}
"""The fairseq ``--arch`` names the converter accepts, with their layer specs."""


# --------------------------------------------------------------------------- ids and dictionaries


def fairseq_to_posenc_ids(ids: Any) -> np.ndarray:
    """fairseq token ids -> the converted model's ids (ids 0 and 1 swapped).

    fairseq's ``<pad>`` (1) becomes our pad 0 and its ``<s>`` (0) our 1; every
    other id is unchanged. The swap is its own inverse.

    Examples:

        >>> fairseq_to_posenc_ids([[45, 7, 2, 1, 1]]).tolist()
        [[45, 7, 2, 0, 0]]
    """
    ids = np.asarray(ids)
    if not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"fairseq_to_posenc_ids: `ids` must be integers, got dtype {ids.dtype}.")
    return np.where(ids == 0, 1, np.where(ids == 1, 0, ids))


def posenc_to_fairseq_ids(ids: Any) -> np.ndarray:
    """The converted model's ids -> fairseq ids (the same swap of 0 and 1).

    Examples:

        >>> posenc_to_fairseq_ids([[1, 45, 2, 0]]).tolist()
        [[0, 45, 2, 1]]
    """
    return fairseq_to_posenc_ids(ids)


def read_fairseq_dictionary(source: str | os.PathLike | Sequence[str]) -> list[str]:
    """The tokens of a fairseq ``dict.txt``, indexed by the converted model's ids.

    ``dict.txt`` lists one ``word count`` per line (an optional trailing
    ``#fairseq:overwrite`` flag is ignored); fairseq puts its four special
    symbols before them. The list returned is ``["<pad>", "<s>", "</s>",
    "<unk>", word_4, ...]``: ``tokens[i]`` is the token of our id ``i``.

    Args:
        source: the path of ``dict.txt``, or its lines.

    Returns:
        The tokens, in our id order.

    Examples:

        >>> read_fairseq_dictionary(["the 1061", "de 993", "la 12 #fairseq:overwrite"])
        ['<pad>', '<s>', '</s>', '<unk>', 'the', 'de', 'la']
    """
    if isinstance(source, str | os.PathLike):
        with open(source, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    else:
        lines = list(source)
    words = []
    for number, line in enumerate(lines, 1):
        line = line.rstrip()
        if not line:
            continue
        if line.endswith(" #fairseq:overwrite"):
            line = line[: -len(" #fairseq:overwrite")]
        word, _, count = line.rpartition(" ")
        if not word or not count.lstrip("-").isdigit():
            raise ValueError(
                f"read_fairseq_dictionary: line {number} must be '<token> <count>', got {line!r}."
            )
        words.append(word)
    return [FAIRSEQ_SPECIALS[1], FAIRSEQ_SPECIALS[0], *FAIRSEQ_SPECIALS[2:], *words]


# --------------------------------------------------------------------------- loading


def load_fairseq_checkpoint(path: str | os.PathLike) -> dict:
    """Reads a fairseq checkpoint without executing pickled code.

    ``torch.load(path, map_location="cpu", weights_only=True)`` with only
    ``argparse.Namespace`` (fairseq's ``args``) allowed beyond tensors and plain
    containers. A checkpoint holding any other pickled object is rejected.

    Args:
        path: the ``.pt`` file.

    Returns:
        The checkpoint dict (``"model"``: the state dict; ``"args"`` or ``"cfg"``).

    Raises:
        ImportError: PyTorch is not installed.
        ValueError: the file holds objects other than the allowed ones.
    """
    checkpoint = torch_load(path, "load_fairseq_checkpoint", allowed=[argparse.Namespace])
    if not isinstance(checkpoint, Mapping):
        raise ValueError(
            f"load_fairseq_checkpoint: {os.fspath(path)!r} must hold a dict, "
            f"got {type(checkpoint).__name__}."
        )
    return dict(checkpoint)


# --------------------------------------------------------------------------- architecture


def _check_size(size: int, text: str) -> None:
    """Raises if a list of ``size`` layers, about to be built from ``text``, is too long."""
    if size > MAX_LAYERS:
        raise ValueError(
            f"parse_fairseq_layers: {excerpt(text)!r} describes {size:,} layers, more than "
            f"the {MAX_LAYERS} layers the converter accepts."
        )


def _evaluate(node: ast.AST, text: str) -> Any:
    """Literal lists/tuples of ints and bools, joined with ``+`` and repeated with ``* n``.

    Every list is checked against ``MAX_LAYERS`` before it is built, so no spec
    expands to more than that, whatever it repeats.
    """
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, text)
    if isinstance(node, ast.Constant) and type(node.value) in (int, bool):
        return node.value
    if isinstance(node, ast.List | ast.Tuple):
        items = [_evaluate(item, text) for item in node.elts]
        if isinstance(node, ast.Tuple):
            return tuple(items)
        _check_size(len(items), text)
        return items
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _evaluate(node.left, text), _evaluate(node.right, text)
        if isinstance(left, list) and isinstance(right, list):
            _check_size(len(left) + len(right), text)
            return left + right
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        left, right = _evaluate(node.left, text), _evaluate(node.right, text)
        if isinstance(right, list):
            left, right = right, left
        if isinstance(left, list) and type(right) is int and right >= 0:
            _check_size(len(left) * right, text)
            return left * right
    raise ValueError(
        f"parse_fairseq_layers: {excerpt(text)!r} must be a list of (channels, kernel_size"
        "[, residual]) tuples written with literals, `+` and `* n` (as fairseq writes them)."
    )


def parse_fairseq_layers(spec: str | Sequence) -> list[tuple[int, ...]]:
    """A fairseq layer spec such as ``"[(512, 3)] * 9 + [(1024, 3)] * 4"``, parsed safely.

    Only literals, list concatenation and repetition are accepted (the string
    is parsed with :mod:`ast`, never evaluated), for at most ``MAX_LAYERS``
    layers in total, checked before any list is expanded.

    Args:
        spec: fairseq's ``encoder_layers`` / ``decoder_layers`` string, or the list.

    Returns:
        The ``(channels, kernel_size[, residual])`` tuples.

    Examples:

        >>> parse_fairseq_layers("[(512, 3)] * 2 + [(1024, 1, 0)]")
        [(512, 3), (512, 3), (1024, 1, 0)]
    """
    if isinstance(spec, str):
        try:
            value = _evaluate(ast.parse(spec.strip(), mode="eval"), spec)
        except SyntaxError as error:
            raise ValueError(
                f"parse_fairseq_layers: {excerpt(spec)!r} is not a list expression."
            ) from error
        except RecursionError as error:  # `[...] + [...] + ...` thousands of terms long
            raise ValueError(
                f"parse_fairseq_layers: {excerpt(spec)!r} is nested too deeply to parse."
            ) from error
    else:
        value = spec
    if not isinstance(value, list | tuple) or not value:
        raise ValueError(f"parse_fairseq_layers: expected a non-empty list, got {excerpt(spec)}.")
    _check_size(len(value), str(spec))
    layers = []
    for item in value:
        if (
            not isinstance(item, list | tuple)
            or len(item) not in (2, 3)
            or not all(type(v) is int for v in item)
        ):
            raise ValueError(
                f"parse_fairseq_layers: each layer must be (channels, kernel_size[, residual]) "
                f"ints, got {excerpt(item)} in {excerpt(spec)!r}."
            )
        layers.append(tuple(item))
    return layers


def _with_residuals(spec: Any) -> list[tuple[int, int, int]]:
    """Parsed specs as ``(channels, kernel_size, residual)``, residual defaulting to 1."""
    layers = parse_fairseq_layers(spec)
    return [(layer[0], layer[1], layer[2] if len(layer) == 3 else 1) for layer in layers]


def _parse_attention(value: Any, layers: int) -> list[bool]:
    if isinstance(value, str):
        text = value.strip()
        try:
            value = _evaluate(ast.parse(text, mode="eval"), text)
        except (SyntaxError, ValueError, RecursionError) as error:
            raise ValueError(
                f"{_OWNER}: `decoder_attention` must be True, False or a list of them, "
                f"got {excerpt(text)!r}."
            ) from error
    if isinstance(value, bool):
        value = [value] * layers
    if not isinstance(value, list | tuple) or not all(isinstance(v, bool) for v in value):
        raise ValueError(f"{_OWNER}: `decoder_attention` must be bools, got {excerpt(value)}.")
    return list(value)


def _arguments(checkpoint: Mapping, args: Any) -> dict:
    """The architecture arguments: ``args``, else the checkpoint's ``args`` or ``cfg.model``."""
    if args is None:
        args = checkpoint.get("args")
    if args is None:
        cfg = checkpoint.get("cfg")
        if isinstance(cfg, Mapping):
            args = cfg.get("model")
    if args is None:
        raise ValueError(
            f"{_OWNER}: the checkpoint has no architecture arguments ('args' or "
            "'cfg'['model']); pass them with `args=` (e.g. {'arch': 'fconv_wmt_en_fr'})."
        )
    if isinstance(args, argparse.Namespace):
        return dict(vars(args))
    if isinstance(args, Mapping):
        return dict(args)
    raise TypeError(
        f"{_OWNER}: `args` must be an argparse.Namespace or a mapping, got {type(args).__name__}."
    )


# --------------------------------------------------------------------------- tensors


def _fold(v: np.ndarray, g: np.ndarray, dim: int, key: str, origin: str) -> np.ndarray:
    """``g * v / ||v||``, the norm over every axis of ``v`` but ``dim`` (torch's weight_norm).

    Raises:
        ValueError: a vector of ``v`` (``key``, read from ``origin``) has norm 0 or
            one that is not finite: the fold would be NaN.
    """
    v = v.astype(np.float64)
    axes = tuple(axis for axis in range(v.ndim) if axis != dim)
    norm = np.sqrt(np.sum(v * v, axis=axes, keepdims=True))
    bad = ~np.isfinite(norm) | (norm == 0)
    if bad.any():
        raise ValueError(
            f"{_OWNER}: {origin}: {key!r} has a vector of norm 0 or not finite "
            f"({int(bad.sum())} of {bad.size} along axis {dim}, e.g. index "
            f"{int(np.flatnonzero(bad)[0])}); weight norm divides by it, so the weights "
            "would be NaN."
        )
    return g.astype(np.float64) * v / norm


def _g_shape(v_shape: tuple, dim: int) -> tuple:
    return tuple(size if axis == dim else 1 for axis, size in enumerate(v_shape))


def _expected_shapes(
    arch: dict, encoder_specs: list, decoder_specs: list, share_output: bool, version: float
) -> dict[str, tuple]:
    shapes: dict[str, tuple] = {}

    def linear(prefix: str, fan_in: int, fan_out: int) -> None:
        shapes[f"{prefix}.weight_g"] = (fan_out, 1)
        shapes[f"{prefix}.weight_v"] = (fan_out, fan_in)
        shapes[f"{prefix}.bias"] = (fan_out,)

    def stack(side: str, specs: list, conv_dim: int) -> int:
        layer_in = [specs[0][0]]
        in_channels = specs[0][0]
        for index, (channels, kernel, residual) in enumerate(specs):
            residual_dim = channels if residual == 0 else layer_in[-residual]
            if residual_dim != channels:
                linear(f"{side}.projections.{index}", residual_dim, channels)
            v_shape = (kernel, in_channels, 2 * channels)
            shapes[f"{side}.convolutions.{index}.weight_g"] = _g_shape(v_shape, conv_dim)
            shapes[f"{side}.convolutions.{index}.weight_v"] = v_shape
            shapes[f"{side}.convolutions.{index}.bias"] = (2 * channels,)
            if side == "decoder":
                linear(f"decoder.attention.{index}.in_projection", channels, arch["embed"])
                linear(f"decoder.attention.{index}.out_projection", arch["embed"], channels)
            layer_in.append(channels)
            in_channels = channels
        return in_channels

    embed = arch["embed"]
    for side, vocab, positions, specs in (
        ("encoder", arch["src_vocab"], arch["src_positions"], encoder_specs),
        ("decoder", arch["tgt_vocab"], arch["tgt_positions"], decoder_specs),
    ):
        shapes[f"{side}.embed_tokens.weight"] = (vocab, embed)
        shapes[f"{side}.embed_positions.weight"] = (positions, embed)
        linear(f"{side}.fc1", embed, specs[0][0])
        # fairseq's decoder convolutions were normalised over dim 0 before version 2.
        last = stack(side, specs, 2 if side == "encoder" or version >= 2 else 0)
        if side == "encoder":
            linear("encoder.fc2", last, embed)
        else:
            linear("decoder.fc2", last, arch["out_embed"])
    if share_output:
        shapes["decoder.fc3.weight"] = (arch["tgt_vocab"], arch["out_embed"])
    else:
        linear("decoder.fc3", arch["out_embed"], arch["tgt_vocab"])
    return shapes


def _shape_of(state: Mapping, key: str) -> tuple | None:
    value = state.get(key)
    return None if value is None else tuple(getattr(value, "shape", np.shape(value)))


# --------------------------------------------------------------------------- conversion


def from_fairseq_fconv(
    checkpoint: str | os.PathLike | Mapping,
    src_vocab_size: int | None = None,
    tgt_vocab_size: int | None = None,
    *,
    args: Any = None,
    weight_norm: bool = False,
    dropout: float | None = None,
    name: str | None = None,
) -> ConvS2S:
    """A fairseq ``fconv`` checkpoint as a :class:`~keras_posenc.zoo.convs2s.ConvS2S`.

    The architecture comes from the checkpoint's arguments (``encoder_layers``
    / ``decoder_layers`` spec strings, parsed without ``eval``; the
    ``SUPPORTED_ARCHITECTURES`` defaults fill fields that are absent); the
    vocabulary sizes, embedding widths and position-table sizes come from the
    tensors' shapes. Weight norm is folded (``w = g * v / ||v||`` over
    fairseq's dimensions, including the dim-0 decoder convolutions of
    checkpoints older than fairseq's decoder ``version`` 2). Token ids 0 and 1
    are swapped (see the module docstring and :func:`fairseq_to_posenc_ids`),
    and the ``bos_id`` row of the target embedding is fairseq's ``</s>`` row,
    the token fairseq starts targets with.

    Position tables: fairseq's table of ``n`` rows reserves rows 0 and 1 (its
    positions start at ``padding_idx + 1`` = 2); the converted model keeps rows
    ``2 .. n - 1``, so ``max_source_positions`` is ``n - 2``.

    Args:
        checkpoint: a ``.pt`` path (read with :func:`load_fairseq_checkpoint`),
            a loaded checkpoint dict (with ``"model"``), or a bare state dict
            (then pass ``args``). Tensors may be torch tensors or numpy arrays.
        src_vocab_size: if given, checked against the source embedding's rows
            (``len(src_dict)`` in fairseq).
        tgt_vocab_size: likewise for the target embedding.
        args: the architecture arguments (an ``argparse.Namespace`` or a dict),
            overriding the checkpoint's.
        weight_norm: build the model with weight-normalised convolutions
            (``kernel_v`` set to the folded weight, ``kernel_g`` to its norm:
            the same outputs, the reparametrisation kept for fine-tuning);
            False (default) gives plain kernels.
        dropout: the model's dropout rate (default: the checkpoint's, else 0.1).
        name: the Keras model's name.

    Returns:
        The ConvS2S model, pad 0, bos 1, eos 2.

    Raises:
        ImportError: a path was given and PyTorch is missing.
        ValueError: an unsupported architecture, a layer spec of more than
            ``MAX_LAYERS`` layers, state-dict keys missing or unexpected (both
            listed, the first few of each), a tensor of the wrong shape (file,
            key, expected and given shapes named), or a weight-norm ``weight_v``
            with a vector of norm 0 (its fold would be NaN).

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.convert import from_fairseq_fconv
        >>> from_fairseq_fconv({"encoder.embed_tokens.weight": np.zeros((8, 4))},
        ...                    args={"arch": "fconv_lm"})
        Traceback (most recent call last):
        ...
        ValueError: from_fairseq_fconv: architecture 'fconv_lm' is not supported; ...

    Reference:
        Gehring et al. 2017; fairseq's ``fairseq/models/fconv.py`` (the state-dict layout).
    """
    # Errors about the tensors say where they come from.
    origin = "the checkpoint"
    if isinstance(checkpoint, str | os.PathLike):
        origin = repr(os.fspath(checkpoint))
        checkpoint = load_fairseq_checkpoint(checkpoint)
    if not isinstance(checkpoint, Mapping):
        raise TypeError(
            f"{_OWNER}: `checkpoint` must be a path or a dict, got {type(checkpoint).__name__}."
        )
    state = checkpoint.get("model", checkpoint)
    if not isinstance(state, Mapping):
        raise ValueError(
            f"{_OWNER}: checkpoint['model'] must be a state dict, got {type(state).__name__}."
        )
    if "model" not in checkpoint and args is None:
        raise ValueError(
            f"{_OWNER}: a bare state dict has no architecture arguments; pass `args=` "
            "(e.g. the checkpoint's args, or {'arch': 'fconv_wmt_en_fr'})."
        )
    arguments = _arguments(checkpoint, args)
    arch_name = arguments.get("arch")
    if arch_name is not None and (
        not isinstance(arch_name, str) or arch_name not in SUPPORTED_ARCHITECTURES
    ):
        raise ValueError(
            f"{_OWNER}: architecture {excerpt(arch_name)!r} is not supported; supported: "
            f"{sorted(SUPPORTED_ARCHITECTURES)} (the fconv encoder-decoder, not fconv_lm or "
            "fconv_self_att)."
        )
    defaults = SUPPORTED_ARCHITECTURES[arch_name or "fconv"]
    encoder_specs = _with_residuals(arguments.get("encoder_layers") or defaults["encoder_layers"])
    decoder_specs = _with_residuals(arguments.get("decoder_layers") or defaults["decoder_layers"])
    attention = _parse_attention(arguments.get("decoder_attention", True), len(decoder_specs))
    if attention != [True] * len(decoder_specs):
        raise ValueError(
            f"{_OWNER}: only attention in every decoder layer is supported (fairseq's "
            f"default); the checkpoint has decoder_attention={excerpt(attention)}."
        )
    if arguments.get("adaptive_softmax_cutoff"):
        raise ValueError(f"{_OWNER}: adaptive softmax output layers are not supported.")
    share_output = bool(arguments.get("share_input_output_embed", False))

    # Sizes the args do not determine come from the tensors; every key is then checked.
    def size(key: str, axis: int) -> int:
        shape = _shape_of(state, key)
        if shape is None or len(shape) <= axis:
            raise ValueError(f"{_OWNER}: the state dict has no usable {key!r} (shape {shape}).")
        return int(shape[axis])

    embed = size("encoder.embed_tokens.weight", 1)
    for key in ("encoder_embed_dim", "decoder_embed_dim"):
        if arguments.get(key) is not None and arguments[key] != embed:
            raise ValueError(
                f"{_OWNER}: args.{key} is {excerpt(arguments[key])} but "
                "encoder.embed_tokens.weight "
                f"has width {embed}; the converter needs equal encoder and decoder widths."
            )
    out_embed = int(arguments.get("decoder_out_embed_dim") or size("decoder.fc2.bias", 0))
    arch = {
        "embed": embed,
        "out_embed": out_embed,
        "src_vocab": size("encoder.embed_tokens.weight", 0),
        "tgt_vocab": size("decoder.embed_tokens.weight", 0),
        "src_positions": size("encoder.embed_positions.weight", 0),
        "tgt_positions": size("decoder.embed_positions.weight", 0),
    }
    for argument, given, key in (
        ("src_vocab_size", src_vocab_size, "src_vocab"),
        ("tgt_vocab_size", tgt_vocab_size, "tgt_vocab"),
    ):
        if given is not None and given != arch[key]:
            raise ValueError(
                f"{_OWNER}: `{argument}` is {given} but the checkpoint's embedding has "
                f"{arch[key]} rows."
            )
    for key in ("src_positions", "tgt_positions"):
        if arch[key] < _FAIRSEQ_PAD + 2:
            raise ValueError(
                f"{_OWNER}: a position table needs more than {_FAIRSEQ_PAD + 1} rows (fairseq "
                f"reserves them), got {arch[key]}."
            )
    version = (
        float(to_numpy(state["decoder.version"]).reshape(-1)[0])
        if ("decoder.version" in state)
        else 1.0
    )
    expected = _expected_shapes(arch, encoder_specs, decoder_specs, share_output, version)
    optional = {"decoder.version", "encoder.version"}
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected) - optional)
    if missing or unexpected:
        raise ValueError(
            f"{_OWNER}: the state dict of {origin} does not match the fconv architecture of "
            f"the args (encoder_layers={excerpt(encoder_specs)}, decoder_layers="
            f"{excerpt(decoder_specs)}); missing keys: {excerpt(missing)}; unexpected keys: "
            f"{excerpt(unexpected)}."
        )
    for key, shape in expected.items():
        given = _shape_of(state, key)
        if given != shape:
            raise ValueError(
                f"{_OWNER}: {origin}: {key!r} must have shape {shape} for this architecture, "
                f"got {given}."
            )

    if dropout is None:
        dropout = arguments.get("dropout")
        dropout = 0.1 if dropout is None else float(dropout)
    model = ConvS2S(
        arch["src_vocab"],
        arch["tgt_vocab"],
        embed_dim=embed,
        encoder_layers=encoder_specs,
        decoder_layers=decoder_specs,
        decoder_out_embed_dim=out_embed,
        max_source_positions=arch["src_positions"] - _FAIRSEQ_PAD - 1,
        max_target_positions=arch["tgt_positions"] - _FAIRSEQ_PAD - 1,
        dropout=dropout,
        weight_norm=weight_norm,
        pad_id=0,
        bos_id=1,
        eos_id=2,
        name=name,
    )
    _assign(model, state, encoder_specs, decoder_specs, share_output, version, origin)
    return model


def _assign(
    model: ConvS2S,
    state: Mapping,
    encoder_specs: list,
    decoder_specs: list,
    share_output: bool,
    version: float,
    origin: str,
) -> None:
    def tensor(key: str) -> np.ndarray:
        return to_numpy(state[key]).astype(np.float64)

    def set_variable(variable: Any, value: np.ndarray) -> None:
        variable.assign(value.astype(variable.dtype))

    def linear_weight(prefix: str) -> np.ndarray:
        return fold(prefix, 0)

    def fold(prefix: str, dim: int) -> np.ndarray:
        v, g = tensor(f"{prefix}.weight_v"), tensor(f"{prefix}.weight_g")
        return _fold(v, g, dim, f"{prefix}.weight_v", origin)

    def dense(layer: Any, prefix: str) -> None:
        set_variable(layer.kernel, linear_weight(prefix).T)
        set_variable(layer.bias, tensor(f"{prefix}.bias"))

    # Our id i is fairseq's swap[i]: <pad> and <s> exchange places.
    def swap(vocab: int) -> np.ndarray:
        order = np.arange(vocab)
        order[[0, 1]] = [1, 0]
        return order

    def embedding(layer: Any, side: str, bos_row: int | None) -> None:
        table = tensor(f"{side}.embed_tokens.weight")
        rows = table[swap(table.shape[0])]
        if bos_row is not None:
            rows[1] = table[bos_row]
        set_variable(layer.token_embedding.embeddings, rows)
        positions = tensor(f"{side}.embed_positions.weight")[_FAIRSEQ_PAD + 1 :]
        set_variable(layer.position_embedding.embeddings, positions)

    def stack(conv_stack: Any, side: str, specs: list, conv_dim: int) -> None:
        for index in range(len(specs)):
            projection = conv_stack.projections[index]
            if projection is not None:
                dense(projection, f"{side}.projections.{index}")
            prefix = f"{side}.convolutions.{index}"
            kernel = fold(prefix, conv_dim)
            conv = conv_stack.convolutions[index]
            if conv.weight_norm:
                set_variable(conv.kernel_v, kernel)
                set_variable(conv.kernel_g, np.sqrt(np.sum(kernel**2, axis=(0, 1))))
            else:
                set_variable(conv._kernel, kernel)
            set_variable(conv.bias, tensor(f"{prefix}.bias"))
            if side == "decoder":
                attention = conv_stack.attentions[index]
                dense(attention.in_projection, f"decoder.attention.{index}.in_projection")
                dense(attention.out_projection, f"decoder.attention.{index}.out_projection")

    embedding(model.encoder_embedding, "encoder", None)
    dense(model.encoder_fc1, "encoder.fc1")
    stack(model.encoder_stack, "encoder", encoder_specs, 2)
    dense(model.encoder_fc2, "encoder.fc2")
    # fairseq feeds </s> as the first target token; our targets start with bos_id = 1.
    embedding(model.decoder_embedding, "decoder", _FAIRSEQ_EOS)
    dense(model.decoder_fc1, "decoder.fc1")
    stack(model.decoder_stack, "decoder", decoder_specs, 2 if version >= 2 else 0)
    dense(model.decoder_fc2, "decoder.fc2")
    if share_output:
        weight = tensor("decoder.fc3.weight")
        bias = np.zeros(weight.shape[0])
    else:
        weight = linear_weight("decoder.fc3")
        bias = tensor("decoder.fc3.bias")
    order = swap(weight.shape[0])
    set_variable(model.decoder_fc3.kernel, weight[order].T)
    set_variable(model.decoder_fc3.bias, bias[order])


# --------------------------------------------------------------------------- archives

# What fairseq's hub_utils.from_pretrained calls an archive's BPE codes file.
_BPE_CODES_FILES = ("bpecodes", "code")


def from_fairseq_archive(
    folder: str | os.PathLike,
    *,
    checkpoint_file: str | None = None,
    dropout: float | None = None,
) -> tuple[ConvS2S, Any, dict]:
    """A fairseq translation archive's folder (extracted) as a model and its text pipeline.

    fairseq's fconv archives (``wmt14.v2.en-fr.fconv-py.tar.bz2`` and its siblings)
    hold, in one folder, the checkpoint ``model.pt``, the BPE codes ``bpecodes`` and
    the dictionaries ``dict.<source>.txt`` / ``dict.<target>.txt``; the languages are
    the checkpoint's ``source_lang`` / ``target_lang`` (fairseq's hub does the same).

    Args:
        folder: the extracted archive: the folder holding ``model.pt``, or a folder
            whose only entry is that folder (as a ``tar`` of a folder extracts).
        checkpoint_file: the checkpoint's file name in the folder (default:
            ``model.pt``, else the folder's only ``.pt`` file).
        dropout: the model's dropout rate (default: the checkpoint's).

    Returns:
        ``(model, preprocessor, details)``: the :class:`~keras_posenc.zoo.convs2s.ConvS2S`
        (:func:`from_fairseq_fconv`), its
        :class:`~keras_posenc.zoo.translation.TranslationPreprocessor` (Moses in the
        two languages, the archive's BPE codes, both dictionaries in the model's id
        order), and a dict of what was read (file names, languages, architecture).

    Raises:
        ValueError: no checkpoint, several and no ``checkpoint_file``, no languages, a
            dictionary missing, or dictionaries whose sizes differ from the
            checkpoint's embeddings (the message names the files).
    """
    from keras_posenc.zoo.translation import TranslationPreprocessor

    who = "from_fairseq_archive"
    folder = _archive_root(os.fspath(folder), who)
    entries = sorted(os.listdir(folder))
    if checkpoint_file is None:
        checkpoints = [name for name in entries if name.endswith(".pt")]
        if "model.pt" in checkpoints:
            checkpoint_file = "model.pt"
        elif len(checkpoints) == 1:
            checkpoint_file = checkpoints[0]
        else:
            raise ValueError(
                f"{who}: {folder!r} holds {len(checkpoints)} checkpoints "
                f"({excerpt(checkpoints)}) and no model.pt; name one with `checkpoint_file=`."
            )
    path = os.path.join(folder, checkpoint_file)
    if not os.path.isfile(path):
        raise ValueError(f"{who}: {folder!r} has no checkpoint {checkpoint_file!r}.")
    checkpoint = load_fairseq_checkpoint(path)
    languages = _languages(checkpoint, entries)
    if languages is None:
        raise ValueError(
            f"{who}: the checkpoint names no source_lang / target_lang and {folder!r} does "
            f"not hold exactly two dict.<lang>.txt files (it holds {excerpt(entries)})."
        )
    dictionaries = []
    for lang in languages:
        name = f"dict.{lang}.txt"
        if name not in entries:
            raise ValueError(
                f"{who}: {folder!r} has no {name} (the {lang!r} dictionary); it holds "
                f"{excerpt(entries)}."
            )
        dictionaries.append(read_fairseq_dictionary(os.path.join(folder, name)))
    try:
        model = from_fairseq_fconv(
            checkpoint,
            src_vocab_size=len(dictionaries[0]),
            tgt_vocab_size=len(dictionaries[1]),
            dropout=dropout,
        )
    except ValueError as error:
        raise ValueError(f"{who}: {path!r}: {error}") from error
    codes = next((name for name in _BPE_CODES_FILES if name in entries), None)
    arguments = _arguments(checkpoint, None)
    preprocessor = TranslationPreprocessor(
        languages[0],
        languages[1],
        source_vocabulary=dictionaries[0],
        target_vocabulary=dictionaries[1],
        bpe_codes=os.path.join(folder, codes) if codes else None,
        moses_escape=not arguments.get("moses_no_escape", False),
        aggressive_dash_splits=not arguments.get("moses_no_dash_splits", False),
    )
    details = {
        "checkpoint": checkpoint_file,
        "dictionaries": [f"dict.{lang}.txt" for lang in languages],
        "bpe_codes": codes,
        "source_lang": languages[0],
        "target_lang": languages[1],
        "arch": arguments.get("arch"),
    }
    return model, preprocessor, details


def _archive_root(folder: str, who: str) -> str:
    """The folder holding the checkpoint: ``folder`` or its only subfolder."""
    if not os.path.isdir(folder):
        raise ValueError(f"{who}: {folder!r} is not a folder.")
    entries = os.listdir(folder)
    if not any(name.endswith(".pt") for name in entries) and len(entries) == 1:
        inner = os.path.join(folder, entries[0])
        if os.path.isdir(inner):
            return inner
    return folder


def _languages(checkpoint: Mapping, entries: Sequence[str]) -> tuple[str, str] | None:
    """(source, target) from the checkpoint's task arguments, else from two dict files."""
    for where in (checkpoint.get("args"), (checkpoint.get("cfg") or {}).get("task")):
        values = vars(where) if isinstance(where, argparse.Namespace) else where
        if isinstance(values, Mapping):
            source, target = values.get("source_lang"), values.get("target_lang")
            if isinstance(source, str) and isinstance(target, str) and source and target:
                return source, target
    found = [n[5:-4] for n in entries if n.startswith("dict.") and n.endswith(".txt")]
    return (found[0], found[1]) if len(found) == 2 else None
