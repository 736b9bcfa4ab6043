"""keras-hub's ``Seq2SeqLM`` and ``CausalLM`` over the zoo's generating models.

The zoo's encoder-decoders (:class:`~keras_posenc.zoo.seq2seq.Seq2SeqModel`) and language
models (:class:`~keras_posenc.zoo.language_model.LanguageModel`) are functional models that
end in logits: their output projection is inside the graph (tied to the token embedding in
Shaw's Transformer, T5, MUSE and the tied DecoderLMs), and their decoding contract
(``encode``, ``init_cache``, ``decode_step``) reads the same layers. So the **backbone keeps
the logits**: a family's backbone is the whole zoo network (keras-hub's text backbones stop at
hidden states and their tasks apply the tied embedding; splitting ours would mean a second
copy of every family's decoding contract), and the task adds no layer: ``task(x)`` is the
backbone's logits, its ``generate`` runs the zoo's decoding (:mod:`keras_posenc.generation`,
the one implementation of greedy search, sampling and beam search) on the backbone's network.

keras-hub's ``generate`` (``Seq2SeqLM.generate`` / ``CausalLM.generate``) calls
``preprocessor.generate_preprocess`` -> ``generate_step`` -> ``preprocessor.generate_postprocess``;
the tasks here override ``generate_step`` (and ``make_generate_function``: the zoo's searches
compile their own step) and add the zoo's search options to ``generate`` (``beam_size``,
``length_penalty``, ``seed``, ...). A sampler given to ``compile(sampler=...)`` is used by
``generate``; without one the search is greedy. The preprocessors pack texts as the zoo
models' own ``generate`` does (keras_posenc/zoo/text.py), so both give the same text.
"""

from __future__ import annotations

from typing import Any

import keras
import keras_hub
import numpy as np

from keras_posenc import tokenizers
from keras_posenc.models._backbone import ZooBackbone, copy_weights
from keras_posenc.zoo.registry import get_spec
from keras_posenc.zoo.text import TextModel

__all__ = [
    "TextBackbone",
    "ZooCausalLM",
    "ZooCausalLMPreprocessor",
    "ZooSeq2SeqLM",
    "ZooSeq2SeqLMPreprocessor",
]

_SEARCH_OPTIONS = (
    "beam_size",
    "length_penalty",
    "seed",
    "min_length",
    "no_repeat_ngram_size",
)


class TextBackbone(ZooBackbone):
    """A generating family's backbone: :class:`~keras_posenc.models.ZooBackbone`, and the
    zoo builders whose names it builds (:attr:`zoo_builders`: a family of the zoo may hold
    several models, ConvS2S's encoder-decoders and its language model)."""

    #: The zoo builders of the names ``from_zoo`` accepts (empty: every name of the family).
    zoo_builders: tuple = ()

    @classmethod
    def zoo_arguments(cls, name: str, **overrides: Any) -> tuple[dict, dict]:
        spec = get_spec(name)
        if spec.family == cls.family and cls.zoo_builders and spec.builder not in cls.zoo_builders:
            raise ValueError(
                f"{cls.__name__}.from_zoo: {name!r} is a {spec.family!r} model of another "
                f"kind ({getattr(spec.builder, '__name__', spec.builder)}); this backbone "
                f"builds {[getattr(b, '__name__', b) for b in cls.zoo_builders]}'s."
            )
        return super().zoo_arguments(name, **overrides)


def _is_text(x: Any) -> bool:
    """Whether ``x`` is text for a preprocessor: strings, or a dict of them."""
    if isinstance(x, dict):
        return any(tokenizers.as_texts(v) is not None for v in x.values())
    return tokenizers.as_texts(x) is not None


def _as_numpy(x: Any) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x))


class _ZooGenerating:
    """What both tasks share: the backbone's logits as the task's output, the zoo's search
    options on ``generate``, and ``from_zoo``."""

    #: The family's preprocessor class (``from_zoo`` builds one around a tokenizer).
    preprocessor_cls: Any = None

    def _init_task(self, backbone: Any, preprocessor: Any, kwargs: dict) -> dict:
        self.backbone = backbone
        self.preprocessor = preprocessor
        inputs = backbone.input
        return dict(inputs=inputs, outputs=backbone(inputs), **kwargs)

    def fit(self, x: Any = None, y: Any = None, *args: Any, **kwargs: Any) -> Any:
        """keras-hub's ``fit``; texts (a Seq2SeqLM's ``{"encoder_text", "decoder_text"}``, a
        CausalLM's strings) are packed by the preprocessor first, eagerly, in Python (it
        cannot run inside keras-hub's ``tf.data`` pipeline); token ids train as they are."""
        if self.preprocessor is not None and _is_text(x):
            x, y, weights = self.preprocessor(x)
            kwargs["sample_weight"] = weights
        return super().fit(x, y, *args, **kwargs)

    def preprocess_samples(self, x: Any, y: Any = None, sample_weight: Any = None) -> Any:
        # Texts were packed by `fit`: what reaches keras-hub's pipeline is token ids. The
        # backbone's inputs only (a dict with more keys would be matched by position).
        names = self.backbone.input
        if isinstance(x, dict) and isinstance(names, dict):
            x = {name: x[name] for name in names if name in x}
        elif isinstance(x, dict) and names.name in x:  # a CausalLM's token_ids
            x = x[names.name]
        return keras.utils.pack_x_y_sample_weight(x, y, sample_weight)

    def compile(
        self,
        optimizer: Any = "auto",
        loss: Any = "auto",
        *,
        weighted_metrics: Any = "auto",
        sampler: Any = "greedy",
        **kwargs: Any,
    ) -> None:
        """keras-hub's ``compile``, with greedy search as ``generate``'s default (the zoo
        models' ``generate`` default; keras-hub's is ``"top_k"``)."""
        super().compile(
            optimizer, loss, weighted_metrics=weighted_metrics, sampler=sampler, **kwargs
        )

    def make_generate_function(self) -> Any:
        # The zoo's searches compile their own step per model (keras_posenc/generation/
        # compiled.py); the search itself runs in Python (beam search's bookkeeping).
        self.generate_function = self.generate_step
        return self.generate_function

    def generate(
        self,
        inputs: Any,
        max_length: int | None = None,
        stop_token_ids: Any = "auto",
        strip_prompt: bool = False,
        **search: Any,
    ) -> Any:
        """keras-hub's ``generate`` (text in, text out with a preprocessor; the backbone's
        inputs without), with the zoo's search options: ``beam_size``, ``length_penalty``,
        ``seed``, ``min_length`` and ``no_repeat_ngram_size``
        (:func:`keras_posenc.generation.generate`). The sampler is ``compile``'s, and the
        search greedy without one.

        Raises:
            TypeError: an unknown search option.
            ValueError: ``stop_token_ids`` other than the model's end id (the zoo's
                searches stop at ``eos_id``), or what the search refuses.
        """
        unknown = sorted(set(search) - set(_SEARCH_OPTIONS))
        if unknown:
            raise TypeError(
                f"{type(self).__name__}.generate: unknown arguments {unknown}; the search "
                f"options are {list(_SEARCH_OPTIONS)}."
            )
        self._search = search
        try:
            return super().generate(inputs, max_length, stop_token_ids, strip_prompt)
        finally:
            self._search = {}

    def _search_arguments(self, stop_token_ids: Any) -> dict:
        network = self.backbone.network
        if stop_token_ids is None or {int(i) for i in stop_token_ids} != {network.eos_id}:
            raise ValueError(
                f"{type(self).__name__}.generate: `stop_token_ids` must be 'auto' or "
                f"[{network.eos_id}] (the zoo's searches stop at the model's eos_id), got "
                f"{stop_token_ids!r}."
            )
        sampler = getattr(self, "sampler", None)
        if isinstance(sampler, keras_hub.samplers.GreedySampler):
            sampler = None
        return {"sampler": sampler, **getattr(self, "_search", {})}

    @classmethod
    def from_zoo(
        cls, name: str, weights: Any = None, *, tokenizer: Any = "auto", **overrides: Any
    ) -> Any:
        """The task of the zoo's named configuration ``name``, with the weights
        ``zoo.create(name, weights=weights, **overrides)`` loads (None: fresh ones), so
        that ``task(x)`` equals the zoo model's call.

        Args:
            name: a name of the family in ``zoo.list_models()``.
            weights: as ``zoo.create``'s: a shipped tag, a ``.weights.h5`` or ``.keras``
                file, a preset source, or None.
            tokenizer: the preprocessor's keras-hub tokenizer; ``"auto"``: the zoo model's
                (as the family's tokenizer class), or the shipped preset's vocabulary;
                None: no preprocessor (``generate`` on token ids).
            **overrides: configuration fields, as in ``zoo.create``.

        Raises:
            ValueError: see ``zoo.create`` and the backbone's ``zoo_arguments``.
        """
        from keras_posenc import zoo
        from keras_posenc.zoo import shipped

        changed = overrides
        if weights is not None and shipped.is_tag(weights):
            changed = {**shipped.shipped_weights(name, weights)[1], **overrides}
        # First: a name of another family fails before its model is built.
        arguments, _ = cls.backbone_cls.zoo_arguments(name, **changed)
        model = zoo.create(name, weights=weights, **overrides)
        backbone = cls.backbone_cls(**arguments)
        copy_weights(model, backbone, f"{cls.__name__}.from_zoo({name!r})")
        if isinstance(tokenizer, str) and tokenizer == "auto":
            tokenizer = cls.zoo_tokenizer(name, weights, model)
        preprocessor = None if tokenizer is None else cls.preprocessor_cls(tokenizer)
        return cls(backbone=backbone, preprocessor=preprocessor)

    def to_zoo(self) -> keras.Model:
        """The zoo's model of the backbone's configuration with the task's weights; a
        translation task's model gets its tokenizer's pipeline as ``model.preprocessor``
        (what the zoo's ``translate`` reads: keras_posenc/models/translation.py)."""
        backbone = self.backbone
        model = backbone.build_network(**backbone.network_config, name=backbone.name)
        copy_weights(backbone, model, f"{type(self).__name__}.to_zoo")
        pipeline = getattr(getattr(self.preprocessor, "tokenizer", None), "pipeline", None)
        if pipeline is not None:
            model.preprocessor = pipeline
        return model

    @classmethod
    def zoo_tokenizer(cls, name: str, weights: Any, model: Any) -> Any:
        """The tokenizer ``from_zoo`` gives the preprocessor by default: the zoo model's
        (a byte tokenizer as the family's keras-hub class), else None."""
        held = getattr(model, "tokenizer", None)
        if isinstance(held, tokenizers.ByteTokenizer):
            return cls.preprocessor_cls.tokenizer_cls()
        return held


class ZooSeq2SeqLMPreprocessor(TextModel, keras_hub.models.Seq2SeqLMPreprocessor):
    """A zoo encoder-decoder's keras-hub preprocessor: texts to ids and back.

    Packs as the zoo models' ``generate`` and ``preprocess_text_pairs`` do
    (keras_posenc/zoo/text.py, after keras-hub's ``T5Preprocessor``): a source is its tokens
    and the end token, right-padded with the padding id; a target starts with the decoder
    start id. ``encoder_sequence_length`` None pads to the longest source (the zoo's way);
    ``decoder_sequence_length`` is ``generate``'s default ``max_length`` (the decoder start
    included). Eager Python on every backend.

    Args:
        tokenizer: a keras-hub tokenizer with ``pad_token_id`` and ``end_token_id``.
        encoder_sequence_length: None, or the packed sources' length.
        decoder_sequence_length: the targets' length (64).
        decoder_start_id: the id every target starts with; None: the tokenizer's start
            token (T5's is its padding id, 0).
        **kwargs: keras-hub ``Preprocessor`` arguments.
    """

    def __init__(
        self,
        tokenizer: Any,
        encoder_sequence_length: int | None = None,
        decoder_sequence_length: int = 64,
        decoder_start_id: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(tokenizer, encoder_sequence_length, decoder_sequence_length, **kwargs)
        self.decoder_start_id = decoder_start_id

    # The ids TextModel's packing reads.
    @property
    def pad_id(self) -> int:
        return int(self.tokenizer.pad_token_id)

    @property
    def eos_id(self) -> int:
        return int(self.tokenizer.end_token_id)

    @property
    def bos_id(self) -> int:
        start = self.decoder_start_id
        return int(self.tokenizer.start_token_id if start is None else start)

    def build(self, input_shape: Any) -> None:
        self.built = True  # no packer layers: TextModel packs

    def call(self, x: Any, y: Any = None, sample_weight: Any = None, **lengths: Any) -> Any:
        """``(x, y, sample_weight)`` for ``fit`` from ``{"encoder_text", "decoder_text"}``
        (``TextModel.preprocess_text_pairs``)."""
        if getattr(self.tokenizer, "pipeline", None) is not None:
            # A translation tokenizer (keras_posenc/models/translation.py) tokenizes in the
            # source language only: the targets would get source ids.
            raise TypeError(
                f"{type(self).__name__}: packing text pairs for `fit` is not supported with "
                f"a translation tokenizer ({type(self.tokenizer).__name__}); pass token ids."
            )
        encoder = lengths.get("encoder_sequence_length", self.encoder_sequence_length)
        decoder = lengths.get("sequence_length") or lengths.get(
            "decoder_sequence_length", self.decoder_sequence_length
        )
        return self.preprocess_text_pairs(x, encoder, decoder)

    def generate_preprocess(
        self, x: Any, sequence_length: int | None = None, **lengths: Any
    ) -> dict:
        """The sources of ``x`` (a string, a list of strings, or ``{"encoder_text": ...}``
        with an empty ``decoder_text``) packed for ``generate_step``."""
        who = f"{type(self).__name__}.generate_preprocess"
        if isinstance(x, dict):
            prompts = tokenizers.as_texts(x.get("decoder_text", "")) or []
            if any(prompts):
                raise ValueError(f"{who}: decoder prompts are not supported; give sources only.")
            x = x.get("encoder_text")
        texts = tokenizers.as_texts(_python(x))
        if texts is None:
            raise TypeError(
                f"{who}: `x` must be a string or a list of strings, got {type(x).__name__}."
            )
        encoder = self.encode_texts(texts, "generate")
        length = lengths.get("encoder_sequence_length", self.encoder_sequence_length)
        if length is not None:
            encoder = _fit(encoder, length, self.pad_id, self.eos_id)
        decoder_length = (
            sequence_length
            or lengths.get("decoder_sequence_length")
            or self.decoder_sequence_length
        )
        decoder = np.full((len(texts), decoder_length), self.pad_id, "int32")
        decoder[:, 0] = self.bos_id
        decoder_mask = np.zeros_like(decoder, dtype=bool)
        decoder_mask[:, 0] = True
        return {
            "encoder_token_ids": encoder,
            "encoder_padding_mask": encoder != self.pad_id,
            "decoder_token_ids": decoder,
            "decoder_padding_mask": decoder_mask,
        }

    def generate_postprocess(self, x: dict) -> list[str]:
        """The text of each generated row (cut at the end token, special tokens removed)."""
        ids = _as_numpy(x["decoder_token_ids"])
        mask = _as_numpy(x["decoder_padding_mask"]).astype(bool)
        return self.decode_texts(np.where(mask, ids, self.pad_id)[:, 1:], None)

    def get_config(self) -> dict[str, Any]:
        # keras-hub's Seq2SeqLMPreprocessor.get_config leaves the lengths out (its family
        # subclasses add them): without them a preset's generate length fell back to 64.
        return {
            **super().get_config(),
            "encoder_sequence_length": self.encoder_sequence_length,
            "decoder_sequence_length": self.decoder_sequence_length,
            "decoder_start_id": self.decoder_start_id,
        }


def _python(x: Any) -> Any:
    """A TensorFlow or numpy array of strings as Python strings (keras-hub may hand one)."""
    if hasattr(x, "numpy"):
        x = x.numpy()
    if isinstance(x, np.ndarray):
        x = [v.decode("utf-8") if isinstance(v, bytes) else v for v in x.reshape(-1).tolist()]
    return x


def _fit(ids: np.ndarray, length: int, pad: int, end: int) -> np.ndarray:
    """``ids`` right-padded (or cut, the end id kept) to ``length`` columns."""
    if ids.shape[1] >= length:
        cut = ids[:, :length].copy()
        long = (ids[:, length - 1 :] != pad).any(axis=1) & (ids.shape[1] > length)
        cut[long, -1] = end
        return cut
    return np.pad(ids, ((0, 0), (0, length - ids.shape[1])), constant_values=pad)


class ZooSeq2SeqLM(_ZooGenerating, keras_hub.models.Seq2SeqLM):
    """A zoo encoder-decoder as a keras-hub ``Seq2SeqLM`` (the module docstring).

    ``task(x)`` is the backbone's logits (``x``: ``encoder_token_ids`` and
    ``decoder_token_ids``); ``task.generate(texts)`` runs the zoo's search on the backbone's
    network. A family subclass sets ``backbone_cls`` and ``preprocessor_cls``.

    Args:
        backbone: the family's backbone.
        preprocessor: its preprocessor, or None.
        **kwargs: ``keras.Model`` arguments.
    """

    def __init__(self, backbone: Any, preprocessor: Any = None, **kwargs: Any) -> None:
        super().__init__(**self._init_task(backbone, preprocessor, kwargs))

    def generate_step(self, inputs: dict, stop_token_ids: Any = None) -> dict:
        """The search from ``inputs["encoder_token_ids"]`` for the length of
        ``inputs["decoder_token_ids"]``; returns ``decoder_token_ids`` (the start id, then
        the generated tokens) and their ``decoder_padding_mask``."""
        from keras_posenc import generation

        network = self.backbone.network
        arguments = self._search_arguments(stop_token_ids)
        source = _as_numpy(inputs["encoder_token_ids"]).astype("int32")
        source = source[:, : max(1, int((source != network.pad_id).sum(axis=1).max()))]
        length = int(keras.ops.shape(inputs["decoder_token_ids"])[1])
        tokens = generation.generate(network, source, max_length=length - 1, **arguments)
        ids = np.concatenate([np.full((len(tokens), 1), network.bos_id, "int32"), tokens], 1)
        mask = ids != network.pad_id
        mask[:, 0] = True
        return {"decoder_token_ids": ids, "decoder_padding_mask": mask}


class ZooCausalLMPreprocessor(keras_hub.models.CausalLMPreprocessor):
    """A zoo language model's keras-hub preprocessor: keras-hub's ``CausalLMPreprocessor``
    (the tokenizer's start token, the text's tokens, right-padded), on its Python path,
    with the family's tokenizer. ``sequence_length`` (64) is ``generate``'s default
    ``max_length``."""

    def __init__(self, tokenizer: Any, sequence_length: int = 64, **kwargs: Any) -> None:
        super().__init__(tokenizer, sequence_length, **kwargs)


class ZooCausalLM(_ZooGenerating, keras_hub.models.CausalLM):
    """A zoo language model as a keras-hub ``CausalLM`` (the module docstring).

    ``task(token_ids)`` is the backbone's logits; ``task.generate(prompts)`` runs the zoo's
    search on the backbone's network. A family subclass sets ``backbone_cls`` and
    ``preprocessor_cls``.

    Args:
        backbone: the family's backbone.
        preprocessor: its preprocessor, or None.
        **kwargs: ``keras.Model`` arguments.
    """

    def __init__(self, backbone: Any, preprocessor: Any = None, **kwargs: Any) -> None:
        super().__init__(**self._init_task(backbone, preprocessor, kwargs))

    def generate_step(self, inputs: dict, stop_token_ids: Any = None) -> dict:
        """The search from the prompts ``inputs["token_ids"]`` (right-padded, with their
        ``padding_mask``) to their length; returns ``token_ids`` (prompt and continuation)
        and ``padding_mask``."""
        from keras_posenc import generation

        network = self.backbone.network
        arguments = self._search_arguments(stop_token_ids)
        ids = _as_numpy(inputs["token_ids"]).astype("int32")
        mask = _as_numpy(inputs["padding_mask"]).astype(bool)
        prompt = np.where(mask, ids, network.pad_id)[:, : max(1, int(mask.sum(axis=1).max()))]
        tokens = generation.generate(network, prompt, max_length=ids.shape[1], **arguments)
        return {"token_ids": tokens, "padding_mask": tokens != network.pad_id}
