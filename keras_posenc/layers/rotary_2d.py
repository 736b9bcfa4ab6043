"""2D rotary position embeddings for feature maps: axial and mixed (RoPE-Mixed).

`RotaryPositions2D` says how the queries and keys of a ``(height, width)`` grid
are rotated by their 2D positions, as timm's ``RotaryEmbeddingCat`` (axial,
fixed frequencies) and ``RotaryEmbeddingMixed`` (Heo et al. 2024's RoPE-Mixed,
learned per-head frequencies) do. Like `RotaryPositions` it is a description,
not a layer: `RelativeTransformerBlock2D` takes one as ``rotary=`` and owns the
mixed frequencies as its weight (keras_posenc/layers/coatnet/transformer.py).

Examples:

    >>> import numpy as np
    >>> from keras_posenc.layers.rotary_2d import RotaryPositions2D
    >>> axial = RotaryPositions2D()
    >>> x = np.ones((1, 6, 2, 8), "float32")  # (batch, height * width, heads, head_dim)
    >>> tuple(axial.rotate(x, (2, 3)).shape)
    (1, 6, 2, 8)
    >>> RotaryPositions2D(kind="mixed").frequency_shape(num_heads=2, head_dim=8)
    (2, 2, 4)
"""

from __future__ import annotations

import math
import random
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc.layers._checks import check_bool, check_choice, check_int, grid_size
from keras_posenc.layers._description import Description

__all__ = ["MixedRotaryFrequencies", "RotaryPositions2D"]

#: The kinds of 2D rotary: ``"axial"`` (fixed frequencies, half of the pairs per axis) and
#: ``"mixed"`` (learned per-head frequencies mixing both axes in every pair).
KINDS = ("axial", "mixed")
#: The axial frequency bands: RoPE's inverse frequencies over cell indices, or timm's
#: pixel bands over coordinates in [-1, 1].
BANDS = ("inverse", "pixel")
#: Which coordinate comes first: ``"ij"`` (row, column) or ``"xy"`` (column, row).
GRID_INDEXINGS = ("ij", "xy")

# timm's defaults (timm/layers/pos_embed_sincos.py): 10000 for the axial bands, 10 for the
# mixed frequencies (RoPE-Mixed's); "ij" for RotaryEmbeddingCat, "xy" for RotaryEmbeddingMixed.
_TEMPERATURE = {"axial": 10000.0, "mixed": 10.0}
_INDEXING = {"axial": "ij", "mixed": "xy"}

DEFAULTS = {
    "kind": "axial",
    "temperature": None,
    "bands": "inverse",
    "max_res": 224,
    "linear_bands": False,
    "reference_size": None,
    "grid_indexing": None,
}


def _axis_coordinates(side: Any, pixel: bool, reference: int | None) -> Any:
    """The coordinates of one side's cells, float32: indices, or ``[-1, 1]`` evenly."""
    side_f = ops.cast(side, "float32")
    t = ops.cast(ops.arange(side), "float32")
    if pixel:
        # torch.linspace(-1, 1, s): -1 alone for one cell.
        t = t * (2.0 / ops.maximum(side_f - 1.0, 1.0)) - 1.0
    if reference is not None:
        # EVA's resizing (timm's ref_feat_shape): the map spans the reference grid.
        t = t / side_f * float(reference)
    return t


@keras.saving.register_keras_serializable(package="keras_posenc")
class MixedRotaryFrequencies(keras.initializers.Initializer):
    """RoPE-Mixed's initial frequencies, shape ``(2, num_heads, head_dim // 2)``.

    Heo et al. (2024) and timm's ``init_random_2d_freqs``: magnitudes
    ``m_l = temperature ** (-4 l / head_dim)`` for ``l < head_dim / 4``, and per
    head a random angle ``a`` (uniform in ``[0, 2 pi)``); the ``x`` frequencies
    are ``[m cos a, m cos(a + pi / 2)]`` and the ``y`` ones
    ``[m sin a, m sin(a + pi / 2)]`` (so pairs of the two halves turn along
    perpendicular directions).

    Args:
        temperature: the magnitudes' base (10 in the paper), a positive number.
        seed: None, an int or a ``keras.random.SeedGenerator``.

    Examples:

        >>> import numpy as np
        >>> from keras import ops
        >>> from keras_posenc.layers.rotary_2d import MixedRotaryFrequencies
        >>> f = ops.convert_to_numpy(MixedRotaryFrequencies(seed=1)((2, 3, 4)))
        >>> print(np.round(np.hypot(f[0], f[1])[0], 4))  # magnitudes of head 0
        [1.     0.3162 1.     0.3162]
    """

    def __init__(self, temperature: float = 10.0, seed: Any = None) -> None:
        self.temperature = _positive("MixedRotaryFrequencies", "temperature", temperature)
        # Unseeded, it fixes a seed now from Python's random state, as Keras' initializers do
        # (so keras.utils.set_random_seed makes it reproducible); a SeedGenerator made here
        # would become a variable of the layer that builds the weight.
        self.seed = seed if seed is not None else random.randint(1, 2**31 - 1)

    def __call__(self, shape: Any, dtype: Any = None) -> Any:
        shape = tuple(int(side) for side in shape)
        if len(shape) != 3 or shape[0] != 2 or shape[2] % 2:
            raise ValueError(
                "MixedRotaryFrequencies: the shape must be (2, num_heads, head_dim // 2) "
                f"with an even last axis; got {shape}"
            )
        heads, half = shape[1], shape[2]
        head_dim = 2 * half
        magnitudes = self.temperature ** (-np.arange(0, head_dim, 4, dtype="float32") / head_dim)
        angles = keras.random.uniform((heads, 1), 0.0, 2.0 * math.pi, seed=self.seed)
        magnitudes = ops.convert_to_tensor(magnitudes[None, :], "float32")
        fx = ops.concatenate(
            [magnitudes * ops.cos(angles), magnitudes * ops.cos(angles + math.pi / 2)], -1
        )
        fy = ops.concatenate(
            [magnitudes * ops.sin(angles), magnitudes * ops.sin(angles + math.pi / 2)], -1
        )
        return ops.cast(ops.stack([fx, fy]), dtype or "float32")

    def get_config(self) -> dict:
        seed = self.seed if isinstance(self.seed, int) else None
        return {"temperature": self.temperature, "seed": seed}


def _positive(caller: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{caller}: `{name}` must be a positive number; got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{caller}: `{name}` must be a finite number; got {value!r}")
    return float(value)


@keras.saving.register_keras_serializable(package="keras_posenc")
class RotaryPositions2D(Description):
    """2D rotary position embeddings (axial or RoPE-Mixed) for a feature map.

    The queries and keys of the cells of a ``(height, width)`` map, flattened
    row by row, are rotated pair by pair; pairs are interleaved
    (dimensions ``2k`` and ``2k + 1``, timm's default layout), pair ``k`` turned
    by an angle ``phi_k(p)`` of the cell's coordinates ``p = (p_1, p_2)``
    (``(row, column)`` with ``grid_indexing="ij"``, ``(column, row)`` with
    ``"xy"``):

    - ``"axial"`` (timm's ``RotaryEmbeddingCat``; Heo et al.'s RoPE-Axial): the
      first half of the pairs turn with ``p_1``, the second with ``p_2``, by the
      same ``head_dim / 4`` bands ``b_l``: ``phi_l = p_1 b_l`` and
      ``phi_{l + head_dim/4} = p_2 b_l``. The bands are ``"inverse"``
      (``b_l = temperature ** (-l / (head_dim / 4))``, over cell indices
      ``0 .. side - 1``: EVA-02's; the logit of two cells then depends on their
      offset only) or ``"pixel"`` (timm's default: ``pi`` times ``max_res / 2``
      bands from 1 up, log-spaced or with ``linear_bands`` linear, over
      coordinates evenly spaced in ``[-1, 1]``).
    - ``"mixed"`` (``RotaryEmbeddingMixed``, RoPE-Mixed): learned frequencies
      ``f`` of shape ``(2, num_heads, head_dim / 2)`` per layer (the layer that
      uses it owns them: `MixedRotaryFrequencies` initialises them), ``phi_k =
      p_1 f[0, h, k] + p_2 f[1, h, k]`` for head ``h``, over cell indices.

    ``reference_size`` (axial, timm's ``ref_feat_shape``) rescales the
    coordinates of a map of any size to span that grid (EVA's fine-tuning at a
    new resolution); without it a larger map takes further indices (or, for
    ``"pixel"``, the same ``[-1, 1]``). The grid comes from the feature map at
    each call, so any size works. Angles and the rotation are computed in
    float32; `rotate` returns its input's dtype.

    Args:
        kind: ``"axial"`` (default) or ``"mixed"``.
        temperature: the base of the frequencies: ``None`` (default) for 10000
            (axial) or 10 (mixed), else a positive number; unused by
            ``bands="pixel"`` (must stay None).
        bands: ``"inverse"`` (default) or ``"pixel"``, axial only.
        max_res: the pixel bands' maximum resolution (default 224), an integer
            ``>= 2``, ``bands="pixel"`` only.
        linear_bands: linear instead of log-spaced pixel bands (default False),
            ``bands="pixel"`` only.
        reference_size: None (default) or the ``(height, width)`` (or one int)
            the coordinates are rescaled to, axial only.
        grid_indexing: ``None`` (default: ``"ij"`` axial, ``"xy"`` mixed, as
            timm), ``"ij"`` or ``"xy"``.

    An argument its ``kind`` or ``bands`` does not read must keep its default,
    else a ``ValueError``. A head size that is not a multiple of 4 is refused
    by `check_head_dim` (and `rotate`).

    Examples:

        The logit of two cells depends on their 2D offset only:

        >>> import numpy as np
        >>> from keras import ops
        >>> from keras_posenc.layers.rotary_2d import RotaryPositions2D
        >>> rope = RotaryPositions2D(temperature=100.0)
        >>> rng = np.random.default_rng(0)
        >>> q, k = (np.repeat(rng.normal(size=(1, 1, 1, 8)), 20, 1).astype("float32")
        ...         for _ in range(2))
        >>> tq = ops.convert_to_numpy(rope.rotate(q, (4, 5)))[0, :, 0]
        >>> tk = ops.convert_to_numpy(rope.rotate(k, (4, 5)))[0, :, 0]
        >>> def logit(a, b):  # cells (row, column) of the 4 x 5 map
        ...     return float(tq[a[0] * 5 + a[1]] @ tk[b[0] * 5 + b[1]])
        >>> bool(np.isclose(logit((0, 0), (1, 2)), logit((2, 1), (3, 3)), atol=1e-5))
        True
        >>> RotaryPositions2D(kind="mixed")
        RotaryPositions2D(kind='mixed')
        >>> RotaryPositions2D(kind="mixed").trainable
        True

    References:
        - [Heo et al., 2024. Rotary Position Embedding for Vision
          Transformer](https://arxiv.org/abs/2403.13298)
        - [Fang et al., 2023. EVA-02: A Visual Representation for Neon
          Genesis](https://arxiv.org/abs/2303.11331)
    """

    def __init__(
        self,
        kind: str = "axial",
        temperature: float | None = None,
        bands: str = "inverse",
        max_res: int = 224,
        linear_bands: bool = False,
        reference_size: int | tuple[int, int] | None = None,
        grid_indexing: str | None = None,
    ) -> None:
        who = "RotaryPositions2D"
        kind = check_choice(who, "kind", kind, KINDS)
        bands = check_choice(who, "bands", bands, BANDS)
        if temperature is not None:
            temperature = _positive(who, "temperature", temperature)
        max_res = check_int(who, "max_res", max_res, 2)
        linear_bands = check_bool(who, "linear_bands", linear_bands)
        if reference_size is not None:
            reference_size = list(grid_size(reference_size, who, "reference_size"))
        if grid_indexing is not None:
            grid_indexing = check_choice(who, "grid_indexing", grid_indexing, GRID_INDEXINGS)
        arguments = {
            "kind": kind,
            "temperature": temperature,
            "bands": bands,
            "max_res": max_res,
            "linear_bands": linear_bands,
            "reference_size": reference_size,
            "grid_indexing": grid_indexing,
        }
        unread = []
        if kind == "mixed":
            unread += ["bands", "reference_size"]
        if bands == "pixel":
            unread.append("temperature")
        else:
            unread += ["max_res", "linear_bands"]
        for name in unread:
            if arguments[name] != DEFAULTS[name]:
                raise ValueError(
                    f"{who}: `{name}` is not read with kind={kind!r}, bands={bands!r}: leave "
                    f"it at its default {DEFAULTS[name]!r}; received {name}={arguments[name]!r}"
                )
        self._arguments = arguments
        self.kind = kind
        self.temperature = temperature if temperature is not None else _TEMPERATURE[kind]
        self.bands = bands
        self.max_res = max_res
        self.linear_bands = linear_bands
        self.reference_size = None if reference_size is None else tuple(reference_size)
        self.grid_indexing = grid_indexing or _INDEXING[kind]

    def __repr__(self) -> str:
        arguments = ", ".join(
            f"{name}={value!r}"
            for name, value in self._arguments.items()
            if value != DEFAULTS[name]
        )
        return f"{type(self).__name__}({arguments})"

    @property
    def trainable(self) -> bool:
        """Whether the scheme reads learned frequencies (``"mixed"``)."""
        return self.kind == "mixed"

    def check_head_dim(self, caller: str, head_dim: int) -> None:
        """Refuses a head size that is not a multiple of 4 (two axes of pairs)."""
        if head_dim % 4:
            raise ValueError(
                f"{caller}: 2D rotary turns pairs along two axes: the head size must be a "
                f"multiple of 4; received head_dim={head_dim}"
            )

    def frequency_shape(self, num_heads: int, head_dim: int) -> tuple[int, int, int]:
        """The shape of the mixed frequencies a layer owns: ``(2, num_heads, head_dim // 2)``."""
        return (2, num_heads, head_dim // 2)

    def initializer(self, seed: Any = None) -> MixedRotaryFrequencies:
        """The initializer of the mixed frequencies (`MixedRotaryFrequencies`)."""
        return MixedRotaryFrequencies(self.temperature, seed)

    def axial_bands(self, head_dim: int) -> np.ndarray:
        """The axial bands ``b_l``, ``head_dim // 4`` float32 numbers."""
        count = head_dim // 4
        if self.bands == "inverse":
            exponent = np.arange(count, dtype="float32") / np.float32(count)
            return (1.0 / np.float32(self.temperature) ** exponent).astype("float32")
        top = self.max_res / 2
        if self.linear_bands:
            values = np.linspace(1.0, top, count, dtype="float32")
        else:
            values = 2.0 ** np.linspace(0.0, math.log2(self.max_res) - 1, count, dtype="float32")
        return (values * np.float32(math.pi)).astype("float32")

    def coordinates(self, size: Any) -> tuple[Any, Any]:
        """``(p_1, p_2)``: each cell's coordinates, float32 vectors of ``height * width``."""
        height, width = size
        reference = self.reference_size or (None, None)
        pixel = self.kind == "axial" and self.bands == "pixel"
        rows = _axis_coordinates(height, pixel, reference[0])
        columns = _axis_coordinates(width, pixel, reference[1])
        # Row-major cells: the row coordinate repeats along a row, the column's tiles.
        ones_w = ops.ones_like(columns)
        ones_h = ops.ones_like(rows)
        p_row = ops.reshape(rows[:, None] * ones_w[None, :], (-1,))
        p_col = ops.reshape(ones_h[:, None] * columns[None, :], (-1,))
        return (p_row, p_col) if self.grid_indexing == "ij" else (p_col, p_row)

    def angles(self, size: Any, head_dim: int, frequencies: Any = None) -> Any:
        """The angles ``phi``, float32 ``(height * width, heads or 1, head_dim // 2)``."""
        first, second = self.coordinates(size)
        if self.kind == "axial":
            bands = ops.convert_to_tensor(self.axial_bands(head_dim))
            phi = ops.concatenate([first[:, None] * bands, second[:, None] * bands], axis=-1)
            return phi[:, None, :]
        if frequencies is None:
            raise ValueError(
                "RotaryPositions2D: kind='mixed' needs its learned `frequencies`, "
                "(2, num_heads, head_dim // 2); received None"
            )
        frequencies = ops.cast(frequencies, "float32")
        return (
            first[:, None, None] * frequencies[0][None]
            + second[:, None, None] * frequencies[1][None]
        )

    def rotate(self, x: Any, size: Any, frequencies: Any = None) -> Any:
        """``x`` (batch, height * width, heads, head_dim) turned by its cells' angles.

        Args:
            x: queries or keys of a map flattened row by row.
            size: the map's ``(height, width)`` (ints or int scalar tensors).
            frequencies: the mixed frequencies ``(2, heads, head_dim // 2)``;
                None for ``"axial"``.
        """
        head_dim = int(x.shape[-1])
        self.check_head_dim("RotaryPositions2D.rotate", head_dim)
        phi = self.angles(size, head_dim, frequencies)
        cos, sin = ops.cos(phi), ops.sin(phi)
        x32 = ops.cast(x, "float32")
        even, odd = x32[..., 0::2], x32[..., 1::2]
        turned = ops.stack([even * cos - odd * sin, odd * cos + even * sin], axis=-1)
        return ops.cast(ops.reshape(turned, ops.shape(x)), x.dtype)
