"""Train a small MUSE to reverse token sequences, and a plain Transformer of the same size.

Uses only the public API. Run with any backend:

    KERAS_BACKEND=jax python zoo/muse/train_reverse.py [--epochs 4] [--models muse,transformer]

Both models have the same frame: 3 encoder and 3 decoder blocks of width 64, feed-forward
128, 4 heads, dropout 0.1, the scaled embeddings and sinusoidal positions of
`zoo.MUSEEmbedding`, 20 ids. They differ only in the blocks:

    muse         the zoo's `muse_tiny` (MUSE blocks: attention + dynamic convolutions of
                 kernel 3 and 15 from one value projection, FFN, in parallel, post-norm)
    transformer  keras_hub.layers.TransformerEncoder / TransformerDecoder (attention, then
                 FFN, each with its own residual and post-norm), decoded by recomputing the
                 prefix (its cache is the token buffer): a `zoo.Seq2SeqModel` subclass

The task is keras_posenc.experiments.reverse_task (4-12 words from 17),
20 000 training sequences, Adam 2e-3, batch 64, scored by exact match on 1 000 held-out
sequences with greedy decoding: the same recipe as zoo/convs2s/train_reverse.py.
"""

from __future__ import annotations

import argparse
from typing import Any

import keras
from keras import ops

from keras_posenc import zoo
from keras_posenc.experiments import train_reverse

VOCAB, WIDTH, FFN, HEADS, LAYERS, DROPOUT, MAX_LENGTH = 20, 64, 128, 4, 3, 0.1, 64


class TransformerBaseline(zoo.Seq2SeqModel):
    """keras_hub Transformer blocks between MUSE's embeddings and output projection."""

    def __init__(self, **kwargs: Any) -> None:
        import keras_hub

        # The layers first, then the base class, which builds the graph from encode/decode.
        self.source_embedding = zoo.MUSEEmbedding(VOCAB, WIDTH, dropout=DROPOUT, name="source")
        self.target_embedding = zoo.MUSEEmbedding(
            VOCAB, WIDTH, dropout=DROPOUT, tie_weights=False, name="target"
        )
        self.encoder_blocks = [
            keras_hub.layers.TransformerEncoder(FFN, HEADS, dropout=DROPOUT, name=f"encoder_{i}")
            for i in range(LAYERS)
        ]
        self.decoder_blocks = [
            keras_hub.layers.TransformerDecoder(FFN, HEADS, dropout=DROPOUT, name=f"decoder_{i}")
            for i in range(LAYERS)
        ]
        super().__init__(
            source_vocab_size=VOCAB,
            target_vocab_size=VOCAB,
            max_source_length=MAX_LENGTH,
            max_target_length=MAX_LENGTH,
            **kwargs,
        )

    def encode(self, encoder_token_ids: Any, training: Any = None) -> tuple:
        mask = ops.not_equal(encoder_token_ids, 0)
        x = self.source_embedding(encoder_token_ids, training=training)  # carries the mask
        for block in self.encoder_blocks:
            x = block(x, training=training)
        # A fresh tensor without the Keras mask (the cross-attention gets `mask` explicitly,
        # and its projections would warn about a mask they cannot use).
        return ops.add(x, 0.0), mask

    def decode(self, decoder_token_ids: Any, encoder_state: tuple, training: Any = None) -> Any:
        encoded, mask = encoder_state
        x = self.target_embedding(decoder_token_ids, position_offset=0, training=training)
        # Without the Keras mask: causal blocks need no target padding mask (as in MUSE).
        x = ops.add(x, 0.0)
        for block in self.decoder_blocks:
            x = block(x, encoded, encoder_padding_mask=mask, training=training)
        return self.target_embedding(x, reverse=True)

    def init_cache(self, encoder_state: tuple, max_length: int) -> tuple:
        batch = ops.shape(encoder_state[0])[0]
        return (*encoder_state, ops.zeros((batch, max_length), "int32"))

    def decode_step(self, token_ids: Any, cache: tuple, index: Any) -> tuple:
        encoded, mask, tokens = cache
        step = ops.reshape(ops.cast(token_ids, "int32"), (-1, 1))
        tokens = ops.slice_update(tokens, [0, index], step)
        # Causal blocks: the positions after `index` (still 0, padding) change nothing.
        logits = ops.take(self.decode(tokens, (encoded, mask)), index, axis=1)
        return logits, (encoded, mask, tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", default="muse,transformer")
    args = parser.parse_args()
    for name in args.models.split(","):
        keras.utils.set_random_seed(args.seed)
        if name == "muse":
            model = zoo.create("muse_tiny", src_vocab_size=VOCAB, tgt_vocab_size=VOCAB)
        elif name == "transformer":
            model = TransformerBaseline(name="transformer")
        else:
            parser.error(f"--models: unknown {name!r}; choose from muse, transformer")
        result = train_reverse(model, epochs=args.epochs, seed=args.seed, verbose=2)
        print(
            f"{name} on {keras.backend.backend()}: {int(result['parameters']):,} parameters, "
            f"trained in {result['train_seconds']:.0f} s, held-out exact match "
            f"{result['exact_match']:.1%} (greedy, 1000 sequences)",
            flush=True,
        )


if __name__ == "__main__":
    main()
