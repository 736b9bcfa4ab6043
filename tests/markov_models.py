"""Tiny models whose next-token distributions are known in closed form, for testing
keras_posenc.generation against the plain-Python reference (tests/reference/search.py).

The logits of the token after position ``index`` are ``table[token] + position[index]``
(a Markov chain with a position-dependent bias): small enough that the reference can
enumerate what a search does, and that tests can compute every step's distribution.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_posenc.zoo import Seq2SeqModel
from keras_posenc.zoo.language_model import LanguageModel


def _tables(table, position):
    vocab = table.shape[0]
    embed = keras.layers.Embedding(
        vocab, vocab, embeddings_initializer=keras.initializers.Constant(table), name="table"
    )
    bias = keras.layers.Embedding(
        position.shape[0],
        vocab,
        embeddings_initializer=keras.initializers.Constant(position),
        name="position",
    )
    return embed, bias


class MarkovModel(Seq2SeqModel):
    """A seq2seq model whose next-token logits are ``table[token] + position[index]``:
    small enough that the plain-Python reference can enumerate what search does."""

    def __init__(self, table, position, **kwargs):
        vocab = table.shape[0]
        self.table, self.position = _tables(table, position)
        super().__init__(
            source_vocab_size=vocab,
            target_vocab_size=vocab,
            max_target_length=position.shape[0],
            **kwargs,
        )

    def encode(self, encoder_token_ids, training=None):
        return (ops.cast(encoder_token_ids, "float32") * 0.0,)

    def decode(self, decoder_token_ids, encoder_state, training=None):
        positions = ops.cumsum(ops.ones_like(decoder_token_ids), axis=1) - 1
        return self.table(decoder_token_ids) + self.position(positions)

    def init_cache(self, encoder_state, max_length):
        return encoder_state

    def decode_step(self, token_ids, cache, index):
        logits = self.table(token_ids) + self.position(ops.reshape(index, (1,)))
        return logits, cache


def _markov_tables(seed, vocab, length, eos_bias):
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((vocab, vocab)).astype("float32") * 1.5
    position = rng.standard_normal((length, vocab)).astype("float32") * 0.5
    position[:, 2] += eos_bias * np.arange(length) / length

    def log_probs(prefix):
        """Log-probabilities of the token after ``prefix`` (its first token at position 0)."""
        logits = table[prefix[-1]].astype("float64") + position[len(prefix) - 1]
        return logits - np.log(np.sum(np.exp(logits - logits.max()))) - logits.max()

    return table, position, log_probs


def markov(seed, vocab=7, length=8, eos_bias=0.0):
    """A :class:`MarkovModel` and ``log_probs(prefix)`` (``prefix`` starts with bos)."""
    table, position, log_probs = _markov_tables(seed, vocab, length, eos_bias)
    return MarkovModel(table, position), log_probs


class MarkovLanguageModel(LanguageModel):
    """The decoder-only twin of :class:`MarkovModel`: ``model(ids)`` gives at position
    ``t`` the logits ``table[ids[t]] + position[t]`` of the token at ``t + 1``."""

    def __init__(self, table, position, **kwargs):
        self.table, self.position = _tables(table, position)
        self._init_language_model(table.shape[0], 0, 1, 2, position.shape[0])
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        positions = ops.cumsum(ops.ones_like(token_ids), axis=1) - 1
        logits = self.table(token_ids) + self.position(positions)
        super().__init__(inputs=token_ids, outputs=logits, **kwargs)

    def init_cache(self, batch_size, max_length):
        return (ops.zeros((batch_size, 1)),)

    def decode_step(self, token_ids, cache, index):
        logits = self.table(token_ids) + self.position(ops.reshape(index, (1,)))
        return logits, cache


def markov_lm(seed, vocab=7, length=10, eos_bias=0.0):
    """A :class:`MarkovLanguageModel` and ``log_probs(sequence)`` of the next token."""
    table, position, log_probs = _markov_tables(seed, vocab, length, eos_bias)
    return MarkovLanguageModel(table, position), log_probs
