"""The relative terms of `MultiHeadRelativeAttention` (keras_posenc/layers/relative_attention.py):
the relative logits (the bias of ``relative="bias"``, the key logits by a gather or by Music
Transformer's skew) and the value term of ``relative="keys_values"``.

None of them builds the ``(query_length, key_length, head_dim)`` tensor that the textbook
formula suggests; each method's docstring says how its term is computed and what it
costs. Private: the layer's module keeps its arguments, projections and call.
"""

from __future__ import annotations

from typing import Any

from keras import ops

from keras_posenc import backend


def _empty(length: Any) -> bool:
    """Whether a run of keys is known to be empty. A length only known when running (a
    rolling cache's window and new keys, in a graph traced with a dynamic number of queries:
    the exported prompt graph, keras_posenc/zoo/language_model.py) holds the window's keys
    at least, so it is not; `if length` on it would fail in a TensorFlow graph."""
    return isinstance(length, int) and length == 0


class RelativeTerms:
    """The relative terms, as methods of `MultiHeadRelativeAttention`.

    They read the layer's arguments (``relative``, ``position``,
    ``relative_logits``, ``key_dim``) and its tables (``relative_bias``,
    ``relative_keys``, ``relative_values``), made in its ``__init__``.
    """

    def _relative_logits(
        self, q: Any, query_length: Any, key_length: Any, offset: Any, skew: bool = True
    ) -> Any:
        """The relative part of the logits, float32, (batch or 1, heads, q_len, k_len), or None.

        Within a call's `backend.scratch` the gathered key logits may be a scratch
        buffer, which the attention core then overwrites. ``skew=False`` gathers even
        with ``relative_logits="skew"`` (a run of a rolling cache, whose tensor offset
        need not keep the bound `_use_skew` assumes).
        """
        if self.relative is None:
            return None
        if self.relative == "bias":
            bias = self.relative_bias.per_head(query_length, key_length, offset, "float32")
            return ops.expand_dims(bias, 0)
        if skew and self._use_skew(query_length, key_length, offset):
            return self._skewed_key_logits(q, query_length, key_length, offset)
        return self._gathered_key_logits(q, query_length, key_length, offset)

    def _relative_logits_of_runs(self, q: Any, query_length: Any, runs: tuple) -> Any:
        """`_relative_logits` for keys in runs of consecutive positions, joined on the keys.

        ``runs``: ``(keys, offset)`` pairs in key order (a rolling cache: the sinks, then
        the window; keys at positions ``0 ..``: one run). A run's offset is its first
        query's position minus its first key's: each run is the usual computation.
        """
        if len(runs) == 1:
            return self._relative_logits(q, query_length, *runs[0])
        if self.relative is None:
            return None
        parts = [
            self._relative_logits(q, query_length, *run, skew=False)
            for run in runs
            if not _empty(run[0])
        ]
        return parts[0] if len(parts) == 1 else ops.concatenate(parts, axis=-1)

    def _relative_value_term_of_runs(
        self, probabilities: Any, query_length: Any, runs: tuple
    ) -> Any:
        """`_relative_value_term` summed over runs of keys (`_relative_logits_of_runs`)."""
        if len(runs) == 1:
            return self._relative_value_term(probabilities, query_length, *runs[0])
        total, start = None, 0
        for length, offset in runs:
            if _empty(length):
                continue
            term = self._relative_value_term(
                probabilities[..., start : start + length], query_length, length, offset
            )
            total = term if total is None else total + term
            start += length
        return total

    def _use_skew(self, query_length: Any, key_length: Any, offset: Any) -> bool:
        """Whether the skew applies: a `ClipPositions` row for every distance, static lengths.

        The rows needed are ``r = j - i - offset`` in ``[-(offset + q_len - 1),
        k_len - 1 - offset]``. With an int offset that is checked exactly; with
        a tensor offset (a cache index) ``0 <= offset <= k_len - q_len`` holds
        (the new keys must fit into the cache), so ``max_distance >=
        max(q_len, k_len) - 1`` suffices.
        """
        # "auto" gathers: measured at L = 2048 with a table of 2L - 1 rows on CPU,
        # the skew's reshape/slice copies cost more peak memory than the gather
        # on PyTorch (4.3 vs 4.0 S) and TensorFlow (5.4 vs 4.2 S), a little
        # less on JAX (4.6 vs 4.8 S); its gain is no index matrix and no gather.
        if self.relative_logits != "skew":
            return False
        if not (isinstance(query_length, int) and isinstance(key_length, int)):
            return False
        return self.position.has_row_per_distance(query_length, key_length, offset)

    def _gathered_key_logits(self, q: Any, query_length: Any, key_length: Any, offset: Any) -> Any:
        """``q_i . w^K[idx(i, j)]`` by a gather, for any scheme and length.

        The kernel `keras_posenc.backend.relative_key_logits`: ``Q W_K^T`` once for
        every table row, read at column ``idx(i, j)`` of row i with an index matrix
        of (q_len, k_len), never broadcast to the batch and heads (a broadcast
        index made PyTorch build a full int64 index, 2 S). The (q_len, k_len,
        key_dim) tensor a^K is never built.
        """
        index = self.relative_keys.indices(query_length, key_length, offset)
        return backend.relative_key_logits(q, self.relative_keys.table(), index)

    def _skewed_key_logits(self, q: Any, query_length: int, key_length: int, offset: Any) -> Any:
        """``q_i . w^K[idx(i, j)]`` by Music Transformer's skew (Huang et al. 2018).

        Needs a row for every distance (`_use_skew`). Let ``m = q_len + k_len - 1``
        and ``X = Q E^T`` of shape (batch, heads, q_len, m), where ``E`` holds the
        table rows of ``r = -(offset + q_len - 1) ... k_len - 1 - offset`` in
        order, so ``X[i, c]`` belongs to ``r = c - (offset + q_len - 1)``. The
        logit of (i, j) has ``r = j - i - offset``, i.e. ``c = j - i + q_len - 1``:
        row i of the result is row i of X shifted left by ``q_len - 1 - i``. In
        X flattened row by row that is element ``i * m + c = (q_len - 1) + i * (m - 1)
        + j``: drop the first ``q_len - 1`` elements, read rows of ``m - 1``
        (``>= k_len`` when ``q_len >= 2``) and keep their first ``k_len``. This
        covers both directions, ``q_len != k_len`` and an offset; the published
        recipe (pad a column on the left, reshape to (L + 1, L), drop the first
        row) is its causal ``L x L`` special case. No index matrix, no gather.
        """
        table = ops.cast(self.relative_keys.table(), q.dtype)
        width = query_length + key_length - 1
        # The table row of the smallest r (a ClipPositions scheme: row = r + max_distance).
        first = self.position.max_distance - (offset + query_length - 1)
        if isinstance(offset, int):
            rows = ops.slice(table, (first, 0), (width, self.key_dim))
        else:
            # A cache index: a gather of `width` rows, not a slice at a tensor start, whose
            # start torch.export cannot trace (it reads the value; decoding then ran
            # eagerly, several times slower).
            rows = ops.take(table, first + ops.arange(width, dtype="int32"), axis=0)
        x = ops.cast(ops.einsum("bqhd,md->bhqm", q, rows), "float32")
        if query_length == 1:  # c = j: already in place
            return x
        batch, heads = ops.shape(x)[0], ops.shape(x)[1]
        flat = ops.reshape(x, (batch, heads, query_length * width))
        shifted = flat[:, :, query_length - 1 : query_length - 1 + query_length * (width - 1)]
        shifted = ops.reshape(shifted, (batch, heads, query_length, width - 1))
        return shifted[:, :, :, :key_length]

    def _relative_value_term(
        self,
        probabilities: Any,
        query_length: Any,
        key_length: Any,
        offset: Any,
    ) -> Any:
        """``sum_j a_ij w^V[idx(i, j)]`` as (batch, q_len, heads, value_dim).

        Equal to ``sum_r A_ir w^V[r]`` with ``A_ir`` = the attention weight of
        query i that falls into table row r. Every table scheme here maps each
        row to an interval of distances (`_bucket_intervals`), so for query i
        row r covers a contiguous run of keys ``j_lo(i, r) .. j_hi(i, r)``, and
        ``A_ir = C[i, j_hi] - C[i, j_lo - 1]`` with ``C`` the cumulative sum of
        the weights over the keys. For `ClipPositions` the interior rows are single
        diagonals (band extraction) and the two end rows the tail sums. Cost:
        ``C`` (one S) and two (batch, heads, q_len, rows) gathers; no
        transposed copy of the weights (a segment sum needed one), and a^V,
        (q_len, k_len, value_dim), is never built. Within a call's
        `backend.scratch` the cumulative sums may overwrite the probabilities
        (`backend.cumulative_sum`): the caller reads them no more.
        """
        table = self.relative_values.table()
        lowest, highest, nonempty = self._bucket_intervals(query_length, key_length, offset)
        positions = ops.arange(query_length, dtype="int32")[:, None] + ops.cast(offset, "int32")
        last_key = ops.cast(key_length, "int32") - 1
        first_key = ops.maximum(positions + lowest[None, :], 0)  # (q_len, rows)
        last_key = ops.minimum(positions + highest[None, :], last_key)
        nonempty = ops.logical_and(nonempty[None, :], ops.less_equal(first_key, last_key))

        cumulative = backend.cumulative_sum(probabilities)

        def read(cumulative: Any, column: Any) -> Any:
            # C[i, column[i, r]]; empty rows read any valid column (masked below).
            column = ops.clip(column, 0, ops.cast(key_length, "int32") - 1)
            return backend.take_columns(cumulative, column)

        upto_last = read(cumulative, last_key)
        before_first = read(cumulative, first_key - 1)
        del cumulative
        before_first = before_first * ops.cast(ops.greater(first_key, 0), "float32")
        per_row = (upto_last - before_first) * ops.cast(nonempty, "float32")
        return ops.einsum("bhqr,rd->bqhd", ops.cast(per_row, table.dtype), table)

    def _bucket_intervals(self, query_length: Any, key_length: Any, offset: Any) -> tuple:
        """Per table row: the smallest and largest distance r mapped to it, and whether any is.

        Only the distances that occur, ``-(offset + q_len - 1) .. k_len - 1 -
        offset``, are bucketed (a vector of ``q_len + k_len - 1``). Each
        table scheme is monotone in r on each side of 0 (clip, piecewise: on the
        whole line; T5's log buckets: by |r| with separate buckets per sign), so
        a row's distances form one interval, found from its count ``n`` and sum
        ``s``: ``lo = (2 s - n (n - 1)) / (2 n)``, ``hi = lo + n - 1`` (exact in int32).
        """
        # Plain arithmetic on the lengths: ints stay ints (JAX needs a concrete
        # size for arange), TensorFlow's symbolic scalars stay tensors.
        count = query_length + key_length - 1
        distances = ops.arange(count, dtype="int32") - (
            ops.cast(offset, "int32") + ops.cast(query_length, "int32") - 1
        )
        buckets = self.position.index(distances)
        rows = self.position.table_size
        number = ops.segment_sum(ops.ones_like(distances), buckets, num_segments=rows)
        total = ops.segment_sum(distances, buckets, num_segments=rows)
        safe = ops.maximum(number, 1)
        lowest = ops.floor_divide(2 * total - number * (number - 1), 2 * safe)
        return lowest, lowest + number - 1, ops.greater(number, 0)
