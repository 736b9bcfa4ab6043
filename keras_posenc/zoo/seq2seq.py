"""The base class of the zoo's encoder-decoder models and the decoding contract.

Every sequence-to-sequence zoo model (ConvS2S, MUSE, ...) is a
:class:`Seq2SeqModel` (``keras_posenc.zoo.Seq2SeqModel``, which a model of one's
own subclasses: see the class): a functional ``keras.Model`` whose call is the
teacher-forced forward pass,

    model({"encoder_token_ids": source, "decoder_token_ids": target_in}) -> logits

(``(batch, source_time)`` and ``(batch, target_time)`` int ids;
``(batch, target_time, target_vocab_size)`` logits), and which also exposes the
three pieces :mod:`keras_posenc.generation` decodes with:

- ``encode(encoder_token_ids) -> encoder_state``, a tuple of batch-first tensors;
- ``init_cache(encoder_state, max_length) -> cache``, a tuple of batch-first
  tensors of fixed shape: the encoder state the decoder reads and every
  decoder layer's buffer for ``max_length`` target positions;
- ``decode_step(token_ids, cache, index) -> (logits, cache)``: ``token_ids`` is
  ``(batch,)``, the token at target position ``index`` (a scalar int tensor;
  position 0 holds ``bos_id``); ``logits`` is ``(batch, target_vocab_size)``
  float32, the prediction of the token at ``index + 1``;

and ``decode(decoder_token_ids, encoder_state) -> logits``, the full
(teacher-forced) decoder on an encoded source. ``encoder_state_names()`` and
``cache_names()`` name the tensors of the state and the cache: the exported
graphs' input and output names (:func:`decoding_names`). ``decode_step`` must equal
``decode`` at every position; caches are reordered between steps with
:meth:`Seq2SeqModel.reorder_cache` (a gather along the batch axis).

Work that depends on the weights only (ConvS2S's weight normalisation) can be
done once per search instead of once per step: ``step_constants()`` computes
it (a tuple of tensors; the default is empty) and the steps run inside
``with model.step_scope(constants):``.

Token ids: ``pad_id`` (default 0) marks padding in sources and targets (a
source's mask is ``ids != pad_id``: True for real tokens), ``bos_id`` (1)
starts every target (the decoder start token), ``eos_id`` (2) ends it. The
three differ, except in a model whose class sets ``decoder_start_may_be_pad =
True`` (T5, whose targets start with its padding id 0): there ``bos_id`` may
equal ``pad_id``, and the model must not find target padding at position 0
(position 0 always holds the start token: T5's logits mask is ``(ids !=
pad_id) | (position == 0)``). ``eos_id`` differs from both in every model.
Generation never produces ``pad_id`` or ``bos_id``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc import backend, tokenizers
from keras_posenc.layers._checks import check_int
from keras_posenc.zoo.adapt import FunctionalModel
from keras_posenc.zoo.text import TextModel

_INPUT_NAMES = ("encoder_token_ids", "decoder_token_ids")


class GeneratingModel(TextModel):
    """``generate`` for the zoo's generating models (:class:`Seq2SeqModel` and
    :class:`~keras_posenc.zoo.language_model.LanguageModel`), and the check of the
    token ids a direct call receives."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # A direct, eager call checks its token ids as `generate` does: out of the
        # vocabulary or past the position table, TensorFlow and PyTorch failed inside a
        # gather and JAX clipped the index and returned logits. Inside a traced function
        # (fit, predict on TensorFlow and JAX, export) the values are not known and the
        # graph runs unchecked (`backend.concrete_values`).
        self._check_token_inputs(args[0] if args else kwargs.get("inputs"))
        return super().__call__(*args, **kwargs)

    def predict(self, x: Any = None, *args: Any, **kwargs: Any) -> Any:
        # `predict` traces the call on TensorFlow and JAX: arrays are checked here first
        # (a dataset or generator is not: its values are read batch by batch in the graph).
        self._check_token_inputs(x)
        return super().predict(x, *args, **kwargs)

    def _check_token_inputs(self, inputs: Any) -> None:
        for name, tensor in self._token_inputs(inputs):
            values = backend.concrete_values(tensor)
            if values is not None and values.ndim == 2:
                self.check_token_ids(values, name, **self._check_arguments(name))

    #: The names of the token-id inputs of a call (a dict's keys; a language model also
    #: takes its one input as a plain tensor).
    token_input_names: tuple = ("encoder_token_ids", "decoder_token_ids")

    def _token_inputs(self, inputs: Any) -> list:
        """(name, tensor) of each token-id input of a call."""
        if isinstance(inputs, dict):
            return [(name, inputs[name]) for name in self.token_input_names if name in inputs]
        if len(self.token_input_names) == 1 and not isinstance(inputs, list | tuple):
            return [(self.token_input_names[0], inputs)]
        return []

    def _check_arguments(self, name: str) -> dict:
        return {}

    def generate(
        self,
        inputs: Any,
        max_length: int | None = None,
        beam_size: int = 1,
        length_penalty: float = 1.0,
        sampler: Any = None,
        seed: int | None = None,
        min_length: int = 0,
        prefix_tokens: Any = None,
        no_repeat_ngram_size: int = 0,
        return_n_best: int | None = None,
    ) -> np.ndarray:
        """Greedy search, sampling (``sampler``) or beam search (``beam_size > 1``).

        A thin wrapper over :func:`keras_posenc.generation.generate`; see it for
        the arguments. ``inputs``: an encoder-decoder's sources, or a language
        model's prompts (then ``max_length``, the returned length with the
        prompt, is required). A model with a tokenizer also takes a string or a
        list of strings, and returns text.

        Returns:
            ``(batch, max_length)`` ids (``(batch, N, max_length)`` with
            ``return_n_best=N``): an encoder-decoder's tokens after ``bos``, a
            language model's prompt and continuation. For text: a string, or a
            list of strings (of ``N`` strings each with ``return_n_best=N``),
            special tokens removed.
        """
        from keras_posenc import generation

        texts = tokenizers.as_texts(inputs)
        ids = inputs if texts is None else self.encode_texts(texts, "generate", max_length)
        result = generation.generate(
            self,
            ids,
            max_length=max_length,
            beam_size=beam_size,
            length_penalty=length_penalty,
            sampler=sampler,
            seed=seed,
            min_length=min_length,
            prefix_tokens=prefix_tokens,
            no_repeat_ngram_size=no_repeat_ngram_size,
            return_n_best=return_n_best,
        )
        if texts is None:
            return result
        decoded = self.decode_texts(result, ids)
        return decoded[0] if isinstance(inputs, str) else decoded


class Seq2SeqModel(GeneratingModel, FunctionalModel):
    """An encoder-decoder zoo model: teacher-forced call, cached decoding, ``generate``.

    The base class of the zoo's encoder-decoders, and the way to write one's own.
    A subclass is written as keras-hub writes its functional backbones: its
    ``__init__`` creates its layers as attributes, then calls
    ``super().__init__(source_vocab_size=..., target_vocab_size=..., pad_id=...,
    bos_id=..., eos_id=..., max_source_length=..., max_target_length=...,
    **kwargs)``, which checks the token ids and limits, sets them as attributes,
    builds the functional graph from the subclass's ``encode`` and ``decode``
    (inputs ``encoder_token_ids`` and ``decoder_token_ids``, output ``logits``)
    and initialises ``keras.Model`` with it (``name``, ``trainable`` in
    ``kwargs``). Until then attributes are plain Python attributes (on PyTorch a
    layer cannot be assigned before ``keras.Model.__init__``); the graph tracks
    every layer it calls, so their weights train and save. A layer whose weights
    ``encode`` reads without calling it (MUSE's decoder layers, whose
    cross-attention keys and values the encoder state holds) is built before
    ``super().__init__``. A subclass whose layers need the checked values calls
    :meth:`check_seq2seq_arguments` first.

    It implements ``encode``, ``decode``, ``init_cache`` and ``decode_step`` (see
    :mod:`keras_posenc.zoo.seq2seq`), and may name its state and cache
    (``encoder_state_names``, ``cache_names``). Its ``get_config`` extends
    ``super().get_config()`` (``name``, ``trainable``) with its constructor's
    arguments; :meth:`from_config` calls the constructor with them, so
    ``keras.models.load_model`` and ``clone_model`` rebuild it (registered with
    ``keras.saving.register_keras_serializable``). ``fit``, ``evaluate``,
    ``generate``, ``translate`` and the export of its decoding graphs
    (:func:`keras_posenc.export.export_seq2seq`) then work as for the zoo's models.

    Args:
        source_vocab_size: number of source token ids (at least 3).
        target_vocab_size: number of target token ids, the logits' width (at least 3).
        pad_id: padding id (0), the source mask is ``ids != pad_id``.
        bos_id: the id every target starts with (1).
        eos_id: the id that ends a target (2).
        max_source_length: the longest source the model accepts (its position
            table), or None (any length).
        max_target_length: the longest target (``bos`` included), or None.
        **kwargs: ``keras.Model`` arguments (``name``, ``trainable``).

    Attributes:
        decoder_start_may_be_pad: a class attribute: whether ``bos_id`` (the
            decoder start token) may equal ``pad_id`` (False; T5: True). Such a
            model never reads position 0 of a target as padding. The checked
            arguments (``source_vocab_size``, ``target_vocab_size``, ``pad_id``,
            ``bos_id``, ``eos_id``, ``max_source_length``, ``max_target_length``)
            are attributes of the same names.

    Raises:
        TypeError, ValueError: a vocabulary size, id or limit that is not an
            integer in range, or ids that are not distinct (naming the class).

    Examples:

        >>> import keras
        >>> import numpy as np
        >>> from keras import ops
        >>> from keras_posenc import zoo
        >>> @keras.saving.register_keras_serializable(package="docs")
        ... class Bag(zoo.Seq2SeqModel):
        ...     '''The mean source embedding added to each target token's.'''
        ...
        ...     def __init__(self, vocab_size=12, width=8, **kwargs):
        ...         self.vocab_size, self.width = vocab_size, width
        ...         self.embedding = keras.layers.Embedding(vocab_size, width, name="embedding")
        ...         self.head = keras.layers.Dense(vocab_size, name="head")
        ...         super().__init__(
        ...             source_vocab_size=vocab_size, target_vocab_size=vocab_size, **kwargs
        ...         )
        ...
        ...     def encode(self, encoder_token_ids, training=None):
        ...         return (ops.mean(self.embedding(encoder_token_ids), axis=1),)
        ...
        ...     def decode(self, decoder_token_ids, encoder_state, training=None):
        ...         context = ops.expand_dims(encoder_state[0], 1)
        ...         return self.head(self.embedding(decoder_token_ids) + context)
        ...
        ...     def init_cache(self, encoder_state, max_length):
        ...         return tuple(encoder_state)  # no decoder buffers: each step sees one token
        ...
        ...     def decode_step(self, token_ids, cache, index):
        ...         logits = self.decode(ops.expand_dims(token_ids, 1), cache)
        ...         return logits[:, 0], cache
        ...
        ...     def get_config(self):
        ...         return {**super().get_config(), "vocab_size": self.vocab_size,
        ...                 "width": self.width}
        >>> model = Bag(name="bag")
        >>> model.bos_id, model.output_names
        (1, ['logits'])
        >>> source = np.array([[5, 6, 7, 2], [8, 9, 2, 0]])
        >>> target_in = np.array([[1, 7, 6], [1, 9, 8]])
        >>> tuple(model({"encoder_token_ids": source, "decoder_token_ids": target_in}).shape)
        (2, 3, 12)
        >>> model.generate(source, max_length=5).shape
        (2, 5)
        >>> Bag.from_config(model.get_config()).count_params() == model.count_params()
        True
    """

    decoder_start_may_be_pad = False

    def __init__(
        self,
        *,
        source_vocab_size: int | None = None,
        target_vocab_size: int | None = None,
        pad_id: int = 0,
        bos_id: int = 1,
        eos_id: int = 2,
        max_source_length: int | None = None,
        max_target_length: int | None = None,
        **kwargs: Any,
    ) -> None:
        checked = self.check_seq2seq_arguments(
            source_vocab_size,
            target_vocab_size,
            pad_id,
            bos_id,
            eos_id,
            max_source_length,
            max_target_length,
        )
        # Set before the graph is built: `encode` and `decode` read them (the padding id).
        for name, value in checked.items():
            setattr(self, name, value)
        inputs, logits = self._functional_graph()
        super().__init__(inputs=inputs, outputs=logits, **kwargs)

    @classmethod
    def check_seq2seq_arguments(
        cls,
        source_vocab_size: int | None,
        target_vocab_size: int | None,
        pad_id: int = 0,
        bos_id: int = 1,
        eos_id: int = 2,
        max_source_length: int | None = None,
        max_target_length: int | None = None,
    ) -> dict[str, Any]:
        """The constructor's token arguments, checked: a dict of the seven, by name.

        A subclass whose layers need them (a vocabulary size, the padding id) calls
        this before creating the layers and passes the result on to
        ``super().__init__(**checked, **kwargs)``.

        Raises:
            TypeError, ValueError: as the constructor (naming the class).
        """
        owner = cls.__name__
        vocabularies = {}
        for name, vocab in (
            ("source_vocab_size", source_vocab_size),
            ("target_vocab_size", target_vocab_size),
        ):
            vocabularies[name] = check_int(owner, name, vocab, 0)
            if vocabularies[name] < 3:
                raise ValueError(
                    f"{owner}: `{name}` must be at least 3 (pad, bos and eos ids), got {vocab}."
                )
        source, target = vocabularies["source_vocab_size"], vocabularies["target_vocab_size"]
        ids = check_special_ids(
            owner,
            pad_id,
            bos_id,
            eos_id,
            min(source, target),
            f"both vocabulary sizes ({source}, {target})",
            cls.decoder_start_may_be_pad,
        )
        limits = {
            name: None if value is None else check_int(owner, name, value, 0)
            for name, value in (
                ("max_source_length", max_source_length),
                ("max_target_length", max_target_length),
            )
        }
        return {**vocabularies, **ids, **limits}

    def _functional_graph(self) -> tuple[dict, Any]:
        """Symbolic inputs (``encoder_token_ids``, ``decoder_token_ids``) and the logits."""
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name) for name in _INPUT_NAMES
        }
        state = self.encode(inputs["encoder_token_ids"])
        logits = self.decode(inputs["decoder_token_ids"], state)
        # Names the output "logits" (Keras' output_names, an exported graph's output name);
        # float32 keeps the logits' dtype under a mixed policy, and the Keras mask passes.
        logits = keras.layers.Identity(dtype="float32", name="logits")(logits)
        return inputs, logits

    def get_config(self) -> dict:
        """``name`` and ``trainable``; a subclass adds its constructor's arguments."""
        return {"name": self.name, "trainable": self.trainable}

    # ------------------------------------------------------------------ contract

    def encode(self, encoder_token_ids: Any, training: Any = None) -> tuple:
        """The encoder state ``decode`` and ``init_cache`` read, a tuple of batch-first tensors."""
        raise NotImplementedError(f"{type(self).__name__} does not implement `encode`.")

    def decode(self, decoder_token_ids: Any, encoder_state: tuple, training: Any = None) -> Any:
        """Teacher-forced logits ``(batch, target_time, target_vocab_size)``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement `decode`.")

    def init_cache(self, encoder_state: tuple, max_length: int) -> tuple:
        """The decoding cache for ``max_length`` target positions (``bos`` included)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement `init_cache`.")

    def decode_step(self, token_ids: Any, cache: tuple, index: Any) -> tuple:
        """``(logits (batch, target_vocab_size) float32, new_cache)`` for one target position."""
        raise NotImplementedError(f"{type(self).__name__} does not implement `decode_step`.")

    def step_constants(self) -> tuple:
        """Tensors computed from the weights alone that every decoding step reads.

        :mod:`keras_posenc.generation` computes them once per search and runs the
        steps inside :meth:`step_scope`, instead of recomputing them in each step.
        The default has none (an empty tuple).
        """
        return ()

    @contextlib.contextmanager
    def step_scope(self, constants: tuple) -> Iterator[None]:
        """Within the block, ``decode_step`` reads ``constants`` (from
        :meth:`step_constants`) instead of computing them. The default does nothing."""
        yield

    def encoder_state_names(self) -> tuple[str, ...]:
        """A name for each tensor of ``encode``'s state, the encoder graph's output names.

        Subclasses name them after what they hold; this default numbers them
        (``encoder_state_0``, ...), running the encoder once to count them.
        """
        return tuple(f"encoder_state_{i}" for i in range(len(self._probe_cache()[0])))

    def cache_names(self) -> tuple[str, ...]:
        """A name for each tensor of ``init_cache``'s cache (the encoder state's names
        first), the decoder-step graph's input names.

        Subclasses name the decoder buffers after their layers (``cache_<layer>``); this
        default numbers them (``cache_0``, ...), running the encoder once to count them.
        """
        state, cache = self._probe_cache()
        names = self.encoder_state_names()
        return (*names, *(f"cache_{i}" for i in range(len(cache) - len(names))))

    def _probe_cache(self) -> tuple[tuple, tuple]:
        """The encoder state and the cache for a one-token source."""
        state = self.encode(np.full((1, 1), self.bos_id, "int32"), training=False)
        return tuple(state), tuple(self.init_cache(state, 2))

    @staticmethod
    def reorder_cache(cache: tuple, indices: Any) -> tuple:
        """Gathers every cache tensor along the batch axis (beam search's reordering)."""
        return keras.tree.map_structure(lambda t: ops.take(t, indices, axis=0), cache)

    # ------------------------------------------------------------------ checks and generation

    def translate(
        self,
        texts: str | Sequence[str],
        *,
        beam_size: int = 5,
        max_length: int | None = None,
        length_penalty: float = 1.0,
        batch_size: int = 32,
        preprocessor: Any = None,
    ) -> str | list[str]:
        """Translations of sentences, as fairseq's ``translate(sentences, beam=5)``.

        Each batch of ``batch_size`` sentences is encoded by the text pipeline
        (:class:`~keras_posenc.zoo.translation.TranslationPreprocessor`: Moses, BPE,
        dictionary), decoded by beam search (greedy search for ``beam_size=1``) with
        fairseq's defaults (no eos before the first token; at most
        ``min(200, max_target_length)`` tokens, fairseq's ``max_len_b``), and the best
        hypothesis turned back into text.

        Args:
            texts: one sentence, or a list of them.
            beam_size: hypotheses kept per sentence (fairseq's hub default, 5).
            max_length: the most target tokens (default: ``min(200, max_target_length)``).
            length_penalty: beam search's length exponent (fairseq's ``lenpen``).
            batch_size: sentences per batch.
            preprocessor: the text pipeline; default ``self.preprocessor``, which a
                model loaded from a translation preset has (:func:`~keras_posenc.zoo.
                presets.from_preset`).

        Returns:
            One translation per sentence; a string for a string.

        Raises:
            ValueError: no text pipeline, a pipeline whose vocabularies do not match
                the model's, a sentence longer than the source positions, or a bad
                ``beam_size`` / ``batch_size``.

        Example:

        >>> from keras_posenc import zoo
        >>> # model = zoo.from_preset("https://dl.fbaipublicfiles.com/fairseq/models/"
        >>> #                         "wmt14.v2.en-fr.fconv-py.tar.bz2")  # downloads once
        >>> # model.translate("Hello world!")
        """
        from keras_posenc import generation

        who = f"{type(self).__name__}.translate"
        preprocessor = (
            preprocessor if preprocessor is not None else getattr(self, "preprocessor", None)
        )
        if preprocessor is None or not hasattr(preprocessor, "decode"):
            raise ValueError(
                f"{who}: the model has no text pipeline; load it with zoo.from_preset(...) "
                "from a translation archive or preset, or pass `preprocessor=` (a "
                "TranslationPreprocessor)."
            )
        sizes = (preprocessor.source_vocab_size, preprocessor.target_vocab_size)
        if sizes != (self.source_vocab_size, self.target_vocab_size):
            raise ValueError(
                f"{who}: the preprocessor's vocabularies have {sizes[0]} / {sizes[1]} tokens "
                f"but the model's {self.source_vocab_size} / {self.target_vocab_size}."
            )
        beam_size = check_int(who, "beam_size", beam_size, 1)
        batch_size = check_int(who, "batch_size", batch_size, 1)
        single = isinstance(texts, str)
        texts = [texts] if single else texts
        if max_length is None:
            limit = self.max_target_length
            max_length = 200 if limit is None else min(200, limit)
        results: list[str] = []
        for start in range(0, len(texts), batch_size):
            source = preprocessor.encode(
                texts[start : start + batch_size], max_length=self.max_source_length
            )
            ids = generation.generate(
                self,
                source,
                max_length=max_length,
                beam_size=beam_size,
                length_penalty=length_penalty,
                min_length=1,  # fairseq's min_len: no empty translation
            )
            results += preprocessor.decode(ids)
        return results[0] if single else results

    def _check_arguments(self, name: str) -> dict:
        return {"source": name != "decoder_token_ids"}

    def check_token_ids(self, token_ids: Any, argument: str, source: bool = True) -> np.ndarray:
        """``token_ids`` as an int32 numpy array, after checking rank, range and length.

        These checks cannot run inside a compiled graph, so the Python entry
        points (``generate``, the search functions) call this first.

        Raises:
            TypeError: for non-integer ids.
            ValueError: for a rank other than 2, an id outside the vocabulary or
                a sequence longer than the model's position table.
        """
        vocab = self.source_vocab_size if source else self.target_vocab_size
        limit = self.max_source_length if source else self.max_target_length
        limit_name = "max_source_length" if source else "max_target_length"
        return check_token_array(self, argument, token_ids, vocab, limit, limit_name)

    @classmethod
    def from_config(cls, config: dict) -> Seq2SeqModel:
        """The model of a :meth:`get_config` dict (its layers' ``dtype`` too): ``cls(**config)``."""
        return cls(**config)


def check_special_ids(
    owner: str,
    pad_id: Any,
    bos_id: Any,
    eos_id: Any,
    vocab: int,
    vocab_text: str,
    start_may_be_pad: bool = False,
) -> dict[str, int]:
    """``{"pad_id": .., "bos_id": .., "eos_id": ..}`` after checking each is an int in
    ``[0, vocab)`` (``vocab_text`` names the limit in the message) and that the three
    differ; with ``start_may_be_pad`` (T5) ``bos_id`` may equal ``pad_id``.

    Raises:
        TypeError, ValueError: naming ``owner``, the argument, expected and given.
    """
    ids = {}
    for name, value in (("pad_id", pad_id), ("bos_id", bos_id), ("eos_id", eos_id)):
        ids[name] = check_int(owner, name, value, 0)
        if ids[name] >= vocab:
            raise ValueError(
                f"{owner}: `{name}` must be a token id below {vocab_text}, got {value}."
            )
    if start_may_be_pad:
        # The decoder start token may be the padding id (T5); eos differs from both.
        if ids["eos_id"] in (ids["pad_id"], ids["bos_id"]):
            raise ValueError(
                f"{owner}: `eos_id` must differ from `pad_id` and from the decoder start "
                f"id, got {ids}."
            )
    elif len(set(ids.values())) != 3:
        raise ValueError(f"{owner}: `pad_id`, `bos_id` and `eos_id` must differ, got {ids}.")
    return ids


def check_token_array(
    model: Any, argument: str, token_ids: Any, vocab: int, limit: int | None, limit_name: str
) -> np.ndarray:
    """``token_ids`` as an int32 numpy array of shape (batch, time), after checking
    dtype, rank, range (``[0, vocab)``) and length (at most ``limit`` when not None).

    Raises:
        TypeError: for non-integer ids.
        ValueError: for a rank other than 2, an id outside the vocabulary or more
            than ``limit`` positions (named ``limit_name`` in the message).
    """
    owner = f"{type(model).__name__}({model.name!r})"
    array = np.asarray(keras.ops.convert_to_numpy(token_ids))
    if not np.issubdtype(array.dtype, np.integer):
        raise TypeError(
            f"{owner}: `{argument}` must hold integer token ids, got dtype {array.dtype}."
        )
    if array.ndim != 2:
        raise ValueError(
            f"{owner}: `{argument}` must have shape (batch, time), got shape {array.shape}."
        )
    if array.size and (array.min() < 0 or array.max() >= vocab):
        bad = array[(array < 0) | (array >= vocab)]
        raise ValueError(
            f"{owner}: `{argument}` holds token ids outside the vocabulary [0, {vocab}): "
            f"e.g. {int(bad[0])}."
        )
    if limit is not None and array.shape[1] > limit:
        raise ValueError(
            f"{owner}: `{argument}` has {array.shape[1]} positions, more than the model's "
            f"{limit_name} = {limit}."
        )
    return array.astype("int32")


# --------------------------------------------------------------------------- export graphs


@keras.saving.register_keras_serializable(package="keras_posenc")
class Seq2SeqEncoder(keras.Model):
    """The encoder of a :class:`Seq2SeqModel` as a model of its own (for export).

    ``encoder(encoder_token_ids)`` returns the list of encoder-state tensors
    (``model.encode``): the first inputs of a decoding cache. A model whose class
    lists ``encoder_padding_mask`` in ``padding_mask_names`` (T5) also takes
    ``encoder([encoder_token_ids, encoder_padding_mask])`` (the mask ``(batch,
    source_time)``, 1 or True for real tokens), so a source may be padded on the
    left; its exported graph has both inputs (:func:`encoder_input_names`).

    Args:
        seq2seq: the :class:`Seq2SeqModel` (its weights are shared, not copied).
        **kwargs: ``keras.Model`` arguments.

    Raises:
        ValueError: a list of inputs other than the ids and, for such a model, the mask.

    Examples:

        >>> from keras_posenc.zoo.t5 import T5
        >>> model = T5(40, hidden_dim=8, intermediate_dim=16, num_heads=2, num_layers=1)
        >>> encoder = Seq2SeqEncoder(model)
        >>> ids, mask = np.array([[0, 5, 6, 1]]), np.array([[0, 1, 1, 1]])  # left padding
        >>> ops.convert_to_numpy(encoder([ids, mask])[1]).tolist()  # the source mask
        [[False, True, True, True]]
    """

    def __init__(self, seq2seq: Seq2SeqModel, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seq2seq = seq2seq

    def call(self, inputs: Any) -> list:
        if not isinstance(inputs, list | tuple):
            return list(self.seq2seq.encode(inputs, training=False))
        names = encoder_input_names(self.seq2seq)
        if not 1 <= len(inputs) <= len(names):
            raise ValueError(
                f"{type(self).__name__}({self.name!r}): the inputs of "
                f"{type(self.seq2seq).__name__}'s encoder are {names}, got a list of "
                f"{len(inputs)}."
            )
        masks = dict(zip(names[1:], inputs[1:]))
        return list(self.seq2seq.encode(inputs[0], training=False, **masks))

    def get_config(self) -> dict:
        return {"name": self.name, "seq2seq": keras.saving.serialize_keras_object(self.seq2seq)}

    @classmethod
    def from_config(cls, config: dict) -> Seq2SeqEncoder:
        config = dict(config)
        seq2seq = keras.saving.deserialize_keras_object(config.pop("seq2seq"))
        config.pop("trainable", None)
        return cls(seq2seq, **config)


def encoder_input_names(model: Seq2SeqModel) -> list[str]:
    """The exported encoder graph's inputs: ``encoder_token_ids``, then
    ``encoder_padding_mask`` where the model's class lists it in ``padding_mask_names``
    (T5, whose ``encode`` takes it); ConvS2S, MUSE and Shaw's take the ids alone."""
    names = ["encoder_token_ids"]
    return names + [n for n in getattr(model, "padding_mask_names", ()) if n.startswith("encoder")]


@keras.saving.register_keras_serializable(package="keras_posenc")
class Seq2SeqDecoderStep(keras.Model):
    """One decoding step of a :class:`Seq2SeqModel` as a model of its own (for export).

    ``step([token_ids, index, *cache])`` returns ``[logits, *new_cache]``:
    ``token_ids`` is ``(batch,)`` int32, ``index`` a ``(1,)`` int32 tensor (the
    target position; a plain scalar cannot be a model input), ``cache`` the
    tensors of ``model.init_cache`` (the encoder state first) and ``logits``
    ``(batch, target_vocab_size)`` float32. The caches go in and come out, so
    an exported step can be driven by any runtime's loop.

    Args:
        seq2seq: the :class:`Seq2SeqModel` (its weights are shared, not copied).
        **kwargs: ``keras.Model`` arguments.
    """

    def __init__(self, seq2seq: Seq2SeqModel, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seq2seq = seq2seq

    def call(self, inputs: list) -> list:
        token_ids, index, *cache = inputs
        position = ops.reshape(ops.cast(index, "int32"), ())
        logits, new_cache = self.seq2seq.decode_step(token_ids, tuple(cache), position)
        return [logits, *new_cache]

    def get_config(self) -> dict:
        return {"name": self.name, "seq2seq": keras.saving.serialize_keras_object(self.seq2seq)}

    @classmethod
    def from_config(cls, config: dict) -> Seq2SeqDecoderStep:
        config = dict(config)
        seq2seq = keras.saving.deserialize_keras_object(config.pop("seq2seq"))
        config.pop("trainable", None)
        return cls(seq2seq, **config)


def decoding_names(model: Seq2SeqModel) -> dict[str, tuple[list[str], list[str]]]:
    """Input and output names of the exported encoder and decoder-step graphs.

    The encoder graph takes ``encoder_token_ids`` (and ``encoder_padding_mask``,
    int32 ``(batch, source_time)``, for T5: :func:`encoder_input_names`) and returns
    the encoder state (``model.encoder_state_names()``); the step graph takes
    ``token_ids``, ``index`` and the cache (``model.cache_names()``, the
    encoder state first) and returns ``logits`` and the updated cache, each
    tensor named ``new_`` and its input's name. The encoder's outputs are
    named as the step's inputs they feed.

    Returns:
        ``{"encoder": (inputs, outputs), "decoder_step": (inputs, outputs)}``.

    Examples:

        >>> from keras_posenc.zoo.convs2s import ConvS2S
        >>> model = ConvS2S(20, 20, embed_dim=8, encoder_layers=[(8, 3)],
        ...                 decoder_layers=[(8, 3), (8, 3)], decoder_out_embed_dim=8)
        >>> decoding_names(model)["encoder"]
        (['encoder_token_ids'], ['encoder_keys', 'encoder_values', 'source_mask'])
        >>> decoding_names(model)["decoder_step"][0][3:]
        ['encoder_values', 'source_mask', 'cache_decoder_conv_0', 'cache_decoder_conv_1']
    """
    cache = list(model.cache_names())
    return {
        "encoder": (encoder_input_names(model), list(model.encoder_state_names())),
        "decoder_step": (
            ["token_ids", "index", *cache],
            ["logits", *(f"new_{name}" for name in cache)],
        ),
    }


def decoding_signatures(model: Seq2SeqModel) -> tuple[list, list]:
    """Input signatures of :class:`Seq2SeqEncoder` and :class:`Seq2SeqDecoderStep`.

    The batch axis is dynamic everywhere; a cache axis is dynamic when it
    follows the source length (the encoder state) or the decoded length, found
    by building caches for two sizes and comparing shapes. Each spec is named
    as :func:`decoding_names` names the input.

    Returns:
        ``(encoder_signature, step_signature)``, lists of ``keras.InputSpec``.
    """
    caches = []
    for length in (3, 5):
        source = np.full((1, length), model.bos_id, dtype="int32")
        caches.append(model.init_cache(model.encode(source, training=False), length + 2))
    names = decoding_names(model)
    ids = dict(shape=(None, None), dtype="int32")  # the token ids and their padding mask
    encoder = [keras.InputSpec(**ids, name=name) for name in names["encoder"][0]]
    return encoder, step_signature(names["decoder_step"][0], *caches)


def step_signature(names: list[str], short_cache: tuple, long_cache: tuple) -> list:
    """The input signature of a one-step decoder graph ``[token_ids, index, *cache]``.

    ``names``: the graph's input names; ``short_cache`` and ``long_cache``: caches
    built for two lengths. The batch axis is dynamic, and so is every cache axis
    whose size differs between the two (it follows the source or decoded length).
    """
    token_name, index_name, *cache_names = names
    specs = [
        keras.InputSpec(shape=(None,), dtype="int32", name=token_name),
        keras.InputSpec(shape=(1,), dtype="int32", name=index_name),
    ]
    for short, long, name in zip(short_cache, long_cache, cache_names, strict=True):
        shape = [None] + [
            a if a == b else None for a, b in zip(short.shape[1:], long.shape[1:], strict=True)
        ]
        dtype = keras.backend.standardize_dtype(short.dtype)
        specs.append(keras.InputSpec(shape=tuple(shape), dtype=dtype, name=name))
    return specs
