"""Decoder-only language models as released today (Llama, Mistral, Qwen, Gemma 2), on the
library's attention core, so that every position scheme can serve in a real model.

**DecoderLM** (family ``decoder_lm``): token embedding, a stack of `DecoderBlock` (RMS norms,
attention with grouped-query heads, rotary or any relative scheme, optional sliding window on
all or some layers, query-key norms and soft-capping; a gated MLP), a final RMS norm and the
output projection (tied to the embedding or not), with an optional final logit cap. Named
sizes for tests and training from scratch, with the byte-level tokenizer
(`keras_posenc.tokenizers.ByteTokenizer`), so they generate text;
`keras_posenc.convert.from_keras_hub_decoder` makes one from keras-hub's Llama, Llama 3,
Mistral, Qwen and Gemma (1, 2 and 3) backbones.

    name               layers  d    MLP   heads  kv heads  parameters (vocab 259, tied)
    decoder_lm_tiny    2       64   172   4      2         107,520
    decoder_lm_small   6       256  688   8      4         4,419,584

(Parameters: ``V d`` for the tied embedding, per layer ``d (h + 2 g) d_h + h d_h d`` for
the attention (``h`` query heads and ``g`` key/value heads of size ``d_h``), ``3 d m`` for
the gated MLP and ``2 d`` for the norms, and ``d`` for the final norm:
tests/zoo/test_decoder_lm.py derives them.)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import keras
from keras import ops

from keras_posenc.layers._checks import (
    check_bool,
    check_int,
    check_positive_number,
    check_rate,
)
from keras_posenc.layers._memory import check_allocation
from keras_posenc.layers._relative_arguments import check_rotary
from keras_posenc.layers.decoder_block import DecoderBlock
from keras_posenc.layers.rotary import RotaryPositions
from keras_posenc.zoo.config import ZooConfig, by_name
from keras_posenc.zoo.language_model import LanguageModel
from keras_posenc.zoo.registry import register_model

__all__ = ["DecoderLM", "DecoderLMConfig"]

REFERENCE = (
    "Touvron et al. 2023, Llama 2 (arXiv:2307.09288); Jiang et al. 2023, Mistral 7B "
    "(arXiv:2310.06825); Gemma Team 2024, Gemma 2 (arXiv:2408.00118)"
)


@keras.saving.register_keras_serializable(package="keras_posenc")
class DecoderLM(LanguageModel):
    """A decoder-only language model of `DecoderBlock` layers (Llama, Mistral, Gemma 2).

    ``model(token_ids)`` returns float32 next-token logits ``(batch, time, vocab_size)``
    (position ``t`` predicts the token at ``t + 1``). Causal, with padding on the right: no
    real token sees the padding after it, so the full pass equals the cached steps. It
    implements the decoding contract of `LanguageModel`: one attention cache per layer,
    ``layer.attention.cache_shape(batch, max_length)`` (a rolling cache of the window in
    windowed layers, so their memory does not grow with the length); ``generate`` runs
    greedy search, sampling or beam search.

    Args:
        vocab_size: token ids (the logits' width).
        hidden_dim: model width.
        intermediate_dim: the gated MLP's width.
        num_heads: query heads.
        num_layers: decoder blocks.
        head_dim: size of each head; default ``hidden_dim // num_heads``.
        num_key_value_heads: key/value heads (default ``num_heads``).
        activation: the MLP gate's activation: ``"silu"`` (SwiGLU, Llama) or ``"gelu_tanh"``
            (GeGLU, Gemma).
        layer_norm_epsilon: the RMS norms' epsilon.
        rotary: the rotary embedding of every layer: a `RotaryPositions` or its config;
            ``"default"`` is ``RotaryPositions()`` (base 10,000); None for none.
        relative: a relative term in every layer (`MultiHeadRelativeAttention`'s
            ``relative``: ``"bias"``, ...); default none.
        position: that term's scheme (`MultiHeadRelativeAttention`'s ``position``: T5's
            buckets, ALiBi, ...).
        sliding_window: None, or the window of the local layers.
        global_every: with ``sliding_window``: None (every layer is local), or ``k``: layer
            ``i`` is global (no window) when ``(i + 1) % k == 0`` (Gemma 2: 2, every other
            layer from the second; Gemma 3: 6).
        global_rotary: with ``global_every``: None (the global layers take ``rotary``), or
            the rotary embedding of the global layers (a `RotaryPositions` or its config;
            Gemma 3: base 1,000,000 there, 10,000 in the local layers).
        attention_sinks: the attention's, in the local layers.
        query_key_norm: the attention's (Gemma 3, Qwen 3: ``"rms"``).
        logit_soft_cap: the attention's (Gemma 2).
        query_scale_dim: the attention's.
        use_bias: biases of the attention's projections (Qwen: True).
        output_bias: a bias of the attention's output projection (None: ``use_bias``;
            Qwen: False).
        use_post_attention_norm: Gemma 2's norm of the attention's output.
        use_post_feedforward_norm: Gemma 2's norm of the MLP's output.
        final_logit_soft_cap: None, or the cap of the output logits
            (``c * tanh(logits / c)``, Gemma 2).
        scale_embeddings: multiply the embedded tokens by ``sqrt(hidden_dim)`` (Gemma).
        tie_word_embeddings: the output projection is the embedding's transpose (default
            True); False gives it its own weights (Llama, Mistral).
        dropout: dropout on the attention probabilities and every residual branch.
        remat: recompute every block in the backward pass of training (Keras' remat:
            ``DecoderBlock(remat=True)``): less memory, more time. Default False.
        max_length: the longest sequence accepted (None: any).
        pad_id: the padding id (0).
        bos_id: the start id (1).
        eos_id: the end id (2).
        tokenizer: what ``generate`` reads and writes text with: ``"byte"``
            (`keras_posenc.tokenizers.ByteTokenizer`, the named sizes' default), a
            ``keras_hub`` tokenizer (a converted preset's), or None (token ids only). Its
            start and end ids must be ``bos_id`` and ``eos_id``, its vocabulary within
            ``vocab_size``.
        **kwargs: ``name`` and other ``keras.Model`` arguments.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc import zoo
        >>> model = zoo.create("decoder_lm_tiny", sliding_window=4)
        >>> tuple(model(np.array([[1, 5, 6, 7]])).shape)  # 259 ids: the byte tokenizer's
        (1, 4, 259)
        >>> [tuple(c.shape) for c in model.init_cache(1, 100)]  # rolling caches
        [(1, 2, 4, 2, 16), (1, 2, 4, 2, 16)]
        >>> model.generate(np.array([[1, 5, 6]]), max_length=8).shape
        (1, 8)
        >>> type(model.generate("Hi", max_length=8)).__name__  # text in, text out
        'str'

        Token ids of another vocabulary: no tokenizer.

        >>> zoo.create("decoder_lm_tiny", vocab_size=40, tokenizer=None).vocab_size
        40
    """

    def __init__(
        self,
        vocab_size: int = 256,
        hidden_dim: int = 64,
        intermediate_dim: int = 172,
        num_heads: int = 4,
        num_layers: int = 2,
        head_dim: int | None = None,
        num_key_value_heads: int | None = None,
        activation: str = "silu",
        layer_norm_epsilon: float = 1e-6,
        rotary: Any = "default",
        relative: str | None = None,
        position: Any = None,
        sliding_window: int | None = None,
        global_every: int | None = None,
        global_rotary: Any = None,
        attention_sinks: int = 0,
        query_key_norm: str | None = None,
        logit_soft_cap: float | None = None,
        query_scale_dim: int | None = None,
        use_bias: bool = False,
        output_bias: bool | None = None,
        use_post_attention_norm: bool = False,
        use_post_feedforward_norm: bool = False,
        final_logit_soft_cap: float | None = None,
        scale_embeddings: bool = False,
        tie_word_embeddings: bool = True,
        dropout: float = 0.0,
        remat: bool = False,
        max_length: int | None = None,
        pad_id: int = 0,
        bos_id: int = 1,
        eos_id: int = 2,
        tokenizer: Any = None,
        **kwargs: Any,
    ) -> None:
        owner = type(self).__name__
        ids = (vocab_size, pad_id, bos_id, eos_id, max_length)
        self._init_language_model(*ids)
        self.hidden_dim = check_int(owner, "hidden_dim", hidden_dim, 1)
        self.num_layers = check_int(owner, "num_layers", num_layers, 1)
        self.num_heads = check_int(owner, "num_heads", num_heads, 1)
        if head_dim is None and self.hidden_dim % self.num_heads:
            raise ValueError(
                f"{owner}: `hidden_dim` ({hidden_dim}) must be a multiple of `num_heads` "
                f"({num_heads}) when `head_dim` is not given."
            )
        self.head_dim = (
            self.hidden_dim // self.num_heads
            if head_dim is None
            else check_int(owner, "head_dim", head_dim, 1)
        )
        self.global_every = (
            None if global_every is None else check_int(owner, "global_every", global_every, 1)
        )
        if self.global_every is not None and sliding_window is None:
            raise ValueError(
                f"{owner}: `global_every` chooses which layers drop the sliding window; "
                f"pass `sliding_window` too, got global_every={global_every}."
            )
        if global_rotary is not None and self.global_every is None:
            raise ValueError(
                f"{owner}: `global_rotary` is the rotary embedding of the global layers that "
                f"`global_every` chooses; pass `global_every` too, got "
                f"global_rotary={global_rotary!r}."
            )
        self.global_rotary = check_rotary(owner, global_rotary)
        self.final_logit_soft_cap = (
            None
            if final_logit_soft_cap is None
            else check_positive_number(owner, "final_logit_soft_cap", final_logit_soft_cap)
        )
        self.scale_embeddings = check_bool(owner, "scale_embeddings", scale_embeddings)
        self.tie_word_embeddings = check_bool(owner, "tie_word_embeddings", tie_word_embeddings)
        self.dropout = check_rate(owner, "dropout", dropout)
        if isinstance(rotary, str) and rotary == "default":
            rotary = RotaryPositions()
        policy = kwargs.pop("dtype", None)
        self._block_arguments = dict(
            intermediate_dim=intermediate_dim,
            num_heads=self.num_heads,
            head_dim=self.head_dim,
            num_key_value_heads=num_key_value_heads,
            activation=activation,
            layer_norm_epsilon=layer_norm_epsilon,
            use_post_attention_norm=use_post_attention_norm,
            use_post_feedforward_norm=use_post_feedforward_norm,
            relative=relative,
            position=position,
            rotary=rotary,
            attention_sinks=attention_sinks,
            query_key_norm=query_key_norm,
            logit_soft_cap=logit_soft_cap,
            query_scale_dim=query_scale_dim,
            use_bias=use_bias,
            output_bias=output_bias,
            dropout=self.dropout,
            # Keras' remat of every block's call in training (keras_posenc/layers/_remat.py).
            remat=check_bool(owner, "remat", remat),
        )
        self.sliding_window = sliding_window
        if attention_sinks and sliding_window is None:
            raise ValueError(
                f"{owner}: `attention_sinks` keep the first keys visible outside a sliding "
                f"window; pass `sliding_window` too, got attention_sinks={attention_sinks}."
            )
        check_allocation(owner, "token embedding", [(self.vocab_size, self.hidden_dim)])
        self.token_embedding = keras.layers.ReversibleEmbedding(
            self.vocab_size,
            self.hidden_dim,
            tie_weights=self.tie_word_embeddings,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=0.02),
            reverse_dtype="float32",
            dtype=policy,
            name="token_embedding",
        )
        self.token_embedding.build((None, None))
        self.transformer_layers = [
            DecoderBlock(
                **{**self._block_arguments, **self._layer_arguments(i, attention_sinks)},
                sliding_window=sliding_window if self.is_local(i) else None,
                dtype=policy,
                name=f"transformer_layer_{i}",
            )
            for i in range(self.num_layers)
        ]
        self.layer_norm = keras.layers.RMSNormalization(
            epsilon=layer_norm_epsilon, dtype=policy, name="sequence_output_layernorm"
        )
        self.embedding_dropout = keras.layers.Dropout(self.dropout, dtype=policy)
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        logits = keras.layers.Identity(dtype="float32", name="logits")(self._decode(token_ids))
        super().__init__(inputs=token_ids, outputs=logits, dtype=policy, **kwargs)
        self._init_language_model(*ids)
        self._init_tokenizer(tokenizer)

    def _layer_arguments(self, layer: int, attention_sinks: int) -> dict:
        """What layer ``layer`` takes of its own: sinks where local, the global rotary."""
        arguments = {"attention_sinks": attention_sinks * self.is_local(layer)}
        if self.global_rotary is not None and not self.is_local(layer):
            arguments["rotary"] = self.global_rotary
        return arguments

    def is_local(self, layer: int) -> bool:
        """Whether layer ``layer`` attends within the sliding window."""
        if self.sliding_window is None:
            return False
        return self.global_every is None or (layer + 1) % self.global_every != 0

    # ------------------------------------------------------------------ forward pass

    def _embed(self, ids: Any, training: Any = None) -> Any:
        x = self.token_embedding(ids)
        if self.scale_embeddings:  # a Python float: no constant captured by an export
            x = x * ops.cast(math.sqrt(self.hidden_dim), x.dtype)
        return self.embedding_dropout(x, training=training)

    def _logits(self, x: Any) -> Any:
        logits = self.token_embedding(self.layer_norm(x), reverse=True)
        if self.final_logit_soft_cap is not None:
            cap = self.final_logit_soft_cap
            logits = ops.tanh(logits / cap) * cap
        return logits

    def _decode(self, token_ids: Any, training: Any = None) -> Any:
        x = self._embed(ops.cast(token_ids, "int32"), training)
        for block in self.transformer_layers:
            x = block(x, training=training)
        return self._logits(x)

    # ------------------------------------------------------------------ decoding contract

    def cache_names(self) -> tuple[str, ...]:
        """``cache_transformer_layer_<i>``: layer ``i``'s keys and values."""
        return tuple(f"cache_{block.name}" for block in self.transformer_layers)

    def init_cache(self, batch_size: Any, max_length: int) -> tuple:
        """One zero buffer per layer, ``block.attention.cache_shape(batch, max_length)``."""
        return tuple(
            ops.zeros(block.attention.cache_shape(batch_size, max_length), self.compute_dtype)
            for block in self.transformer_layers
        )

    def decode_step(self, token_ids: Any, cache: tuple, index: Any) -> tuple:
        # The prompt's path on one token: one implementation, and the same operations as a
        # step of its own (a reshape to (batch, 1), the blocks, the logits' first row).
        logits, new_cache = self.decode_prompt(ops.reshape(token_ids, (-1, 1)), cache, index)
        return logits[:, 0], new_cache

    decodes_prompts = True

    def decode_prompt(self, token_ids: Any, cache: tuple, index: Any) -> tuple:
        """``(logits (batch, T, vocab_size) float32, new_cache)``: the ``(batch, T)`` tokens
        at ``index .. index + T - 1`` written in one call, as ``T`` calls of ``decode_step``.

        Every `DecoderBlock` writes ``T`` rows of its cache from ``index`` (a rolling cache
        keeps the last ``sliding_window`` of them, however long the prompt).

        Examples:

            >>> import numpy as np
            >>> from keras_posenc import zoo
            >>> model = zoo.create("decoder_lm_tiny", sliding_window=3)
            >>> ids = np.array([[1, 5, 6, 7, 8]], "int32")
            >>> logits, cache = model.decode_prompt(ids, model.init_cache(1, 8), 0)
            >>> from keras import ops
            >>> full = ops.convert_to_numpy(model(ids))
            >>> bool(np.allclose(ops.convert_to_numpy(logits), full, atol=1e-5))
            True
        """
        x = self._embed(ops.cast(token_ids, "int32"))
        new_cache = []
        for block, buffer in zip(self.transformer_layers, cache, strict=True):
            x, buffer = block(x, cache=buffer, cache_update_index=index)
            new_cache.append(buffer)
        return self._logits(x), tuple(new_cache)

    def get_config(self) -> dict:
        arguments = dict(self._block_arguments)
        arguments["position"] = keras.saving.serialize_keras_object(arguments["position"])
        arguments["rotary"] = keras.saving.serialize_keras_object(arguments["rotary"])
        arguments.pop("dropout")
        return {
            "name": self.name,
            "vocab_size": self.vocab_size,
            "hidden_dim": self.hidden_dim,
            "num_layers": self.num_layers,
            **arguments,
            "sliding_window": self.sliding_window,
            "global_every": self.global_every,
            "global_rotary": keras.saving.serialize_keras_object(self.global_rotary),
            "final_logit_soft_cap": self.final_logit_soft_cap,
            "scale_embeddings": self.scale_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "dropout": self.dropout,
            "max_length": self.max_length,
            **self._language_model_config(),
            # The layers' policy ("mixed_bfloat16", ...): the functional model's own stays
            # float32, so a .keras file would otherwise rebuild the layers in float32.
            "dtype": keras.dtype_policies.serialize(self.token_embedding.dtype_policy),
        }

    @classmethod
    def from_config(cls, config: dict) -> DecoderLM:
        config = dict(config)
        config.pop("trainable", None)
        return cls(**config)


# --------------------------------------------------------------------------- configurations


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecoderLMConfig(ZooConfig):
    """A named :class:`DecoderLM`: its arguments, with its defaults."""

    vocab_size: int = 256
    hidden_dim: int = 64
    intermediate_dim: int = 172
    num_heads: int = 4
    num_layers: int = 2
    head_dim: int | None = None
    num_key_value_heads: int | None = None
    activation: str = "silu"
    layer_norm_epsilon: float = 1e-6
    rotary: Any = "default"
    relative: str | None = None
    position: Any = None
    sliding_window: int | None = None
    global_every: int | None = None
    global_rotary: Any = None
    attention_sinks: int = 0
    query_key_norm: str | None = None
    logit_soft_cap: float | None = None
    query_scale_dim: int | None = None
    use_bias: bool = False
    output_bias: bool | None = None
    use_post_attention_norm: bool = False
    use_post_feedforward_norm: bool = False
    final_logit_soft_cap: float | None = None
    scale_embeddings: bool = False
    tie_word_embeddings: bool = True
    dropout: float = 0.0
    remat: bool = False
    max_length: int | None = None
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    tokenizer: Any = None
    name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        who = type(self).__name__
        for field in ("vocab_size", "hidden_dim", "intermediate_dim", "num_heads", "num_layers"):
            check_int(who, field, getattr(self, field), 1)


#: The registered decoder-only models: zoo name -> :class:`DecoderLMConfig`. Llama's
#: proportions (MLP about 8/3 of the width, half as many key/value heads as query heads),
#: small enough to train here; the byte-level tokenizer's 259 ids (`ByteTokenizer`).
DECODER_LM_CONFIGS: dict[str, DecoderLMConfig] = by_name([
    DecoderLMConfig(zoo_name="decoder_lm_tiny", name="decoder_lm_tiny", hidden_dim=64,
                    intermediate_dim=172, num_heads=4, num_key_value_heads=2, num_layers=2,
                    vocab_size=259, tokenizer="byte"),
    DecoderLMConfig(zoo_name="decoder_lm_small", name="decoder_lm_small", hidden_dim=256,
                    intermediate_dim=688, num_heads=8, num_key_value_heads=4, num_layers=6,
                    vocab_size=259, tokenizer="byte"),
])  # fmt: skip

for _name, _config in DECODER_LM_CONFIGS.items():
    register_model(
        _name,
        DecoderLM,
        family="decoder_lm",
        config=_config,
        description=(
            f"decoder-only LM (Llama-style), {_config.num_layers} layers, d "
            f"{_config.hidden_dim}, SwiGLU {_config.intermediate_dim}, {_config.num_heads} "
            f"heads on {_config.num_key_value_heads} key/value heads, RoPE"
        ),
        reference=REFERENCE,
    )
