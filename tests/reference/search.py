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
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


def _allowed(log_probs: np.ndarray, pad: int, bos: int, eos: int, generated: int,
             min_length: int, last: bool) -> np.ndarray:  # fmt: skip
    values = np.array(log_probs, dtype="float64")
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
           min_length: int = 0) -> list[int]:  # fmt: skip
    """The generated tokens (after bos), eos included if it came."""
    prefix = [bos]
    for step in range(max_length):
        values = _allowed(log_probs(prefix), pad, bos, eos, step, min_length, last=False)
        token = int(np.argmax(values))
        prefix.append(token)
        if token == eos:
            break
    return prefix[1:]


def beam(log_probs: Callable, beam_size: int, max_length: int, length_penalty: float,
         pad: int, bos: int, eos: int, min_length: int = 0) -> tuple[list[int], float]:  # fmt: skip
    """The best finished hypothesis (tokens after bos, eos included) and its score."""
    live = [([bos], 0.0)]
    finished = []
    for step in range(max_length):
        candidates = []
        for order, (prefix, score) in enumerate(live):
            values = _allowed(log_probs(prefix), pad, bos, eos, step, min_length,
                              last=step == max_length - 1)  # fmt: skip
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
    tokens, score = max(finished, key=lambda item: item[1])
    return tokens, score
