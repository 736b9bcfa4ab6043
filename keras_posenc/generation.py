"""Greedy search, sampling and beam search for every generating zoo model.

Two kinds of model generate:

- **encoder-decoders** (:class:`keras_posenc.zoo.seq2seq.Seq2SeqModel`:
  ConvS2S, MUSE, T5, ...): ``encode`` a source once, ``init_cache(state,
  max_length)`` a fixed-shape, batch-first cache that holds the encoder state
  and every decoder layer's buffer, then one ``decode_step`` per target
  position. Targets start with ``bos_id``; the searches return the tokens
  after it, ``(batch, max_length)``.
- **decoder-only language models**
  (:class:`keras_posenc.zoo.language_model.LanguageModel`: ``convs2s_lm``,
  ...): ``init_cache(batch, max_length)``, then one ``decode_step`` per
  position, starting from the prompt's first token. The searches return the
  whole sequence, prompt included, ``(batch, max_length)``.

Both kinds follow one decoding contract (docs/development.md, "Compiled decoding
and model creation", and the cache format in "Conventions"), so one
implementation of each search serves both. The step (cache reordering, the
decoder step, the rules below) is compiled once per batch shape
(``tf.function`` on TensorFlow, ``jax.jit`` on JAX; on PyTorch a graph traced
with ``torch.export`` once a shape has run eagerly a few times, see
``keras_posenc.backend.compile_function``), and its cost does not grow
with the prefix. Greedy search and sampling are one compiled loop (on
PyTorch, the compiled step in a Python loop); beam search's bookkeeping
between steps (beam candidates, finished hypotheses) runs in numpy. Work on
the weights alone (the model's ``step_constants()``, e.g. ConvS2S's weight
normalisation) is done once per search, not once per step.

``use_cache=False`` decodes by recomputing the whole prefix at every step
(the full decoder on a fixed-length buffer, also compiled); it gives the same
tokens and is there to check the cache and to measure what the cache saves.

Rules every search shares:

- ``pad_id`` and ``bos_id`` are never generated (their log-probabilities are
  set to -inf: a generated pad would change how the model counts positions).
- ``min_length``: ``eos_id`` is forbidden before that many tokens (an
  encoder-decoder counts the generated tokens; a language model counts the
  whole sequence, prompt included).
- **Forced tokens**: an encoder-decoder's ``prefix_tokens`` (fairseq's prefix)
  and the rest of a language model's prompt are fed as they are, whatever the
  model predicts; their log-probabilities still count in beam search's score.
  Rows of different lengths are right-padded with ``pad_id``; a row goes on
  with its own generation once its forced tokens end. Forced tokens may not
  hold ``eos_id`` (a forced end would end a row before it started).
- ``no_repeat_ngram_size = n > 0``: a token that would complete an n-gram the
  sequence already holds (starting token and forced tokens included) is
  forbidden, as fairseq's ``--no-repeat-ngram-size``.
- Each row ends with ``eos_id`` (unless ``max_length`` ran out) and is padded
  with ``pad_id`` after it.
- Checks that cannot run inside the compiled step run first, in Python: ids
  outside the vocabulary, inputs longer than the model's position table,
  empty sources or prompts and a ``max_length`` beyond the model's limit
  raise ``ValueError``. An empty batch returns empty results without running
  the model.
- Logits that are not finite (NaN or Inf) raise ``ValueError`` once the step
  that produced them returns: such a row has no most likely token.

**Sampling** (:func:`sample`) draws each token with a ``keras_hub.samplers``
sampler (``"greedy"``, ``"random"``, ``"top_k"``, ``"top_p"``, or an instance
such as ``TopKSampler(k=10, temperature=0.7)``): the sampler's
``compute_probabilities`` (temperature) and ``get_next_token`` (the filter and
the draw) run inside the compiled loop, after the rules above have set
forbidden tokens' logits to -1e9. The sampler's random state is a loop
variable, so ``seed=`` reproduces the same tokens on a backend; without it the
sampler's own seed generator is used and advanced, as keras_hub's
``generate`` does.

**Beam search** follows fairseq's ``SequenceGenerator``: each step takes the
``2 * beam_size`` best continuations of the live hypotheses; a continuation
ending in ``eos_id`` among the best ``beam_size`` is finished with the score
``sum(log p) / length ** length_penalty`` (``length`` counts the generated
tokens, ``eos`` included, and for a language model the prompt after its first
token: ``length_penalty > 1`` favours longer outputs, ``0`` ranks by raw
log-probability); the best ``beam_size`` others stay live. A sentence is done
once it has ``beam_size`` finished hypotheses; at ``max_length`` every live
hypothesis is finished. The best finished hypothesis is returned, or with
``return_n_best=N`` the N best, best first (ties keep the order in which they
finished, so the first equals the default result). keras_hub's
``BeamSampler`` has neither the length penalty nor this finalisation, so it
is not used.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc._quiet import quiet_import
from keras_posenc.backend import compile_function, compiled_while_loop
from keras_posenc.layers._checks import (
    check_bool,
    check_int,
    check_non_negative_number,
    is_finite_number,
)

__all__ = ["beam_search", "generate", "greedy_search", "sample"]

_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Logit of a token that may not come next inside the compiled loops.
_FORBIDDEN = -1e9
# keras_hub's samplers by name (keras_hub.samplers.get's identifiers that sample one
# token from the next-token distribution).
SAMPLERS = ("greedy", "random", "top_k", "top_p")


# --------------------------------------------------------------------------- checks


def _owner(model: Any) -> str:
    return f"{type(model).__name__}({getattr(model, 'name', '?')!r})"


def _decoder_only(model: Any) -> bool:
    return bool(getattr(model, "is_decoder_only", False))


def _check_model(model: Any, function: str) -> None:
    if _decoder_only(model):
        needed, contract = (
            ("init_cache", "decode_step", "check_token_ids", "bos_id", "eos_id", "pad_id"),
            "keras_posenc.zoo.language_model.LanguageModel",
        )
    else:
        needed, contract = (
            ("encode", "decode", "init_cache", "decode_step", "check_token_ids", "bos_id"),
            "keras_posenc.zoo.seq2seq.Seq2SeqModel",
        )
    missing = [name for name in needed if not hasattr(model, name)]
    if missing:
        raise TypeError(
            f"{function}: `model` must follow the decoding contract of {contract} (or "
            f"keras_posenc.zoo.seq2seq.Seq2SeqModel); {type(model).__name__} lacks "
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


def _check_forced(model: Any, function: str, argument: str, forced: np.ndarray) -> np.ndarray:
    """Where ``forced`` (right-padded rows) holds tokens; raises for eos or inner padding."""
    real = forced != model.pad_id
    if forced.shape[1] > 1 and np.any(real[:, 1:] & ~real[:, :-1]):
        row = int(np.flatnonzero(np.any(real[:, 1:] & ~real[:, :-1], axis=1))[0])
        raise ValueError(
            f"{function}: `{argument}` must be padded on the right only (pad_id = "
            f"{model.pad_id} after a row's last token); row {row} has padding before a token."
        )
    if np.any(forced == model.eos_id):
        raise ValueError(
            f"{function}: `{argument}` may not hold eos_id = {model.eos_id} (a forced end "
            "would end the row before it starts); leave it out."
        )
    return real


# --------------------------------------------------------------------------- tasks


@dataclasses.dataclass
class _Task:
    """What a search decodes, for either kind of model.

    ``steps`` tokens are chosen, one per ``decode_step``; step ``i`` feeds the token
    at position ``i`` (``first`` at 0) and chooses the token at ``i + 1``, unless
    ``forced_mask[:, i]`` forces ``forced[:, i]``. ``eos`` is forbidden at steps
    below ``min_index``.
    """

    model: Any
    function: str
    first: np.ndarray  # (batch,) int32
    forced: np.ndarray  # (batch, steps) int32
    forced_mask: np.ndarray  # (batch, steps) bool
    min_index: int
    source: np.ndarray | None = None  # an encoder-decoder's sources
    no_repeat_ngram_size: int = 0
    use_cache: bool = True

    @property
    def batch(self) -> int:
        return int(self.first.shape[0])

    @property
    def steps(self) -> int:
        return int(self.forced.shape[1])

    def state(self, repeat: int = 1) -> tuple:
        """The encoder state of every source, each repeated ``repeat`` times (beams)."""
        source = np.repeat(self.source, repeat, axis=0)
        return tuple(self.model.encode(ops.convert_to_tensor(source, "int32"), training=False))

    def configure(self, no_repeat_ngram_size: Any, use_cache: Any) -> None:
        """Checks and sets the options every search shares."""
        ngram = check_int(self.function, "no_repeat_ngram_size", no_repeat_ngram_size, 0)
        # An n-gram longer than any sequence never repeats: the rule is void.
        self.no_repeat_ngram_size = 0 if ngram > self.steps + 1 else ngram
        self.use_cache = check_bool(self.function, "use_cache", use_cache)

    def cache(self, repeat: int = 1) -> tuple:
        """The decoding cache (``use_cache``), or a prefix buffer and the encoder state."""
        rows = self.batch * repeat
        state = () if _decoder_only(self.model) else self.state(repeat)
        if self.use_cache:
            if _decoder_only(self.model):
                return tuple(self.model.init_cache(rows, self.steps + 1))
            return tuple(self.model.init_cache(state, self.steps))
        prefix = np.full((rows, self.steps), self.model.pad_id, "int32")
        return (ops.convert_to_tensor(prefix, "int32"), *state)

    def result(self, tokens: np.ndarray) -> np.ndarray:
        """The returned ids: a language model's start token, then the chosen tokens."""
        if not _decoder_only(self.model):
            return tokens
        first = self.first.reshape(self.first.shape + (1,) * (tokens.ndim - 1))
        first = np.broadcast_to(first, tokens.shape[:-1] + (1,))
        return np.concatenate([first, tokens], axis=-1).astype("int32")


def _task(
    model: Any,
    function: str,
    inputs: Any,
    max_length: Any,
    min_length: Any,
    prefix_tokens: Any,
) -> _Task:
    _check_model(model, function)
    min_length = check_int(function, "min_length", min_length, 0)
    if _decoder_only(model):
        return _language_model_task(model, function, inputs, max_length, min_length, prefix_tokens)
    return _seq2seq_task(model, function, inputs, max_length, min_length, prefix_tokens)


def _seq2seq_task(
    model: Any,
    function: str,
    inputs: Any,
    max_length: Any,
    min_length: int,
    prefix_tokens: Any,
) -> _Task:
    source = model.check_token_ids(inputs, "encoder_token_ids")
    if source.shape[1] == 0:
        raise ValueError(
            f"{function}: `encoder_token_ids` must hold at least one token per row "
            f"(e.g. just eos_id = {model.eos_id}), got shape {source.shape}."
        )
    max_length = _max_length(model, function, max_length, source.shape[1])
    if min_length > max_length:
        raise ValueError(
            f"{function}: `min_length` = {min_length} is larger than `max_length` = {max_length}."
        )
    forced = np.full((source.shape[0], max_length), model.pad_id, "int32")
    if prefix_tokens is not None:
        prefix = model.check_token_ids(prefix_tokens, "prefix_tokens", source=False)
        if prefix.shape[0] != source.shape[0]:
            raise ValueError(
                f"{function}: `prefix_tokens` must have one row per source ({source.shape[0]}), "
                f"got shape {prefix.shape}."
            )
        if prefix.shape[1] > max_length:
            raise ValueError(
                f"{function}: `prefix_tokens` has {prefix.shape[1]} tokens, more than "
                f"`max_length` = {max_length}."
            )
        forced[:, : prefix.shape[1]] = prefix
    return _Task(
        model,
        function,
        first=np.full(source.shape[0], model.bos_id, "int32"),
        forced=forced,
        forced_mask=_check_forced(model, function, "prefix_tokens", forced),
        min_index=min_length,
        source=source,
    )


def _language_model_task(
    model: Any,
    function: str,
    prompt: Any,
    max_length: Any,
    min_length: int,
    prefix_tokens: Any,
) -> _Task:
    if prefix_tokens is not None:
        raise ValueError(
            f"{function}: `prefix_tokens` is for encoder-decoders; a language model's forced "
            f"tokens are its prompt (got prefix_tokens for {_owner(model)})."
        )
    prompt = model.check_token_ids(prompt, "prompt")
    if prompt.shape[1] == 0 or np.any(prompt[:, 0] == model.pad_id):
        raise ValueError(
            f"{function}: every row of `prompt` must start with a token (e.g. bos_id = "
            f"{model.bos_id}), not pad_id = {model.pad_id}; got shape {prompt.shape}."
        )
    if max_length is None:
        raise ValueError(
            f"{function}: a language model needs `max_length` (the length of the returned "
            "sequences, prompt included)."
        )
    max_length = check_int(function, "max_length", max_length, 2)
    limit = model.max_length
    if limit is not None and max_length > limit:
        raise ValueError(
            f"{function}: `max_length` = {max_length} is more than {_owner(model)}'s "
            f"max_length = {limit}."
        )
    longest = int((prompt != model.pad_id).sum(axis=1).max(initial=0))  # 0 rows: empty result
    if longest >= max_length:
        raise ValueError(
            f"{function}: `max_length` = {max_length} leaves no room to generate after a "
            f"prompt of {longest} tokens; give more than {longest}."
        )
    if min_length > max_length:
        raise ValueError(
            f"{function}: `min_length` = {min_length} is larger than `max_length` = {max_length}."
        )
    forced = np.full((prompt.shape[0], max_length - 1), model.pad_id, "int32")
    rest = prompt[:, 1:max_length]
    forced[:, : rest.shape[1]] = rest
    return _Task(
        model,
        function,
        first=prompt[:, 0].copy(),
        forced=forced,
        forced_mask=_check_forced(model, function, "prompt", forced),
        min_index=max(min_length - 1, 0),
    )


# --------------------------------------------------------------------------- rules


def _banned_ngrams(history: Any, index: Any, size: int, vocab: Any) -> Any:
    """``(batch, vocab)`` True for tokens that would repeat an n-gram of ``history``.

    ``history``: ``(batch, length)`` ids, real up to position ``index``; the token
    at ``index + 1`` is being chosen. An n-gram starting at ``s`` is repeated if its
    first ``size - 1`` tokens equal the last ``size - 1`` of the history; its last
    token (at ``s + size - 1 <= index``) is then banned.
    """
    batch, length = ops.shape(history)[0], ops.shape(history)[1]
    starts = length - size + 1  # every n-gram that fits in the buffer
    if isinstance(starts, int) and starts <= 0:
        return ops.zeros((batch, vocab), "bool")
    tail = index + 1 - (size - 1) + ops.arange(size - 1, dtype="int32")
    last = ops.take(history, ops.clip(tail, 0, length - 1), axis=1)  # (batch, size - 1)
    match = ops.ones((batch, starts), "bool")
    for k in range(size - 1):
        match = match & (history[:, k : k + starts] == last[:, k : k + 1])
    offset = ops.arange(starts, dtype="int32")
    valid = (offset + size - 1 <= index) & (index + 1 >= size - 1)
    match = match & valid[None, :]
    banned = history[:, size - 1 : size - 1 + starts]
    rows = ops.broadcast_to(ops.arange(batch, dtype="int32")[:, None], ops.shape(banned))
    indices = ops.reshape(ops.stack([rows, ops.cast(banned, "int32")], axis=-1), (-1, 2))
    counts = ops.scatter(indices, ops.reshape(ops.cast(match, "float32"), (-1,)), (batch, vocab))
    return counts > 0


def _masked_logits(task_rules: tuple, logits: Any, index: Any, history: Any) -> Any:
    """Logits with forbidden tokens set to -1e9 (pad, bos, early eos, repeated n-grams)."""
    model, min_index, ngram = task_rules
    vocab = ops.shape(logits)[-1]
    ids = ops.arange(vocab, dtype="int32")
    banned = (ids == model.pad_id) | (ids == model.bos_id)
    banned = banned | ((ids == model.eos_id) & (index < min_index))
    logits = ops.where(banned[None, :], _FORBIDDEN, logits)
    if ngram:
        logits = ops.where(_banned_ngrams(history, index, ngram, vocab), _FORBIDDEN, logits)
    return logits


def _banned_ngrams_numpy(sequence: np.ndarray, size: int) -> list[int]:
    """Tokens that would repeat an n-gram of ``sequence`` if they came next (beam search)."""
    if size == 0 or len(sequence) < size - 1:
        return []
    last = tuple(sequence[len(sequence) - size + 1 :]) if size > 1 else ()
    banned = []
    for start in range(len(sequence) - size + 1):
        if tuple(sequence[start : start + size - 1]) == last:
            banned.append(int(sequence[start + size - 1]))
    return banned


# --------------------------------------------------------------------------- samplers


def _sampler(function: str, sampler: Any) -> Any:
    """A ``keras_hub.samplers.Sampler`` from a name or an instance."""
    samplers = quiet_import("keras_hub").samplers  # imports TensorFlow: only when needed

    if isinstance(sampler, str):
        if sampler not in SAMPLERS:
            raise ValueError(
                f"{function}: `sampler` must be one of {SAMPLERS} or a keras_hub.samplers "
                f"instance, got {sampler!r}."
            )
        return samplers.get(sampler)
    if not isinstance(sampler, samplers.Sampler):
        raise TypeError(
            f"{function}: `sampler` must be one of {SAMPLERS} or a keras_hub.samplers.Sampler "
            f"instance, got {type(sampler).__name__}."
        )
    if type(sampler).__call__ is not samplers.Sampler.__call__ or not hasattr(
        sampler, "get_next_token"
    ):
        raise ValueError(
            f"{function}: {type(sampler).__name__} runs its own decoding loop (beam or "
            "contrastive search) and cannot draw one token at a time; use beam_search for "
            "beams, or a sampler that draws from the next-token distribution "
            f"{SAMPLERS}."
        )
    return sampler


def _check_sampler_settings(function: str, sampler: Any, vocab: int | None) -> None:
    """The one check of a sampler's settings, for every sampler our generation receives.

    keras_hub's samplers take any value: a temperature of 0 divides by zero (argmax on
    TensorFlow came back as id = vocabulary size, JAX returned tokens), a negative one samples
    the inverted distribution, ``top_p`` above 1 or at 0 and ``k`` of 0 or above the
    vocabulary fail deep in each backend or sample wrongly. Greedy search is the way to ask
    for the argmax.
    """
    name = type(sampler).__name__
    temperature = getattr(sampler, "temperature", 1.0)
    if not (is_finite_number(temperature) and temperature > 0):
        raise ValueError(
            f"{function}: {name}: `temperature` must be a finite number > 0 (for the most "
            f"likely token, use greedy_search or the 'greedy' sampler), got {temperature!r}."
        )
    p = getattr(sampler, "p", None)
    if p is not None and not (is_finite_number(p) and 0 < p <= 1):
        raise ValueError(f"{function}: {name}: `p` must be in (0, 1], got {p!r}.")
    k = getattr(sampler, "k", None)
    if k is None:
        return
    most = f" and at most the vocabulary size {vocab}" if vocab else ""
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1 or (vocab and k > vocab):
        raise ValueError(f"{function}: {name}: `k` must be an int >= 1{most}, got {k!r}.")


def _sampler_key(sampler: Any) -> Any:
    """What a compiled loop depends on in ``sampler``: its type and settings, not its seed
    (the random state is a loop input), so samplers that differ only there share it."""
    if sampler is None:
        return None
    try:
        config = dict(sampler.get_config())
        config.pop("seed", None)
        return (type(sampler), repr(sorted(config.items())))
    except Exception:  # noqa: BLE001  (a custom sampler without a usable config)
        return (type(sampler), id(sampler))


def _seed_states(function: str, sampler: Any, seed: Any) -> tuple:
    """The sampler's random state to start from: its own, or fresh from ``seed``."""
    if sampler is None:
        return ()
    if seed is None:
        return tuple(ops.convert_to_tensor(v.value) for v in sampler.variables)
    seed = check_int(function, "seed", seed, 0)
    return tuple(
        ops.convert_to_tensor(keras.random.SeedGenerator(seed + i).state.value)
        for i in range(len(sampler.variables))
    )


def _draw(sampler: Any, logits: Any, seeds: tuple) -> tuple:
    """The sampler's next token from ``logits``, with its random state given and returned.

    The state is mapped in a ``keras.StatelessScope``, so a compiled loop carries it as
    a loop variable instead of assigning a variable inside the graph.
    """
    variables = sampler.variables
    with keras.StatelessScope(state_mapping=list(zip(variables, seeds, strict=True))) as scope:
        token = sampler.get_next_token(sampler.compute_probabilities(logits))
    new_seeds = []
    for variable, old in zip(variables, seeds, strict=True):
        value = scope.get_current_value(variable)
        new_seeds.append(old if value is None else value)
    return ops.cast(token, "int32"), tuple(new_seeds)


# --------------------------------------------------------------------------- compiled steps


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


def _run_loop(task: _Task, sampler: Any = None, seeds: tuple = ()) -> tuple:
    """Greedy search or sampling over ``task``: ``(chosen tokens, final random state)``."""
    model = task.model
    output = np.full((task.batch, task.steps), model.pad_id, dtype="int32")
    if task.batch == 0:  # nothing to decode (and an empty batch breaks some backends' kernels)
        return output, seeds
    loop = _compiled(model, "loop", task.use_cache, sampler, task.no_repeat_ngram_size)
    result = loop(
        ops.convert_to_tensor(0, "int32"),  # the position
        ops.convert_to_tensor(task.first, "int32"),
        task.cache(),
        ops.convert_to_tensor(output, "int32"),
        ops.convert_to_tensor(np.zeros(task.batch, bool)),  # finished
        ops.convert_to_tensor(np.ones(task.batch, bool)),  # finite logits so far
        (
            ops.convert_to_tensor(task.first, "int32"),
            ops.convert_to_tensor(task.forced, "int32"),
            ops.convert_to_tensor(task.forced_mask),
            ops.convert_to_tensor(task.min_index, "int32"),
        ),
        seeds,
        _compiled(model, "constants")(),
    )
    output, finite, seeds = result[3], result[5], result[7]
    _check_finite(model, task.function, np.asarray(ops.convert_to_numpy(finite)))
    return np.asarray(ops.convert_to_numpy(output), dtype="int32"), tuple(seeds)


# --------------------------------------------------------------------------- searches


def greedy_search(
    model: Any,
    inputs: Any,
    max_length: int | None = None,
    min_length: int = 0,
    use_cache: bool = True,
    prefix_tokens: Any = None,
    no_repeat_ngram_size: int = 0,
) -> np.ndarray:
    """Decodes the most likely token at every step.

    Args:
        model: a :class:`~keras_posenc.zoo.seq2seq.Seq2SeqModel` or a
            :class:`~keras_posenc.zoo.language_model.LanguageModel` (any model
            with their decoding contract).
        inputs: an encoder-decoder's ``(batch, source_time)`` source ids, padded
            with ``model.pad_id``; a language model's ``(batch, prompt_time)``
            prompt, right-padded with ``pad_id`` (each row starts with a token).
        max_length: encoder-decoder: the most tokens to generate (``eos``
            included), default ``2 * source_time + 10`` capped by
            ``model.max_target_length``; language model (required): the length
            of the returned sequences, prompt included.
        min_length: ``eos`` is not generated before this many tokens (see the
            module docstring).
        use_cache: decode with the cache (default) or recompute the full
            prefix every step (same tokens, slower).
        prefix_tokens: encoder-decoders only: ``(batch, prefix_time)`` target
            tokens forced at the first positions (right-padded with ``pad_id``).
        no_repeat_ngram_size: if ``n > 0``, never repeat an n-gram.

    Returns:
        ``(batch, max_length)`` int32 numpy ids, ``pad_id`` after each row's
        ``eos``: an encoder-decoder's tokens after ``bos``; a language model's
        prompt and its continuation.

    Raises:
        ValueError: ids outside the vocabulary, an input longer than the
            model's position table or with no token, a ``max_length`` beyond
            its limit, forced tokens holding ``eos_id``, or logits that are not
            finite (NaN or Inf).

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
    task = _task(model, function, inputs, max_length, min_length, prefix_tokens)
    task.configure(no_repeat_ngram_size, use_cache)
    output, _ = _run_loop(task)
    return task.result(output)


def sample(
    model: Any,
    inputs: Any,
    sampler: Any = "random",
    seed: int | None = None,
    max_length: int | None = None,
    min_length: int = 0,
    use_cache: bool = True,
    prefix_tokens: Any = None,
    no_repeat_ngram_size: int = 0,
) -> np.ndarray:
    """Draws every token from the model's next-token distribution with a keras_hub sampler.

    Args:
        model: as :func:`greedy_search`.
        inputs: as :func:`greedy_search`.
        sampler: ``"random"`` (default), ``"top_k"``, ``"top_p"``, ``"greedy"``
            (keras_hub's defaults: ``k = 5``, ``p = 0.1``, temperature 1), or a
            ``keras_hub.samplers`` instance with your settings, e.g.
            ``keras_hub.samplers.TopPSampler(p=0.9, temperature=0.7)``. Samplers
            that run their own loop (``BeamSampler``, ``ContrastiveSampler``)
            are refused.
        seed: start the sampler's random state from this int, leaving the
            sampler's own state alone: the same seed gives the same tokens on a
            backend. None (default) uses and advances the sampler's own state,
            so repeated calls differ, as in keras_hub.
        max_length: as :func:`greedy_search`.
        min_length: as :func:`greedy_search`.
        use_cache: as :func:`greedy_search`.
        prefix_tokens: as :func:`greedy_search`.
        no_repeat_ngram_size: as :func:`greedy_search`.

    Returns:
        As :func:`greedy_search`.

    Raises:
        TypeError: for a ``sampler`` that is neither a name nor a keras_hub sampler.
        ValueError: as :func:`greedy_search`; an unknown sampler name, a
            sampler that runs its own loop, or sampler settings out of range: a
            ``temperature`` that is not a finite number > 0 (greedy search is the way
            to ask for the most likely token), ``p`` outside (0, 1], ``k`` below 1
            or above the vocabulary size.

    Examples:

        >>> import numpy as np
        >>> import keras_hub
        >>> from keras_posenc.generation import sample
        >>> from keras_posenc.zoo.convs2s import ConvS2SLanguageModel
        >>> model = ConvS2SLanguageModel(30, embed_dim=8, decoder_layers=[(12, 4)] * 2,
        ...                              decoder_out_embed_dim=8)
        >>> top_k = keras_hub.samplers.TopKSampler(k=3, temperature=0.8)
        >>> first = sample(model, np.array([[1, 5]]), top_k, seed=7, max_length=8)
        >>> again = sample(model, np.array([[1, 5]]), top_k, seed=7, max_length=8)
        >>> bool((first == again).all()), first.shape
        (True, (1, 8))
    """
    function = "sample"
    sampler = _sampler(function, sampler)
    vocab = getattr(model, "vocab_size" if _decoder_only(model) else "target_vocab_size", None)
    _check_sampler_settings(function, sampler, vocab if isinstance(vocab, int) else None)
    task = _task(model, function, inputs, max_length, min_length, prefix_tokens)
    task.configure(no_repeat_ngram_size, use_cache)
    output, seeds = _run_loop(task, sampler, _seed_states(function, sampler, seed))
    if seed is None:  # the sampler's own state moves on, as after keras_hub's generate
        for variable, value in zip(sampler.variables, seeds, strict=True):
            variable.assign(value)
    return task.result(output)


def beam_search(
    model: Any,
    inputs: Any,
    beam_size: int = 4,
    max_length: int | None = None,
    length_penalty: float = 1.0,
    min_length: int = 0,
    use_cache: bool = True,
    prefix_tokens: Any = None,
    no_repeat_ngram_size: int = 0,
    return_n_best: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Beam search with fairseq's length penalty and end-of-sequence finalisation.

    See the module docstring for how hypotheses are scored, finished and
    chosen.

    Args:
        model: as :func:`greedy_search`.
        inputs: as :func:`greedy_search`.
        beam_size: hypotheses kept per sentence.
        max_length: as :func:`greedy_search`.
        length_penalty: exponent of the length that divides a finished
            hypothesis' summed log-probability.
        min_length: as :func:`greedy_search`.
        use_cache: as :func:`greedy_search`.
        prefix_tokens: as :func:`greedy_search`.
        no_repeat_ngram_size: as :func:`greedy_search`.
        return_n_best: None (default): the best hypothesis per sentence; an
            int ``N`` in ``[1, beam_size]``: the ``N`` best, best first.

    Returns:
        ``(tokens, scores)``: ``(batch, max_length)`` int32 ids of the best
        hypothesis (``pad_id`` after ``eos``; a language model's include the
        prompt) and its ``(batch,)`` float score; with ``return_n_best=N``,
        ``(batch, N, max_length)`` ids and ``(batch, N)`` scores sorted best
        first (a sentence with fewer than N finished hypotheses is filled with
        ``pad_id`` rows scored -inf).

    Raises:
        ValueError: as :func:`greedy_search`, for a ``beam_size`` below 1, a
            ``length_penalty`` that is negative, NaN or infinite, or a
            ``return_n_best`` outside ``[1, beam_size]``.

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
        >>> tokens, scores = beam_search(model, np.array([[4, 5, 6, 2]]), beam_size=3,
        ...                              max_length=6, return_n_best=3)
        >>> tokens.shape, bool(np.all(np.diff(scores) <= 0))
        ((1, 3, 6), True)
    """
    function = "beam_search"
    task = _task(model, function, inputs, max_length, min_length, prefix_tokens)
    task.configure(no_repeat_ngram_size, use_cache)
    beam = check_int(function, "beam_size", beam_size, 1)
    length_penalty = check_non_negative_number(function, "length_penalty", length_penalty)
    n_best = None
    if return_n_best is not None:
        n_best = check_int(function, "return_n_best", return_n_best, 1)
        if n_best > beam:
            raise ValueError(
                f"{function}: `return_n_best` = {n_best} asks for more hypotheses than "
                f"`beam_size` = {beam} keeps."
            )
    finished = _beams(task, beam, length_penalty)
    count = 1 if n_best is None else n_best
    output = np.full((task.batch, count, task.steps), model.pad_id, dtype="int32")
    scores = np.full((task.batch, count), -np.inf)
    for b, hypotheses in enumerate(finished):
        # Stable: ties keep the order they finished in, so the first is max()'s choice.
        ranked = sorted(hypotheses, key=lambda item: -item[0])[:count]
        for rank, (score, sequence) in enumerate(ranked):
            output[b, rank, : len(sequence)] = sequence
            scores[b, rank] = score
    output = task.result(output)
    if n_best is None:
        return output[:, 0], scores[:, 0]
    return output, scores


def _beams(task: _Task, beam: int, length_penalty: float) -> list[list[tuple[float, np.ndarray]]]:
    """Every sentence's finished hypotheses ``(score, tokens)``, in the order they finished."""
    model, function = task.model, task.function
    batch, steps = task.batch, task.steps
    finished: list[list[tuple[float, np.ndarray]]] = [[] for _ in range(batch)]
    if batch == 0:  # nothing to decode (and an empty batch breaks some backends' kernels)
        return finished
    rows = batch * beam
    # Every hypothesis gets its own copy of its sentence's cache (encoder state included).
    cache = task.cache(repeat=beam)
    constants = _compiled(model, "constants")()
    step = _compiled(model, "reordering_step", task.use_cache)
    first = np.repeat(task.first, beam)
    scores = np.zeros((batch, beam))
    scores[:, 1:] = -np.inf  # at the start all beams are the same: keep one
    history = np.full((rows, steps), model.pad_id, dtype="int32")
    tokens = first.copy()
    order = np.arange(rows, dtype="int32")
    done = np.zeros(batch, bool)
    for index in range(steps):
        log_probs, cache = step(
            ops.convert_to_tensor(tokens, "int32"),
            cache,
            ops.convert_to_tensor(index, "int32"),
            ops.convert_to_tensor(order, "int32"),
            constants,
        )
        log_probs = np.asarray(ops.convert_to_numpy(log_probs), dtype="float64")
        _check_finite(model, function, np.isfinite(log_probs).all(axis=-1))
        vocab = log_probs.shape[-1]
        raw = log_probs.copy()
        log_probs[:, model.pad_id] = -np.inf
        log_probs[:, model.bos_id] = -np.inf
        if index < task.min_index:
            log_probs[:, model.eos_id] = -np.inf
        if task.no_repeat_ngram_size:
            for row in range(rows):
                sequence = np.concatenate([first[row : row + 1], history[row, :index]])
                log_probs[row, _banned_ngrams_numpy(sequence, task.no_repeat_ngram_size)] = -np.inf
        log_probs = log_probs.reshape(batch, beam, vocab)
        raw = raw.reshape(batch, beam, vocab)
        for b in np.flatnonzero(task.forced_mask[:, index]):
            token = task.forced[b, index]
            log_probs[b] = -np.inf
            log_probs[b, :, token] = raw[b, :, token]
        if index == steps - 1:  # out of room: every live hypothesis ends here
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
    return finished


def generate(
    model: Any,
    inputs: Any,
    max_length: int | None = None,
    beam_size: int = 1,
    length_penalty: float = 1.0,
    sampler: Any = None,
    seed: int | None = None,
    min_length: int = 0,
    prefix_tokens: Any = None,
    no_repeat_ngram_size: int = 0,
    return_n_best: int | None = None,
) -> np.ndarray:
    """Greedy search, sampling or beam search, chosen by the arguments (``model.generate``).

    ``sampler`` given: :func:`sample`; else ``beam_size > 1`` or ``return_n_best``
    given: :func:`beam_search` (its ids only); else :func:`greedy_search`.
    The other arguments are theirs.

    Raises:
        ValueError: for a ``sampler`` with ``beam_size > 1`` or ``return_n_best``
            (beam search does not sample), and as the search chosen.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.generation import generate
        >>> from keras_posenc.zoo.convs2s import ConvS2S
        >>> model = ConvS2S(12, 12, embed_dim=8, encoder_layers=[(8, 3)],
        ...                 decoder_layers=[(8, 3)], decoder_out_embed_dim=8)
        >>> generate(model, np.array([[4, 5, 6, 2]]), max_length=6, beam_size=2,
        ...          return_n_best=2).shape
        (1, 2, 6)
    """
    function = "generate"
    beam = check_int(function, "beam_size", beam_size, 1)
    options = {
        "max_length": max_length,
        "min_length": min_length,
        "prefix_tokens": prefix_tokens,
        "no_repeat_ngram_size": no_repeat_ngram_size,
    }
    if sampler is not None:
        if beam != 1 or return_n_best is not None:
            raise ValueError(
                f"{function}: `sampler` cannot be combined with `beam_size` = {beam} or "
                f"`return_n_best` = {return_n_best} (beam search does not sample)."
            )
        return sample(model, inputs, sampler=sampler, seed=seed, **options)
    if beam == 1 and return_n_best is None:
        return greedy_search(model, inputs, **options)
    tokens, _ = beam_search(
        model,
        inputs,
        beam_size=beam,
        length_penalty=length_penalty,
        return_n_best=return_n_best,
        **options,
    )
    return tokens
