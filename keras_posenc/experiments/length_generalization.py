"""Which position encodings generalise to longer sequences than they were trained on?

Small Transformer stacks, identical except for how position enters them, are
trained on synthetic token tasks at length 64 and tested at 64, 128, 256, 512
and 1024 (16 times the training length). Three tasks, generated in code
(`task_data`):

- ``"copy_back"`` (purely relative): at position ``i`` output the token at
  ``i - shift`` (``shift=4``). The answer is the same function of the
  distance wherever ``i`` is, so an encoding that sees distances should
  keep solving it at any length.
- ``"copy_position"`` (absolute): at position ``i`` output the token at
  position ``position`` (``3``). From the query's side the distance to the
  answer grows with ``i``: a purely relative encoding must find the start of
  the sequence some other way, and the table shows where it cannot.
- ``"copy_recent"`` (recency): the tokens ``0 .. marked - 1`` (``marked=3``:
  0, 1 and 2) are *marked*; at position ``i`` output the most recent marked
  token at a position ``j < i``. No fixed offset decides: the answer is the
  nearest earlier marked token, at a distance that varies (geometric, mean
  ``vocabulary_size / marked`` = 3.3 with uniform tokens), so an encoding
  that prefers near keys to far ones, ALiBi's premise, should be enough.

The models are causal (decoder-only blocks: `RelativeTransformerDecoder`
without cross-attention), so the tasks depend on the past only, ALiBi is
keras_hub's `AlibiBias` exactly as defined (a bias on key positions, which
the causal mask turns into ``-m (i - j)``), and training on full length-64
sequences trains every length up to 64 at once (position ``i`` sees only
``0..i``). The accuracy at a test length ``L`` is measured on positions
``L/2 .. L-1`` of each test sequence: at ``L >= 128`` those are all
positions never seen in training, so the number is not diluted by the
first 64 positions, which behave exactly as in training.

Every model: token embedding (10 tokens, width 32), the encoding's absolute
term if it has one (added to the embedding), 2 pre-norm blocks (2 heads of
size 16, feed-forward 64), a final layer normalisation and a 10-way softmax:
17,806 parameters, plus the encoding's own weights (``params`` in the
results). Every block's self-attention is `MultiHeadRelativeAttention`; the
encodings (`ENCODINGS`):

- `none`: no position at all (NoPE: under the causal mask only the mask
  carries order): attention with one bias bucket (``position=ClipPositions(0)``),
  a constant per head that the softmax cancels;
- `learned_absolute`: ``keras_hub.layers.PositionEmbedding(64)`` added to
  the tokens; it has no row for position 64 or later, so a longer input
  raises a ValueError and the results say "n/a";
- `sinusoidal`: ``keras_hub.layers.SinePositionEncoding`` added to the tokens;
- `rope`: rotary queries and keys (``rotary=RotaryPositions(max_wavelength=10000)``);
- `rope_pi`, `rope_ntk`, `rope_dynamic_ntk`, `rope_yarn`, `rope_llama3`,
  `rope_longrope`: the trained `rope` models, not retrained, run at test
  length ``L`` with a scaled `RotaryPositions`: position interpolation
  (``scaling="linear"``), NTK-aware, YaRN (the paper's ramp), Llama 3.1's
  scaling and LongRoPE (NTK-aware long factors: no searched ones exist for
  these models) with ``s = L / 64``, dynamic NTK with ``training_length=64``
  (it sets ``s`` from the length itself); `_scaled_rope.scaled_rotation` has
  each one's arguments. At ``L = 64`` every one is `rope`;
- `xpos`: RoPE with xPos' decay (``RotaryPositions(xpos_scale_base=512)``);
- `alibi`: ``keras_hub.layers.AlibiBias`` (its default slopes) as ``attention_bias``;
- `alibi_scheme`: the library's ``ALiBi()`` position scheme in every block's
  attention (``relative="bias", position=ALiBi()``): the paper's slopes, the
  same logits as `alibi` up to a constant per query row;
- `kerple_log`, `kerple_power`: ``KERPLE("log")`` / ``KERPLE("power")`` in
  every block's attention (learned ``r1, r2`` per head and block);
- `fire`: ``FIRE()`` in every block's attention (its MLP per block);
- `continuous_bias`: ``ContinuousBias()`` (an MLP of the log-scaled distance,
  timm's "cr" form, 512 hidden units) in every block's attention;
- `relative_bias_clip`: ``RelativePositionBias(position=ClipPositions(16))``;
- `relative_bias_log`: T5's ``RelativePositionBias(position=LogBuckets(32, 64,
  bidirectional=False))``;
- `relative_bias_piecewise`: iRPE's ``RelativePositionBias(position=PiecewiseBuckets(32))``;
- `relative_bias_multiscale`: ``MultiScaleRelativePositionEmbedding(scales=(5,
  10, 20))`` with one column per head, as a bias;
- `shaw_keys_values`: Shaw et al., ``relative="keys_values",
  position=ClipPositions(16)`` in every block;
- `sinusoidal_relative_bias`: `sinusoidal` and `relative_bias_log` together.

Each learned relative table is one table shared by both blocks (computed
once per call and passed as ``attention_bias``), as T5 does, so the four
table rows differ in their position scheme only. The computed schemes (`alibi_scheme`,
KERPLE, FIRE, the continuous bias) are the library's ``position=`` option of
each block's attention, with each block's own weights, as a user of the
library would write them.

The grid's trainings are independent: ``workers`` runs them in parallel
processes (`_workers.run_jobs`), with one progress bar over them.
"""

from __future__ import annotations

import csv
import math
import os
import time
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc._quiet import quiet_import
from keras_posenc.experiments._figures import (
    new_figure,
    read_csv_rows,
    require_matplotlib,
    results_to_redraw,
    save_figure,
)
from keras_posenc.experiments._scaled_rope import SCALED_CLAIMS, SCALED_ROPE, scaled_rotation
from keras_posenc.experiments._settings import merge_settings
from keras_posenc.experiments._workers import run_jobs
from keras_posenc.layers._checks import check_choice, check_int, check_number_at_least
from keras_posenc.layers.position_biases import FIRE, KERPLE, ALiBi, ContinuousBias
from keras_posenc.layers.position_schemes import ClipPositions, LogBuckets, PiecewiseBuckets
from keras_posenc.layers.relative_position import (
    MultiScaleRelativePositionEmbedding,
    RelativePositionBias,
)
from keras_posenc.layers.relative_transformer import RelativeTransformerDecoder
from keras_posenc.layers.rotary import RotaryPositions

# The encodings that are trained, in the tables' order (the scaled rotary rows follow `rope`).
TRAINED_ENCODINGS = (
    "none",
    "learned_absolute",
    "sinusoidal",
    "rope",
    "xpos",
    "alibi",
    "alibi_scheme",
    "kerple_log",
    "kerple_power",
    "fire",
    "continuous_bias",
    "relative_bias_clip",
    "relative_bias_log",
    "relative_bias_piecewise",
    "relative_bias_multiscale",
    "shaw_keys_values",
    "sinusoidal_relative_bias",
)
_ROPE_AT = TRAINED_ENCODINGS.index("rope") + 1
ENCODINGS = TRAINED_ENCODINGS[:_ROPE_AT] + tuple(SCALED_ROPE) + TRAINED_ENCODINGS[_ROPE_AT:]
# The computed schemes, in each block's attention as ``position=`` (fresh per block).
_SCHEMES = {
    "alibi_scheme": lambda: ALiBi(),
    "kerple_log": lambda: KERPLE("log"),
    "kerple_power": lambda: KERPLE("power"),
    "fire": lambda: FIRE(),
    "continuous_bias": lambda: ContinuousBias(),
}
TASKS = ("copy_back", "copy_position", "copy_recent")
TASK_DESCRIPTIONS = {
    "copy_back": "relative: the token {shift} positions back",
    "copy_position": "absolute: the token at position {position}",
    "copy_recent": "recency: the most recent earlier token of the {marked} marked ones",
}

COLUMNS = (
    "task",
    "encoding",
    "test_length",
    "accuracy",
    "accuracy_std",
    "accuracy_min",
    "accuracy_max",
    "seeds",
    "params",
    "num_layers",
    "train_steps",
    "note",
)

# The model and the tasks: the same for the quick and the full run.
MODEL_SETTINGS = {
    "vocabulary_size": 10,
    "hidden_dim": 32,
    "num_heads": 2,
    "num_layers": 2,
    "intermediate_dim": 64,
    "train_length": 64,
}
TASK_SETTINGS = {"shift": 4, "position": 3, "marked": 3}
# The training and evaluation budget. Full: 153 trainings (17 trained encodings,
# 3 tasks, 3 seeds); the recorded run's times are on docs/experiments/length-generalization.md.
FULL_SETTINGS = {
    "train_steps": 1000,
    "batch_size": 32,
    "learning_rate": 3e-3,
    "test_lengths": (64, 128, 256, 512, 1024),
    "eval_positions": 4096,
}
# Quick: every encoding on the relative task, one seed, one block instead of
# two, a short training at a higher learning rate (much of its time is compiling
# the 17 models; measured times in docs/data/cli_timings.csv). A smoke test:
# its numbers are not the study's.
QUICK_SETTINGS = {
    "num_layers": 1,
    "train_steps": 200,
    "batch_size": 32,
    "learning_rate": 1e-2,
    "test_lengths": (64, 128, 256, 512, 1024),
    "eval_positions": 256,
}
QUICK_TASKS = ("copy_back",)

# Tokens per evaluation batch: 8 sequences at L = 1024, whose attention
# logits (8, 2, 1024, 1024) in float32 take 64 MiB.
_EVAL_TOKENS_PER_BATCH = 8192


# ----------------------------------------------------------------------------- tasks


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


# ----------------------------------------------------------------------------- models


class LengthGeneralizationModel(keras.Model):
    """A small causal Transformer that labels every token, with one position encoding.

    Built by `build_model`; see the module's docstring for the architecture
    and the encodings. ``max_length`` is the number of positions the model
    can run: ``train_length`` for ``"learned_absolute"`` (its table has no
    other rows), ``None`` (any) for the others. Longer inputs raise a
    ValueError (`check_length`) when the length is known at call time.

    Args:
        encoding: one of `ENCODINGS`.
        vocabulary_size: number of token types (inputs and outputs).
        hidden_dim: width of the embeddings and blocks.
        num_heads: attention heads per block.
        num_layers: number of blocks.
        intermediate_dim: hidden size of each block's feed-forward network.
        train_length: the training length; the size of the learned position table.
        scaling_factor: the ``s`` of the `SCALED_ROPE` encodings but
            `rope_dynamic_ntk` (the test length over ``train_length``); only
            those take one.
        **kwargs: standard model arguments (``name``, ...).

    Call arguments:
        tokens: ``(batch, length)`` int token ids.

    Returns:
        ``(batch, length, vocabulary_size)`` logits.
    """

    def __init__(
        self,
        encoding: str,
        vocabulary_size: int = 10,
        hidden_dim: int = 32,
        num_heads: int = 2,
        num_layers: int = 2,
        intermediate_dim: int = 64,
        train_length: int = 64,
        scaling_factor: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keras_hub = quiet_import("keras_hub")  # imports TensorFlow: only when needed

        caller = type(self).__name__
        self.encoding = check_choice(caller, "encoding", encoding, ENCODINGS)
        scaled = encoding in SCALED_ROPE and encoding != "rope_dynamic_ntk"
        if scaling_factor is not None and not scaled:
            raise ValueError(
                f"{caller}({encoding!r}): `scaling_factor` is for the encodings "
                f"{', '.join(repr(n) for n in SCALED_ROPE if n != 'rope_dynamic_ntk')} only; "
                f"got {scaling_factor!r}."
            )
        self.scaling_factor = scaling_factor
        self.num_heads = num_heads
        self.train_length = train_length
        self.max_length = train_length if encoding == "learned_absolute" else None
        self.token_embedding = keras.layers.Embedding(vocabulary_size, hidden_dim, name="tokens")
        self.absolute = None
        if encoding == "learned_absolute":
            self.absolute = keras_hub.layers.PositionEmbedding(train_length, name="positions")
        elif encoding in ("sinusoidal", "sinusoidal_relative_bias"):
            self.absolute = keras_hub.layers.SinePositionEncoding(name="positions")
        self.shared_bias = None
        if encoding in ("relative_bias_log", "sinusoidal_relative_bias"):
            self.shared_bias = RelativePositionBias(
                num_heads, position=LogBuckets(32, 64, bidirectional=False)
            )
        elif encoding == "relative_bias_clip":
            self.shared_bias = RelativePositionBias(num_heads, position=ClipPositions(16))
        elif encoding == "relative_bias_piecewise":
            self.shared_bias = RelativePositionBias(num_heads, position=PiecewiseBuckets(32))
        elif encoding == "relative_bias_multiscale":
            self.shared_bias = MultiScaleRelativePositionEmbedding(num_heads, scales=(5, 10, 20))
        elif encoding == "alibi":
            self.shared_bias = keras_hub.layers.AlibiBias(name="alibi")
        # Attention without a relative term is the same layer with one bias
        # bucket (a constant per head, cancelled by the softmax), so every
        # encoding runs the same attention code.
        attention: dict[str, Any] = {"relative": "bias", "position": ClipPositions(0)}
        if encoding == "shaw_keys_values":
            attention = {"relative": "keys_values", "position": ClipPositions(16)}
        elif encoding == "rope":
            attention["rotary"] = RotaryPositions(max_wavelength=10000)
        elif encoding == "xpos":
            attention["rotary"] = RotaryPositions(xpos_scale_base=512)
        elif encoding in SCALED_ROPE:
            factor = 1.0 if scaling_factor is None else scaling_factor
            factor = check_number_at_least(caller, "scaling_factor", factor, 1.0)
            head_dim = hidden_dim // num_heads
            attention["rotary"] = scaled_rotation(encoding, factor, train_length, head_dim)
        self.blocks = []
        for i in range(num_layers):
            if encoding in _SCHEMES:  # a fresh scheme per block: its weights are the block's
                attention = {"relative": "bias", "position": _SCHEMES[encoding]()}
            self.blocks.append(
                RelativeTransformerDecoder(
                    intermediate_dim,
                    num_heads,
                    normalize_first=True,
                    name=f"block_{i}",
                    **attention,
                )
            )
        self.final_norm = keras.layers.LayerNormalization(name="final_norm")
        self.classifier = keras.layers.Dense(vocabulary_size, name="classifier")

    def _attention_bias(self, length: Any) -> Any:
        if self.shared_bias is None:
            return None
        if isinstance(self.shared_bias, MultiScaleRelativePositionEmbedding):
            # (length, length, heads) -> (1, heads, length, length)
            return ops.expand_dims(ops.transpose(self.shared_bias(length, length), (2, 0, 1)), 0)
        if self.encoding == "alibi":
            # keras_hub's AlibiBias adds m_h * (j - (length - 1)) to scores: a bias on key
            # positions that the causal mask turns into ALiBi's -m_h * (i - j) plus a
            # constant per query row (which the softmax ignores). Applied to zeros of
            # shape (1, heads, 1, length) it returns that bias, broadcast over queries.
            return self.shared_bias(ops.zeros((1, self.num_heads, 1, length), self.compute_dtype))
        return self.shared_bias(length, length)

    def check_length(self, length: int | None) -> None:
        """Raises a ValueError when the model cannot run sequences of ``length``."""
        if self.max_length is not None and length is not None and length > self.max_length:
            raise ValueError(
                f"LengthGeneralizationModel({self.encoding!r}): learned absolute positions "
                f"have a table of {self.max_length} rows (the training length), so they "
                f"cannot run a sequence of length {length}; expected a length <= "
                f"{self.max_length}."
            )

    def call(self, tokens: Any) -> Any:
        static_length = tokens.shape[1]
        self.check_length(static_length)
        length = static_length if static_length is not None else ops.shape(tokens)[1]
        x = self.token_embedding(tokens)
        if self.absolute is not None:
            x = x + self.absolute(x)
        bias = self._attention_bias(length)
        for block in self.blocks:
            x = block(x, attention_bias=bias)
        return self.classifier(self.final_norm(x))


def build_model(
    encoding: str,
    seed: int | None = None,
    scaling_factor: float | None = None,
    **model_settings: Any,
) -> keras.Model:
    """The experiment's model for one encoding, built (weights created).

    Args:
        encoding: one of `ENCODINGS`.
        seed: if given, ``keras.utils.set_random_seed(seed)`` first, so the
            initial weights are reproducible.
        scaling_factor: ``s`` of the `SCALED_ROPE` encodings but dynamic NTK
            (default 1: plain RoPE); the study sets the weights of such a
            model from a trained `rope` model (`scaled_rope`).
        **model_settings: overrides of `MODEL_SETTINGS` (``vocabulary_size``,
            ``hidden_dim``, ``num_heads``, ``num_layers``, ``intermediate_dim``,
            ``train_length``).

    Returns:
        A `LengthGeneralizationModel`.

    Examples:

        >>> model = build_model("relative_bias_log", seed=0)
        >>> model.count_params()
        17870
        >>> build_model("learned_absolute", seed=0).max_length
        64
    """
    unknown = set(model_settings) - set(MODEL_SETTINGS)
    if unknown:
        raise ValueError(
            f"build_model: unknown model settings {sorted(unknown)}; "
            f"expected some of {sorted(MODEL_SETTINGS)}."
        )
    settings = {**MODEL_SETTINGS, **model_settings}
    if seed is not None:
        keras.utils.set_random_seed(seed)
    model = LengthGeneralizationModel(encoding, scaling_factor=scaling_factor, **settings)
    # A symbolic call creates the weights without running anything (JAX would
    # compile every operation for this one shape).
    model(keras.Input((settings["train_length"],), dtype="int32"))
    return model


# ----------------------------------------------------------------------------- training


def evaluate(
    model: LengthGeneralizationModel,
    task: str,
    length: int,
    num_positions: int = 4096,
    seed: int = 0,
    **task_settings: Any,
) -> float:
    """Token accuracy on positions ``length // 2 .. length - 1`` of fresh sequences.

    Enough sequences are drawn to cover at least ``num_positions`` measured
    positions; they are run eagerly in batches of about 8192 tokens.

    Args:
        model: a trained `LengthGeneralizationModel`.
        task: one of `TASKS`.
        length: the test length.
        num_positions: at least this many scored positions are measured.
        seed: seed of the test sequences.
        **task_settings: ``shift`` and ``position`` of `task_data`.

    Returns:
        The fraction of scored positions whose most likely token is the answer.

    Raises:
        ValueError: the model cannot run ``length`` (learned absolute
            positions beyond their table), before anything is computed.
    """
    model.check_length(length)
    half = length // 2
    count = max(1, math.ceil(num_positions / (length - half)))
    tokens, labels, weights = task_data(
        task, count, length, seed=seed, vocabulary_size=model.classifier.units, **task_settings
    )
    batch = max(1, _EVAL_TOKENS_PER_BATCH // length)
    correct = total = 0.0
    for start in range(0, count, batch):
        # An eager call, not predict: no compilation for each new length.
        logits = ops.convert_to_numpy(model(tokens[start : start + batch], training=False))
        hits = logits.argmax(-1) == labels[start : start + batch]
        w = weights[start : start + batch, half:]
        correct += float((hits[:, half:] * w).sum())
        total += float(w.sum())
    return correct / total


def scaled_rope(
    trained: LengthGeneralizationModel, encoding: str, test_length: int
) -> LengthGeneralizationModel:
    """A trained `rope` model, run with the scaled rotation of ``encoding`` at ``test_length``.

    The same layers with a `RotaryPositions` scaled for ``s = test_length /
    train_length`` (at least 1; dynamic NTK takes ``s`` from each call's
    length), and the trained model's weights: the rotation has none, so
    nothing is retrained.

    Args:
        trained: a `LengthGeneralizationModel` of encoding ``"rope"``.
        encoding: one of `SCALED_ROPE` (``"rope_pi"``, ``"rope_ntk"``,
            ``"rope_dynamic_ntk"``, ``"rope_yarn"``, ``"rope_llama3"``,
            ``"rope_longrope"``).
        test_length: the length it will run.

    Returns:
        A new `LengthGeneralizationModel` with ``trained``'s weights.

    Examples:

        >>> rope = build_model("rope", seed=0)
        >>> model = scaled_rope(rope, "rope_yarn", 256)
        >>> rotary = model.blocks[0].rotary
        >>> rotary.scaling, rotary.scaling_factor, rotary.yarn_convention
        ('yarn', 4.0, 'paper')
    """
    caller = "scaled_rope"
    if getattr(trained, "encoding", None) != "rope":
        raise ValueError(
            f"{caller}: `trained` must be a model of encoding 'rope', got {trained!r}."
        )
    check_choice(caller, "encoding", encoding, tuple(SCALED_ROPE))
    settings = {
        "vocabulary_size": trained.classifier.units,
        "hidden_dim": trained.token_embedding.output_dim,
        "num_heads": trained.num_heads,
        "num_layers": len(trained.blocks),
        "intermediate_dim": trained.blocks[0].intermediate_dim,
        "train_length": trained.train_length,
    }
    factor = None
    if SCALED_ROPE[encoding] != "dynamic_ntk":
        factor = max(1.0, check_int(caller, "test_length", test_length, 1) / trained.train_length)
    model = build_model(encoding, scaling_factor=factor, **settings)
    model.set_weights(trained.get_weights())
    return model


def train_and_evaluate(
    encoding: str,
    task: str,
    seed: int = 0,
    train_steps: int = 1000,
    batch_size: int = 32,
    learning_rate: float = 3e-3,
    test_lengths: Sequence[int] = (64, 128, 256, 512, 1024),
    eval_positions: int = 4096,
    verbose: int = 0,
    model_settings: dict[str, Any] | None = None,
    task_settings: dict[str, Any] | None = None,
    scaled: Sequence[str] = (),
) -> dict[str, Any]:
    """Trains one model (one encoding, task and seed) and tests it at each length.

    Training: ``train_steps`` Adam steps (gradient norm clipped at 1; the
    learning rate warms up linearly to ``learning_rate`` over the first tenth,
    then decays to zero along a cosine) on batches of ``batch_size`` fresh
    length-``train_length`` sequences (``seed`` sets the initial weights and
    the training data), compiled once. Testing: `evaluate` on data that is the
    same for every seed and encoding.

    Args:
        encoding: one of `TRAINED_ENCODINGS`.
        scaled: for ``"rope"``, the `SCALED_ROPE` encodings to test too, from
            the same trained weights (`scaled_rope`).

    Returns:
        ``{"accuracy": {encoding: {length: accuracy or None}}, "params": int,
        "seconds": float}``, with one entry per encoding (``encoding`` and
        those of ``scaled``); ``None`` where the model cannot run the length.
    """
    check_choice("train_and_evaluate", "encoding", encoding, TRAINED_ENCODINGS)
    if scaled and encoding != "rope":
        raise ValueError(
            f"train_and_evaluate: `scaled` rotations are tested on 'rope' models only; "
            f"got encoding={encoding!r}, scaled={list(scaled)!r}."
        )
    model_settings = {**MODEL_SETTINGS, **(model_settings or {})}
    task_settings = {**TASK_SETTINGS, **(task_settings or {})}
    keras.backend.clear_session()  # no graph or name build-up across 153 models
    start = time.perf_counter()
    model = build_model(encoding, seed=seed, **model_settings)
    # Linear warm-up over the first tenth, then cosine decay to zero: the end of
    # training settles, so the seeds differ less than with a constant rate.
    warmup = max(1, train_steps // 10)
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, max(1, train_steps - warmup), warmup_target=learning_rate, warmup_steps=warmup
    )
    model.compile(
        optimizer=keras.optimizers.Adam(schedule, clipnorm=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    tokens, labels, weights = task_data(
        task,
        train_steps * batch_size,
        model_settings["train_length"],
        seed=[seed, TASKS.index(task)],
        vocabulary_size=model_settings["vocabulary_size"],
        **task_settings,
    )
    model.fit(
        tokens,
        labels,
        sample_weight=weights,
        batch_size=batch_size,
        epochs=1,
        shuffle=False,
        verbose=verbose,
    )
    accuracy: dict[str, dict[int, float | None]] = {name: {} for name in (encoding, *scaled)}
    for length in test_lengths:
        if model.max_length is not None and length > model.max_length:
            accuracy[encoding][length] = None  # it cannot run: reported as n/a, never guessed
            continue
        test = {"task": task, "length": length, "num_positions": eval_positions}
        test.update(seed=10_000 + length, **task_settings)
        accuracy[encoding][length] = evaluate(model, **test)
        for name in scaled:
            accuracy[name][length] = evaluate(scaled_rope(model, name, length), **test)
    return {
        "accuracy": accuracy,
        "params": model.count_params(),
        "seconds": time.perf_counter() - start,
    }


def length_generalization_experiment(
    quick: bool = True,
    out: str | os.PathLike | None = None,
    seeds: Sequence[int] | None = None,
    encodings: Sequence[str] = ENCODINGS,
    tasks: Sequence[str] | None = None,
    verbose: int = 1,
    workers: int = 1,
    **settings: Any,
) -> list[dict[str, Any]]:
    """Trains every encoding on every task and seed, tests it at every length.

    Args:
        quick: the quick run (the relative task only, one seed, models of
            one block, 200 training steps at learning rate 1e-2, 256 measured
            positions per length; about a minute on 2 cores with 2 workers,
            see the command line page) instead of the full one (the three
            tasks, seeds 0, 1, 2, two blocks, 1000 steps at 3e-3, 4096
            positions; see the experiment's page for its time).
        out: a folder to write ``length_generalization.csv``, ``.md`` and
            ``.png`` (accuracy against test length, drawn with matplotlib, the
            ``experiments`` extra; `redraw` draws it again from the CSV) into;
            created if missing.
        seeds: seeds; default ``(0,)`` quick, ``(0, 1, 2)`` full.
        encodings: a selection of `ENCODINGS`. A `SCALED_ROPE` encoding trains
            the `rope` models it is computed from (reported only if selected).
        tasks: a selection of `TASKS`; default ``("copy_back",)`` quick, all full.
        verbose: 1 prints a progress bar over the trainings and then a summary
            line per encoding, 2 also Keras' one line per training (with one
            worker; its progress bar is not used: the first step's estimate
            includes compiling and was off by minutes); 0 prints nothing.
        workers: trainings run at once, each in its own process (1: all in
            this one). The results do not depend on it: every training seeds
            its own weights and data.
        **settings: overrides of `QUICK_SETTINGS` / `FULL_SETTINGS`
            (``train_steps``, ``batch_size``, ``learning_rate``,
            ``test_lengths``, ``eval_positions``), `MODEL_SETTINGS` and
            `TASK_SETTINGS`.

    Returns:
        One dict per (task, encoding, test length), in the order of ``tasks``
        and ``encodings``, with the keys of ``COLUMNS``: the mean accuracy over
        seeds, its standard deviation, minimum and maximum (all ``None`` with
        the note ``"n/a"`` where the model cannot run the length), the number
        of seeds, parameters, blocks and training steps.

    Raises:
        ImportError: with ``out`` but without matplotlib, before any training.
    """
    caller = "length_generalization_experiment"
    if out is not None:  # fail before the training, not after it
        require_matplotlib(caller)
    model_settings, budget, task_settings = merge_settings(
        caller, quick, settings, QUICK_SETTINGS, FULL_SETTINGS, MODEL_SETTINGS, TASK_SETTINGS
    )
    encodings = [encodings] if isinstance(encodings, str) else list(encodings)
    if tasks is None:
        tasks = QUICK_TASKS if quick else TASKS
    tasks = [tasks] if isinstance(tasks, str) else list(tasks)
    for name, values, allowed in (("encodings", encodings, ENCODINGS), ("tasks", tasks, TASKS)):
        wrong = [v for v in values if v not in allowed]
        if wrong or not values:
            raise ValueError(
                f"{caller}: `{name}` must be a non-empty selection of {list(allowed)}; "
                f"received {values!r}."
            )
    workers = check_int(caller, "workers", workers, 1)
    seeds = tuple(seeds if seeds is not None else ((0,) if quick else (0, 1, 2)))
    if not seeds:
        raise ValueError(f"{caller}: `seeds` must not be empty.")
    budget["test_lengths"] = tuple(budget["test_lengths"])
    scaled = [name for name in encodings if name in SCALED_ROPE]
    trained = [
        name for name in TRAINED_ENCODINGS if name in encodings or (scaled and name == "rope")
    ]
    jobs = [
        {
            "encoding": encoding,
            "task": task,
            "seed": seed,
            "verbose": 2 if verbose >= 2 and workers == 1 else 0,
            "model_settings": model_settings,
            "task_settings": task_settings,
            "scaled": tuple(scaled) if encoding == "rope" else (),
            **budget,
        }
        for encoding in trained
        for task in tasks
        for seed in seeds
    ]
    start = time.perf_counter()
    results = run_jobs(
        train_and_evaluate, jobs, workers=workers, progress=verbose >= 1, quiet=verbose < 2
    )
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for job, result in zip(jobs, results):
        for name, accuracy in result["accuracy"].items():
            runs.setdefault((name, job["task"]), []).append(
                {"accuracy": accuracy, "params": result["params"]}
            )

    rows = []
    for task in tasks:
        for encoding in encodings:
            rows.extend(_rows(task, encoding, runs[encoding, task], budget, model_settings))
    if verbose:
        elapsed = time.perf_counter() - start
        for encoding in encodings:
            cells = [
                f"{task} "
                + ", ".join(
                    f"{r['test_length']}: {_cell(r)}"
                    for r in rows
                    if r["encoding"] == encoding and r["task"] == task
                )
                for task in tasks
            ]
            params = next(r["params"] for r in rows if r["encoding"] == encoding)
            print(f"{encoding}: " + " | ".join(cells) + f" ({params:,} params)", flush=True)
        print(
            f"{len(jobs)} trainings ({len(seeds)} seed(s)) in {elapsed:.0f} s with "
            f"{workers} worker(s)",
            flush=True,
        )
    if out is not None:
        write_results(rows, out, vocabulary_size=model_settings["vocabulary_size"])
    return rows


def _rows(
    task: str,
    encoding: str,
    runs: Sequence[dict[str, Any]],
    budget: dict[str, Any],
    model_settings: dict[str, Any],
) -> list[dict[str, Any]]:
    """The result rows of one encoding on one task: the seeds' mean, spread and range."""
    rows = []
    for length in budget["test_lengths"]:
        values = [run["accuracy"][length] for run in runs]
        row = {
            "task": task,
            "encoding": encoding,
            "test_length": length,
            "seeds": len(runs),
            "params": runs[0]["params"],
            "num_layers": model_settings["num_layers"],
            "train_steps": budget["train_steps"],
        }
        if any(v is None for v in values):
            row.update(accuracy=None, accuracy_std=None, accuracy_min=None)
            row.update(accuracy_max=None, note="n/a")
        else:
            values = np.array(values)
            row.update(
                accuracy=float(values.mean()),
                accuracy_std=float(values.std()),
                accuracy_min=float(values.min()),
                accuracy_max=float(values.max()),
                note="",
            )
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------- outputs


def _cell(row: dict[str, Any]) -> str:
    """The mean over seeds and, with several seeds, the lowest and highest in brackets."""
    if row["accuracy"] is None:
        return "n/a"
    if row["seeds"] == 1:
        return f"{row['accuracy']:.2f}"
    return f"{row['accuracy']:.2f} ({row['accuracy_min']:.2f}-{row['accuracy_max']:.2f})"


def markdown_table(rows: Sequence[dict[str, Any]], vocabulary_size: int = 10) -> str:
    """One markdown table per task: encodings down, test lengths across, mean (range)."""
    lines = []
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    for task in tasks:
        task_rows = [r for r in rows if r["task"] == task]
        lengths = list(dict.fromkeys(r["test_length"] for r in task_rows))
        encodings = list(dict.fromkeys(r["encoding"] for r in task_rows))
        cells = {(r["encoding"], r["test_length"]): r for r in task_rows}
        first = task_rows[0]
        description = TASK_DESCRIPTIONS[task].format(**TASK_SETTINGS)
        lines.append(
            f"**{task}** ({description}): accuracy on positions L/2..L-1, mean "
            f"(lowest-highest) over {first['seeds']} seed(s); {first['num_layers']} block(s), "
            f"{first['train_steps']} training steps at length {MODEL_SETTINGS['train_length']}; "
            f"chance {chance(task, vocabulary_size, TASK_SETTINGS['marked']):.2f}"
        )
        lines.append("")
        lines.append("| encoding | params | " + " | ".join(f"L={n}" for n in lengths) + " |")
        lines.append("|---|---:|" + "---:|" * len(lengths))
        for encoding in encodings:
            row_cells = [_cell(cells[encoding, n]) for n in lengths]
            params = cells[encoding, lengths[0]]["params"]
            lines.append(f"| {encoding} | {params:,} | " + " | ".join(row_cells) + " |")
        lines.append("")
    ranking = ranking_table(rows)
    if ranking:
        lines.extend([ranking, ""])
    scaled = [name for name in SCALED_ROPE if any(r["encoding"] == name for r in rows)]
    if scaled:
        lines.append(
            f"{', '.join(scaled)}: the trained rope models with "
            "the rotation scaled at test time (s = L / 64), not retrained."
        )
        lines.append("")
    if any(r["accuracy"] is None for r in rows):
        lines.append(
            "n/a: the model cannot run that length (learned absolute positions have no "
            "table row beyond the training length)."
        )
    return "\n".join(lines).rstrip("\n") + "\n"


# The tasks whose answer lies at a distance from the query (not at a fixed position):
# where a relative encoding is expected to carry over to longer sequences.
RANKED_TASKS = ("copy_back", "copy_recent")


def ranking_table(rows: Sequence[dict[str, Any]]) -> str:
    """The encodings ranked by their mean accuracy at the longest length on `RANKED_TASKS`.

    Only the ranked tasks present count, and only encodings measured on all
    of them at that length (not n/a); an empty string when none is.

    Examples:

        >>> rows = [{"task": "copy_back", "encoding": e, "test_length": 128, "accuracy": a,
        ...          "seeds": 3} for e, a in (("rope", 0.4), ("alibi", 0.9))]
        >>> print(ranking_table(rows))
        **Ranking** at L = 128: mean accuracy over copy_back, 3 seed(s)
        <BLANKLINE>
        | rank | encoding | mean | copy_back |
        |---:|---|---:|---:|
        | 1 | alibi | 0.90 | 0.90 |
        | 2 | rope | 0.40 | 0.40 |
    """
    tasks = [t for t in RANKED_TASKS if any(r["task"] == t for r in rows)]
    if not tasks:
        return ""
    longest = max(r["test_length"] for r in rows)
    cells = {
        (r["encoding"], r["task"]): r["accuracy"]
        for r in rows
        if r["test_length"] == longest and r["task"] in tasks
    }
    encodings = list(dict.fromkeys(r["encoding"] for r in rows))
    scored = []
    for encoding in encodings:
        values = [cells.get((encoding, task)) for task in tasks]
        if all(v is not None for v in values):
            scored.append((-float(np.mean(values)), encodings.index(encoding), encoding, values))
    if not scored:
        return ""
    scored.sort()
    seeds = max(r["seeds"] for r in rows)
    lines = [
        f"**Ranking** at L = {longest}: mean accuracy over {', '.join(tasks)}, {seeds} seed(s)",
        "",
        "| rank | encoding | mean | " + " | ".join(tasks) + " |",
        "|---:|---|---:|" + "---:|" * len(tasks),
    ]
    for rank, (negative_mean, _, encoding, values) in enumerate(scored, start=1):
        shown = " | ".join(f"{v:.2f}" for v in values)
        lines.append(f"| {rank} | {encoding} | {-negative_mean:.2f} | {shown} |")
    return "\n".join(lines)


def write_results(
    rows: Sequence[dict[str, Any]], out: str | os.PathLike, vocabulary_size: int = 10
) -> list[str]:
    """Writes ``length_generalization.csv``, ``.md`` and ``.png`` into ``out``.

    The CSV is the data behind the figure: `redraw` draws the PNG again from it.

    Returns:
        The paths written.

    Raises:
        ImportError: without matplotlib (the ``experiments`` extra), before anything is written.
    """
    require_matplotlib("length_generalization.write_results")
    os.makedirs(out, exist_ok=True)
    csv_path = os.path.join(out, CSV_NAME)
    with open(csv_path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({key: "" if row[key] is None else row[key] for key in COLUMNS})
    return [csv_path, *_write_tables_and_figure(rows, out, vocabulary_size)]


def _write_tables_and_figure(
    rows: Sequence[dict[str, Any]], out: str | os.PathLike, vocabulary_size: int
) -> list[str]:
    md_path = os.path.join(out, "length_generalization.md")
    with open(md_path, "w") as handle:
        handle.write(markdown_table(rows, vocabulary_size))
    claims_path = os.path.join(out, CLAIMS_NAME)
    with open(claims_path, "w") as handle:
        handle.write(claims_table(rows, vocabulary_size))
    png_path = save_figure(plot(rows, chance=1 / vocabulary_size), os.path.join(out, FIGURE_NAME))
    return [md_path, claims_path, png_path]


def render(
    folder: str | os.PathLike, out: str | os.PathLike | None = None, vocabulary_size: int = 10
) -> list[str]:
    """Writes the markdown tables, the claims table and the PNG again from the CSV in ``folder``.

    No training: everything `write_results` writes besides the CSV is made
    from the CSV's rows, so a change to how they are shown needs no new run.

    Args:
        folder: the folder holding ``length_generalization.csv``.
        out: the folder to write into; default ``folder``.
        vocabulary_size: the run's number of token types (chance; the CSV does
            not record it; default `MODEL_SETTINGS`'s).

    Returns:
        The paths written.

    Raises:
        ImportError: without matplotlib (the ``experiments`` extra).
    """
    rows, out = results_to_redraw("length_generalization.render", read_results, folder, out)
    return _write_tables_and_figure(rows, out, vocabulary_size)


# ----------------------------------------------------------------------------- the claims

# What the papers (or, without a paper, their authors) claim about length, in short; the
# papers page (docs/papers.md) sets these next to the study's numbers.
CLAIMS = {
    "none": "NoPE (Kazemnejad et al. 2023): a causal model without positions generalises "
    "better than RoPE, ALiBi and T5's bias on small reasoning tasks",
    "learned_absolute": "cannot represent positions past its table",
    "sinusoidal": "Vaswani et al. 2017 hoped it extrapolates; known to degrade",
    "rope": "Su et al. 2021; degrades past the training length unless scaled",
    "xpos": "Sun et al. 2022: extrapolates better than RoPE",
    "alibi": "Press et al. 2022: trained at 1024, matches sinusoidal trained at 2048 (tested at "
    "2048)",
    "alibi_scheme": "the same paper (the library's ALiBi)",
    "kerple_log": "Chi et al. 2022: the best of its kernels; better than ALiBi at 4x-16x",
    "kerple_power": "Chi et al. 2022: extrapolates, behind the log kernel",
    "fire": "Li et al. 2023: beats NoPE, RoPE, ALiBi, KERPLE and T5's bias",
    "continuous_bias": "Liu et al. 2022 (Swin v2): transfers to larger windows than trained",
    "relative_bias_clip": "Shaw et al. 2018: defined for any length",
    "relative_bias_log": "Raffel et al. 2020: defined for any length",
    "relative_bias_piecewise": "Wu et al. 2021: defined for any length",
    "relative_bias_multiscale": "the seed lecture: defined for any length",
    "shaw_keys_values": "Shaw et al. 2018: defined for any length",
    **SCALED_CLAIMS,
}
# A model has learned a task when it is this far above chance at the training length
# (a fraction of the way from chance to 1), and holds a length while it keeps its
# accuracy at the training length within HOLD_MARGIN.
LEARNED_FRACTION = 0.5
HOLD_MARGIN = 0.05


def verdict(series: Sequence[dict[str, Any]], chance_level: float) -> str:
    """One encoding on one task, in words: up to which length it keeps its accuracy.

    ``"not learned"`` when the mean accuracy at the shortest length is less
    than `LEARNED_FRACTION` of the way from chance to 1; ``"cannot run
    past L"`` when a length is n/a; otherwise ``"holds to L"`` for the
    longest ``L`` up to which every mean stays within `HOLD_MARGIN` of the
    shortest length's, or ``"falls at L"`` for the first length below that.

    Args:
        series: the rows of one encoding and task, at increasing test lengths.
        chance_level: the task's chance accuracy (`chance`).

    Examples:

        >>> rows = [{"test_length": n, "accuracy": a} for n, a in ((64, 1.0), (128, 0.98),
        ...     (256, 0.7))]
        >>> verdict(rows, 0.1)
        'holds to 128'
        >>> verdict(rows[:1] + [{"test_length": 128, "accuracy": None}], 0.1)
        'cannot run past 64'
        >>> verdict([{"test_length": 64, "accuracy": 0.3}], 0.1)
        'not learned'
    """
    series = sorted(series, key=lambda row: row["test_length"])
    first = series[0]["accuracy"]
    if first is None or first < chance_level + LEARNED_FRACTION * (1 - chance_level):
        return "not learned"
    held = series[0]["test_length"]
    for row in series[1:]:
        if row["accuracy"] is None:
            return f"cannot run past {held}"
        if row["accuracy"] < first - HOLD_MARGIN:
            return (
                f"holds to {held}"
                if held > series[0]["test_length"]
                else (f"falls at {row['test_length']}")
            )
        held = row["test_length"]
    return f"holds to {held}"


def claims_table(rows: Sequence[dict[str, Any]], vocabulary_size: int = 10) -> str:
    """The published claim of each encoding next to what the study measured, as markdown.

    One line per encoding that `CLAIMS` names; per task, the mean accuracy at
    the shortest and the longest test length and the `verdict`.
    """
    tasks = [task for task in TASKS if any(r["task"] == task for r in rows)]
    lengths = sorted({r["test_length"] for r in rows})
    first, last = lengths[0], lengths[-1]
    header = "| encoding | claim | " + " | ".join(f"{task}: L={first} -> {last}" for task in tasks)
    lines = [
        f"Mean accuracy over {max(r['seeds'] for r in rows)} seed(s) at L = {first} and "
        f"L = {last}; *learned*: at least {LEARNED_FRACTION:.0%} of the way from chance to 1 "
        f"at L = {first}; *holds to L*: every mean up to L within {HOLD_MARGIN} of the one at "
        f"L = {first}.",
        "",
        header + " |",
        "|---|---|" + "---|" * len(tasks),
    ]
    encodings = list(dict.fromkeys(r["encoding"] for r in rows))
    for encoding in encodings:
        if encoding not in CLAIMS:
            continue
        cells = []
        for task in tasks:
            series = [r for r in rows if r["encoding"] == encoding and r["task"] == task]
            if not series:
                cells.append("")
                continue
            by_length = {r["test_length"]: r for r in series}
            shown = [
                "n/a" if by_length[n]["accuracy"] is None else f"{by_length[n]['accuracy']:.2f}"
                for n in (first, last)
                if n in by_length
            ]
            level = chance(task, vocabulary_size, TASK_SETTINGS["marked"])
            cells.append(" -> ".join(shown) + f": {verdict(series, level)}")
        lines.append(f"| {encoding} | {CLAIMS[encoding]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


CSV_NAME = "length_generalization.csv"
CLAIMS_NAME = "length_generalization_claims.md"
FIGURE_NAME = "length_generalization.png"
_INT_COLUMNS = ("test_length", "seeds", "params", "num_layers", "train_steps")
_FLOAT_COLUMNS = ("accuracy", "accuracy_std", "accuracy_min", "accuracy_max")


def read_results(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a ``length_generalization.csv`` (or of the folder holding one).

    Numbers come back as ints and floats, an empty cell (a length the model
    cannot run) as ``None``: the rows `length_generalization_experiment`
    returned, ready for `plot` or `markdown_table`.

    Raises:
        ValueError: when the CSV lacks a column of `COLUMNS`.

    Examples:

        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> with open(os.path.join(folder, "length_generalization.csv"), "w") as f:
        ...     _ = f.write(",".join(COLUMNS) + "\\n"
        ...                 "copy_back,rope,128,0.5,0.1,0.4,0.6,3,17806,2,1000,\\n")
        >>> row = read_results(folder)[0]
        >>> row["encoding"], row["test_length"], row["accuracy"]
        ('rope', 128, 0.5)
    """
    rows = []
    for raw in read_csv_rows(path, CSV_NAME, COLUMNS):
        row: dict[str, Any] = {key: raw[key] for key in COLUMNS}
        for key in _INT_COLUMNS:
            row[key] = int(raw[key])
        for key in _FLOAT_COLUMNS:
            row[key] = float(raw[key]) if raw[key] != "" else None
        rows.append(row)
    return rows


def redraw(
    folder: str | os.PathLike, out: str | os.PathLike | None = None, vocabulary_size: int = 10
) -> str:
    """Draws ``length_generalization.png`` again from the ``length_generalization.csv`` beside it.

    No training: the CSV that `write_results` wrote holds everything the figure shows.

    Args:
        folder: the folder holding the CSV.
        out: the folder for the PNG; default ``folder``.
        vocabulary_size: the run's number of token types (chance is its inverse;
            the CSV does not record it; default `MODEL_SETTINGS`'s).

    Returns:
        The path of the PNG.

    Raises:
        ImportError: without matplotlib (the ``experiments`` extra).
    """
    rows, out = results_to_redraw("length_generalization.redraw", read_results, folder, out)
    return save_figure(plot(rows, chance=1 / vocabulary_size), os.path.join(out, FIGURE_NAME))


# ----------------------------------------------------------------------------- the figure

# One colour and marker per task (the relative task first), from matplotlib's default cycle.
_TASK_STYLES = {
    "copy_back": {"color": "tab:blue", "marker": "o"},
    "copy_position": {"color": "tab:orange", "marker": "s"},
    "copy_recent": {"color": "tab:green", "marker": "^"},
}
_COLUMNS = 5
# The tasks in the legend, shorter than `TASK_DESCRIPTIONS`.
_LEGEND = {
    "copy_back": "the token {shift} back",
    "copy_position": "the token at {position}",
    "copy_recent": "the latest marked token",
}


def plot(rows: Sequence[dict[str, Any]], chance: float | None = None) -> Any:
    """Accuracy against test length, one panel per encoding, as a matplotlib figure.

    Each panel has one line per task: the mean over seeds, with an error bar
    from the lowest to the highest seed; "n/a" marks a length the model
    cannot run. The x axis is the test length in tokens on a log scale; a
    dashed line marks chance. The legend sits above the panels.

    Args:
        rows: the rows of `length_generalization_experiment` (or `read_results`).
        chance: accuracy of guessing, drawn as a dashed line; ``None`` for none.

    Returns:
        A ``matplotlib.figure.Figure`` (Agg canvas) of 1200 px width at
        `keras_posenc.experiments._figures.DPI`; save it with its ``savefig``.

    Raises:
        ImportError: without matplotlib (the ``experiments`` extra).

    Examples:

        >>> rows = [
        ...     {"task": "copy_back", "encoding": "rope", "test_length": n, "accuracy": a,
        ...      "accuracy_min": a - 0.1, "accuracy_max": a, "seeds": 3}
        ...     for n, a in ((64, 1.0), (128, 0.8))]
        >>> figure = plot(rows, chance=0.1)
        >>> [int(v) for v in figure.get_size_inches() * figure.dpi]
        [1200, 500]
    """
    encodings = list(dict.fromkeys(r["encoding"] for r in rows))
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    lengths = sorted({r["test_length"] for r in rows})
    columns = min(_COLUMNS, len(encodings))
    grid_rows = math.ceil(len(encodings) / columns)
    # At least 5 inches: the y label spans the grid's height, even of one row of panels.
    # The legend: a line per task, chance, and copy_recent's floor; three to a row.
    legend_entries = len(tasks) + (chance is not None) + ("copy_recent" in tasks)
    legend_columns = min(3, legend_entries)
    legend_rows = math.ceil(legend_entries / legend_columns)
    height = max(5.0, 1.8 + 2.6 * grid_rows) + 0.3 * (legend_rows - 1)
    figure = new_figure("length_generalization.plot", height=height)
    # The legend gets a row of its own above the panels: constrained layout places a
    # figure legend "outside" without regard to the suptitle or supxlabel (they overlap).
    grid = figure.add_gridspec(
        grid_rows + 1, columns, height_ratios=[0.12 * legend_rows] + [1] * grid_rows
    )
    legend_axis = figure.add_subplot(grid[0, :])
    legend_axis.set_axis_off()
    axes = grid[1:, :].subgridspec(grid_rows, columns).subplots(sharex=True, sharey=True)
    axes = np.asarray(axes).ravel()
    handles = {}
    for axis, encoding in zip(axes, encodings):
        axis.set_title(encoding, fontsize=11)
        axis.set_xscale("log", base=2)
        axis.set_xticks(lengths, [str(n) for n in lengths])
        axis.minorticks_off()
        axis.set_ylim(-0.02, 1.05)
        axis.grid(True, color="0.9")
        if chance is not None:
            handles["chance"] = axis.axhline(chance, color="0.45", linestyle="--", linewidth=1)
        if "copy_recent" in tasks:  # its answer is one of the marked tokens: a higher floor
            handles["marked"] = axis.axhline(
                1 / TASK_SETTINGS["marked"], color="tab:green", linestyle=":", linewidth=1
            )
        for index, task in enumerate(tasks):
            series = [r for r in rows if r["encoding"] == encoding and r["task"] == task]
            style = _TASK_STYLES.get(task, {"marker": "o"})
            measured = [r for r in series if r["accuracy"] is not None]
            if measured:
                x = np.array([r["test_length"] for r in measured], float)
                y = np.array([r["accuracy"] for r in measured])
                low = y - np.array([r["accuracy_min"] for r in measured])
                high = np.array([r["accuracy_max"] for r in measured]) - y
                # The tasks' bars side by side, not on top of each other (a log axis: a factor).
                dodge = 2 ** (0.04 * (2 * index - (len(tasks) - 1)))
                handles[task] = axis.errorbar(
                    x * dodge,
                    y,
                    yerr=np.maximum([low, high], 0),
                    capsize=2,
                    linewidth=1.5,
                    markersize=5,
                    **style,
                )
            for row in series:
                if row["accuracy"] is None:
                    axis.text(
                        row["test_length"],
                        0.55 - 0.12 * index,
                        "n/a",
                        ha="center",
                        va="center",
                        fontsize=9,
                        color=style.get("color", "black"),
                    )
    for index in range(len(encodings), len(axes)):
        axes[index].set_axis_off()
        if index >= columns:  # the panel above an empty cell shows the test lengths
            axes[index - columns].xaxis.set_tick_params(labelbottom=True)
    labels = {task: f"{task} ({_LEGEND[task].format(**TASK_SETTINGS)})" for task in tasks}
    labels["chance"] = f"chance ({chance:.2f})" if chance is not None else ""
    labels["marked"] = f"copy_recent's chance ({1 / TASK_SETTINGS['marked']:.2f})"
    entries = [key for key in labels if key in handles]
    seeds = max(r["seeds"] for r in rows)
    legend_axis.legend(
        [handles[key] for key in entries],
        [labels[key] for key in entries],
        loc="center",
        ncols=legend_columns,
        fontsize=10,
        frameon=False,
    )
    figure.suptitle(
        "Length generalisation: accuracy beyond the training length, per position encoding\n"
        f"(line: mean of {seeds} seed(s); bar: lowest to highest seed)"
    )
    train_length = MODEL_SETTINGS["train_length"]
    figure.supxlabel(f"test length L (tokens, log scale; trained at L = {train_length})")
    figure.supylabel("accuracy on positions L/2 .. L-1 (fraction correct)")
    return figure
