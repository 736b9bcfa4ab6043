"""Greedy and beam search shared by every sequence-to-sequence zoo model.

The search functions work on any model that follows the decoding contract of
:class:`keras_posenc.zoo.seq2seq.Seq2SeqModel` (design.md, "Decoding caches"):
``encode`` a source once, ``init_cache`` a fixed-shape, batch-first cache that
holds the encoder state and every decoder layer's buffer, then one
``decode_step`` per target position. The step (cache reordering, the decoder
step and the log-softmax) is compiled once per batch shape (``tf.function`` on
TensorFlow, ``jax.jit`` on JAX; on PyTorch a graph traced with ``torch.export``
once a shape has run eagerly a few times, see ``keras_posenc._compile``), and
its cost does not grow with the prefix. Greedy search is one compiled loop (on
PyTorch, the compiled step in a Python loop); beam search's bookkeeping between
steps (beam candidates, finished hypotheses) runs in numpy. Work on the weights
alone (the model's ``step_constants()``, e.g. ConvS2S's weight normalisation)
is done once per search, not once per step.

``use_cache=False`` decodes by recomputing the whole prefix at every step
(``model.decode`` on a fixed-length buffer, also compiled); it gives the same
tokens and is there to check the cache and to measure what the cache saves.

Rules both searches share:

- Targets start with ``model.bos_id`` at position 0; the returned ids are the
  generated tokens after it, ``(batch, max_length)``, each row ending with
  ``model.eos_id`` (unless ``max_length`` ran out) and padded with
  ``model.pad_id`` after it.
- ``pad_id`` and ``bos_id`` are never generated (their log-probabilities are
  set to -inf: a generated pad would change how the model counts positions).
- ``min_length``: ``eos_id`` is forbidden before that many tokens.
- ``max_length`` defaults to ``2 * source_length + 10``, capped by the model's
  ``max_target_length``.
- Checks that cannot run inside the compiled step run first, in Python: ids
  outside the vocabulary, sources longer than the model's position table, empty
  sources and a ``max_length`` beyond ``max_target_length`` raise ``ValueError``.
  An empty batch returns empty results without running the model.
- Logits that are not finite (NaN or Inf) raise ``ValueError`` once the step
  that produced them returns: such a row has no most likely token.

Beam search follows fairseq's ``SequenceGenerator``: each step takes the
``2 * beam_size`` best continuations of the live hypotheses; a continuation
ending in ``eos_id`` among the best ``beam_size`` is finished with the score
``sum(log p) / length ** length_penalty`` (``length`` counts the generated
tokens, ``eos`` included: ``length_penalty > 1`` favours longer outputs, ``0``
ranks by raw log-probability); the best ``beam_size`` others stay live. A
sentence is done once it has ``beam_size`` finished hypotheses; at
``max_length`` every live hypothesis is finished. The best finished hypothesis
is returned. (keras_hub's ``BeamSampler`` has neither the length penalty nor
this finalisation, so it is not used.)
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
from keras import ops

from keras_posenc._compile import compile_inference, compiled_while_loop
from keras_posenc.layers._checks import check_int, check_non_negative_number

__all__ = ["beam_search", "greedy_search"]

_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Logit of a token that may not come next inside the compiled greedy loop.
_FORBIDDEN = -1e9


# --------------------------------------------------------------------------- checks


def _owner(model: Any) -> str:
    return f"{type(model).__name__}({getattr(model, 'name', '?')!r})"


def _check_model(model: Any, function: str) -> None:
    missing = [
        name
        for name in ("encode", "decode", "init_cache", "decode_step", "check_token_ids", "bos_id")
        if not hasattr(model, name)
    ]
    if missing:
        raise TypeError(
            f"{function}: `model` must follow the decoding contract of "
            f"keras_posenc.zoo.seq2seq.Seq2SeqModel; {type(model).__name__} lacks "
            f"{', '.join(missing)}."
        )


def _max_length(model: Any, function: str, max_length: Any, source_length: int) -> int:
    limit = model.max_target_length
    if max_length is None:
        max_length = 2 * source_length + 10
        return max_length if limit is None else min(max_length, limit)
    max_length = check_int(function, "max_length", max_length, 1)
    if limit is not None and max_length > limit:
        raise ValueError(
            f"{function}: `max_length` = {max_length} needs {max_length} target positions, "
            f"more than {_owner(model)}'s max_target_length = {limit}."
        )
    return max_length


# --------------------------------------------------------------------------- decoders


def _compiled(model: Any, kind: str) -> Any:
    """The model's compiled ``kind`` function, made once per model.

    ``"greedy_loop"``: all of greedy search in one loop; ``"reordering_step"``:
    reorder the cache (beam search), then one decoding step; ``"full"``: the
    whole decoder on a prefix buffer (``use_cache=False``); ``"constants"``:
    the model's ``step_constants()`` (work on the weights alone, such as
    ConvS2S's weight normalisation), computed once per search and passed to
    the steps, which run inside ``model.step_scope``.
    """
    functions = _COMPILED.setdefault(model, {})
    if kind not in functions:

        def step(token_ids: Any, cache: tuple, index: Any) -> tuple:
            logits, cache = model.decode_step(token_ids, cache, index)
            return ops.log_softmax(logits, axis=-1), cache

        def reordering_step(
            token_ids: Any, cache: tuple, index: Any, order: Any, constants: tuple
        ) -> tuple:
            with model.step_scope(constants):
                return step(token_ids, model.reorder_cache(cache, order), index)

        def constants() -> tuple:
            return tuple(model.step_constants())

        def full(token_ids: Any, state: tuple, index: Any) -> Any:
            logits = model.decode(token_ids, state)
            return ops.log_softmax(ops.take(logits, index, axis=1), axis=-1)

        def greedy_cond(index: Any, tokens: Any, cache: tuple, output: Any, *rest: Any) -> Any:
            finished = rest[0]
            # ops.shape, not output.shape: TensorFlow retraces once lengths vary
            # (reduce_retracing) with the length unknown, and `.shape` is then None.
            return ops.logical_and(index < ops.shape(output)[1], ops.logical_not(ops.all(finished)))

        def greedy_body(
            index: Any,
            tokens: Any,
            cache: tuple,
            output: Any,
            finished: Any,
            finite: Any,
            min_length: Any,
            constants: tuple,
        ) -> tuple:
            pad, bos, eos = model.pad_id, model.bos_id, model.eos_id
            with model.step_scope(constants):
                logits, cache = model.decode_step(tokens, cache, index)
            logits = ops.cast(logits, "float32")
            # NaN logits have no argmax; the flag lets the caller raise (_check_finite).
            finite = finite & (finished | ops.all(ops.isfinite(logits), axis=-1))
            vocab = ops.arange(ops.shape(logits)[-1], dtype="int32")
            banned = (vocab == pad) | (vocab == bos) | ((vocab == eos) & (index < min_length))
            logits = ops.where(banned[None, :], _FORBIDDEN, logits)
            tokens = ops.where(finished, pad, ops.cast(ops.argmax(logits, axis=-1), "int32"))
            output = ops.slice_update(output, (0, index), tokens[:, None])
            finished = finished | (tokens == eos)
            return index + 1, tokens, cache, output, finished, finite, min_length, constants

        function = {
            "reordering_step": reordering_step,
            "full": full,
            "constants": constants,
        }
        if kind == "greedy_loop":
            # All of greedy search in one compiled loop: no Python between steps
            # (on PyTorch, the compiled step and a Python loop; see _compile.py).
            functions[kind] = compiled_while_loop(greedy_cond, greedy_body, model.variables)
        else:
            functions[kind] = compile_inference(function[kind], model.variables)
    return functions[kind]


class _CachedDecoder:
    """One ``decode_step`` per position over the model's cache."""

    def __init__(self, model: Any, state: tuple, max_length: int) -> None:
        self.model = model
        self.cache = model.init_cache(state, max_length)
        self.constants = _compiled(model, "constants")()

    def step(self, token_ids: np.ndarray, index: int, order: np.ndarray) -> np.ndarray:
        log_probs, self.cache = _compiled(self.model, "reordering_step")(
            ops.convert_to_tensor(token_ids, "int32"),
            self.cache,
            ops.convert_to_tensor(index, "int32"),
            ops.convert_to_tensor(order, "int32"),
            self.constants,
        )
        return np.asarray(ops.convert_to_numpy(log_probs), dtype="float64")


class _RecomputingDecoder:
    """The whole prefix through ``model.decode`` at every step (a fixed-length buffer)."""

    def __init__(self, model: Any, state: tuple, max_length: int, batch: int) -> None:
        self.full_function = _compiled(model, "full")
        self.state = state
        self.prefix = np.full((batch, max_length), model.pad_id, dtype="int32")

    def step(self, token_ids: np.ndarray, index: int, order: np.ndarray | None) -> np.ndarray:
        if order is not None:
            self.prefix = self.prefix[order]
        self.prefix[:, index] = token_ids
        log_probs = self.full_function(
            ops.convert_to_tensor(self.prefix, "int32"),
            self.state,
            ops.convert_to_tensor(index, "int32"),
        )
        return np.asarray(ops.convert_to_numpy(log_probs), dtype="float64")


def _start(
    model: Any, source: np.ndarray, max_length: int, use_cache: bool
) -> _CachedDecoder | _RecomputingDecoder:
    state = model.encode(ops.convert_to_tensor(source, "int32"), training=False)
    if use_cache:
        return _CachedDecoder(model, state, max_length)
    return _RecomputingDecoder(model, state, max_length, source.shape[0])


def _forbid(model: Any, log_probs: np.ndarray, generated: int, min_length: int) -> None:
    """Sets the log-probabilities of tokens that may not come next to -inf, in place."""
    log_probs[..., model.pad_id] = -np.inf
    log_probs[..., model.bos_id] = -np.inf
    if generated < min_length:
        log_probs[..., model.eos_id] = -np.inf


def _check_finite(model: Any, function: str, finite: np.ndarray) -> None:
    """Raises for rows whose logits hold NaN or Inf: they have no most likely token,
    and searching on would return padding (beam search: with the score -inf)."""
    if not finite.all():
        rows = np.flatnonzero(~finite)
        raise ValueError(
            f"{function}: the model's logits are not finite (NaN or Inf) for {len(rows)} of "
            f"{finite.size} sequences (e.g. row {rows[0]}): {_owner(model)}'s weights or the "
            "encoder state hold NaN or Inf, or the computation overflowed."
        )


def _prepare(
    model: Any,
    function: str,
    encoder_token_ids: Any,
    max_length: Any,
    min_length: Any,
) -> tuple[np.ndarray, int, int]:
    _check_model(model, function)
    source = model.check_token_ids(encoder_token_ids, "encoder_token_ids")
    if source.shape[1] == 0:
        raise ValueError(
            f"{function}: `encoder_token_ids` must hold at least one token per row "
            f"(e.g. just eos_id = {model.eos_id}), got shape {source.shape}."
        )
    max_length = _max_length(model, function, max_length, source.shape[1])
    min_length = check_int(function, "min_length", min_length, 0)
    if min_length > max_length:
        raise ValueError(
            f"{function}: `min_length` = {min_length} is larger than `max_length` = {max_length}."
        )
    return source, max_length, min_length


# --------------------------------------------------------------------------- searches


def greedy_search(
    model: Any,
    encoder_token_ids: Any,
    max_length: int | None = None,
    min_length: int = 0,
    use_cache: bool = True,
) -> np.ndarray:
    """Decodes the most likely token at every step.

    Args:
        model: a :class:`~keras_posenc.zoo.seq2seq.Seq2SeqModel` (any model
            with its decoding contract).
        encoder_token_ids: ``(batch, source_time)`` int source ids, padded
            with ``model.pad_id``.
        max_length: the most tokens to generate (``eos`` included); default
            ``2 * source_time + 10``, capped by ``model.max_target_length``.
        min_length: ``eos`` is not generated before this many tokens.
        use_cache: decode with the cache (default) or recompute the full
            prefix every step (same tokens, slower).

    Returns:
        ``(batch, max_length)`` int32 numpy ids: the tokens after ``bos``,
        ``pad_id`` after each row's ``eos``.

    Raises:
        ValueError: ids outside the vocabulary, a source longer than the
            model's position table or with no token, a ``max_length`` beyond
            its target table, or logits that are not finite (NaN or Inf).

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.generation import greedy_search
        >>> from keras_posenc.zoo.convs2s import ConvS2S
        >>> model = ConvS2S(12, 12, embed_dim=8, encoder_layers=[(8, 3)],
        ...                 decoder_layers=[(8, 3)], decoder_out_embed_dim=8)
        >>> tokens = greedy_search(model, np.array([[4, 5, 6, 2]]), max_length=6)
        >>> tokens.shape
        (1, 6)
        >>> greedy_search(model, np.array([[4, 50]]))
        Traceback (most recent call last):
        ValueError: ConvS2S(...): `encoder_token_ids` holds token ids outside the vocabulary ...
    """
    function = "greedy_search"
    source, max_length, min_length = _prepare(
        model, function, encoder_token_ids, max_length, min_length
    )
    batch = source.shape[0]
    output = np.full((batch, max_length), model.pad_id, dtype="int32")
    if batch == 0:  # nothing to decode (and an empty batch breaks some backends' kernels)
        return output
    if use_cache:
        state = model.encode(ops.convert_to_tensor(source, "int32"), training=False)
        result = _compiled(model, "greedy_loop")(
            ops.convert_to_tensor(0, "int32"),  # the position
            ops.convert_to_tensor(np.full(batch, model.bos_id), "int32"),
            model.init_cache(state, max_length),
            ops.convert_to_tensor(output, "int32"),
            ops.convert_to_tensor(np.zeros(batch, bool)),  # finished
            ops.convert_to_tensor(np.ones(batch, bool)),  # finite logits so far
            ops.convert_to_tensor(min_length, "int32"),
            _compiled(model, "constants")(),
        )
        output, finite = result[3], result[5]
        _check_finite(model, function, np.asarray(ops.convert_to_numpy(finite)))
        return np.asarray(ops.convert_to_numpy(output), dtype="int32")
    decoder = _start(model, source, max_length, use_cache)
    finished = np.zeros(batch, bool)
    tokens = np.full(batch, model.bos_id, dtype="int32")
    for index in range(max_length):
        log_probs = decoder.step(tokens, index, None)
        _check_finite(model, function, finished | np.isfinite(log_probs).all(axis=-1))
        _forbid(model, log_probs, index, min_length)
        tokens = np.argmax(log_probs, axis=-1).astype("int32")
        output[:, index] = np.where(finished, model.pad_id, tokens)
        finished |= tokens == model.eos_id
        if finished.all():
            break
    return output


def beam_search(
    model: Any,
    encoder_token_ids: Any,
    beam_size: int = 4,
    max_length: int | None = None,
    length_penalty: float = 1.0,
    min_length: int = 0,
    use_cache: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Beam search with fairseq's length penalty and end-of-sequence finalisation.

    See the module docstring for how hypotheses are scored, finished and
    chosen.

    Args:
        model: a :class:`~keras_posenc.zoo.seq2seq.Seq2SeqModel`.
        encoder_token_ids: ``(batch, source_time)`` int source ids.
        beam_size: hypotheses kept per sentence.
        max_length: the most tokens to generate (``eos`` included).
        length_penalty: exponent of the length that divides a finished
            hypothesis' summed log-probability.
        min_length: ``eos`` is not generated before this many tokens.
        use_cache: decode with the cache (default) or recompute the full prefix.

    Returns:
        ``(tokens, scores)``: ``(batch, max_length)`` int32 ids of the best
        hypothesis (``pad_id`` after ``eos``) and its ``(batch,)`` float score.

    Raises:
        ValueError: as :func:`greedy_search`, and for a ``beam_size`` below 1
            or a ``length_penalty`` that is negative, NaN or infinite.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.generation import beam_search
        >>> from keras_posenc.zoo.convs2s import ConvS2S
        >>> model = ConvS2S(12, 12, embed_dim=8, encoder_layers=[(8, 3)],
        ...                 decoder_layers=[(8, 3)], decoder_out_embed_dim=8)
        >>> tokens, scores = beam_search(model, np.array([[4, 5, 6, 2]]), beam_size=3,
        ...                              max_length=6)
        >>> tokens.shape, scores.shape
        ((1, 6), (1,))
    """
    function = "beam_search"
    source, max_length, min_length = _prepare(
        model, function, encoder_token_ids, max_length, min_length
    )
    beam = check_int(function, "beam_size", beam_size, 1)
    length_penalty = check_non_negative_number(function, "length_penalty", length_penalty)
    batch = source.shape[0]
    if batch == 0:  # nothing to decode (and an empty batch breaks some backends' kernels)
        return np.full((0, max_length), model.pad_id, dtype="int32"), np.zeros(0)
    rows = batch * beam
    # Every hypothesis gets its own copy of its sentence's encoder state.
    decoder = _start(model, np.repeat(source, beam, axis=0), max_length, use_cache)
    scores = np.zeros((batch, beam))
    scores[:, 1:] = -np.inf  # at the start all beams are the same: keep one
    history = np.full((rows, max_length), model.pad_id, dtype="int32")
    tokens = np.full(rows, model.bos_id, dtype="int32")
    order = np.arange(rows, dtype="int32")
    finished: list[list[tuple[float, np.ndarray]]] = [[] for _ in range(batch)]
    done = np.zeros(batch, bool)
    for index in range(max_length):
        log_probs = decoder.step(tokens, index, order)
        _check_finite(model, function, np.isfinite(log_probs).all(axis=-1))
        vocab = log_probs.shape[-1]
        log_probs = log_probs.reshape(batch, beam, vocab)
        _forbid(model, log_probs, index, min_length)
        if index == max_length - 1:  # out of room: every live hypothesis ends here
            eos = log_probs[..., model.eos_id].copy()
            log_probs[...] = -np.inf
            log_probs[..., model.eos_id] = eos
        candidates = (scores[..., None] + log_probs).reshape(batch, beam * vocab)
        top = np.argsort(-candidates, axis=-1, kind="stable")[:, : 2 * beam]
        new_order = np.zeros((batch, beam), dtype="int64")
        new_tokens = np.full((batch, beam), model.eos_id, dtype="int32")
        new_scores = np.full((batch, beam), -np.inf)
        for b in range(batch):
            if done[b]:
                new_order[b] = b * beam
                continue
            live = 0
            for rank, flat in enumerate(top[b]):
                score = candidates[b, flat]
                if not np.isfinite(score):
                    break
                source_beam, token = divmod(int(flat), vocab)
                if token == model.eos_id:
                    if rank < beam:
                        sequence = history[b * beam + source_beam, :index].tolist()
                        length = index + 1
                        finished[b].append(
                            (score / length**length_penalty, np.array(sequence + [token]))
                        )
                    continue
                new_order[b, live] = b * beam + source_beam
                new_tokens[b, live] = token
                new_scores[b, live] = score
                live += 1
                if live == beam:
                    break
            if len(finished[b]) >= beam or live == 0:
                done[b] = True
            # Empty live slots copy a real row, with score -inf, so they never win.
            new_order[b, live:] = new_order[b, 0] if live else b * beam
        if done.all():
            break
        order = new_order.reshape(rows).astype("int32")
        tokens = new_tokens.reshape(rows)
        scores = new_scores
        history = history[order]
        history[:, index] = tokens
    output = np.full((batch, max_length), model.pad_id, dtype="int32")
    best_scores = np.full(batch, -np.inf)
    for b in range(batch):
        if finished[b]:
            score, sequence = max(finished[b], key=lambda item: item[0])
            output[b, : len(sequence)] = sequence
            best_scores[b] = score
    return output, best_scores
