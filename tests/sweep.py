# ruff: noqa: E501  (one case a line: the table reads as a list)
"""A sweep of bad inputs over the public layers, calls, generation and CLI commands,
each case classified as the hardening issue does:

- ``clear``: one error of the expected class whose message names the layer or
  function and the argument;
- ``unclear``: an error, but another class or a message without those names (a raw
  backend error);
- ``silent``: a result where an error was due;
- ``crash``: anything else (the process would die, a non-Exception).

``python tests/sweep.py`` prints the counts on the backend of ``KERAS_BACKEND`` and
every case that is not clear; ``tests/test_sweep.py`` (the ``full`` tier) asserts that
every case is clear. Add a case for every defect found beyond them.
"""

from __future__ import annotations

import collections
import re
import sys
from collections.abc import Callable

import keras
import keras_hub
import numpy as np

from keras_posenc import cli, generation, layers, zoo
from keras_posenc.layers import set_memory_limit
from keras_posenc.zoo.convs2s import ConvS2S, ConvS2SLanguageModel

F = np.zeros((2, 5, 16), "float32")


def _convs2s() -> ConvS2S:
    keras.utils.set_random_seed(0)
    return ConvS2S(
        12, 12, embed_dim=8, encoder_layers=[(8, 3)], decoder_layers=[(8, 3)],
        decoder_out_embed_dim=8, max_source_positions=16, max_target_positions=32, dropout=0.0,
    )  # fmt: skip


def _lm() -> ConvS2SLanguageModel:
    keras.utils.set_random_seed(0)
    return ConvS2SLanguageModel(13, embed_dim=8, decoder_layers=[(8, 3)], decoder_out_embed_dim=8)


def _ids(value: int, shape: tuple = (1, 4)) -> np.ndarray:
    return np.full(shape, value, "int32")


def _pair(source: np.ndarray, target: np.ndarray) -> dict:
    return {"encoder_token_ids": source, "decoder_token_ids": target}


def _limited(function: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        set_memory_limit("1M")
        try:
            return function()
        finally:
            set_memory_limit(None)

    return run


def _sample(**settings: object) -> Callable[[], object]:
    def run() -> object:
        sampler = keras_hub.samplers.TopPSampler(**settings) if "p" in settings else None
        if sampler is None:
            sampler = keras_hub.samplers.TopKSampler(**settings)
        return generation.sample(_lm(), _ids(1, (1, 2)), max_length=5, sampler=sampler)

    return run


def _cli(*arguments: str) -> Callable[[], object]:
    def run() -> object:
        status = cli.main(list(arguments))
        if status != 0:  # the CLI's errors are one line on stderr and a status of 1 or 2
            raise ValueError(f"posenc {arguments[0]}: exit status {status}")
        return status

    return run


# name: (call, expected error class, a pattern the message must hold)
CASES: dict[str, tuple[Callable[[], object], type, str]] = {
    # layer constructors
    "attention num_heads 0": (lambda: layers.MultiHeadRelativeAttention(0, 4), ValueError, r"MultiHeadRelativeAttention.*`num_heads`"),
    "attention key_dim float": (lambda: layers.MultiHeadRelativeAttention(2, 4.5), (ValueError, TypeError), r"`key_dim`"),
    "attention dropout 1.5": (lambda: layers.MultiHeadRelativeAttention(2, 4, dropout=1.5), ValueError, r"`dropout`"),
    "attention relative mode": (lambda: layers.MultiHeadRelativeAttention(2, 4, relative="x"), ValueError, r"`relative`"),
    "glu kernel 0": (lambda: layers.GLUConv1D(8, 0), ValueError, r"GLUConv1D.*`kernel_size`"),
    "muse kernel even": (lambda: layers.MUSEAttention(2, 8, kernel_sizes=(2,)), ValueError, r"MUSEAttention"),
    "encoder intermediate 0": (lambda: layers.RelativeTransformerEncoder(0, 2), ValueError, r"RelativeTransformerEncoder.*`intermediate_dim`"),
    "rotary scaling": (lambda: layers.RotaryPositions(scaling="nope"), ValueError, r"RotaryPositions.*`scaling`"),
    "clip negative": (lambda: layers.ClipPositions(-1), ValueError, r"ClipPositions.*`max_distance`"),
    # layer calls
    "attention rank 2": (lambda: layers.MultiHeadRelativeAttention(2, 4)(F[0], F[0]), ValueError, r"`query` must have rank 3"),
    "attention int features": (lambda: layers.MultiHeadRelativeAttention(2, 4)(F.astype("int32"), F.astype("int32")), TypeError, r"`query` must hold floating-point"),
    "attention float mask": (lambda: layers.MultiHeadRelativeAttention(2, 4)(F, F, attention_mask=np.zeros((2, 5, 5), "float32")), TypeError, r"`attention_mask` must be boolean"),
    "attention mask shape": (lambda: layers.MultiHeadRelativeAttention(2, 4)(F, F, attention_mask=np.ones((2, 3, 7), bool)), ValueError, r"`attention_mask` must have shape"),
    "attention bias shape": (lambda: layers.MultiHeadRelativeAttention(2, 4)(F, F, attention_bias=np.zeros((2, 3, 7), "float32")), ValueError, r"`attention_bias` must have shape"),
    "attention bias bool": (lambda: layers.MultiHeadRelativeAttention(2, 4)(F, F, attention_bias=np.ones((5, 5), bool)), TypeError, r"`attention_bias` must be an additive"),
    "attention cache index 9": (lambda: layers.MultiHeadRelativeAttention(2, 4)(F[:, :1], F[:, :1], cache=np.zeros((2, 2, 5, 2, 4), "float32"), cache_update_index=9), ValueError, r"`cache_update_index`"),
    "attention huge heads": (_limited(lambda: layers.MultiHeadRelativeAttention(1000, 100)(F, F)), ValueError, r"MultiHeadRelativeAttention.*memory limit"),
    "glu float mask": (lambda: layers.GLUConv1D(8, 3)(F, mask=np.zeros((2, 5), "float32")), TypeError, r"GLUConv1D.*`mask` must be boolean"),
    "glu mask shape": (lambda: layers.GLUConv1D(8, 3)(F, mask=np.ones((2, 6), bool)), ValueError, r"GLUConv1D.*`mask` must have shape"),
    "glu int features": (lambda: layers.GLUConv1D(8, 3)(F.astype("int32")), TypeError, r"GLUConv1D.*floating-point"),
    "muse encoder int features": (lambda: layers.MUSEEncoderLayer(32, 2)(F.astype("int32")), TypeError, r"MUSEEncoderLayer.*floating-point"),
    "encoder wrong width": (lambda: [e := layers.RelativeTransformerEncoder(32, 2), e(F), e(np.zeros((2, 5, 8), "float32"))], ValueError, r"RelativeTransformerEncoder.*last axis of `inputs` must be 16"),
    "decoder mask shape": (lambda: layers.RelativeTransformerDecoder(32, 2)(F, F, decoder_padding_mask=np.ones((2, 6), bool)), ValueError, r"RelativeTransformerDecoder.*`decoder_padding_mask` must have shape"),
    "relative embedding huge": (_limited(lambda: layers.RelativePositionEmbedding(4096, position=layers.ClipPositions(100))(5, 5)), ValueError, r"RelativePositionEmbedding.*memory limit"),
    # zoo models called directly
    "convs2s ids beyond vocab": (lambda: _convs2s()(_pair(_ids(50), _ids(3))), ValueError, r"ConvS2S.*`encoder_token_ids` holds token ids outside"),
    "convs2s negative ids": (lambda: _convs2s()(_pair(_ids(-1), _ids(3))), ValueError, r"`encoder_token_ids` holds token ids outside"),
    "convs2s source too long": (lambda: _convs2s()(_pair(_ids(3, (1, 17)), _ids(3))), ValueError, r"max_source_length = 16"),
    "convs2s predict beyond vocab": (lambda: _convs2s().predict(_pair(_ids(3), _ids(12)), verbose=0), ValueError, r"`decoder_token_ids` holds token ids outside"),
    "lm ids beyond vocab": (lambda: _lm()(_ids(13)), ValueError, r"`token_ids` holds token ids outside"),
    "zoo unknown override": (lambda: zoo.create("muse_tiny", vocab_size=40000), ValueError, r"zoo model 'muse_tiny': unknown override 'vocab_size'"),
    "zoo huge vocabulary": (_limited(lambda: zoo.create("convs2s_small", src_vocab_size=40000, tgt_vocab_size=40000)), ValueError, r"ConvS2SEmbedding: its embedding tables .* memory limit"),
    # generation
    "greedy float source": (lambda: generation.greedy_search(_convs2s(), np.ones((1, 4), "float32")), TypeError, r"`encoder_token_ids` must hold integer"),
    "greedy empty source": (lambda: generation.greedy_search(_convs2s(), _ids(3, (2, 0))), ValueError, r"greedy_search: `encoder_token_ids` must hold at least one"),
    "greedy max_length 0": (lambda: generation.greedy_search(_convs2s(), _ids(3), max_length=0), ValueError, r"greedy_search.*`max_length`"),
    "beam size 0": (lambda: generation.beam_search(_convs2s(), _ids(3), beam_size=0), ValueError, r"beam_search.*`beam_size`"),
    "beam penalty nan": (lambda: generation.beam_search(_convs2s(), _ids(3), length_penalty=float("nan")), ValueError, r"`length_penalty`"),
    "lm without max_length": (lambda: generation.greedy_search(_lm(), _ids(1, (1, 2))), ValueError, r"greedy_search: a language model needs `max_length`"),
    "lm prompt starts with pad": (lambda: generation.greedy_search(_lm(), _ids(0, (1, 2)), max_length=5), ValueError, r"every row of `prompt` must start"),
    "sample temperature 0": (_sample(k=3, temperature=0.0), ValueError, r"sample: TopKSampler: `temperature` must be a finite number > 0"),
    "sample temperature -1": (_sample(k=3, temperature=-1.0), ValueError, r"`temperature` must be a finite number > 0"),
    "sample k 0": (_sample(k=0), ValueError, r"TopKSampler: `k` must be an int >= 1"),
    "sample k above vocab": (_sample(k=99), ValueError, r"`k` must be an int >= 1 and at most the vocabulary size 13"),
    "sample p 0": (_sample(p=0.0), ValueError, r"TopPSampler: `p` must be in \(0, 1\]"),
    "sample p 2": (_sample(p=2.0), ValueError, r"`p` must be in \(0, 1\]"),
    # CLI commands (one line on stderr, a non-zero status)
    "cli unknown model": (_cli("export", "no_such_model", "--out", "/nonexistent-out"), ValueError, r"posenc export: exit status"),
    "cli bad --set": (_cli("export", "convs2s_small", "--set", "embed_dim", "--out", "/nonexistent-out"), ValueError, r"posenc export: exit status"),
}  # fmt: skip


def classify(call: Callable[[], object], expected: type, pattern: str) -> tuple[str, str]:
    """(class, detail) of one case."""
    try:
        call()
    except Exception as error:  # noqa: BLE001  (every error is classified)
        message = " ".join(str(error).split())
        if isinstance(error, expected) and re.search(pattern, message):
            return "clear", ""
        return "unclear", f"{type(error).__name__}: {message[:300]}"
    except BaseException as error:  # noqa: BLE001  (SystemExit, KeyboardInterrupt, ...)
        return "crash", f"{type(error).__name__}: {error}"
    return "silent", "returned a result"


def sweep() -> dict[str, tuple[str, str]]:
    return {name: classify(*case) for name, case in CASES.items()}


def main() -> int:
    results = sweep()
    counts = collections.Counter(kind for kind, _ in results.values())
    print(f"{keras.backend.backend()}: {len(results)} cases, " + ", ".join(
        f"{counts[kind]} {kind}" for kind in ("clear", "unclear", "silent", "crash")
    ))  # fmt: skip
    for name, (kind, detail) in results.items():
        if kind != "clear":
            print(f"  {kind}: {name}: {detail}")
    return 0 if counts["clear"] == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
