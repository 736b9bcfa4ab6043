"""keras_posenc.generation beyond plain greedy and beam search: sampling through
keras_hub's samplers, decoder-only language models, forced prefixes, n-gram blocking
and n-best lists, against the plain-Python reference (reference/search.py) and numpy
filters; cached decoding of convs2s_lm against recomputation."""

from __future__ import annotations

import keras
import keras_hub
import numpy as np
import pytest
from markov_models import markov, markov_lm

from keras_posenc import generation
from keras_posenc.zoo.convs2s import ConvS2SLanguageModel
from reference import search

pytestmark = pytest.mark.contract

PAD, BOS, EOS = 0, 1, 2


def softmax(log_probs):
    values = np.exp(log_probs - log_probs.max())
    return values / values.sum()


def allowed_probabilities(log_probs, generated, min_length=0):
    """The next-token distribution after the rules (pad, bos, early eos forbidden)."""
    values = np.array(log_probs)
    values[[PAD, BOS]] = -np.inf
    if generated < min_length:
        values[EOS] = -np.inf
    return softmax(values)


def small_lm(seed=0, **overrides):
    keras.utils.set_random_seed(seed)
    config = dict(embed_dim=8, decoder_layers=[(12, 3), (16, 2)], decoder_out_embed_dim=8)
    config.update(overrides)
    return ConvS2SLanguageModel(31, dropout=0.0, **config)


# --------------------------------------------------------------------------- forced tokens, n-grams


@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_with_a_prefix_and_ngram_blocking_matches_the_reference(seed):
    model, log_probs = markov(seed, eos_bias=1.0)
    source = np.full((2, 3), 3, "int32")
    prefix = np.array([[4, 5, 4], [6, 0, 0]], "int32")  # right-padded: row 1 forces one
    for ngram in (0, 2):
        tokens = generation.greedy_search(
            model, source, max_length=8, prefix_tokens=prefix, no_repeat_ngram_size=ngram
        )
        for row in range(2):
            forced = [t for t in prefix[row] if t != PAD]
            expected = search.greedy(log_probs, 8, PAD, BOS, EOS, forced=forced, ngram=ngram)
            assert tokens[row, : len(expected)].tolist() == expected
            assert tokens[row, : len(forced)].tolist() == forced
            assert (tokens[row, len(expected) :] == PAD).all()


def test_ngram_blocking_never_repeats_an_ngram():
    # eos forbidden to the end: 10 tokens from a 7-token vocabulary must loop without blocking.
    model, _ = markov(2, length=12)
    source = np.full((1, 3), 3, "int32")
    free = generation.greedy_search(model, source, max_length=11, min_length=11)
    blocked = generation.greedy_search(
        model, source, max_length=11, min_length=11, no_repeat_ngram_size=2
    )

    def bigrams(row):
        sequence = [BOS, *row.tolist()]
        return [tuple(sequence[i : i + 2]) for i in range(len(sequence) - 1)]

    assert len(set(bigrams(free[0]))) < len(bigrams(free[0]))  # the test has teeth
    assert len(set(bigrams(blocked[0]))) == len(bigrams(blocked[0]))


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_beam_with_a_prefix_and_ngram_blocking_matches_the_reference(length_penalty):
    model, log_probs = markov(3, eos_bias=3.0)
    source = np.full((1, 3), 3, "int32")
    prefix = np.array([[5, 4]], "int32")
    tokens, scores = generation.beam_search(
        model,
        source,
        beam_size=3,
        max_length=8,
        length_penalty=length_penalty,
        prefix_tokens=prefix,
        no_repeat_ngram_size=2,
    )
    expected, score = search.beam(
        log_probs, 3, 8, length_penalty, PAD, BOS, EOS, forced=[5, 4], ngram=2
    )
    assert tokens[0, : len(expected)].tolist() == expected
    assert scores[0] == pytest.approx(score, abs=1e-5)


@pytest.mark.parametrize("seed", [0, 4])
def test_n_best_lists_are_sorted_and_start_with_the_best(seed):
    model, log_probs = markov(seed, eos_bias=3.0)
    source = np.full((2, 3), 3, "int32")
    best, best_scores = generation.beam_search(model, source, beam_size=4, max_length=8)
    tokens, scores = generation.beam_search(
        model, source, beam_size=4, max_length=8, return_n_best=3
    )
    expected = search.beam(log_probs, 4, 8, 1.0, PAD, BOS, EOS, n_best=3)
    assert tokens.shape == (2, 3, 8) and scores.shape == (2, 3)
    for row in range(2):
        np.testing.assert_array_equal(tokens[row, 0], best[row])
        assert scores[row, 0] == best_scores[row]
        assert np.all(np.diff(scores[row]) <= 0)
        for rank, (sequence, score) in enumerate(expected):
            assert tokens[row, rank, : len(sequence)].tolist() == sequence
            assert scores[row, rank] == pytest.approx(score, abs=1e-5)


# --------------------------------------------------------------------------- sampling


def draws(sampler, seed=0, rows=48, length=7):
    model, log_probs = markov(5, eos_bias=1.0)
    source = np.full((rows, 3), 3, "int32")
    tokens = generation.sample(model, source, sampler, seed=seed, max_length=length)
    return tokens, log_probs


def each_step(tokens, log_probs):
    """Every sampled token with the allowed distribution it was drawn from."""
    for row in tokens:
        prefix = [BOS]
        for step, token in enumerate(row.tolist()):
            yield token, allowed_probabilities(log_probs(prefix), step)
            prefix.append(token)
            if token == EOS:
                break


def test_the_same_seed_gives_the_same_tokens():
    sampler = keras_hub.samplers.RandomSampler()
    first, _ = draws(sampler, seed=11)
    again, _ = draws(sampler, seed=11)
    other, _ = draws(sampler, seed=12)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    assert len({tuple(row) for row in first.tolist()}) > 1  # rows draw independently


def test_without_a_seed_the_samplers_state_moves_on():
    model, _ = markov(5, eos_bias=1.0)
    source = np.full((16, 3), 3, "int32")
    sampler = keras_hub.samplers.RandomSampler(seed=3)
    first = generation.sample(model, source, sampler, max_length=7)
    second = generation.sample(model, source, sampler, max_length=7)
    assert not np.array_equal(first, second)
    restarted = generation.sample(
        model, source, keras_hub.samplers.RandomSampler(seed=3), max_length=7
    )
    np.testing.assert_array_equal(first, restarted)


def test_top_k_never_leaves_the_top_k():
    tokens, log_probs = draws(keras_hub.samplers.TopKSampler(k=2))
    seen = 0
    for token, probabilities in each_step(tokens, log_probs):
        assert token in search.top_k_allowed(probabilities, 2)
        seen += 1
    assert seen > 100


def test_top_p_stays_inside_the_nucleus():
    tokens, log_probs = draws(keras_hub.samplers.TopPSampler(p=0.6))
    sizes = []
    for token, probabilities in each_step(tokens, log_probs):
        allowed = search.nucleus(probabilities, 0.6)
        assert token in allowed
        sizes.append(len(allowed))
    assert max(sizes) > 1 and len(sizes) > 100  # nuclei with a choice were sampled


@pytest.mark.parametrize("sampler", ["greedy", keras_hub.samplers.RandomSampler(temperature=1e-4)])
def test_greedy_sampler_and_temperature_near_zero_equal_greedy_search(sampler):
    model, _ = markov(1, eos_bias=1.0)
    source = np.full((3, 3), 3, "int32")
    greedy = generation.greedy_search(model, source, max_length=8, no_repeat_ngram_size=2)
    sampled = generation.sample(
        model, source, sampler, seed=0, max_length=8, no_repeat_ngram_size=2
    )
    np.testing.assert_array_equal(sampled, greedy)


def test_sampling_keeps_the_rules():
    model, _ = markov(6, eos_bias=-3.0)
    source = np.full((32, 3), 3, "int32")
    prefix = np.array([[4, 5]] * 32, "int32")
    tokens = generation.sample(
        model, source, "random", seed=1, max_length=8, min_length=4, prefix_tokens=prefix
    )
    assert (tokens[:, :2] == [4, 5]).all()
    assert not np.isin(tokens[:, :4], [PAD, BOS, EOS]).any()


# --------------------------------------------------------------------------- language models


def test_language_model_searches_match_the_reference():
    model, log_probs = markov_lm(0, eos_bias=2.0)
    prompt = np.array([[1, 4, 5], [1, 6, 0]], "int32")  # right-padded prompts
    greedy = generation.greedy_search(model, prompt, max_length=9, no_repeat_ngram_size=3)
    tokens, scores = generation.beam_search(model, prompt, beam_size=3, max_length=9)
    for row in range(2):
        start, *forced = [t for t in prompt[row] if t != PAD]
        expected = search.greedy(log_probs, 8, PAD, BOS, EOS, forced=forced, ngram=3, start=[start])
        assert greedy[row, : 1 + len(expected)].tolist() == [start, *expected]
        assert (greedy[row, 1 + len(expected) :] == PAD).all()
    # Beam search against the reference: the forced tokens count in the score.
    expected, score = search.beam(log_probs, 3, 8, 1.0, PAD, BOS, EOS, forced=[4, 5])
    assert tokens[0, : len(expected) + 1].tolist() == [BOS, *expected]
    assert scores[0] == pytest.approx(score, abs=1e-5)


def test_convs2s_lm_cached_generation_equals_recomputation():
    model = small_lm(seed=1)
    prompt = np.array([[1, 7, 8, 9], [1, 10, 0, 0]], "int32")
    options = dict(max_length=12, min_length=12)
    cached = model.generate(prompt, **options)
    np.testing.assert_array_equal(
        cached, generation.greedy_search(model, prompt, use_cache=False, **options)
    )
    assert cached.shape == (2, 12)
    assert cached[0, :4].tolist() == [1, 7, 8, 9] and cached[1, :2].tolist() == [1, 10]
    tokens, scores = generation.beam_search(model, prompt, beam_size=3, max_length=10)
    full_tokens, full_scores = generation.beam_search(
        model, prompt, beam_size=3, max_length=10, use_cache=False
    )
    np.testing.assert_array_equal(tokens, full_tokens)
    np.testing.assert_allclose(scores, full_scores, atol=1e-4)
    sampler = keras_hub.samplers.TopKSampler(k=4)
    sampled = model.generate(prompt, sampler=sampler, seed=5, **options)
    np.testing.assert_array_equal(
        sampled, generation.sample(model, prompt, sampler, seed=5, use_cache=False, **options)
    )


def test_generate_dispatches_to_each_search():
    model = small_lm(seed=2)
    prompt = np.array([[1, 5]], "int32")
    n_best = model.generate(prompt, max_length=6, beam_size=3, return_n_best=2)
    beam, _ = generation.beam_search(model, prompt, beam_size=3, max_length=6, return_n_best=2)
    np.testing.assert_array_equal(n_best, beam)
    assert n_best.shape == (1, 2, 6)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(inputs=np.array([[0, 4]])), ValueError, "must start with a token"),
        (dict(inputs=np.array([[1, 0, 4]])), ValueError, "padded on the right only"),
        (dict(inputs=np.array([[1, 2, 4]])), ValueError, "may not hold eos_id"),
        (dict(max_length=3), ValueError, "leaves no room"),
        (dict(max_length=None), ValueError, "needs `max_length`"),
        (dict(prefix_tokens=np.array([[4]])), ValueError, "`prefix_tokens` is for encoder"),
        (dict(no_repeat_ngram_size=-1), ValueError, "no_repeat_ngram_size"),
        (dict(inputs=np.array([[1, 40]])), ValueError, "outside the vocabulary"),
    ],
)
def test_language_model_generation_errors(kwargs, error, message):
    model, _ = markov_lm(0)
    arguments = dict(inputs=np.array([[1, 4, 5]]), max_length=8)
    arguments.update(kwargs)
    with pytest.raises(error, match=message):
        generation.greedy_search(model, **arguments)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda m, s: generation.sample(m, s, "nucleus"), ValueError, "must be one of"),
        (lambda m, s: generation.sample(m, s, 3), TypeError, "keras_hub.samplers.Sampler"),
        (
            lambda m, s: generation.sample(m, s, keras_hub.samplers.BeamSampler()),
            ValueError,
            "runs its own decoding loop",
        ),
        (
            lambda m, s: generation.beam_search(m, s, beam_size=2, return_n_best=3),
            ValueError,
            "return_n_best",
        ),
        (
            lambda m, s: generation.generate(m, s, sampler="random", beam_size=2),
            ValueError,
            "beam search does not sample",
        ),
        (
            lambda m, s: generation.greedy_search(m, s, prefix_tokens=np.array([[4, 2]])),
            ValueError,
            "may not hold eos_id",
        ),
        (
            lambda m, s: generation.greedy_search(m, s, prefix_tokens=np.array([[4], [5]])),
            ValueError,
            "one row per source",
        ),
        (lambda m, s: generation.sample(m, s, seed=-1), ValueError, "seed"),
    ],
)
def test_search_argument_errors(call, error, message):
    model, _ = markov(0)
    with pytest.raises(error, match=message):
        call(model, np.full((1, 3), 3, "int32"))


# Bad sampler settings are refused where generation receives the sampler, before any search
# runs (keras_posenc/generation/sampling.py, _check_sampler_settings): pure Python, so once.
@pytest.mark.neutral
@pytest.mark.parametrize(
    "sampler, message",
    [
        (keras_hub.samplers.RandomSampler(temperature=0.0), r"`temperature` must be .* got 0.0"),
        (keras_hub.samplers.TopKSampler(k=3, temperature=-1.0), "`temperature` must be"),
        (keras_hub.samplers.GreedySampler(temperature=float("nan")), "`temperature` must be"),
        (keras_hub.samplers.RandomSampler(temperature=float("inf")), "`temperature` must be"),
        (keras_hub.samplers.TopPSampler(p=0.0), r"TopPSampler: `p` must be in \(0, 1\], got 0.0"),
        (keras_hub.samplers.TopPSampler(p=1.5), r"`p` must be in \(0, 1\], got 1.5"),
        (keras_hub.samplers.TopPSampler(p=0.5, k=0), "`k` must be an int >= 1"),
        (keras_hub.samplers.TopKSampler(k=0), r"TopKSampler: `k` must be an int >= 1 and at most"),
        (keras_hub.samplers.TopKSampler(k=8), "at most the vocabulary size 7, got 8"),
    ],
    ids=["t0", "t-neg", "t-nan", "t-inf", "p0", "p-above-1", "p-k0", "k0", "k-above-vocab"],
)
def test_sampler_settings_out_of_range_are_refused(sampler, message):
    language_model, _ = markov_lm(0)
    translator, _ = markov(0)
    with pytest.raises(ValueError, match=message) as error:
        generation.sample(language_model, np.array([[1, 4]]), sampler, max_length=6)
    assert str(error.value).startswith(f"sample: {type(sampler).__name__}: `")
    with pytest.raises(ValueError, match=message):
        generation.sample(translator, np.full((1, 3), 3, "int32"), sampler, max_length=6)
    # The limits themselves are accepted.
    for good in (
        keras_hub.samplers.TopKSampler(k=7, temperature=1e-3),
        keras_hub.samplers.TopPSampler(p=1.0),
    ):
        generation.sample(language_model, np.array([[1, 4]]), good, seed=0, max_length=6)
