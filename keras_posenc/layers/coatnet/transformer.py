"""`RelativeTransformerBlock2D`: CoAtNet's Transformer block (MaxViT's, Swin's in windows)."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from keras_posenc.layers import _attention
from keras_posenc.layers._checks import (
    check_activation,
    check_bool,
    check_choice,
    check_int,
    check_positive_number,
    check_rate,
    grid_size,
)
from keras_posenc.layers._initializers import _derived_seed
from keras_posenc.layers._remat import Remat
from keras_posenc.layers.coatnet.partitions import (
    _check_partition,
    _partition,
    _spatial_size,
    merge_windows,
    partition_windows,
)
from keras_posenc.layers.coatnet.shared import (
    POOLS,
    _block_output_shape,
    _check_feature_map,
    _downsampled,
    _PooledProjection,
    _serialize_activation,
    _strides,
    drop_path,
    make_pool,
)
from keras_posenc.layers.coatnet.shifted import (
    _shift,
    check_shifted_map,
    roll_map,
    shifted_window_mask,
)
from keras_posenc.layers.position_biases import ContinuousPositionBias2D
from keras_posenc.layers.relative_position_2d import RelativePositionBias2D, is_static_size
from keras_posenc.layers.rotary import RotaryPositions
from keras_posenc.layers.rotary_2d import RotaryPositions2D

ATTENTION_WIDTHS = ("output", "input")

#: The 2D position biases of `RelativeTransformerBlock2D`: a learned table per head, or
#: an MLP of the offsets (`ContinuousPositionBias2D`).
POSITION_BIASES = ("table", "mlp")
#: The norms of `RelativeTransformerBlock2D`.
NORMS = ("layer", "batch")


@keras.saving.register_keras_serializable(package="keras_posenc")
class RelativeTransformerBlock2D(Remat, keras.layers.Layer):
    """Pre-norm Transformer block with 2D relative attention over a feature map (CoAtNet's T).

    ``x <- Shortcut(x) + DropPath(Attention(Pool(LayerNorm(x))))`` then
    ``x <- x + DropPath(FFN(LayerNorm(x)))``. The attention is multi-head
    self-attention over all ``h * w`` positions of the (pooled) map,
    ``softmax(Q K^T / sqrt(head_dim) + B) V``, where ``B`` is a learned relative
    position bias, one scalar per head and 2D offset
    (:class:`RelativePositionBias2D`), added before the softmax; the softmax runs
    in float32. The heads are ``filters // head_dim``; queries, keys and values
    come from one dense projection to ``3 * filters`` (laid out ``[q | k | v]``,
    each ``(heads, head_dim)``), followed by an output projection. The FFN is
    ``Dense(expansion_rate * filters)``, exact GELU (``activation``), ``Dense(filters)``.

    With ``partition`` the same block is MaxViT's block or grid attention: the
    attention runs within windows of the map (see ``partition``), the FFN and the
    residuals as above.

    With ``strides=2`` both branches are downsampled by a 2 x 2 stride-2 pool
    (max by default): ``Shortcut = Proj(Pool(x))`` (1 x 1 projection only when the
    width changes) and the attention sees ``Pool(LayerNorm(x))``.

    The defaults are the paper's block. timm's ``coatnet_*_rw`` models differ in
    options described here as configuration: average pooling, the attention at
    the input width (the output projection then widens it), no bias on the
    shortcut projection, LayerNorm epsilon 1e-6 and, for ``coatnet_3_rw``, layer
    scale (a learned per-channel factor on each residual branch).

    The bias table is sized at build time for the (pooled) map,
    ``(heads, 2h - 1, 2w - 1)``; weights saved from a block built at another size
    load with the table resized bilinearly (CoAtNet's fine-tuning at a higher
    resolution). Called on a map of another size than it was built for, the block
    resizes the table inside the call. To build it for maps of any size (height
    and width None), give ``bias_size``, the grid the table is sized for: each
    call then resizes the table to the map it sees (in the graph, when the size
    is known at run time only). With ``partition`` the table covers one window,
    whatever the map's size.

    With ``rotary`` (a `RotaryPositions2D`) the queries and keys are also
    rotated by their cells' 2D positions before the logits (timm's EVA-style
    ``apply_rot_embed_cat``): axial with fixed frequencies, or RoPE-Mixed with
    learned frequencies, one ``(2, heads, head_dim / 2)`` weight
    (``rotary_frequencies``) per block, initialised as Heo et al. do. Rotary
    goes alone (``position_bias=None``) or with either bias on top (Heo et
    al.'s RoPE with the relative position bias, their Swin experiments); with
    ``partition`` the positions are those within one window, like the bias.
    ``position_bias=None`` without ``rotary`` (no position information) is
    refused.

    Args:
        filters: output channels, a positive multiple of ``head_dim``.
        head_dim: channels per attention head (default 32, the paper's).
        strides: 1, or 2 to halve height and width (``ceil(size / 2)``).
        expansion_rate: FFN hidden width as a multiple of ``filters`` (default 4).
        drop_path_rate: stochastic depth on both residual branches; in [0, 1).
        norm_epsilon: LayerNorm epsilon (default 1e-5, as the official TF code).
        seed: optional int seed of the stochastic depth noise.
        pool: the downsampling pool, ``"max"`` (default: 2 x 2), ``"avg"`` or ``"max3"``
            (3 x 3, timm's ``"max"``; :data:`POOLS`).
        attention_width: ``"output"`` (default: queries, keys and values are
            ``filters`` wide) or ``"input"`` (as wide as the input, so
            ``input channels // head_dim`` heads, and the output projection maps
            to ``filters``: timm's ``_rw`` models).
        shortcut_bias: a bias on the shortcut projection (default True).
        layer_scale: None (default), or the initial value of the layer-scale
            factors, one per channel and branch, multiplying each residual
            branch before it is added (timm's ``init_values``).
        position_bias: None (rotary alone: needs ``rotary``), ``"table"``
            (default): the learned table
            `RelativePositionBias2D`; ``"mlp"``: `ContinuousPositionBias2D`, an
            MLP of the log-scaled offsets (timm's ``rmlp`` models, mode
            ``"cr"``), whose weights do not depend on the map's size.
        position_bias_dim: ``"mlp"`` only: the MLP's hidden units (default 512).
        position_bias_dropout: ``"mlp"`` only: dropout after the MLP's hidden
            layer during training (default 0; timm's ``RelPosMlp`` uses 0.125).
        activation: the FFN's activation (default ``"gelu"``, exact;
            ``"gelu_tanh"`` is the tanh approximation of the official MaxViT code).
        norm: ``"layer"`` (default: LayerNorm) or ``"batch"`` (BatchNorm over the
            map, with ``norm_epsilon`` and ``norm_momentum``: timm's
            ``coatnet_bn_*`` models). BatchNorm uses batch statistics when
            ``training`` is true.
        norm_momentum: ``norm="batch"`` only: the moving statistics' momentum
            (default 0.99; PyTorch's 0.1 is 0.9 here).
        partition: None (default: attention over the whole map), ``"block"`` or
            ``"grid"``: MaxViT's partitioned attention (Tu et al. 2022). The map
            is cut into windows of ``partition_size`` cells, ``"block"`` taking
            adjacent cells (local attention) and ``"grid"`` cells
            ``height / partition_size`` apart (a dilated, global grid); each
            window attends within itself, with the relative bias of its
            ``partition_size`` grid, and the FFN runs on every position.
            Needs ``strides=1``, ``filters`` equal to the input width and a map
            whose sides are multiples of ``partition_size``.
        partition_size: the windows' ``(height, width)`` (or one int) with
            ``partition``; must be None without it.
        rotary: None (default) or a `RotaryPositions2D` (2D rotary, axial or
            mixed; ``head_dim`` a multiple of 4), as above.
        shift: None (default) or 0: no shift; with ``partition="block"``, Swin's
            shifted windows (Liu et al. 2021): the windows are displaced by
            ``shift`` cells down and right (an int, a pair ``(rows, columns)``
            smaller than ``partition_size``, or ``"half"``: ``partition_size // 2``,
            Swin's). Computed as Swin computes it: the map is rolled up and left by
            ``shift``, cut into windows, and the cells the roll brought together
            from opposite edges attend within their own part only (a mask, see
            `shifted_window_mask`); the output is rolled back. The bias is the
            window's table, indexed by the cells' offsets. Swin alternates
            ``shift=None`` and ``"half"`` from block to block. The map's sides must
            be multiples of ``partition_size`` (keras-hub's Swin pads them with
            zeros instead) and, on a shifted side, longer than one window (Swin
            uses no shift there).
        bias_size: the (pooled) grid ``(height, width)`` (or one int) the
            relative bias is sized for, without ``partition``; default None: the
            map's size at build, which must then be known. Maps of other sizes
            resize the table bilinearly in the call (an MLP bias is evaluated
            for them).
        remat: recompute the block in the backward pass of training calls (Keras'
            ``keras.remat``; stochastic depth and dropout draw the same masks again)
            instead of keeping its activations: less memory, about one more forward
            pass of time. Default False. Not with ``norm="batch"`` (the recomputation
            would update the moving statistics again).
        **kwargs: base layer arguments (``name``, ``dtype``, ``trainable``).

    Call arguments:
        inputs: a feature map ``(batch, height, width, channels)``.
        training: bool; stochastic depth is active only when true.

    Returns:
        ``(batch, ceil(height / strides), ceil(width / strides), filters)``.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.layers.coatnet import RelativeTransformerBlock2D
        >>> block = RelativeTransformerBlock2D(64, head_dim=16, strides=2)
        >>> tuple(block(np.ones((2, 8, 6, 32), "float32")).shape)
        (2, 4, 3, 64)
        >>> block.num_heads, tuple(block.relative_bias.table.shape)
        (4, (4, 7, 5))
        >>> grid = RelativeTransformerBlock2D(32, head_dim=16, partition="grid",
        ...                                   partition_size=2)
        >>> tuple(grid(np.ones((2, 8, 6, 32), "float32")).shape)
        (2, 8, 6, 32)
        >>> tuple(grid.relative_bias.table.shape)  # one 2 x 2 window's offsets
        (2, 3, 3)
        >>> swin = RelativeTransformerBlock2D(32, head_dim=16, partition="block",
        ...                                   partition_size=2, shift="half")
        >>> tuple(swin(np.ones((2, 8, 6, 32), "float32")).shape), swin.shift
        ((2, 8, 6, 32), (1, 1))

        RoPE-Mixed alone (no bias): each block learns its own 2D frequencies, and maps
        of any size are taken:

        >>> from keras_posenc.layers import RotaryPositions2D
        >>> mixed = RelativeTransformerBlock2D(
        ...     32, head_dim=8, rotary=RotaryPositions2D(kind="mixed"), position_bias=None)
        >>> tuple(mixed(np.ones((2, 5, 7, 32), "float32")).shape)
        (2, 5, 7, 32)
        >>> tuple(mixed.rotary_frequencies.shape), mixed.relative_bias
        ((2, 4, 4), None)

    Reference:
        - [Dai et al., 2021. CoAtNet: Marrying Convolution and Attention for All
          Data Sizes](https://arxiv.org/abs/2106.04803)
        - [Tu et al., 2022. MaxViT: Multi-Axis Vision
          Transformer](https://arxiv.org/abs/2204.01697)
        - [Liu et al., 2021. Swin Transformer: Hierarchical Vision Transformer
          using Shifted Windows](https://arxiv.org/abs/2103.14030)
    """

    def __init__(
        self,
        filters: int,
        head_dim: int = 32,
        strides: int = 1,
        expansion_rate: int = 4,
        drop_path_rate: float = 0.0,
        norm_epsilon: float = 1e-5,
        seed: int | None = None,
        pool: str = "max",
        attention_width: str = "output",
        shortcut_bias: bool = True,
        layer_scale: float | None = None,
        position_bias: str = "table",
        position_bias_dim: int = 512,
        position_bias_dropout: float = 0.0,
        activation: str | Any = "gelu",
        norm: str = "layer",
        norm_momentum: float = 0.99,
        partition: str | None = None,
        partition_size: int | tuple[int, int] | None = None,
        bias_size: int | tuple[int, int] | None = None,
        rotary: Any = None,
        shift: int | tuple[int, int] | str | None = None,
        remat: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        who = self._who()
        self._set_remat(who, remat)
        self.rotary = _check_rotary(who, rotary)
        if position_bias is None and self.rotary is None:
            raise ValueError(
                f"{who}: position_bias=None leaves the attention without positions: give "
                f"`rotary` (a RotaryPositions2D) or a bias ('table' or 'mlp')"
            )
        if position_bias is None and bias_size is not None:
            raise ValueError(
                f"{who}: `bias_size` sizes the relative bias, and position_bias=None has "
                f"none; received bias_size={bias_size!r}"
            )
        if bias_size is not None:
            if partition is not None:
                raise ValueError(
                    f"{who}: `bias_size` is for attention over the whole map; with "
                    f"partition={partition!r} the bias covers one window of partition_size. "
                    f"Received bias_size={bias_size!r}"
                )
            bias_size = grid_size(bias_size, who, "bias_size")
        self.bias_size = bias_size
        if position_bias is not None:
            position_bias = check_choice(who, "position_bias", position_bias, POSITION_BIASES)
        self.position_bias = position_bias
        self.position_bias_dim = check_int(who, "position_bias_dim", position_bias_dim, 1)
        self.position_bias_dropout = check_rate(who, "position_bias_dropout", position_bias_dropout)
        self.activation = activation
        self._activation_fn = check_activation(who, activation)
        self.norm = check_choice(who, "norm", norm, NORMS)
        if self.remat and self.norm == "batch":
            raise ValueError(
                f"{who}: remat=True recomputes the block in the backward pass, and "
                f"norm='batch' would update its moving statistics again there: use "
                f"norm='layer' or remat=False"
            )
        self.norm_momentum = check_rate(who, "norm_momentum", norm_momentum)
        self.partition, self.partition_size = _partition(who, partition, partition_size)
        self.shift = _shift(who, shift, self.partition, self.partition_size)
        self.filters = check_int(who, "filters", filters, 1)
        self.head_dim = check_int(who, "head_dim", head_dim, 1)
        if self.filters % self.head_dim:
            raise ValueError(
                f"{who}: `filters` must be a multiple of `head_dim`; received "
                f"filters={filters}, head_dim={head_dim}"
            )
        if self.rotary is not None:
            self.rotary.check_head_dim(who, self.head_dim)
        self.pool = check_choice(who, "pool", pool, POOLS)
        self.attention_width = check_choice(
            who, "attention_width", attention_width, ATTENTION_WIDTHS
        )
        self.shortcut_bias = check_bool(who, "shortcut_bias", shortcut_bias)
        if layer_scale is not None:
            layer_scale = check_positive_number(who, "layer_scale", layer_scale)
        self.layer_scale = layer_scale
        # With attention_width="input" the heads follow the input width (set in build).
        self.num_heads = self.filters // self.head_dim
        self.attention_dim = self.filters
        self.strides = _strides(strides, who)
        if self.partition is not None and self.strides != 1:
            raise ValueError(
                f"{who}: partitioned attention (partition={self.partition!r}) keeps the "
                f"resolution: `strides` must be 1; received strides={strides!r}"
            )
        self.expansion_rate = check_int(who, "expansion_rate", expansion_rate, 1)
        self.drop_path_rate = check_rate(who, "drop_path_rate", drop_path_rate)
        self.norm_epsilon = check_rate(who, "norm_epsilon", norm_epsilon)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed) if self.drop_path_rate > 0 else None

        policy = self.dtype_policy
        self.attention_norm = self._make_norm("attention_norm")
        self.attention_pool = (
            make_pool(self.pool, policy, "attention_pool") if self.strides == 2 else None
        )
        self.qkv_dense = None
        self.output_dense = keras.layers.Dense(self.filters, dtype=policy, name="attention_output")
        self.ffn_norm = self._make_norm("ffn_norm")
        self.ffn_hidden = keras.layers.Dense(
            self.expansion_rate * self.filters, dtype=policy, name="ffn_hidden"
        )
        self.ffn_output = keras.layers.Dense(self.filters, dtype=policy, name="ffn_output")
        self.relative_bias = None
        self.rotary_frequencies = None
        self.shortcut_pool = None
        self.shortcut_projection = None
        self.attention_scale = None
        self.ffn_scale = None

    def _who(self) -> str:
        return f"RelativeTransformerBlock2D '{self.name}'"

    def _make_norm(self, name: str) -> keras.layers.Layer:
        if self.norm == "batch":
            return keras.layers.BatchNormalization(
                epsilon=self.norm_epsilon,
                momentum=self.norm_momentum,
                dtype=self.dtype_policy,
                name=name,
            )
        return keras.layers.LayerNormalization(
            epsilon=self.norm_epsilon, dtype=self.dtype_policy, name=name
        )

    def build(self, input_shape: Any) -> None:
        shape = _check_feature_map(input_shape, self._who())
        batch, height, width, channels = shape
        sized = self.partition is not None or self.bias_size or self.position_bias is None
        if (height is None or width is None) and not sized:
            raise ValueError(
                f"{self._who()}: the spatial size must be known when the block is built "
                f"(it sizes the relative position table), or `bias_size` given (the grid "
                f"the table is sized for, resized at each call); received input shape {shape}"
            )
        channels = int(channels)
        if self.shift is not None:  # first: its message says what Swin does instead
            check_shifted_map(self._who(), shape, self.partition_size, self.shift)
        if self.partition is not None:
            _check_partition(self._who(), shape, self.partition_size, self.filters)
        if self.attention_width == "input":
            if channels % self.head_dim:
                raise ValueError(
                    f"{self._who()}: with attention_width='input' the input channels must "
                    f"be a multiple of head_dim={self.head_dim}; received input shape {shape}"
                )
            self.attention_dim = channels
            self.num_heads = channels // self.head_dim
        self.qkv_dense = keras.layers.Dense(
            3 * self.attention_dim, dtype=self.dtype_policy, name="qkv"
        )
        _PooledProjection.make(self, channels, self.filters, self.pool, self.shortcut_bias)
        _PooledProjection.build(self, shape)
        self.attention_norm.build(shape)
        if self.attention_pool is not None:
            self.attention_pool.build(shape)
        grid = (_downsampled(height, self.strides), _downsampled(width, self.strides))
        # The positions that attend to each other: the map, or one window of it.
        window = self.partition_size or self.bias_size or grid
        if self.position_bias is None:
            self.relative_bias = None
        elif self.position_bias == "mlp":
            self.relative_bias = ContinuousPositionBias2D(
                self.num_heads,
                size=window,
                hidden_dim=self.position_bias_dim,
                dropout=self.position_bias_dropout,
                dtype=self.dtype_policy,
                name="relative_bias",
            )
        else:
            self.relative_bias = RelativePositionBias2D(
                self.num_heads, size=window, dtype=self.dtype_policy, name="relative_bias"
            )
        if self.rotary is not None and self.rotary.trainable:
            seed = self.seed
            self.rotary_frequencies = self.add_weight(
                shape=self.rotary.frequency_shape(self.num_heads, self.head_dim),
                initializer=self.rotary.initializer(
                    None if seed is None else _derived_seed(seed, "rotary_frequencies")
                ),
                name="rotary_frequencies",
                # float32 under mixed precision too: angles grow with the map, and timm
                # computes them in float32 under autocast (get_mixed_freqs).
                dtype="float32",
                autocast=False,
            )
        self.qkv_dense.build((batch, None, channels))
        self.output_dense.build((batch, None, self.attention_dim))
        if self.layer_scale is not None:
            for branch in ("attention_scale", "ffn_scale"):
                setattr(
                    self,
                    branch,
                    self.add_weight(
                        shape=(self.filters,),
                        initializer=keras.initializers.Constant(self.layer_scale),
                        name=branch,
                    ),
                )
        self.ffn_norm.build((batch, *grid, self.filters))
        self.ffn_hidden.build((batch, *grid, self.filters))
        self.ffn_output.build((batch, *grid, self.expansion_rate * self.filters))

    def _bias(self, height: Any, width: Any, training: bool | None) -> Any:
        """The relative bias for a ``(height, width)`` map (or window), or None."""
        if self.relative_bias is None:
            return None
        if not is_static_size((height, width)):
            # Both sides as tensors: Keras refuses a call argument mixing the two.
            size = tuple(ops.convert_to_tensor(side, "int32") for side in (height, width))
        else:
            size = None if (height, width) == self.relative_bias.size else (height, width)
        if self.position_bias == "mlp":
            return self.relative_bias(size=size, training=training)
        return self.relative_bias(size=size)

    def _attention(self, x: Any, training: bool | None = None, mask: Any = None) -> Any:
        height, width = _spatial_size(x)
        positions = height * width
        qkv = self.qkv_dense(ops.reshape(x, (-1, positions, x.shape[-1])))
        qkv = ops.reshape(qkv, (-1, positions, 3, self.num_heads, self.head_dim))
        query, key, value = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        if self.rotary is not None:
            query = self.rotary.rotate(query, (height, width), self.rotary_frequencies)
            key = self.rotary.rotate(key, (height, width), self.rotary_frequencies)
        bias = self._bias(height, width, training)
        # The core's attention: float32 logits and softmax whatever the compute
        # dtype ("Architecture" in docs/development.md: precision).
        attended, _ = _attention.attend(
            _attention.scale_queries(query, self.head_dim),
            key,
            value,
            mask=mask,
            bias=None if bias is None else ops.cast(bias, "float32"),
        )
        attended = ops.reshape(attended, (-1, height, width, self.attention_dim))
        return self.output_dense(attended)

    def _partitioned_attention(self, x: Any, training: bool | None = None) -> Any:
        """Attention within the windows of ``self.partition`` (or over the whole map)."""
        if self.partition is None:
            return self._attention(x, training)
        # A map of unknown size at build is checked here, once its size is known.
        if self.shift is not None:
            check_shifted_map(self._who(), tuple(x.shape), self.partition_size, self.shift)
        _check_partition(self._who(), tuple(x.shape), self.partition_size, self.filters)
        height, width = _spatial_size(x)
        if self.shift is None:
            windows = partition_windows(x, self.partition, self.partition_size)
            windows = self._attention(windows, training)
            return merge_windows(windows, self.partition, self.partition_size, (height, width))
        # Swin's shifted windows (shifted.py): roll, attend within the windows and
        # their regions, roll back.
        windows = partition_windows(roll_map(x, self.shift), "block", self.partition_size)
        mask = shifted_window_mask(height, width, self.partition_size, self.shift)
        # One mask per window of every image: windows are ordered image by image.
        cells = self.partition_size[0] * self.partition_size[1]
        mask = ops.broadcast_to(mask[None], (ops.shape(x)[0], ops.shape(mask)[0], cells, cells))
        mask = ops.reshape(mask, (-1, cells, cells))
        windows = self._attention(windows, training, mask=mask)
        x = merge_windows(windows, "block", self.partition_size, (height, width))
        return roll_map(x, self.shift, back=True)

    def _scaled(self, x: Any, scale: Any) -> Any:
        return x if scale is None else x * ops.cast(scale, x.dtype)

    def _normalised(self, norm: keras.layers.Layer, x: Any, training: bool | None) -> Any:
        # BatchNorm takes `training` (batch statistics); LayerNorm has no such argument.
        return norm(x, training=training) if self.norm == "batch" else norm(x)

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        if self._remats(training):
            return self._remat_call(lambda x: self.call(x, training), (inputs,), training)
        shortcut = _PooledProjection.call(self, inputs)
        x = self._normalised(self.attention_norm, inputs, training)
        if self.attention_pool is not None:
            x = self.attention_pool(x)
        x = self._scaled(self._partitioned_attention(x, training), self.attention_scale)
        x = shortcut + drop_path(x, self.drop_path_rate, self.seed_generator, training)
        hidden = self.ffn_hidden(self._normalised(self.ffn_norm, x, training))
        y = self.ffn_output(self._activation_fn(hidden))
        y = self._scaled(y, self.ffn_scale)
        return x + drop_path(y, self.drop_path_rate, self.seed_generator, training)

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return _block_output_shape(input_shape, self._who(), self.strides, self.filters)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            filters=self.filters,
            head_dim=self.head_dim,
            strides=self.strides,
            expansion_rate=self.expansion_rate,
            drop_path_rate=self.drop_path_rate,
            norm_epsilon=self.norm_epsilon,
            seed=self.seed,
            pool=self.pool,
            attention_width=self.attention_width,
            shortcut_bias=self.shortcut_bias,
            layer_scale=self.layer_scale,
            position_bias=self.position_bias,
            position_bias_dim=self.position_bias_dim,
            position_bias_dropout=self.position_bias_dropout,
            activation=_serialize_activation(self.activation),
            norm=self.norm,
            norm_momentum=self.norm_momentum,
            partition=self.partition,
            partition_size=None if self.partition_size is None else list(self.partition_size),
            bias_size=None if self.bias_size is None else list(self.bias_size),
            rotary=keras.saving.serialize_keras_object(self.rotary),
            shift=None if self.shift is None else list(self.shift),
            remat=self.remat,
        )
        return config


def _check_rotary(caller: str, rotary: Any) -> RotaryPositions2D | None:
    """The 2D rotary of ``rotary``: a `RotaryPositions2D`, its config, or None."""
    if isinstance(rotary, dict):
        rotary = keras.saving.deserialize_keras_object(rotary)
    if isinstance(rotary, RotaryPositions):
        raise TypeError(
            f"{caller}: `rotary` turns a 2D map: give a RotaryPositions2D (kind 'axial' or "
            f"'mixed'), not the 1D {rotary!r}"
        )
    if rotary is not None and not isinstance(rotary, RotaryPositions2D):
        raise TypeError(
            f"{caller}: `rotary` must be None or a RotaryPositions2D (e.g. "
            f"RotaryPositions2D(kind='mixed')); received {rotary!r}"
        )
    return rotary
