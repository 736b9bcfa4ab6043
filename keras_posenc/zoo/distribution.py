"""Model parallelism for the zoo: a ``keras.distribution.LayoutMap`` per model family.

Keras' distribution API (``keras.distribution``, JAX backend) shards a model's
variables by matching each variable's path against the regular expressions of
a :class:`keras.distribution.LayoutMap`. :func:`layout_map` gives the zoo's
rules (Megatron style): the first matrix of a pair (query/key/value and the
FFN's first dense layer, a convolution that widens) is split along its output
axis, the second (the attention's output projection, the FFN's second dense
layer, a convolution that narrows) along its input axis, so each device holds
``1 / n`` of every large kernel. Biases, norms, relative position tables and
the small squeeze-excitation layers stay replicated. XLA's SPMD partitioner
inserts the collectives, so the results are those of the unsharded model up
to float rounding.

Sharded kernels, by family (``M`` is the mesh axis ``model_axis``):

    family                kernel (path ends with)                         layout
    coatnet               stem_convN, expand_conv, shortcut_projection     (., ., ., M)
                          depthwise_conv, project_conv                     (., ., M, .)
                          qkv, ffn_hidden                                  (., M)
                          attention_output, ffn_output                     (M, .)
    muse                  token_embedding/embeddings                       (., M)
                          token_embedding/reverse_embeddings               (M, .)
                          self/cross_attention query, key, value           (., M, .)
                          self_attention/kernel_predictor_K                (., M, .)
                          self_attention/depthwise_kernel_K (static)       (., M)
                          self_attention/pointwise_K (static)              (M, .)
                          self_attention/output (2D)                       (M, .)
                          cross_attention/output (3D)                      (M, ., .)
                          feedforward_intermediate_dense                   (., M)
                          feedforward_output_dense                         (M, .)
    relative_transformer  self/cross_attention query, key, value           (., M, .)
                          attention/attention_output                       (M, ., .)
                          feedforward_intermediate_dense                   (., M)
                          feedforward_output_dense                         (M, .)

The ``relative_transformer`` rules cover models built from
:class:`~keras_posenc.layers.RelativeTransformerEncoder` /
``RelativeTransformerDecoder``; pass such a model (the zoo registers no name for
it) or ``"relative_transformer"``.
"""

from __future__ import annotations

import re
from typing import Any

import keras

from keras_posenc.zoo.registry import get_spec

__all__ = ["FAMILY_RULES", "layout_map"]

_WHO = "layout_map"
_M = "model"  # placeholder for the mesh axis the kernels are split over

# (regular expression that fullmatches a variable path, layout); `_M` is replaced by the
# mesh axis. Inside a family no path matches two rules (LayoutMap raises on that).
FAMILY_RULES: dict[str, tuple[tuple[str, tuple[str | None, ...]], ...]] = {
    "coatnet": (
        (r".*stem_conv\d+/kernel", (None, None, None, _M)),
        (r".*/expand_conv/kernel", (None, None, None, _M)),
        (r".*/shortcut_projection/kernel", (None, None, None, _M)),
        (r".*/depthwise_conv/kernel", (None, None, _M, None)),
        (r".*/project_conv/kernel", (None, None, _M, None)),
        (r".*/qkv/kernel", (None, _M)),
        (r".*/ffn_hidden/kernel", (None, _M)),
        (r".*/attention_output/kernel", (_M, None)),
        (r".*/ffn_output/kernel", (_M, None)),
    ),
    "muse": (
        (r".*token_embedding/embeddings", (None, _M)),
        (r".*token_embedding/reverse_embeddings", (_M, None)),
        (r".*(self|cross)_attention/(query|key|value)/kernel", (None, _M, None)),
        (r".*self_attention/kernel_predictor_\d+/kernel", (None, _M, None)),
        # conv="static": per-channel taps, then a projection that reads those channels.
        (r".*self_attention/depthwise_kernel_\d+", (None, _M)),
        (r".*self_attention/pointwise_\d+/kernel", (_M, None)),
        (r".*self_attention/output/kernel", (_M, None)),
        (r".*cross_attention/output/kernel", (_M, None, None)),
        (r".*feedforward_intermediate_dense/kernel", (None, _M)),
        (r".*feedforward_output_dense/kernel", (_M, None)),
    ),
    "relative_transformer": (
        (r".*(self|cross)_attention/(query|key|value)/kernel", (None, _M, None)),
        (r".*attention/attention_output/kernel", (_M, None, None)),
        (r".*feedforward_intermediate_dense/kernel", (None, _M)),
        (r".*feedforward_output_dense/kernel", (_M, None)),
    ),
}


def _axes(layout: tuple[str | None, ...], model_axis: str) -> tuple[str | None, ...]:
    return tuple(model_axis if axis == _M else axis for axis in layout)


def _check_mesh(device_mesh: Any, model_axis: Any) -> None:
    if not isinstance(device_mesh, keras.distribution.DeviceMesh):
        raise TypeError(
            f"{_WHO}: `device_mesh` must be a keras.distribution.DeviceMesh; received "
            f"{type(device_mesh).__name__}"
        )
    if not isinstance(model_axis, str) or model_axis not in device_mesh.axis_names:
        raise ValueError(
            f"{_WHO}: `model_axis` must name an axis of the device mesh, one of "
            f"{list(device_mesh.axis_names)}; received model_axis={model_axis!r}"
        )


def _family_of(name: str) -> str:
    if name in FAMILY_RULES:
        return name
    family = get_spec(name).family  # raises ValueError for an unknown name
    if family not in FAMILY_RULES:
        raise ValueError(
            f"{_WHO}: no model-parallel layout for {name!r} (family {family!r}); the "
            f"families with one are {sorted(FAMILY_RULES)}"
        )
    return family


def _model_layouts(
    model: keras.Model, model_axis: str, axis_size: int
) -> dict[str, tuple[str | None, ...]]:
    """One exact-path entry per variable that a rule of any family shards.

    Rules are tried family by family; the first whose expression matches the path and
    whose rank equals the variable's wins, so the 2D output projection of a CoAtNet
    block and the 3D one of a relative Transformer in the same model both find theirs.
    """
    layouts = {}
    for variable in model.weights:
        path = variable.path
        for rules in FAMILY_RULES.values():
            layout = next(
                (
                    axes
                    for pattern, axes in rules
                    if re.fullmatch(pattern, path) and len(axes) == len(variable.shape)
                ),
                None,
            )
            if layout is not None:
                break
        if layout is None:
            continue
        dim = layout.index(_M)
        if variable.shape[dim] % axis_size:
            raise ValueError(
                f"{_WHO}: variable {path!r} of shape {tuple(variable.shape)} cannot be split "
                f"over the {axis_size} devices of mesh axis {model_axis!r}: its axis {dim} "
                f"({variable.shape[dim]}) is not a multiple of {axis_size}"
            )
        layouts[path] = _axes(layout, model_axis)
    if not layouts:
        raise ValueError(
            f"{_WHO}: no variable of model {model.name!r} matches a rule of the families "
            f"{sorted(FAMILY_RULES)}; build the model (call it once) before asking for its "
            "layout, or write a LayoutMap for it"
        )
    return layouts


def layout_map(
    model: keras.Model | str,
    device_mesh: keras.distribution.DeviceMesh,
    model_axis: str = "model",
) -> keras.distribution.LayoutMap:
    """The ``LayoutMap`` that shards a zoo model's attention, FFN and convolution kernels.

    Use it with ``keras.distribution.ModelParallel`` (JAX backend); create the model
    inside the distribution's scope so its variables are created sharded.

    Args:
        model: a registered model name (``"coatnet_2"``, ``"muse_wmt_large"``),
            a family name (``"coatnet"``, ``"muse"``, ``"relative_transformer"``),
            or a built ``keras.Model``. A name gives the family's regular
            expressions (so the model need not exist yet); a model gives one
            entry per matched variable path, and checks that every sharded axis
            divides evenly over the mesh axis.
        device_mesh: the ``keras.distribution.DeviceMesh``, e.g. with axes
            ``("batch", "model")``.
        model_axis: the mesh axis the kernels are split over.

    Returns:
        A ``keras.distribution.LayoutMap``; variables it does not name stay replicated.

    Raises:
        TypeError: if ``device_mesh`` is not a ``DeviceMesh``.
        ValueError: for an unknown name, a family without rules, a ``model_axis``
            not in the mesh, a model none of whose variables match, or a sharded
            axis that does not divide over the mesh axis.

    Examples:

        >>> import keras
        >>> from keras_posenc import zoo
        >>> mesh = keras.distribution.DeviceMesh(
        ...     (1, 2), ["batch", "model"], devices=["cpu:0", "cpu:1"])
        >>> layouts = zoo.layout_map("muse_tiny", mesh)
        >>> layouts["decoder_layer_0/self_attention/query/kernel"].axes
        (None, 'model', None)
        >>> layouts["encoder_layer_0/feedforward_output_dense/kernel"].axes
        ('model', None)
        >>> print(layouts["encoder_layer_0/layer_norm/gamma"])  # replicated
        None

    Reference:
        Shoeybi et al. 2019, Megatron-LM: Training Multi-Billion Parameter Language
        Models Using Model Parallelism (arXiv:1909.08053).
    """
    _check_mesh(device_mesh, model_axis)
    layouts = keras.distribution.LayoutMap(device_mesh)
    if isinstance(model, str):
        for pattern, axes in FAMILY_RULES[_family_of(model)]:
            layouts[pattern] = _axes(axes, model_axis)
        return layouts
    if not isinstance(model, keras.Model):
        raise TypeError(
            f"{_WHO}: `model` must be a zoo model name or a keras.Model; received "
            f"{type(model).__name__}"
        )
    axis_size = device_mesh.shape[list(device_mesh.axis_names).index(model_axis)]
    for path, axes in _model_layouts(model, model_axis, axis_size).items():
        # Exact paths: LayoutMap tries an exact match before its regular expressions.
        layouts[path] = axes
    return layouts
