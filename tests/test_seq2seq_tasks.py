"""The synthetic reversal task and the exact-match metric, checked element by element."""

from __future__ import annotations

import numpy as np
import pytest

from keras_posenc.experiments.seq2seq_tasks import exact_match, reverse_task

pytestmark = pytest.mark.contract


def test_reverse_task_examples():
    inputs, targets = reverse_task(50, min_length=2, max_length=7, vocab_size=9, seed=3)
    source, decoder_in = inputs["encoder_token_ids"], inputs["decoder_token_ids"]
    assert source.shape == decoder_in.shape == targets.shape == (50, 8)
    assert source.dtype == decoder_in.dtype == targets.dtype == np.int32
    lengths = set()
    for row in range(50):
        words = []
        for token in source[row]:
            if token == 2:
                break
            assert 3 <= token < 9
            words.append(int(token))
        n = len(words)
        lengths.add(n)
        assert 2 <= n <= 7 and (source[row, n + 1 :] == 0).all()
        expected_target = list(reversed(words)) + [2] + [0] * (7 - n)
        assert targets[row].tolist() == expected_target
        assert decoder_in[row].tolist() == [1] + list(reversed(words)) + [0] * (7 - n)
    assert len(lengths) > 3  # lengths vary
    again, _ = reverse_task(50, min_length=2, max_length=7, vocab_size=9, seed=3)
    np.testing.assert_array_equal(again["encoder_token_ids"], source)


def test_exact_match():
    targets = np.array([[5, 4, 2, 0], [3, 2, 0, 0], [6, 6, 6, 2]])
    assert exact_match(targets, targets) == 1.0
    predicted = np.array([[5, 4, 2, 9], [3, 3, 2, 0], [6, 6, 6, 6]])
    assert exact_match(predicted, targets) == pytest.approx(1 / 3)  # extra after eos ignored
    with pytest.raises(ValueError, match="same batch"):
        exact_match(predicted[:2], targets)


@pytest.mark.parametrize(
    "arguments, message",
    [({"num_examples": 0}, "num_examples"), ({"min_length": 5, "max_length": 4}, "max_length"),
     ({"vocab_size": 3}, "vocab_size")],
)  # fmt: skip
def test_reverse_task_errors(arguments, message):
    with pytest.raises(ValueError, match=f"`{message}` must be an int"):
        reverse_task(**{"num_examples": 4, **arguments})


@pytest.mark.neutral  # numpy only
def test_reverse_task_with_distinct_words():
    inputs, targets = reverse_task(200, 3, 12, vocab_size=40, seed=3, distinct=True)
    for source, target in zip(inputs["encoder_token_ids"], targets, strict=True):
        length = int(np.flatnonzero(source == 2)[0])
        words = source[:length]
        assert len(set(words.tolist())) == length and words.min() >= 3  # none twice
        np.testing.assert_array_equal(target[:length], words[::-1])
    # Every word once: the longest sequence the words allow.
    inputs, _ = reverse_task(1, 37, 37, vocab_size=40, distinct=True)
    assert sorted(inputs["encoder_token_ids"][0, :37].tolist()) == list(range(3, 40))
    with pytest.raises(ValueError, match=r"distinct=True, `max_length` must be at most "
                       r"vocab_size - 3 = 17 \(the words\); got 18"):  # fmt: skip
        reverse_task(4, 3, 18, vocab_size=20, distinct=True)
