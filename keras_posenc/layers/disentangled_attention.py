"""DeBERTa's disentangled self-attention: content-to-position and position-to-content terms.

The layer projects one table of relative position embeddings into per-head position keys
and queries and adds two relative terms to the content logits; the attention itself is the
one core of keras_posenc/layers/_attention.py, the relative rows come from a position scheme
(keras_posenc/layers/position_schemes.py, DeBERTa's `DebertaBuckets` by default), and the
rows of every pair are read by `backend.take_columns` as `MultiHeadRelativeAttention` reads
its key term (keras_posenc/layers/_relative_terms.py): no ``(length, length, head_dim)``
tensor is built.
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from keras_posenc import backend
from keras_posenc.layers import _attention, position_schemes, relative_index
from keras_posenc.layers._checks import (
    check_bias,
    check_bool,
    check_bool_or_auto,
    check_features,
    check_int,
    check_mask,
    check_rate,
    shape_of,
)
from keras_posenc.layers._initializers import sublayer_initializer

__all__ = ["DisentangledSelfAttention"]

#: DeBERTa's relative terms: content-to-position and position-to-content.
TERMS = ("c2p", "p2c")


def _check_terms(caller: str, terms: Any) -> tuple[str, ...]:
    if isinstance(terms, str):
        terms = (terms,)
    if not isinstance(terms, list | tuple) or not terms or any(t not in TERMS for t in terms):
        raise ValueError(
            f"{caller}: `terms` must be a non-empty list of {', '.join(map(repr, TERMS))} "
            f"(DeBERTa's pos_att_type), got {terms!r}."
        )
    if len(set(terms)) != len(terms):
        raise ValueError(f"{caller}: `terms` must not repeat a term, got {terms!r}.")
    return tuple(t for t in TERMS if t in terms)


@keras.saving.register_keras_serializable(package="keras_posenc")
class DisentangledSelfAttention(keras.layers.Layer):
    """DeBERTa's disentangled self-attention (He et al. 2021), v2/v3 as released.

    With content queries and keys ``q_i, k_j`` (projections of the input), a table
    ``P`` of relative position embeddings and its rows ``δ(i, j) =
    position.index(j - i)`` (DeBERTa's log buckets, `DebertaBuckets`):

    ``e_ij = (q_i . k_j + q_i . k^P[δ(i, j)] + k_j . q^P[δ(i, j)]) / sqrt(3 d)``

    where ``k^P = W_k P + b_k`` and ``q^P = W_q P + b_q`` are the position keys and
    queries: the content projections applied to the table (``share_position_projections
    =True``, DeBERTa v3 and v2's ``share_att_key``), or projections of their own. The
    second term is content-to-position (``"c2p"``), the third position-to-content
    (``"p2c"``); ``terms`` keeps either, and the scale is ``sqrt((1 + len(terms)) d)``.
    Both terms read the row of the pair ``(i, j)``, as the released checkpoints do
    (Hugging Face's ``modeling_deberta_v2.py`` and keras-hub's
    ``DisentangledSelfAttention``). Dropout (``dropout``) drops the table's entries and
    the attention probabilities, as there.

    The table is the layer's own (``(2 * position_buckets, hidden)``, created in
    ``build``), or, with ``shared_table=True``, given to every call as
    ``relative_embeddings``: DeBERTa shares one table (after a layer norm) between all
    its layers. Each pair's relative logits are read from ``(batch, heads, length,
    table rows)`` products by a gather (`backend.take_columns`); nothing of size
    ``(length, length, head_dim)`` is built. Logits and softmax run in float32 with a
    finite mask fill (`keras_posenc.layers.MultiHeadRelativeAttention`'s conventions): a
    query that may attend to no key gets a zero attention output.

    Another scheme's bias (``relative="bias"`` in `MultiHeadRelativeAttention`,
    `RelativePositionBias` of any scheme, ALiBi) adds to the logits as
    ``attention_bias``. There is no cache and no causal mask: DeBERTa is an encoder.

    Args:
        num_heads: attention heads.
        key_dim: size of each head (queries, keys, values).
        position: the position scheme of the table rows: a `PositionScheme`, its config
            or a registered name; default ``"deberta"`` (`DebertaBuckets(256, 512)`).
        terms: the relative terms, ``("c2p", "p2c")`` (default) or one of them.
        share_position_projections: project the table with the content query and key
            projections (v3); False: with separate ones (``position_query``,
            ``position_key``).
        shared_table: the table comes with every call (``relative_embeddings``) rather
            than being the layer's own weight.
        dropout: dropout rate of the table and the attention probabilities.
        use_bias: whether the projections have biases (DeBERTa: True).
        output_shape: size of the output's last axis; default the input's.
        kernel_initializer: initializer of the projections' kernels (each sublayer its
            own copy).
        bias_initializer: initializer of their biases.
        embeddings_initializer: initializer of the layer's own table.
        fused_attention: ``"auto"``, ``True`` or ``False``: compute the attention with
            ``keras.ops.dot_product_attention`` (the relative terms as its bias); see
            `MultiHeadRelativeAttention`.
        **kwargs: standard layer arguments.

    Call arguments:
        inputs: ``(batch, length, features)``.
        relative_embeddings: the table, ``(rows, features)`` or ``(1, rows,
            features)``, with ``shared_table=True``; else None.
        padding_mask: ``(batch, length)`` bool or int 0/1, True for real tokens: the keys
            that may be attended to. Default: the input's Keras mask.
        attention_mask: ``(batch, length, length)`` bool or int 0/1, True where query
            ``i`` may attend to key ``j``.
        attention_bias: an additive float bias broadcastable to ``(batch, heads, length,
            length)``, added to the logits (after the scale).
        return_attention_scores: also return the probabilities ``(batch, heads, length,
            length)``.
        training: whether dropout is active.

    Returns:
        ``(batch, length, output_shape)``, with the input's Keras mask; and the
        probabilities with ``return_attention_scores``.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.layers import DebertaBuckets, DisentangledSelfAttention
        >>> layer = DisentangledSelfAttention(2, 4, position=DebertaBuckets(8, 32))
        >>> x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype("float32")
        >>> tuple(layer(x, padding_mask=np.array([[1, 1, 1, 0, 0], [1] * 5])).shape)
        (2, 5, 8)
        >>> tuple(layer.relative_embeddings.shape)  # 2 * position_buckets rows
        (16, 8)

    Reference:
        He, Liu, Gao, Chen, "DeBERTa: Decoding-enhanced BERT with Disentangled
        Attention", ICLR 2021; He, Gao, Chen, "DeBERTaV3: Improving DeBERTa using
        ELECTRA-Style Pre-Training with Gradient-Disentangled Embedding Sharing", ICLR 2023.
    """

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        position: Any = "deberta",
        terms: Any = TERMS,
        share_position_projections: bool = True,
        shared_table: bool = False,
        dropout: float = 0.0,
        use_bias: bool = True,
        output_shape: int | None = None,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        embeddings_initializer: Any = "truncated_normal",
        fused_attention: bool | str = "auto",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        caller = type(self).__name__
        self.num_heads = check_int(caller, "num_heads", num_heads, 1)
        self.key_dim = check_int(caller, "key_dim", key_dim, 1)
        self.position = position_schemes.get(position, caller)
        if self.position.computed or not self.position.toeplitz:
            raise ValueError(
                f"{caller}: `position` must index a table by the distance j - i (such as "
                f"DebertaBuckets or ClipPositions), got {self.position!r}; a computed bias "
                "goes in `attention_bias`."
            )
        self.terms = _check_terms(caller, terms)
        self.share_position_projections = check_bool(
            caller, "share_position_projections", share_position_projections
        )
        self.shared_table = check_bool(caller, "shared_table", shared_table)
        self.dropout = check_rate(caller, "dropout", dropout)
        self.use_bias = check_bool(caller, "use_bias", use_bias)
        self._output_dim = (
            None if output_shape is None else check_int(caller, "output_shape", output_shape, 1)
        )
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.fused_attention = check_bool_or_auto(caller, "fused_attention", fused_attention)
        # DeBERTa's scale: one sqrt(d) per term of the logits (content and each relative).
        self.scale = 1.0 / math.sqrt((1 + len(self.terms)) * self.key_dim)
        self.supports_masking = True

    @property
    def _owner(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def build(self, input_shape: Any, *args: Any, **kwargs: Any) -> None:
        features = input_shape[-1]
        if features is None:
            raise ValueError(f"{self._owner}: the last axis of `inputs` must be known.")
        features = int(features)
        shape = (None, None, features)
        names = ["query", "key", "value"]
        if not self.share_position_projections:
            names += [
                name
                for term, name in (("p2c", "position_query"), ("c2p", "position_key"))
                if term in self.terms
            ]
        for name in names:
            dense = _attention.head_projection(self, self.key_dim, name)
            dense.build(shape)
            setattr(self, f"{name}_dense", dense)
        self.output_dense = _attention.projection(
            self,
            "abhd,hdo->abo",
            (None, self._output_dim or features),
            "o",
            "attention_output",
        )
        self.output_dense.build((None, None, self.num_heads, self.key_dim))
        if not self.shared_table:
            # Named "table", as the zoo names relative tables: no weight decay on it
            # (keras_posenc/zoo/adapt.py).
            self.relative_embeddings = self.add_weight(
                shape=(self.position.table_size, features),
                initializer=sublayer_initializer(self.embeddings_initializer, "relative"),
                name="table",
            )
        self.position_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.attention_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self._features = features
        self.built = True

    # ------------------------------------------------------------------ call

    def _table(self, relative_embeddings: Any) -> Any:
        """The table as ``(1, rows, features)``, after checking where it comes from."""
        if self.shared_table:
            if relative_embeddings is None:
                raise ValueError(
                    f"{self._owner}: made with shared_table=True, it needs "
                    "`relative_embeddings` (the shared table) in every call."
                )
            table = ops.convert_to_tensor(relative_embeddings)
            if len(table.shape) == 2:
                table = ops.expand_dims(table, 0)
            expected = (1, self.position.table_size, self._features)
            if len(table.shape) != 3 or tuple(table.shape) != expected:
                raise ValueError(
                    f"{self._owner}: `relative_embeddings` must have shape "
                    f"{expected[1:]} (position.table_size, features) or {expected}, got "
                    f"{tuple(table.shape)}."
                )
            return ops.cast(table, self.compute_dtype)
        if relative_embeddings is not None:
            raise ValueError(
                f"{self._owner}: `relative_embeddings` is given, but the layer has its own "
                "table; make it with shared_table=True to share one."
            )
        return ops.expand_dims(ops.cast(self.relative_embeddings, self.compute_dtype), 0)

    def _masks(self, x: Any, padding_mask: Any, attention_mask: Any, mask: Any) -> Any:
        length = shape_of(x)[1]
        batch = shape_of(x)[0]
        padding_mask = check_mask(
            self._owner, "padding_mask", padding_mask, (batch, length), ("batch", "length")
        )
        if padding_mask is None:  # the input's Keras mask (an Embedding's mask_zero=True)
            padding_mask = check_mask(
                self._owner, "mask", mask, (batch, length), ("batch", "length")
            )
        attention_mask = check_mask(
            self._owner,
            "attention_mask",
            attention_mask,
            (batch, length, length),
            ("batch", "length", "length"),
        )
        combined = None if padding_mask is None else ops.expand_dims(padding_mask, 1)
        if attention_mask is not None:
            combined = (
                attention_mask if combined is None else ops.logical_and(combined, attention_mask)
            )
        return combined

    def _relative_logits(self, q: Any, k: Any, table: Any, training: Any) -> Any:
        """float32 ``(batch, heads, length, length)``: the kept terms, unscaled."""
        length = ops.shape(q)[1]
        table = self.position_dropout(table, training=training)
        index = self.position.index(relative_index.relative_positions(length, length))
        shared = self.share_position_projections
        total = None
        if "c2p" in self.terms:
            keys = (self.key_dense if shared else self.position_key_dense)(table)[0]
            per_row = ops.einsum("bqhd,rhd->bhqr", q, keys)
            total = backend.take_columns(ops.cast(per_row, "float32"), index)
        if "p2c" in self.terms:
            queries = (self.query_dense if shared else self.position_query_dense)(table)[0]
            per_row = ops.einsum("bkhd,rhd->bhkr", k, queries)
            # Row j of the gather holds k_j . q^P[δ(i, j)] at column i: the transposed index
            # reads it, and the transpose puts the queries first.
            read = backend.take_columns(ops.cast(per_row, "float32"), ops.transpose(index))
            read = ops.transpose(read, (0, 1, 3, 2))
            total = read if total is None else total + read
        return total

    def call(
        self,
        inputs: Any,
        relative_embeddings: Any = None,
        padding_mask: Any = None,
        attention_mask: Any = None,
        attention_bias: Any = None,
        return_attention_scores: bool = False,
        training: Any = None,
        mask: Any = None,
    ) -> Any:
        check_features(self._owner, "inputs", inputs)
        x = _attention.unmasked(inputs)
        table = self._table(relative_embeddings)
        combined = self._masks(x, padding_mask, attention_mask, mask)
        q = self.query_dense(x)
        k = self.key_dense(x)
        v = self.value_dense(x)
        scale = ops.cast(self.scale, "float32")
        bias = self._relative_logits(q, k, table, training) * scale
        if attention_bias is not None:
            length = shape_of(x)[1]
            attention_bias = check_bias(
                self._owner,
                "attention_bias",
                attention_bias,
                (shape_of(x)[0], self.num_heads, length, length),
                ("batch", "num_heads", "length", "length"),
            )
            bias = bias + _attention.float32_bias(attention_bias)
        fused = not return_attention_scores and _attention.use_fused_attention(
            self.fused_attention, self.dropout, training
        )
        output, scores = _attention.attend(
            q * ops.cast(self.scale, q.dtype),
            k,
            v,
            mask=combined,
            bias=bias,
            dropout=self.attention_dropout,
            training=training,
            fused=fused,
            return_scores=return_attention_scores,
        )
        output = self.output_dense(output)
        return (output, scores) if return_attention_scores else output

    def compute_mask(self, inputs: Any, mask: Any = None, **kwargs: Any) -> Any:
        return mask

    def compute_output_shape(self, input_shape: Any, *args: Any, **kwargs: Any) -> tuple:
        return (*tuple(input_shape)[:-1], self._output_dim or input_shape[-1])

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            key_dim=self.key_dim,
            position=keras.saving.serialize_keras_object(self.position),
            terms=list(self.terms),
            share_position_projections=self.share_position_projections,
            shared_table=self.shared_table,
            dropout=self.dropout,
            use_bias=self.use_bias,
            output_shape=self._output_dim,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
            embeddings_initializer=keras.initializers.serialize(self.embeddings_initializer),
            fused_attention=self.fused_attention,
        )
        return config
