"""A learned 2D relative position bias for attention over an image grid (CoAtNet, Swin)."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc.layers import position_schemes
from keras_posenc.layers._checks import grid_size
from keras_posenc.layers._memory import check_allocation
from keras_posenc.layers.relative_index import relative_index_2d_tensor

_CLASS = "RelativePositionBias2D"


def _table_shape(height: int, width: int) -> tuple[int, int]:
    return 2 * height - 1, 2 * width - 1


def bilinear_matrix(in_size: int, out_size: int) -> np.ndarray:
    """The ``(out_size, in_size)`` matrix of 1D linear interpolation, half-pixel centres.

    Same sampling as ``torch.nn.functional.interpolate(mode="bilinear",
    align_corners=False)`` without antialiasing (what timm's
    ``resize_rel_pos_bias_table`` uses): output sample ``d`` reads the input at
    ``(d + 0.5) * in_size / out_size - 0.5``, clamped at the edges. Applied to
    rows and columns it gives bilinear resizing as two matrix products, which
    is exact, differentiable and identical on every backend.
    """
    matrix = np.zeros((out_size, in_size), dtype="float64")
    source = (np.arange(out_size) + 0.5) * (in_size / out_size) - 0.5
    source = np.maximum(source, 0.0)  # torch clamps negative source coordinates to 0
    lower = np.minimum(np.floor(source).astype("int64"), in_size - 1)
    upper = np.minimum(lower + 1, in_size - 1)
    fraction = source - lower
    rows = np.arange(out_size)
    np.add.at(matrix, (rows, lower), 1.0 - fraction)
    np.add.at(matrix, (rows, upper), fraction)
    return matrix


def is_static_size(size: Any) -> bool:
    """Whether ``size`` holds Python ints only (not tensors of a size known at run time)."""
    return all(isinstance(v, int | np.integer) for v in size)


def bilinear_matrix_tensor(in_size: int, out_size: Any) -> Any:
    """:func:`bilinear_matrix` (float32) for an ``out_size`` known at run time.

    The same half-pixel sampling, clamped as torch clamps, written with
    ``keras.ops`` (a row of weights per output sample, as two one-hot rows).
    """
    out_size = ops.cast(out_size, "float32")
    source = (ops.cast(ops.arange(out_size), "float32") + 0.5) * (in_size / out_size) - 0.5
    source = ops.maximum(source, 0.0)
    lower = ops.minimum(ops.floor(source), in_size - 1.0)
    upper = ops.minimum(lower + 1.0, in_size - 1.0)
    fraction = ops.expand_dims(source - lower, 1)
    lower_rows = ops.one_hot(ops.cast(lower, "int32"), in_size, dtype="float32")
    upper_rows = ops.one_hot(ops.cast(upper, "int32"), in_size, dtype="float32")
    return lower_rows * (1.0 - fraction) + upper_rows * fraction


def call_size(size: Any, default: tuple[int, int], who: str) -> tuple[Any, Any]:
    """The ``(height, width)`` a 2D bias is called for: ``default`` for None, a checked
    pair of ints, or a pair holding scalar tensors (a size known at run time only)."""
    if size is None:
        return default
    if isinstance(size, tuple | list) and len(size) == 2 and not is_static_size(size):
        return tuple(size)
    return grid_size(size, who, "size")


def _resize_table(table: Any, size: Any, who: str, num_heads: int | None = None) -> np.ndarray:
    """Validate ``table`` (heads, 2H-1, 2W-1) and resize it bilinearly for grid ``size``."""
    height, width = grid_size(size, who, "size")
    table = np.asarray(table if isinstance(table, np.ndarray) else ops.convert_to_numpy(table))
    odd = table.ndim == 3 and all(n > 0 and n % 2 == 1 for n in table.shape[1:])
    if not odd or table.shape[0] < 1:
        raise ValueError(
            f"{who}: `table` must have shape (num_heads, 2 * height - 1, 2 * width - 1) "
            f"with positive odd table sides; received table of shape {table.shape}"
        )
    if num_heads is not None and table.shape[0] != num_heads:
        raise ValueError(
            f"{who}: `table` must hold num_heads={num_heads} tables, shape "
            f"({num_heads}, {2 * height - 1}, {2 * width - 1}); received table of shape "
            f"{table.shape}"
        )
    target = _table_shape(height, width)
    if table.shape[1:] == target:
        return table
    row_matrix = bilinear_matrix(table.shape[1], target[0])
    col_matrix = bilinear_matrix(table.shape[2], target[1])
    resized = np.einsum("ab,nbc,dc->nad", row_matrix, table.astype("float64"), col_matrix)
    dtype = table.dtype if np.issubdtype(table.dtype, np.floating) else np.float32
    return resized.astype(dtype)


@keras.saving.register_keras_serializable(package="keras_posenc")
class RelativePositionBias2D(keras.layers.Layer):
    """Learned relative position bias for attention over an ``H x W`` grid.

    The CoAtNet / Swin relative attention bias: each head owns a table ``P`` of
    shape ``(2H - 1, 2W - 1)``, one scalar per 2D offset. For query ``(i, j)``
    and key ``(i', j')`` of the grid, both flattened row-major, the bias is
    ``P[i - i' + H - 1, j - j' + W - 1]``; it is added to the attention logits
    before the softmax. The layer gathers the bias with one ``ops.take`` on the
    flattened table and a precomputed index, so nothing larger than the output
    is materialised.

    The weight ``table`` has shape ``(num_heads, 2H - 1, 2W - 1)``. Weights saved
    at another grid size load into this layer: ``load_weights`` (from
    ``.weights.h5`` or ``.keras``) resizes the stored table bilinearly to this
    layer's size, as CoAtNet does when fine-tuning at a higher resolution.
    Resizing uses half-pixel centres without antialiasing, the semantics of
    ``torch.nn.functional.interpolate(mode="bilinear", align_corners=False)``
    that timm's ``resize_rel_pos_bias_table`` uses; ``resize_table`` does the
    same explicitly.

    Args:
        num_heads: number of attention heads (one table per head), a positive int.
        size: the grid ``(height, width)`` the queries and keys live on, or one int
            for a square grid.
        position: the position scheme instead of ``size``: a `Grid2DPositions`
            (the one scheme that indexes pairs of grid cells), its config, or its
            registered name ``"grid2d"`` (7 x 7). With it, ``size``
            must be left at its default or agree with it.
        embeddings_initializer: initializer of the table. The default (``None``)
            means ``TruncatedNormal(stddev=0.02)``, Swin's and timm's choice; it
            starts the bias near zero (attention starts almost content-only)
            while giving each offset a distinct value. Keras truncates at two
            standard deviations where timm truncates at +-2 (so barely at all);
            at this scale the difference is negligible.
        **kwargs: base layer arguments (``name``, ``dtype``, ``trainable``).

    The table is created in the constructor, since the layer has no tensor
    input to build from; a model that holds it saves and loads like any other.

    Call arguments:
        size: optional grid ``(height, width)`` to produce the bias for instead
            of the constructor's ``size``; the table is then resized bilinearly
            inside the call (differentiably). Python ints, or scalar tensors when
            the size is known at run time only (a model built for images of any
            size, traced or exported with unknown height and width): the
            interpolation weights and the index are then computed in the graph,
            with the same numbers. Default: the constructor's size, with the
            table used as is.

    Returns:
        The bias, shape ``(1, num_heads, height * width, height * width)``, in the
        layer's compute dtype; broadcastable to attention logits
        ``(batch, num_heads, queries, keys)``.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc import layers
        >>> bias_layer = layers.RelativePositionBias2D(num_heads=4, size=(3, 5))
        >>> tuple(bias_layer.table.shape)
        (4, 5, 9)
        >>> tuple(bias_layer().shape)
        (1, 4, 15, 15)
        >>> tuple(bias_layer(size=(6, 10)).shape)
        (1, 4, 60, 60)
        >>> grid = layers.Grid2DPositions(size=(3, 5))
        >>> layers.RelativePositionBias2D(num_heads=4, position=grid).size
        (3, 5)
        >>> table = np.ones((4, 5, 9), "float32")
        >>> layers.RelativePositionBias2D.resize_table(table, (6, 10)).shape
        (4, 11, 19)

    Reference:
        - [Dai et al., 2021. CoAtNet: Marrying Convolution and Attention for All
          Data Sizes](https://arxiv.org/abs/2106.04803)
        - [Liu et al., 2021. Swin Transformer: Hierarchical Vision Transformer
          using Shifted Windows](https://arxiv.org/abs/2103.14030)
    """

    def __init__(
        self,
        num_heads: int,
        size: int | tuple[int, int] = (7, 7),
        embeddings_initializer: str | keras.initializers.Initializer | dict | None = None,
        position: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        who = self._who()
        if isinstance(num_heads, bool) or not isinstance(num_heads, int | np.integer):
            raise ValueError(
                f"{who}: `num_heads` must be a positive int; received num_heads={num_heads!r}"
            )
        if num_heads < 1:
            raise ValueError(
                f"{who}: `num_heads` must be a positive int; received num_heads={num_heads!r}"
            )
        self.num_heads = int(num_heads)
        self.position = self._resolve_position(who, position, size)
        self._position_given = position is not None
        self.size = self.position.size
        if embeddings_initializer is None:
            # Keras' "truncated_normal" means stddev 0.05; Swin and timm use 0.02.
            embeddings_initializer = keras.initializers.TruncatedNormal(stddev=0.02)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self._index_cache: dict[tuple[int, int], np.ndarray] = {}
        # No tensor input will ever trigger build(), so create the table now.
        self.build()

    def _who(self) -> str:
        return f"{_CLASS} '{self.name}'"

    @staticmethod
    def _resolve_position(who: str, position: Any, size: Any) -> Any:
        """The `Grid2DPositions` of ``position`` (a scheme, its config or ``"grid2d"``) or
        of ``size``."""
        if position is None:
            return position_schemes.Grid2DPositions.checked(who, size=size)
        position = position_schemes.get(position, who)
        if not isinstance(position, position_schemes.Grid2DPositions):
            raise TypeError(
                f"{who}: `position` must be None or a Grid2DPositions (the scheme of pairs "
                f"of grid cells), got {position!r}."
            )
        given = grid_size(size, who, "size")
        if given != (7, 7) and given != position.size:
            raise ValueError(
                f"{who}: pass either `position` or `size`, not both: size={size!r} does not "
                f"describe position={position!r}."
            )
        return position

    def build(self, input_shape: Any = None) -> None:
        shape = (self.num_heads, *_table_shape(*self.size))
        check_allocation(
            f"{type(self).__name__}({self.name!r})", "table", [shape], self.variable_dtype
        )
        self.table = self.add_weight(
            name="table",
            shape=(self.num_heads, *_table_shape(*self.size)),
            initializer=self.embeddings_initializer,
            trainable=True,
        )

    def _index(self, height: int, width: int) -> np.ndarray:
        key = (height, width)
        if key not in self._index_cache:
            scheme = self.position
            if key != self.size:
                scheme = type(scheme)(size=key)
            self._index_cache[key] = scheme.index_matrix().reshape(-1)
        return self._index_cache[key]

    def call(self, size: int | tuple[int, int] | None = None) -> Any:
        height, width = call_size(size, self.size, self._who())
        table = ops.cast(self.table, self.compute_dtype)
        static = is_static_size((height, width))
        # Sides known at run time only (tensors) are always resized in the graph:
        # interpolating to the table's own size is exact.
        if not static or (height, width) != self.size:
            rows, cols = 2 * height - 1, 2 * width - 1
            if static:
                row_matrix = bilinear_matrix(table.shape[1], rows).astype("float32")
                col_matrix = bilinear_matrix(table.shape[2], cols).astype("float32")
            else:
                row_matrix = bilinear_matrix_tensor(table.shape[1], rows)
                col_matrix = bilinear_matrix_tensor(table.shape[2], cols)
            # (rows, 2H-1) @ (heads, 2H-1, 2W-1) @ (2W-1, cols): bilinear as two products.
            table = ops.matmul(ops.cast(row_matrix, self.compute_dtype), table)
            table = ops.matmul(table, ops.transpose(ops.cast(col_matrix, self.compute_dtype)))
        flat = ops.reshape(table, (self.num_heads, -1))
        if static:
            index = ops.convert_to_tensor(self._index(height, width), dtype="int32")
        else:
            index = relative_index_2d_tensor(height, width)
        bias = ops.take(flat, index, axis=1)
        positions = height * width
        return ops.reshape(bias, (1, self.num_heads, positions, positions))

    def compute_output_shape(self, size: int | tuple[int, int] | None = None) -> tuple:
        height, width = self.size if size is None else grid_size(size, self._who(), "size")
        return (1, self.num_heads, height * width, height * width)

    @staticmethod
    def resize_table(table: Any, size: int | tuple[int, int]) -> np.ndarray:
        """A table ``(heads, 2H - 1, 2W - 1)`` resized bilinearly for grid ``size = (h, w)``.

        Half-pixel centres, no antialiasing (``F.interpolate(mode="bilinear",
        align_corners=False)``, as timm). Returns a numpy array of shape
        ``(heads, 2h - 1, 2w - 1)``, the input unchanged if it already has it.

        Raises:
            ValueError: if ``table`` is not rank 3 with positive odd table sides,
                or ``size`` is not a positive int or pair of positive ints.
        """
        return _resize_table(table, size, f"{_CLASS}.resize_table")

    def load_own_variables(self, store: Any) -> None:
        """Load the table, resizing it bilinearly if it was saved at another grid size."""
        who = self._who()
        if len(store.keys()) != 1:
            raise ValueError(
                f"{who}: expected 1 saved variable (the table); received {len(store.keys())}"
            )
        stored = np.asarray(store["0"])
        self.table.assign(_resize_table(stored, self.size, who, num_heads=self.num_heads))

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            size=list(self.size),
            embeddings_initializer=keras.initializers.serialize(self.embeddings_initializer),
            position=keras.saving.serialize_keras_object(
                self.position if self._position_given else None
            ),
        )
        return config
