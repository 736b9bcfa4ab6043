"""The compiled functions of a search, made once per model and settings.

The loop of greedy search and sampling, beam search's reordering step and the
model's ``step_constants()``, with or without the cache. They are compiled by
``keras_posenc.backend.compile_function`` and ``compiled_while_loop``, which hold
every backend branch of decoding (docs/development.md, "Compiled decoding and model
creation"); nothing here asks which backend runs.
"""

from __future__ import annotations

import weakref
from typing import Any

import keras
from keras import ops

from keras_posenc.backend import compile_function, compiled_while_loop
from keras_posenc.generation.rules import _masked_logits
from keras_posenc.generation.sampling import _draw, _sampler_key
from keras_posenc.generation.tasks import _decoder_only

# Each model's compiled functions by kind and settings; weak keys: they go with the model.
_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _advance(model: Any, use_cache: bool) -> Any:
    """``advance(tokens, cache, index) -> (logits, cache)``: a decoding step, or (without
    the cache) the full decoder on a prefix buffer that holds the tokens so far."""
    if use_cache:
        return model.decode_step
    decoder_only = _decoder_only(model)

    def recompute(tokens: Any, cache: tuple, index: Any) -> tuple:
        prefix, *state = cache
        prefix = ops.slice_update(prefix, (0, index), ops.cast(tokens, "int32")[:, None])
        if decoder_only:
            logits = model(prefix, training=False)
        else:
            logits = model.decode(prefix, tuple(state))
        return ops.take(ops.cast(logits, "float32"), index, axis=1), (prefix, *state)

    return recompute


def _compiled(
    model: Any, kind: str, use_cache: bool = True, sampler: Any = None, ngram: int = 0
) -> Any:
    """The model's compiled ``kind`` function, made once per model and settings.

    ``"loop"``: all of greedy search or sampling (``sampler``) in one loop;
    ``"reordering_step"``: reorder the cache (beam search), then one step's
    log-probabilities; ``"constants"``: the model's ``step_constants()``
    (work on the weights alone, such as ConvS2S's weight normalisation),
    computed once per search and passed to the steps, which run inside
    ``model.step_scope``.
    """
    functions = _COMPILED.setdefault(model, {})
    key = (kind, use_cache, _sampler_key(sampler), ngram) if kind == "loop" else (kind, use_cache)
    if key in functions:
        return functions[key]
    advance = _advance(model, use_cache)
    pad, eos = model.pad_id, model.eos_id

    def reordering_step(
        token_ids: Any, cache: tuple, index: Any, order: Any, constants: tuple
    ) -> tuple:
        reordered = keras.tree.map_structure(lambda t: ops.take(t, order, axis=0), cache)
        with model.step_scope(constants):
            logits, cache = advance(token_ids, reordered, index)
        return ops.log_softmax(ops.cast(logits, "float32"), axis=-1), cache

    def constants() -> tuple:
        return tuple(model.step_constants())

    def loop_cond(index: Any, tokens: Any, cache: tuple, output: Any, *rest: Any) -> Any:
        finished = rest[0]
        # ops.shape, not output.shape: TensorFlow retraces once lengths vary
        # (reduce_retracing) with the length unknown, and `.shape` is then None.
        return ops.logical_and(index < ops.shape(output)[1], ops.logical_not(ops.all(finished)))

    def loop_body(
        index: Any,
        tokens: Any,
        cache: tuple,
        output: Any,
        finished: Any,
        finite: Any,
        rules: tuple,
        seeds: tuple,
        constants: tuple,
    ) -> tuple:
        first, forced, forced_mask, min_index = rules
        with model.step_scope(constants):
            logits, cache = advance(tokens, cache, index)
        logits = ops.cast(logits, "float32")
        # NaN logits have no argmax; the flag lets the caller raise (_check_finite).
        finite = finite & (finished | ops.all(ops.isfinite(logits), axis=-1))
        history = ops.concatenate([first[:, None], output], axis=1)
        logits = _masked_logits((model, min_index, ngram), logits, index, history)
        if sampler is None:
            chosen = ops.cast(ops.argmax(logits, axis=-1), "int32")
        else:
            chosen, seeds = _draw(sampler, logits, seeds)
        forced_now = ops.take(forced_mask, index, axis=1)
        chosen = ops.where(forced_now, ops.take(forced, index, axis=1), chosen)
        tokens = ops.where(finished, pad, chosen)
        output = ops.slice_update(output, (0, index), tokens[:, None])
        finished = finished | (tokens == eos)
        return index + 1, tokens, cache, output, finished, finite, rules, seeds, constants

    if kind == "loop":
        # All of the search in one compiled loop: no Python between steps
        # (on PyTorch, the compiled step and a Python loop: `backend.compiled_while_loop`).
        # A random draw cannot be traced on PyTorch (see `backend.compile_function`): eager there.
        function = compiled_while_loop(
            loop_cond, loop_body, model.variables, traceable=sampler is None
        )
    else:
        named = {"reordering_step": reordering_step, "constants": constants}
        function = compile_function(named[kind], model.variables)
    functions[key] = function
    return function
