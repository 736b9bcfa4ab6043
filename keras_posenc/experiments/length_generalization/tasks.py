"""The study's tasks: token sequences generated in code, their answers and chance.

The package's docstring (``keras_posenc.experiments.length_generalization``)
describes each task and what it asks of a position encoding.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from keras_posenc.layers._checks import check_choice, check_int

TASKS = ("copy_back", "copy_position", "copy_recent")
TASK_DESCRIPTIONS = {
    "copy_back": "relative: the token {shift} positions back",
    "copy_position": "absolute: the token at position {position}",
    "copy_recent": "recency: the most recent earlier token of the {marked} marked ones",
}
# The tasks' settings: the same for the quick and the full run.
TASK_SETTINGS = {"shift": 4, "position": 3, "marked": 3}


def task_data(
    task: str,
    num_sequences: int,
    length: int,
    seed: int | Sequence[int] = 0,
    vocabulary_size: int = 10,
    shift: int = 4,
    position: int = 3,
    marked: int = 3,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random token sequences with the task's answers.

    Tokens are uniform in ``0 .. vocabulary_size - 1`` (chance accuracy is
    ``1 / vocabulary_size``). Positions without an answer (the first
    ``shift`` for ``"copy_back"``, those before ``position`` for
    ``"copy_position"``, whose answer lies in the future of a causal model,
    and those with no marked token before them for ``"copy_recent"``) get
    label 0 and weight 0.

    Args:
        task: ``"copy_back"`` (label ``i`` = token ``i - shift``),
            ``"copy_position"`` (label ``i`` = token ``position``, for
            ``i >= position``) or ``"copy_recent"`` (label ``i`` = token
            ``j``, the largest ``j < i`` whose token is below ``marked``).
        num_sequences: number of sequences.
        length: tokens per sequence.
        seed: seed of the random tokens (anything ``numpy.random.default_rng`` takes).
        vocabulary_size: number of distinct tokens.
        shift: distance back for ``"copy_back"``.
        position: the position whose token ``"copy_position"`` asks for.
        marked: ``"copy_recent"``: the tokens ``0 .. marked - 1`` are marked
            (``1 <= marked < vocabulary_size``).

    Returns:
        ``(tokens, labels, weights)``: int32, int32 and float32 arrays of shape
        ``(num_sequences, length)``.

    Examples:

        >>> tokens, labels, weights = task_data("copy_back", 1, 8, shift=2)
        >>> bool((labels[0, 2:] == tokens[0, :-2]).all()), weights[0].tolist()
        (True, [0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
        >>> tokens, labels, weights = task_data("copy_position", 1, 6, position=3)
        >>> bool((labels[0, 3:] == tokens[0, 3]).all()), weights[0].tolist()
        (True, [0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
        >>> tokens, labels, weights = task_data("copy_recent", 1, 8, seed=1)
        >>> tokens[0].tolist()  # 0, 1 and 2 are marked
        [4, 5, 7, 9, 0, 1, 8, 9]
        >>> labels[0].tolist(), weights[0].tolist()
        ([0, 0, 0, 0, 0, 0, 1, 1], [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    """
    caller = "task_data"
    check_choice(caller, "task", task, TASKS)
    num_sequences = check_int(caller, "num_sequences", num_sequences, 1)
    length = check_int(caller, "length", length, 1)
    vocabulary_size = check_int(caller, "vocabulary_size", vocabulary_size, 2)
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocabulary_size, size=(num_sequences, length)).astype("int32")
    labels = np.zeros_like(tokens)
    weights = np.zeros(tokens.shape, "float32")
    if task == "copy_back":
        shift = check_int(caller, "shift", shift, 1)
        labels[:, shift:] = tokens[:, : max(length - shift, 0)]
        weights[:, shift:] = 1.0
    elif task == "copy_position":
        position = check_int(caller, "position", position, minimum=0)
        if position < length:
            labels[:, position:] = tokens[:, position : position + 1]
            weights[:, position:] = 1.0
    else:
        marked = check_int(caller, "marked", marked, minimum=1)
        if marked >= vocabulary_size:
            raise ValueError(
                f"{caller}: `marked` must be below `vocabulary_size` ({vocabulary_size}), "
                f"so that some tokens are not marked; got {marked}."
            )
        # The latest marked position at or before each position, -1 where none yet...
        latest = np.where(tokens < marked, np.arange(length), -1)
        latest = np.maximum.accumulate(latest, axis=1)
        # ... and strictly before it: shifted one to the right.
        before = np.concatenate([np.full((num_sequences, 1), -1), latest[:, :-1]], axis=1)
        found = before >= 0
        labels = np.where(found, np.take_along_axis(tokens, np.maximum(before, 0), 1), 0)
        labels = labels.astype("int32")
        weights = found.astype("float32")
    return tokens, labels, weights


def chance(task: str, vocabulary_size: int = 10, marked: int = 3) -> float:
    """Accuracy of a guess that knows only which tokens can be answers.

    ``1 / vocabulary_size``, but ``1 / marked`` for ``"copy_recent"``, whose
    answer is always one of the marked tokens.

    Examples:

        >>> chance("copy_back"), round(chance("copy_recent"), 3)
        (0.1, 0.333)
    """
    return 1 / marked if task == "copy_recent" else 1 / vocabulary_size
