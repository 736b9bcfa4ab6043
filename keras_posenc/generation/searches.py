"""The public searches: :func:`greedy_search`, :func:`sample`, :func:`beam_search` and
:func:`generate`, which chooses among them (``model.generate``).

Each checks its arguments, builds the ``_Task`` and runs a loop of
:mod:`keras_posenc.generation.loops`; the rules they share are in the package's
docstring (:mod:`keras_posenc.generation`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from keras_posenc.generation.loops import _beams, _run_loop
from keras_posenc.generation.sampling import _check_sampler_settings, _sampler, _seed_states
from keras_posenc.generation.tasks import _decoder_only, _task
from keras_posenc.layers._checks import check_int, check_non_negative_number

__all__ = ["beam_search", "generate", "greedy_search", "sample"]


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
            with ``model.pad_id`` (a model with an ``encoder_padding_mask`` input,
            T5, also takes keras-hub's dict ``{"encoder_token_ids": ids,
            "encoder_padding_mask": mask}``, and then may be padded on the left);
            a language model's ``(batch, prompt_time)`` prompt, right-padded with
            ``pad_id`` (each row starts with a token).
        max_length: encoder-decoder: the most tokens to generate (``eos``
            included), default ``2 * source_time + 10`` capped by
            ``model.max_target_length``; language model (required): the length
            of the returned sequences, prompt included.
        min_length: ``eos`` is not generated before this many tokens (see
            :mod:`keras_posenc.generation`).
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

    See :mod:`keras_posenc.generation` for how hypotheses are scored, finished
    and chosen.

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
