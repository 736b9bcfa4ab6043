"""Synthetic sequence-to-sequence tasks, generated in code, and their exact-match metric.

The training examples of the seq2seq families (ConvS2S, MUSE, the Transformer
baseline) use the same task so their numbers compare: **reverse a token
sequence**. Ids follow the zoo's seq2seq convention (``pad_id`` 0, ``bos_id``
1, ``eos_id`` 2); words are ids ``3 .. vocab_size - 1``.

- source: ``w_1 .. w_n eos``, right-padded to ``max_length + 1``;
- target (what the model must produce): ``w_n .. w_1 eos``, right-padded;
- decoder input (teacher forcing): ``bos w_n .. w_1``, the target shifted right.

Reversal needs position information (which source token goes where), and
nothing else: it is the smallest task on which a sequence model without a
working notion of position fails.

The language models' example (the Music Transformer) continues **periodic sequences**
(:func:`periodic_task`): ``bos`` then a random motif of 2-8 events repeated; once a
period has been seen, every next event is the one a period back, a relative-position
rule that holds at any absolute position.
"""

from __future__ import annotations

import time
from typing import Any

import keras
import numpy as np

from keras_posenc.layers._checks import check_int

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
FIRST_WORD = 3

__all__ = ["exact_match", "periodic_task", "reverse_task", "train_periodic", "train_reverse"]


def reverse_task(
    num_examples: int,
    min_length: int = 4,
    max_length: int = 12,
    vocab_size: int = 20,
    seed: int = 0,
    distinct: bool = False,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Examples of the reversal task, ready for ``model.fit``.

    Args:
        num_examples: number of (source, target) pairs.
        min_length: fewest words in a sequence.
        max_length: most words in a sequence.
        vocab_size: ids ``0 .. vocab_size - 1``; the words are ``3 ..``.
        seed: seed of the generator (different seeds give disjoint-looking
            samples; use one for training and another for evaluation).
        distinct: no word twice in a sequence (drawn without replacement; then
            ``max_length`` is at most ``vocab_size - 3``). Each word then names its
            place, so the word before the last one written is the next to write, a rule
            that holds at any length (the shipped ``reverse`` preset's task).

    Returns:
        ``(inputs, targets)``: ``inputs`` is ``{"encoder_token_ids",
        "decoder_token_ids"}``, each ``(num_examples, max_length + 1)`` int32;
        ``targets`` is ``(num_examples, max_length + 1)`` int32.

    Examples:

        >>> from keras_posenc.experiments.seq2seq_tasks import reverse_task
        >>> inputs, targets = reverse_task(1, min_length=3, max_length=4, seed=1)
        >>> inputs["encoder_token_ids"].shape, targets.shape
        ((1, 5), (1, 5))
    """
    checks = {"num_examples": (num_examples, 1), "min_length": (min_length, 1)}
    checks.update(max_length=(max_length, min_length), vocab_size=(vocab_size, FIRST_WORD + 1))
    for name, (value, minimum) in checks.items():
        check_int("reverse_task", name, value, minimum)
    if distinct and max_length > vocab_size - FIRST_WORD:
        raise ValueError(
            f"reverse_task: with distinct=True, `max_length` must be at most vocab_size - "
            f"{FIRST_WORD} = {vocab_size - FIRST_WORD} (the words); got {max_length}."
        )
    rng = np.random.default_rng(seed)
    width = max_length + 1
    source = np.full((num_examples, width), PAD_ID, "int32")
    target = np.full((num_examples, width), PAD_ID, "int32")
    decoder_in = np.full((num_examples, width), PAD_ID, "int32")
    lengths = rng.integers(min_length, max_length + 1, num_examples)
    for row, length in enumerate(lengths):
        if distinct:
            words = rng.permutation(np.arange(FIRST_WORD, vocab_size))[:length]
        else:
            words = rng.integers(FIRST_WORD, vocab_size, length)
        source[row, :length] = words
        source[row, length] = EOS_ID
        target[row, :length] = words[::-1]
        target[row, length] = EOS_ID
        decoder_in[row, 0] = BOS_ID
        decoder_in[row, 1 : length + 1] = words[::-1]
    return {"encoder_token_ids": source, "decoder_token_ids": decoder_in}, target


def exact_match(predicted: Any, targets: Any, eos_id: int = EOS_ID, pad_id: int = PAD_ID) -> float:
    """The fraction of rows whose prediction equals the target up to and including ``eos``.

    Both are ``(batch, time)`` ids; everything after a row's first ``eos`` is
    ignored, and a row without ``eos`` counts as wrong.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.experiments.seq2seq_tasks import exact_match
        >>> exact_match(np.array([[5, 4, 2, 7], [5, 4, 3, 2]]), np.array([[5, 4, 2], [5, 4, 2]]))
        0.5
    """
    predicted, targets = np.asarray(predicted), np.asarray(targets)
    if predicted.ndim != 2 or targets.ndim != 2 or predicted.shape[0] != targets.shape[0]:
        raise ValueError(
            f"exact_match: `predicted` and `targets` must be (batch, time) with the same batch; "
            f"got shapes {predicted.shape} and {targets.shape}."
        )
    correct = 0
    for guess, truth in zip(predicted, targets, strict=True):
        truth_end = np.flatnonzero(truth == eos_id)
        guess_end = np.flatnonzero(guess == eos_id)
        if len(truth_end) and len(guess_end) and truth_end[0] == guess_end[0]:
            correct += int(np.array_equal(guess[: truth_end[0]], truth[: truth_end[0]]))
    return correct / len(targets)


def train_reverse(
    model: Any,
    epochs: int = 4,
    num_examples: int = 20_000,
    test_examples: int = 1_000,
    batch_size: int = 64,
    learning_rate: float = 2e-3,
    seed: int = 0,
    verbose: int | str = "auto",
) -> dict[str, float]:
    """Trains a seq2seq model on :func:`reverse_task` with ``fit`` and scores held-out sequences.

    The model (a :class:`~keras_posenc.zoo.seq2seq.Seq2SeqModel` with a
    vocabulary of 20 ids, e.g. ``zoo.create("convs2s_small", src_vocab_size=20,
    tgt_vocab_size=20)``) is compiled with Adam and a cross-entropy that
    ignores padding, trained on ``num_examples`` sequences of 4-12 words, then
    decodes ``test_examples`` sequences of another seed with greedy search.

    Returns:
        ``{"exact_match", "train_seconds", "parameters"}``.
    """
    from keras_posenc.generation import greedy_search

    keras.utils.set_random_seed(seed)
    inputs, targets = reverse_task(num_examples, seed=seed)
    test_inputs, test_targets = reverse_task(test_examples, seed=seed + 1000)
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD_ID),
    )
    start = time.perf_counter()
    model.fit(inputs, targets, batch_size=batch_size, epochs=epochs, verbose=verbose)
    seconds = time.perf_counter() - start
    predicted = greedy_search(model, test_inputs["encoder_token_ids"], max_length=targets.shape[1])
    return {
        "exact_match": exact_match(predicted, test_targets),
        "train_seconds": seconds,
        "parameters": float(model.count_params()),
    }


def periodic_task(
    num_examples: int,
    length: int = 48,
    min_period: int = 2,
    max_period: int = 8,
    vocab_size: int = 19,
    seed: int = 0,
) -> np.ndarray:
    """Periodic event sequences for a language model: ``bos`` then a repeated motif.

    Each row is ``bos m_1 .. m_p m_1 .. m_p ..`` cut at ``length`` ids, with a period
    ``p`` drawn from ``[min_period, max_period]`` and motif events drawn from ids
    ``3 .. vocab_size - 1``.

    Args:
        num_examples: number of sequences.
        length: ids per sequence (``bos`` included).
        min_period: shortest motif.
        max_period: longest motif.
        vocab_size: ids ``0 .. vocab_size - 1``; the events are ``3 ..``.
        seed: seed of the generator.

    Returns:
        ``(num_examples, length)`` int32.

    Examples:

        >>> from keras_posenc.experiments.seq2seq_tasks import periodic_task
        >>> periodic_task(1, length=9, min_period=3, max_period=3, seed=0).tolist()
        [[1, 16, 13, 11, 16, 13, 11, 16, 13]]
    """
    owner = "periodic_task"
    check_int(owner, "num_examples", num_examples, 1)
    check_int(owner, "min_period", min_period, 1)
    check_int(owner, "max_period", max_period, min_period)
    check_int(owner, "length", length, 2 * max_period + 2)
    check_int(owner, "vocab_size", vocab_size, FIRST_WORD + 1)
    rng = np.random.default_rng(seed)
    rows = np.full((num_examples, length), BOS_ID, "int32")
    for row in range(num_examples):
        period = int(rng.integers(min_period, max_period + 1))
        motif = rng.integers(FIRST_WORD, vocab_size, period)
        rows[row, 1:] = np.resize(motif, length - 1)
    return rows


def train_periodic(
    model: Any,
    epochs: int = 4,
    num_examples: int = 10_000,
    test_examples: int = 200,
    length: int = 48,
    batch_size: int = 64,
    learning_rate: float = 2e-3,
    seed: int = 0,
    verbose: int | str = "auto",
) -> dict[str, float]:
    """Trains a language model on :func:`periodic_task` and scores its continuations.

    The model (a :class:`~keras_posenc.zoo.language_model.LanguageModel` with at
    least 19 ids, e.g. ``zoo.create("music_transformer_base", num_events=16, ...)``)
    is compiled with Adam and a next-token cross-entropy, trained with ``fit`` on
    ``num_examples`` sequences, then continues ``test_examples`` sequences of
    another seed from a prompt of ``bos`` and two periods of the longest motif
    (``2 * max_period`` events) with greedy search.

    Returns:
        ``{"continuation_accuracy"`` (the share of generated events equal to the
        sequence's), ``"train_seconds"``, ``"parameters"}``.
    """
    from keras_posenc.generation import greedy_search

    keras.utils.set_random_seed(seed)
    sequences = periodic_task(num_examples, length, seed=seed)
    tests = periodic_task(test_examples, length, seed=seed + 1000)
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    start = time.perf_counter()
    model.fit(
        sequences[:, :-1], sequences[:, 1:], batch_size=batch_size, epochs=epochs, verbose=verbose
    )
    seconds = time.perf_counter() - start
    prompt_length = 1 + 2 * 8
    generated = greedy_search(model, tests[:, :prompt_length], max_length=length, min_length=length)
    continuation = np.asarray(generated)[:, prompt_length:]
    return {
        "continuation_accuracy": float(np.mean(continuation == tests[:, prompt_length:])),
        "train_seconds": seconds,
        "parameters": float(model.count_params()),
    }
