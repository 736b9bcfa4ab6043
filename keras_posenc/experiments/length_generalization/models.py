"""The study's models: one small causal Transformer per position encoding.

`ENCODINGS` lists them; the package's docstring
(``keras_posenc.experiments.length_generalization``) describes each one and
the architecture they share.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from keras_posenc._quiet import quiet_import
from keras_posenc.experiments._scaled_rope import SCALED_ROPE, scaled_rotation
from keras_posenc.layers._checks import check_choice, check_int, check_number_at_least
from keras_posenc.layers.contextual_attention import ContextualPositionAttention
from keras_posenc.layers.disentangled_attention import DisentangledSelfAttention
from keras_posenc.layers.position_biases import FIRE, KERPLE, ALiBi, ContinuousBias
from keras_posenc.layers.position_schemes import (
    ClipPositions,
    DebertaBuckets,
    LogBuckets,
    PiecewiseBuckets,
)
from keras_posenc.layers.relative_position import (
    MultiScaleRelativePositionEmbedding,
    RelativePositionBias,
)
from keras_posenc.layers.relative_transformer_decoder import RelativeTransformerDecoder
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
    "deberta",
    "cope",
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
# The encodings whose attention is a layer of its own rather than MultiHeadRelativeAttention:
# each block is `_AttentionBlock`, RelativeTransformerDecoder's pre-norm block around it.
_OWN_ATTENTION = ("deberta", "cope")
# DeBERTa's buckets at this scale: exact up to 16, log-spaced to 64 (T5's row: 32 buckets
# up to 64), one table of 2 x 32 rows shared by the blocks after a layer norm, as DeBERTa.
_DEBERTA_BUCKETS = {"position_buckets": 32, "max_position": 64}
# CoPE's table covers the training length; longer contextual positions are clipped to 63.
_COPE_POSITIONS = 64
# The model: the same for the quick and the full run.
MODEL_SETTINGS = {
    "vocabulary_size": 10,
    "hidden_dim": 32,
    "num_heads": 2,
    "num_layers": 2,
    "intermediate_dim": 64,
    "train_length": 64,
}


class LengthGeneralizationModel(keras.Model):
    """A small causal Transformer that labels every token, with one position encoding.

    Built by `build_model`; see the package's docstring for the architecture
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
        self.relative_table = self.relative_norm = None
        if encoding == "deberta":
            rows = DebertaBuckets(**_DEBERTA_BUCKETS).table_size
            self.relative_table = keras.layers.Embedding(rows, hidden_dim, name="relative_table")
            self.relative_norm = keras.layers.LayerNormalization(name="relative_norm")
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
            if encoding in _OWN_ATTENTION:
                own = _own_attention(encoding, num_heads, hidden_dim // num_heads)
                self.blocks.append(
                    _AttentionBlock(own, intermediate_dim, hidden_dim, name=f"block_{i}")
                )
                continue
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
        shared = {}
        if self.relative_table is not None:  # DeBERTa's table, shared by the blocks
            table = self.relative_table(ops.arange(self.relative_table.input_dim))
            shared["relative_embeddings"] = self.relative_norm(table)
        for block in self.blocks:
            x = block(x, attention_bias=bias, **shared)
        return self.classifier(self.final_norm(x))


def _own_attention(encoding: str, num_heads: int, key_dim: int) -> keras.layers.Layer:
    if encoding == "deberta":  # v3's: c2p and p2c through the content projections
        position = DebertaBuckets(**_DEBERTA_BUCKETS)
        return DisentangledSelfAttention(num_heads, key_dim, position=position, shared_table=True)
    return ContextualPositionAttention(num_heads, key_dim, max_positions=_COPE_POSITIONS)


class _AttentionBlock(keras.layers.Layer):
    """`RelativeTransformerDecoder`'s causal pre-norm block around another attention layer.

    ``x + attention(norm(x))``, then ``x + W_2 relu(W_1 norm(x))``: the block of the other
    encodings (normalize_first=True, no cross-attention, no dropout) with
    `DisentangledSelfAttention` under a causal mask or `ContextualPositionAttention` (causal
    always) as its self-attention.
    """

    def __init__(
        self, attention: keras.layers.Layer, intermediate_dim: int, hidden_dim: int, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.attention = attention
        self.intermediate_dim = intermediate_dim
        self.attention_norm = keras.layers.LayerNormalization(epsilon=1e-5)
        self.feedforward_norm = keras.layers.LayerNormalization(epsilon=1e-5)
        self.intermediate = keras.layers.Dense(intermediate_dim, activation="relu")
        self.feedforward_output = keras.layers.Dense(hidden_dim)

    def call(self, x: Any, attention_bias: Any = None, relative_embeddings: Any = None) -> Any:
        h = self.attention_norm(x)
        if isinstance(self.attention, DisentangledSelfAttention):
            length = ops.shape(x)[1]
            positions = ops.arange(length)
            causal = ops.expand_dims(positions, 1) >= ops.expand_dims(positions, 0)
            causal = ops.broadcast_to(ops.expand_dims(causal, 0), (ops.shape(x)[0], length, length))
            h = self.attention(
                h,
                relative_embeddings=relative_embeddings,
                attention_mask=causal,
                attention_bias=attention_bias,
            )
        else:
            h = self.attention(h, attention_bias=attention_bias)
        x = x + h
        return x + self.feedforward_output(self.intermediate(self.feedforward_norm(x)))


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
