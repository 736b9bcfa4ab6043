"""keras-hub's decoder-only backbones as zoo models: `from_keras_hub` (issue 50).

keras-hub's ``LlamaBackbone``, ``Llama3Backbone``, ``MistralBackbone``, ``QwenBackbone``
(``Qwen2Backbone``), ``GemmaBackbone`` (Gemma 1 and Gemma 2) and ``Gemma3Backbone`` (text
only) become a
`keras_posenc.zoo.decoder_lm.DecoderLM` with the same numbers: every block is a
`DecoderBlock` whose attention is the library's (so its position scheme can be changed
afterwards), the weights copied one to one. Llama's, Mistral's and Qwen's kernels have our
layout (keras-hub's ``EinsumDense`` projections are ``(hidden, heads, head_dim)`` and
``(heads, head_dim, hidden)``); Gemma's query, key and value kernels are ``(heads, hidden,
head_dim)`` and are transposed, and its norms, ``x * (1 + scale)``, get 1 added to their
scales. ``T5Backbone`` goes to `from_keras_hub_t5`.

A backbone from a preset (``keras_hub.models.GemmaBackbone.from_preset(...)``: a handle
where keras-hub can download it, or a preset folder written by ``save_to_preset``, offline)
converts the same way.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import numpy as np

from keras_posenc._quiet import quiet_import
from keras_posenc.layers.rotary import RotaryPositions
from keras_posenc.zoo.decoder_lm import DecoderLM

__all__ = ["from_keras_hub", "from_keras_hub_decoder", "from_keras_hub_preset"]

# keras-hub's decoder backbones this module converts, by class name (a subclass such as
# Llama3Backbone is matched through its bases), and the family whose rules convert each.
# Qwen2Backbone is another name of QwenBackbone's class.
FAMILIES = {
    "LlamaBackbone": "llama",
    "MistralBackbone": "llama",
    "QwenBackbone": "qwen",
    "GemmaBackbone": "gemma",
    "Gemma3Backbone": "gemma3",
}
DECODERS = tuple(FAMILIES)
_NAMES = (
    "LlamaBackbone, Llama3Backbone, MistralBackbone, QwenBackbone, GemmaBackbone or Gemma3Backbone"
)

# The special ids of keras-hub's tokenizers (pad, bos, eos): Llama's and Mistral's
# SentencePiece ``<unk>``/``<s>``/``</s>`` are 0, 1, 2; Gemma's ``<pad>`` 0, ``<eos>`` 1,
# ``<bos>`` 2 (keras_hub/src/models/gemma/gemma_tokenizer.py). Qwen's tokenizer pads with 0,
# has no start token and ends with ``<|endoftext|>`` (151643, where the vocabulary holds it).
_SPECIAL_IDS = {"llama": (0, 1, 2), "qwen": (0, 1, 2), "gemma": (0, 2, 1), "gemma3": (0, 2, 1)}
_QWEN_END_OF_TEXT = 151643


# keras-hub's encoder backbones and their converters (module, function in
# keras_posenc.convert): models of token ids or images, which take no tokenizer.
_ENCODERS = {
    "DebertaV3Backbone": ("keras_hub_deberta", "from_keras_hub_deberta_v3"),
    "RoformerV2Backbone": ("keras_hub_roformer", "from_keras_hub_roformer_v2"),
    "SwinTransformerBackbone": ("keras_hub_swin", "from_keras_hub_swin"),
}


def _class_names(obj: Any) -> list[str]:
    return [cls.__name__ for cls in type(obj).__mro__]


def _family(backbone: Any) -> str | None:
    for name in _class_names(backbone):
        if name in FAMILIES:
            return FAMILIES[name]
    return None


def from_keras_hub(backbone: Any, **kwargs: Any) -> Any:
    """A zoo model equal to a keras-hub backbone: decoders (`from_keras_hub_decoder`), T5
    (`keras_posenc.convert.from_keras_hub_t5`), DeBERTa v3
    (`keras_posenc.convert.from_keras_hub_deberta_v3`) or RoFormer v2
    (`keras_posenc.convert.from_keras_hub_roformer_v2`).

    ``backbone`` may also be a keras-hub task model (``LlamaCausalLM``, ``T5Seq2SeqLM``,
    ``DebertaV3TextClassifier``, ...): its backbone converts, and a generating model's
    preprocessor's tokenizer becomes the model's (`from_keras_hub_preset` loads both from a
    preset); the encoders (DeBERTa, RoFormer) take token ids, their tokenizers stay
    keras-hub's.

    Raises:
        TypeError: for a backbone of another family, naming the families converted.

    Examples:

        >>> import keras_hub
        >>> from keras_posenc.convert import from_keras_hub
        >>> backbone = keras_hub.models.QwenBackbone(
        ...     vocabulary_size=40, num_layers=1, num_query_heads=4, num_key_value_heads=2,
        ...     hidden_dim=16, intermediate_dim=32,
        ... )
        >>> type(from_keras_hub(backbone)).__name__
        'DecoderLM'
    """
    tasks = {"CausalLM", "Seq2SeqLM", "MaskedLM", "TextClassifier", "ImageClassifier"}
    task = tasks & set(_class_names(backbone))
    # Swin's converter takes keras-hub's image classifier whole: its head converts too.
    whole = backbone if "SwinTransformerImageClassifier" in _class_names(backbone) else None
    if task:  # a keras-hub task model: its backbone, and its preprocessor's tokenizer
        tokenizer = getattr(getattr(backbone, "preprocessor", None), "tokenizer", None)
        if tokenizer is not None:
            kwargs.setdefault("tokenizer", tokenizer)
        backbone = backbone.backbone
    names = _class_names(backbone)
    for class_name, (module, function) in _ENCODERS.items():
        if class_name in names:  # an encoder: no tokenizer (an image model: none either)
            converter = getattr(importlib.import_module(f"keras_posenc.convert.{module}"), function)
            kwargs.pop("tokenizer", None)
            return converter(whole or backbone, **kwargs)
    if "T5Backbone" in names:
        from keras_posenc.convert.keras_hub_t5 import from_keras_hub_t5

        return from_keras_hub_t5(backbone, **kwargs)
    if _family(backbone) is not None:
        return from_keras_hub_decoder(backbone, **kwargs)
    raise TypeError(
        f"from_keras_hub: `backbone` must be one of keras_hub's T5Backbone, "
        f"DebertaV3Backbone, RoformerV2Backbone, SwinTransformerBackbone, {_NAMES}, "
        f"got {type(backbone).__name__}."
    )


def _rotary(config: dict) -> RotaryPositions:
    """keras-hub's rope arguments as a `RotaryPositions` (the same rotation: half-split pairs).

    keras-hub's Llama rotary (``LlamaRotaryEmbedding``, 0.32) computes its frequencies
    without ``rope_position_scaling_factor`` (its ``_get_inverse_freq`` replaces the one that
    divides by it), so a Llama backbone's numbers do not depend on it and neither do ours:
    a factor other than 1 is warned about. Mistral's and Qwen's ``rope_scaling_factor`` is
    linear (keras-hub's ``RotaryEmbedding``).
    """
    wavelength = float(config.get("rope_max_wavelength", 10000))
    ignored = config.get("rope_position_scaling_factor", 1.0)
    if ignored not in (None, 1, 1.0):
        warnings.warn(
            f"from_keras_hub_decoder: the backbone's rope_position_scaling_factor={ignored} "
            f"is not applied by keras-hub's Llama rotary (0.32), so the converted model "
            f"does not apply it either (its numbers equal the backbone's).",
            UserWarning,
            stacklevel=4,
        )
    adjustment = config.get("rope_frequency_adjustment_factor")
    if adjustment is not None:  # Llama 3.1's frequency ramp
        return RotaryPositions(
            max_wavelength=wavelength,
            scaling="llama3",
            scaling_factor=float(adjustment),
            low_freq_factor=float(config.get("rope_low_freq_factor") or 1.0),
            high_freq_factor=float(config.get("rope_high_freq_factor") or 4.0),
            training_length=int(config["rope_pretraining_sequence_length"]),
        )
    factor = float(config.get("rope_scaling_factor", 1.0))
    if factor == 1.0:
        return RotaryPositions(max_wavelength=wavelength)
    return RotaryPositions(max_wavelength=wavelength, scaling="linear", scaling_factor=factor)


def _llama_arguments(backbone: Any, config: dict) -> dict:
    """Llama's, Llama 3's and Mistral's: SwiGLU, rotary, Mistral's window on every layer."""
    return dict(
        intermediate_dim=config["intermediate_dim"],
        head_dim=config.get("head_dim"),
        activation="silu",
        layer_norm_epsilon=config["layer_norm_epsilon"],
        rotary=_rotary(config),
        sliding_window=config.get("sliding_window"),
        tie_word_embeddings=bool(backbone.token_embedding.tie_weights),
    )


def _qwen_arguments(backbone: Any, config: dict) -> dict:
    """Qwen's (keras_hub/src/models/qwen/): Llama's block with biased query, key and value
    projections (none on the output), tied or not, a window on every layer or none.

    keras-hub's ``QwenAttention`` (0.32) applies ``sliding_window_size`` (``p_i - W < p_j
    <= p_i``) on its own attention path only: where it takes the fused one
    (``ops.dot_product_attention`` on JAX and PyTorch) the window is dropped. The converted
    model keeps the window the backbone was given, as its own path and TensorFlow apply it.
    """
    window = config.get("sliding_window_size")
    return dict(
        intermediate_dim=config["intermediate_dim"],
        activation="silu",
        layer_norm_epsilon=config["layer_norm_epsilon"],
        rotary=_rotary(config),
        sliding_window=window if config.get("use_sliding_window_attention") else None,
        use_bias=True,
        output_bias=False,
        tie_word_embeddings=bool(backbone.token_embedding.tie_weights),
    )


def _gemma_arguments(backbone: Any, config: dict) -> dict:
    """Gemma's and Gemma 2's (keras_hub/src/models/gemma/), as keras-hub 0.32 builds them.

    - The MLP: GeGLU (``gelu(x, approximate=True)``, our ``"gelu_tanh"``) on two kernels of
      ``intermediate_dim // 2`` each (``ffw_gating`` and ``ffw_gating_2``).
    - Rotary of base 10,000 whatever the config; Gemma's interleaving of the turned halves is
      one permutation of the queries' and keys' features, which leaves the logits as they are
      (docs/guides/decoder-attention.md).
    - ``use_sliding_window_attention``: layer ``i`` is local when ``i`` is even
      (``GemmaBackbone``), our ``global_every=2``; the window ``p_i - W < p_j <= p_i``.
    - The query scale: ``GemmaDecoderBlock`` builds its attention with
      ``query_head_dim_normalize=True`` whatever the backbone is given, so the queries are
      scaled by ``1 / sqrt(head_dim)``; read from the built attention, so a keras-hub that
      honours ``False`` converts to ``query_scale_dim = hidden_dim // num_query_heads``.
    - The blocks' norms keep ``GemmaDecoderBlock``'s default epsilon (the backbone does not
      pass its own), the final norm the backbone's; `DecoderLM` has one epsilon: the blocks'.
    - The embedding times ``sqrt(hidden_dim)`` (in float32, then in the compute dtype, as
      ours), the output tied, optionally capped (``final_logit_soft_cap``).
    """
    attention = backbone.transformer_layers[0].attention
    query_scale_dim = None
    if not attention.query_head_dim_normalize:
        query_scale_dim = config["hidden_dim"] // config["num_query_heads"]
    elif config.get("query_head_dim_normalize") is False:
        warnings.warn(
            "from_keras_hub_decoder: the backbone's query_head_dim_normalize=False is not "
            "applied by keras-hub's Gemma blocks (0.32's GemmaDecoderBlock and "
            "Gemma3DecoderBlock scale queries by 1 / sqrt(head_dim)), so the converted "
            "model does not apply it either (its numbers equal the backbone's).",
            UserWarning,
            stacklevel=3,
        )
    epsilon = float(backbone.transformer_layers[0].layer_norm_epsilon)
    final_epsilon = float(backbone.layer_norm.epsilon)
    if final_epsilon != epsilon:
        warnings.warn(
            f"from_keras_hub_decoder: the backbone's final norm has epsilon {final_epsilon}, "
            f"its blocks {epsilon} (keras-hub's Gemma backbones do not pass "
            f"layer_norm_epsilon to their blocks); the converted model uses {epsilon} in every "
            f"norm, so its logits differ slightly from the backbone's.",
            UserWarning,
            stacklevel=3,
        )
    window = config.get("sliding_window_size")
    local = bool(config.get("use_sliding_window_attention"))
    return dict(
        intermediate_dim=config["intermediate_dim"] // 2,
        head_dim=config["head_dim"],
        activation="gelu_tanh",
        layer_norm_epsilon=epsilon,
        rotary=RotaryPositions(max_wavelength=10000.0),
        sliding_window=window if local else None,
        global_every=2 if local else None,
        logit_soft_cap=config.get("attention_logit_soft_cap"),
        query_scale_dim=query_scale_dim,
        use_post_attention_norm=bool(config.get("use_post_attention_norm")),
        use_post_feedforward_norm=bool(config.get("use_post_ffw_norm")),
        final_logit_soft_cap=config.get("final_logit_soft_cap"),
        scale_embeddings=True,
        tie_word_embeddings=True,
    )


def _linear_rotary(wavelength: float, factor: float) -> RotaryPositions:
    """keras-hub's ``RotaryEmbedding(max_wavelength, scaling_factor)``: positions / factor."""
    if float(factor) == 1.0:
        return RotaryPositions(max_wavelength=wavelength)
    return RotaryPositions(
        max_wavelength=wavelength, scaling="linear", scaling_factor=float(factor)
    )


def _gemma3_arguments(backbone: Any, config: dict) -> dict:
    """Gemma 3's (keras_hub/src/models/gemma3/), text only: Gemma 2's rules (the query scale
    and the blocks' epsilon read from the built blocks) with

    - the MLP's two kernels of ``intermediate_dim`` each (``gate_dim_reduction=1``);
    - ``use_query_key_norm``: Gemma norms over each head's queries and keys before rotary,
      our ``query_key_norm="rms"`` (their epsilon ``1e-6``: the attention's default, which
      ``Gemma3DecoderBlock`` does not pass on);
    - ``use_sliding_window_attention``: layer ``i`` local when ``i % 6 < 5``, our
      ``global_every=6``; rotary of base 10,000 scaled by ``local_rope_scaling_factor`` in
      the local layers, 1,000,000 by ``global_rope_scaling_factor`` in the global ones
      (``global_rotary``); without the window every layer is global.

    Raises:
        ValueError: for a backbone with a vision encoder, an embedding model's pooling or
            bidirectional attention.
    """
    refused = {
        "vision_encoder": getattr(backbone, "vision_encoder", None) is not None,
        "is_embedding_model": bool(config.get("is_embedding_model")),
        "use_bidirectional_attention": bool(config.get("use_bidirectional_attention")),
    }
    if any(refused.values()):
        raise ValueError(
            f"from_keras_hub_decoder: a Gemma3Backbone converts as a causal text-only "
            f"decoder: no vision_encoder, is_embedding_model=False and "
            f"use_bidirectional_attention=False; got "
            f"{', '.join(name for name, bad in refused.items() if bad)}."
        )
    arguments = _gemma_arguments(backbone, config)
    local = _linear_rotary(10000.0, config.get("local_rope_scaling_factor", 1.0))
    global_ = _linear_rotary(1e6, config.get("global_rope_scaling_factor", 1.0))
    windowed = bool(config.get("use_sliding_window_attention"))
    arguments.update(
        intermediate_dim=config["intermediate_dim"],
        query_key_norm="rms" if config.get("use_query_key_norm") else None,
        rotary=local if windowed else global_,
        global_every=6 if windowed else None,
        global_rotary=global_ if windowed else None,
    )
    return arguments


_ARGUMENTS = {
    "llama": _llama_arguments,
    "qwen": _qwen_arguments,
    "gemma": _gemma_arguments,
    "gemma3": _gemma3_arguments,
}


def from_keras_hub_decoder(
    backbone: Any,
    pad_id: int | None = None,
    bos_id: int | None = None,
    eos_id: int | None = None,
    name: str | None = None,
    tokenizer: Any = None,
) -> DecoderLM:
    """A `DecoderLM` equal to keras-hub's ``LlamaBackbone``, ``Llama3Backbone``,
    ``MistralBackbone``, ``QwenBackbone``, ``GemmaBackbone`` (Gemma 1 and Gemma 2) or
    ``Gemma3Backbone`` (text only): its logits are the backbone's sequence output times the
    embedding, or its reverse embedding when untied, soft-capped where Gemma 2 caps them, as
    keras-hub's ``CausalLM`` computes them.

    What each family maps to: Llama's and Mistral's SwiGLU blocks (Mistral's
    ``sliding_window`` on every layer); Qwen's with ``use_bias=True, output_bias=False`` and
    its ``sliding_window_size`` on every layer when ``use_sliding_window_attention``; Gemma's
    GeGLU blocks (``"gelu_tanh"``, ``intermediate_dim // 2``), ``head_dim``,
    ``scale_embeddings``, Gemma 2's ``use_post_attention_norm``, ``use_post_ffw_norm``
    (``use_post_feedforward_norm``), ``attention_logit_soft_cap`` (``logit_soft_cap``),
    ``final_logit_soft_cap`` and the window on even layers (``global_every=2``); Gemma 3's
    ``intermediate_dim`` kernels, ``use_query_key_norm`` (``query_key_norm="rms"``), one
    global layer in six (``global_every=6``) with its own rotary (``global_rotary``: base
    1,000,000, ``global_rope_scaling_factor``) and the local ones' (base 10,000,
    ``local_rope_scaling_factor``). In a
    ``"bfloat16"`` policy (bfloat16 variables) Gemma's norm scales ``1 + s`` are rounded to
    bfloat16 here, where keras-hub adds 1 in float32: equal in ``"float32"`` and
    ``"mixed_bfloat16"``.

    Args:
        backbone: the built keras-hub backbone.
        pad_id: the padding id; None: keras-hub's tokenizer's (Llama, Mistral, Qwen and
            Gemma: 0). Generation never produces it.
        bos_id: the start id; None: the tokenizer's (Llama and Mistral: 1; Gemma: 2; Qwen
            has none: 1). Generation never produces it.
        eos_id: the end id; None: the tokenizer's (Llama and Mistral: 2; Gemma: 1; Qwen:
            ``<|endoftext|>``, 151643, where the vocabulary holds it, else 2).
        name: the model's name (default: the backbone's).
        tokenizer: the backbone's keras-hub tokenizer (e.g.
            ``keras_hub.models.Tokenizer.from_preset(folder)``), so that ``generate``
            takes and returns text as keras-hub's ``CausalLM`` does; the special ids not
            given are then the tokenizer's. None: token ids only.

    Returns:
        The `DecoderLM`, weights copied, in the backbone's dtype policy.

    Raises:
        TypeError: for another backbone.
        ValueError: for a Gemma 3 with a vision encoder, pooling or bidirectional attention.

    Examples:

        >>> import keras_hub, numpy as np
        >>> from keras_posenc.convert import from_keras_hub
        >>> backbone = keras_hub.models.MistralBackbone(
        ...     vocabulary_size=40, num_layers=2, num_query_heads=4, num_key_value_heads=2,
        ...     hidden_dim=16, intermediate_dim=32, sliding_window=4,
        ... )
        >>> model = from_keras_hub(backbone)
        >>> model.sliding_window, model.transformer_layers[0].attention.num_key_value_heads
        (4, 2)

        Gemma 2: local layers (the even ones) with a rolling cache of the window, the
        global ones with a cache of the whole length:

        >>> gemma2 = keras_hub.models.GemmaBackbone(
        ...     vocabulary_size=40, num_layers=2, num_query_heads=4, num_key_value_heads=2,
        ...     hidden_dim=16, intermediate_dim=64, head_dim=8, use_post_ffw_norm=True,
        ...     use_post_attention_norm=True, attention_logit_soft_cap=50.0,
        ...     final_logit_soft_cap=30.0, use_sliding_window_attention=True,
        ...     sliding_window_size=4,
        ... )
        >>> model = from_keras_hub(gemma2)
        >>> model.transformer_layers[0].intermediate_dim, model.bos_id, model.eos_id
        (32, 2, 1)
        >>> [tuple(c.shape) for c in model.init_cache(1, 100)]
        [(1, 2, 4, 2, 8), (1, 2, 100, 2, 8)]
    """
    family = _family(backbone)
    if family is None:
        raise TypeError(
            f"from_keras_hub_decoder: `backbone` must be keras_hub's {_NAMES}, got "
            f"{type(backbone).__name__}."
        )
    config = backbone.get_config()
    defaults = _SPECIAL_IDS[family]
    if family == "qwen" and config["vocabulary_size"] > _QWEN_END_OF_TEXT:
        defaults = (0, 1, _QWEN_END_OF_TEXT)
    if tokenizer is not None:  # its ids where it has them (Qwen's has no start token)
        found = [getattr(tokenizer, f"{k}_token_id", None) for k in ("pad", "start", "end")]
        defaults = tuple(d if f is None else int(f) for f, d in zip(found, defaults))
    given = (pad_id, bos_id, eos_id)
    ids = [default if value is None else value for value, default in zip(given, defaults)]
    model = DecoderLM(
        vocab_size=config["vocabulary_size"],
        hidden_dim=config["hidden_dim"],
        num_heads=config["num_query_heads"],
        num_layers=config["num_layers"],
        num_key_value_heads=config["num_key_value_heads"],
        dropout=float(config.get("dropout") or 0.0),
        pad_id=ids[0],
        bos_id=ids[1],
        eos_id=ids[2],
        name=name or backbone.name,
        dtype=backbone.dtype_policy,
        tokenizer=tokenizer,
        **_ARGUMENTS[family](backbone, config),
    )
    _copy_weights(backbone, model, family)
    return model


def from_keras_hub_preset(preset: str, **kwargs: Any) -> Any:
    """A zoo model and its tokenizer from a keras-hub preset: a folder written by
    ``save_to_preset`` (offline), or a handle (``"kaggle://..."``, ``"hf://..."``, a preset
    name) where keras-hub can download it.

    keras-hub loads the backbone (``keras_hub.models.Backbone.from_preset``) and, where the
    preset has one, its tokenizer (``keras_hub.models.Tokenizer.from_preset``); both go to
    `from_keras_hub`. ``kwargs`` are `from_keras_hub_decoder`'s (or
    `keras_posenc.convert.from_keras_hub_t5`'s).

    Raises:
        ValueError: for a preset keras-hub cannot find (one line, naming it), or whose
            tokenizer (``tokenizer.json``) needs a file that is missing.
        TypeError: for a preset of another family.

    Examples:

        >>> import keras_hub, tempfile, os
        >>> backbone = keras_hub.models.LlamaBackbone(
        ...     vocabulary_size=40, num_layers=1, num_query_heads=2, num_key_value_heads=1,
        ...     hidden_dim=8, intermediate_dim=16,
        ... )
        >>> folder = os.path.join(tempfile.mkdtemp(), "preset")
        >>> backbone.save_to_preset(folder)
        >>> model = from_keras_hub_preset(folder)
        >>> type(model).__name__, model.tokenizer is None  # this preset has no tokenizer
        ('DecoderLM', True)
    """
    keras_hub = quiet_import("keras_hub")
    try:
        backbone = keras_hub.models.Backbone.from_preset(preset)
    except (FileNotFoundError, ValueError, OSError) as error:
        raise ValueError(
            f"from_keras_hub_preset: `preset` must be a folder written by save_to_preset or "
            f"a preset handle keras-hub can download, got {preset!r} "
            f"({type(error).__name__}: {' '.join(str(error).split()).split('. ')[0]})."
        ) from error
    if set(_ENCODERS) & set(_class_names(backbone)):  # no tokenizer to look for
        return from_keras_hub(backbone, **kwargs)
    try:  # a preset may have no tokenizer: then the model takes token ids only
        tokenizer = keras_hub.models.Tokenizer.from_preset(preset)
    except FileNotFoundError as error:
        # keras-hub names the missing file first: "`tokenizer.json` doesn't exist in preset
        # directory ..." is a preset without a tokenizer; any other file (the vocabulary in
        # assets/tokenizer/) is a tokenizer whose files are missing, which must not load as
        # a model of token ids only.
        missing = str(error).split(" doesn't exist")[0].strip("`'\" ")
        if missing != "tokenizer.json":
            raise ValueError(
                f"from_keras_hub_preset: the tokenizer of {preset!r} needs {missing!r}, which "
                "is missing; copy the preset folder whole (assets/ included) or write it "
                "again with save_to_preset."
            ) from error
        tokenizer = None
    if tokenizer is not None:
        kwargs.setdefault("tokenizer", tokenizer)
    return from_keras_hub(backbone, **kwargs)


# keras-hub's weight paths within a block (its checkpoints' names:
# keras_hub/src/models/llama/llama_decoder.py, mistral/mistral_transformer_decoder.py,
# qwen/qwen_decoder.py, gemma/gemma_decoder_block.py) -> ours; read by path, so no private
# attribute of keras-hub's layers is touched.
_LLAMA_BLOCK = {
    "self_attention/query/kernel": "attention/query/kernel",
    "self_attention/key/kernel": "attention/key/kernel",
    "self_attention/value/kernel": "attention/value/kernel",
    "self_attention/attention_output/kernel": "attention/attention_output/kernel",
    "self_attention_layernorm/scale": "attention_norm/scale",
    "feedforward_gate_dense/kernel": "gate/kernel",
    "feedforward_intermediate_dense/kernel": "up/kernel",
    "feedforward_output_dense/kernel": "down/kernel",
    "feedforward_layernorm/scale": "feedforward_norm/scale",
}
_QWEN_BLOCK = {
    **_LLAMA_BLOCK,
    "self_attention/query/bias": "attention/query/bias",
    "self_attention/key/bias": "attention/key/bias",
    "self_attention/value/bias": "attention/value/bias",
}
_GEMMA_BLOCK = {
    "attention/query/kernel": "attention/query/kernel",
    "attention/key/kernel": "attention/key/kernel",
    "attention/value/kernel": "attention/value/kernel",
    "attention/attention_output/kernel": "attention/attention_output/kernel",
    "pre_attention_norm/scale": "attention_norm/scale",
    "post_attention_norm/scale": "post_attention_norm/scale",
    "pre_ffw_norm/scale": "feedforward_norm/scale",
    "post_ffw_norm/scale": "post_feedforward_norm/scale",
    "ffw_gating/kernel": "gate/kernel",  # the GELU's input
    "ffw_gating_2/kernel": "up/kernel",
    "ffw_linear/kernel": "down/kernel",
}
_GEMMA3_BLOCK = {
    **_GEMMA_BLOCK,
    "attention/query_norm/scale": "attention/query_norm/scale",
    "attention/key_norm/scale": "attention/key_norm/scale",
}
# family -> (its blocks' prefix, its block weights, its top-level weights renamed).
_PATHS = {
    "llama": ("transformer_layer_", _LLAMA_BLOCK, {}),
    "qwen": ("transformer_layer_", _QWEN_BLOCK, {}),
    "gemma": (
        "decoder_block_",
        _GEMMA_BLOCK,
        {"final_normalization/scale": "sequence_output_layernorm/scale"},
    ),
    "gemma3": (
        "decoder_block_",
        _GEMMA3_BLOCK,
        {"final_normalization/scale": "sequence_output_layernorm/scale"},
    ),
}
# Gemma's projections into heads: (heads, hidden, head_dim) there, (hidden, heads, head_dim)
# here (keras_hub/src/models/gemma/gemma_attention.py's "btd,ndh->btnh").
_HEADS_FIRST = ("attention/query/kernel", "attention/key/kernel", "attention/value/kernel")


def _ours(family: str, path: str, value: np.ndarray) -> tuple[str, np.ndarray]:
    """Our path and value for keras-hub's weight ``path`` of ``family``."""
    prefix, block, top = _PATHS[family]
    layer, _, rest = path.partition("/")
    if not (layer.startswith(prefix) and rest in block):
        ours = top.get(path, path)
    else:
        ours = f"transformer_layer_{layer[len(prefix) :]}/{block[rest]}"
        if family.startswith("gemma") and rest in _HEADS_FIRST:
            value = value.transpose(1, 0, 2)
    if family.startswith("gemma") and path.endswith("/scale"):
        # Gemma's RMS norm multiplies by 1 + scale, computed in float32
        # (keras_hub/src/models/gemma/rms_normalization.py); Keras's by the scale.
        value = value.astype("float32") + np.float32(1.0)
    return ours, value


def _copy_weights(backbone: Any, model: DecoderLM, family: str) -> None:
    ours = {weight.path: weight for weight in model.weights}
    theirs = dict(
        _ours(family, weight.path, np.asarray(weight.numpy())) for weight in backbone.weights
    )
    if set(ours) != set(theirs):
        raise ValueError(
            f"from_keras_hub_decoder: the weights do not match: keras-hub's "
            f"{sorted(set(theirs) - set(ours))} have no counterpart, ours "
            f"{sorted(set(ours) - set(theirs))} no source."
        )
    for path, weight in ours.items():
        value = theirs[path]
        if tuple(value.shape) != tuple(weight.shape):
            raise ValueError(
                f"from_keras_hub_decoder: {path!r} has shape {tuple(value.shape)} in the "
                f"backbone, {tuple(weight.shape)} here."
            )
        weight.assign(value)
