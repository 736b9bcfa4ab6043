"""Plain-Python greedy and beam search, written from fairseq's SequenceGenerator rules.

Independent of keras_posenc: hypotheses are Python lists, scores Python floats,
and the next-token distribution comes from a function of the whole prefix,
``log_probs(prefix) -> np.ndarray`` (no cache, no batching).

Rules (the ones keras_posenc.generation documents): pad and bos are never
generated; eos is forbidden before ``min_length`` tokens; at the last allowed
step only eos is possible (beam search); beam search expands every live
hypothesis, ranks the candidates, finishes an eos candidate if it ranks among
the best ``beam_size``, keeps the best ``beam_size`` non-eos candidates, and
stops when ``beam_size`` hypotheses are finished; a finished hypothesis scores
``sum(log p) / length ** length_penalty`` with ``length`` counting eos.

Forced tokens (``forced[step]`` not None: fairseq's prefix tokens, or a language
model's prompt) replace the choice at their step; in beam search every other
continuation of that step is dropped and the forced token's log-probability,
taken before the rules above, is added to the score. ``no_repeat_ngram_size = n``
forbids a token that would complete an n-gram already in the sequence (fairseq's
``NGramRepeatBlock``: the sequence includes the start token).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


def banned_ngrams(sequence: list[int], size: int) -> set[int]:
    """Tokens that would complete an n-gram ``sequence`` already holds."""
    if size == 0:
        return set()
    grams = [tuple(sequence[i : i + size]) for i in range(len(sequence) - size + 1)]
    tail = tuple(sequence[len(sequence) - size + 1 :]) if size > 1 else ()
    if size > 1 and len(sequence) < size - 1:
        return set()
    return {gram[-1] for gram in grams if gram[:-1] == tail}


def _allowed(log_probs: np.ndarray, pad: int, bos: int, eos: int, generated: int,
             min_length: int, last: bool, prefix: list[int] | None = None,
             forced: int | None = None, ngram: int = 0) -> np.ndarray:  # fmt: skip
    values = np.array(log_probs, dtype="float64")
    if forced is not None:
        only = np.full_like(values, -math.inf)
        only[forced] = values[forced]
        return only
    for token in banned_ngrams(prefix or [], ngram):
        values[token] = -math.inf
    values[pad] = -math.inf
    values[bos] = -math.inf
    if generated < min_length:
        values[eos] = -math.inf
    if last:
        only_eos = np.full_like(values, -math.inf)
        only_eos[eos] = values[eos]
        values = only_eos
    return values


def greedy(log_probs: Callable, max_length: int, pad: int, bos: int, eos: int,
           min_length: int = 0, forced: list | None = None, ngram: int = 0,
           start: list[int] | None = None) -> list[int]:  # fmt: skip
    """The generated tokens (after ``start``, default ``[bos]``), eos included if it came."""
    prefix = list(start or [bos])
    begin = len(prefix)
    forced = forced or []
    for step in range(max_length):
        force = forced[step] if step < len(forced) else None
        values = _allowed(log_probs(prefix), pad, bos, eos, step, min_length, False,
                          prefix, force, ngram)  # fmt: skip
        token = int(np.argmax(values))
        prefix.append(token)
        if token == eos:
            break
    return prefix[begin:]


def beam(log_probs: Callable, beam_size: int, max_length: int, length_penalty: float,
         pad: int, bos: int, eos: int, min_length: int = 0, forced: list | None = None,
         ngram: int = 0, n_best: int | None = None) -> tuple:  # fmt: skip
    """The best finished hypothesis (tokens after bos, eos included) and its score; with
    ``n_best``, the ``n_best`` best ``(tokens, score)`` pairs, best first."""
    live = [([bos], 0.0)]
    finished = []
    forced = forced or []
    for step in range(max_length):
        force = forced[step] if step < len(forced) else None
        candidates = []
        for order, (prefix, score) in enumerate(live):
            values = _allowed(log_probs(prefix), pad, bos, eos, step, min_length,
                              step == max_length - 1 and force is None, prefix, force,
                              ngram)  # fmt: skip
            if step == max_length - 1 and force is not None:  # out of room: only eos
                values = np.where(np.arange(len(values)) == eos, values, -math.inf)
            for token, value in enumerate(values):
                if value > -math.inf:
                    # order, token: the tie-break of a stable sort over (beam, token)
                    candidates.append((score + value, order, token, prefix))
        candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
        candidates = candidates[: 2 * beam_size]
        next_live = []
        for rank, (score, _, token, prefix) in enumerate(candidates):
            if token == eos:
                if rank < beam_size:
                    length = step + 1
                    finished.append((prefix[1:] + [eos], score / length**length_penalty))
                continue
            next_live.append((prefix + [token], score))
            if len(next_live) == beam_size:
                break
        if len(finished) >= beam_size or not next_live:
            break
        live = next_live
    if n_best is not None:
        return sorted(finished, key=lambda item: -item[1])[:n_best]
    tokens, score = max(finished, key=lambda item: item[1])
    return tokens, score


def top_k_allowed(probabilities: np.ndarray, k: int) -> set[int]:
    """The k most probable tokens (ties at the k-th probability all allowed)."""
    threshold = np.sort(probabilities)[::-1][k - 1]
    return set(np.flatnonzero(probabilities >= threshold).tolist())


def nucleus(probabilities: np.ndarray, p: float) -> set[int]:
    """The top-p nucleus (Holtzman et al. 2020): the most probable tokens, in order,
    until their total reaches p (the token that crosses p included)."""
    order = np.argsort(-probabilities, kind="stable")
    before = np.cumsum(probabilities[order]) - probabilities[order]  # mass ranked above
    return set(order[before < p].tolist())
