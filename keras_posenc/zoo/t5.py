"""T5 (Raffel et al. 2020): the encoder-decoder that made the log-bucket relative bias standard.

Both stacks are pre-norm Transformers without biases: RMS layer norm (no mean,
no offset), self-attention, in the decoder cross-attention, and a feed-forward
network, each added to the residual stream; a final RMS norm per stack. Position
information is one `keras_posenc.layers.RelativePositionBias` per stack
(``position=LogBuckets(...)``: 32 buckets, max distance 128; bidirectional in the
encoder, causal in the decoder), computed once per call and added to the logits
of every self-attention layer of its stack (`MultiHeadRelativeAttention` with
``relative=None`` and ``attention_bias=``). One token embedding is shared by the
encoder and the decoder.

Registered configurations (the released checkpoints' shapes, 32,128-token vocabulary;
parameters counted by the tests):

    name            layers  d    FFN   heads x d_kv  feed-forward   head              parameters
    t5_small        6+6     512  2048  8 x 64        ReLU           tied embedding    60,506,624
    t5_base         12+12   768  3072  12 x 64       ReLU           tied embedding    222,903,552
    t5_1.1_small    8+8     512  1024  6 x 64        gated GELU     separate matrix   76,961,152
    t5_1.1_base     12+12   768  2048  12 x 64       gated GELU     separate matrix   247,577,856

(T5 v1.0 ties the output projection to the embedding and scales the decoder
output by ``d ** -0.5`` before it; v1.1 has its own output matrix and no scale.
v1.1's GELU is the tanh approximation, `gelu_tanh`.)

Differences from the published layout, by design:

- **The query scale is folded into the query kernel.** T5 does not divide the
  logits by ``sqrt(d_kv)`` (Mesh TensorFlow folds it into the query's
  initialisation); our attention does. Our query kernel is therefore T5's
  times ``sqrt(d_kv)``, and every logit is the same: T5's initialisation
  ``N(0, (d * d_kv) ** -0.5)`` becomes ours, ``N(0, d ** -0.5)``, the same
  distribution as the other projections. With ``d_kv = 64`` the factor is 8,
  a power of two: converting a checkpoint (`keras_posenc.convert.from_keras_hub_t5`)
  changes no bit of its numbers.
- **Token ids**: T5 starts every target with its padding id 0 (the decoder
  start token) and ends it with 1. The model's ``bos_id`` (the decoder start,
  ``decoder_start_id``) is therefore equal to ``pad_id`` (see
  :class:`~keras_posenc.zoo.seq2seq.Seq2SeqModel`); padding is found from the
  ids after position 0, and the logits' Keras mask counts position 0 as real.
- Softmaxes run in float32 with a finite mask fill; a fully padded source
  gives finite outputs. Padded source positions attend like real ones
  (only keys are masked), as in T5, so every encoder output equals keras-hub's,
  with either padding side. A query whose every key is masked (a decoder
  position in left padding, given ``decoder_padding_mask``) gets a zero
  attention output here, while keras-hub's additive -1e9 averages all keys
  there; only those padded positions differ, and no real position reads them.

The layers (`gelu_tanh`, `T5Block`, `T5Stack`) are in keras_posenc/zoo/t5_layers.py, the
named configurations in keras_posenc/zoo/t5_config.py; this module has the model, the masks
of its source and logits and the registration, and re-exports the public names of both.
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from keras_posenc.layers._attention import unmasked
from keras_posenc.layers._checks import check_bool, check_int, check_mask, shape_of
from keras_posenc.layers._memory import check_allocation
from keras_posenc.zoo.registry import register_model
from keras_posenc.zoo.seq2seq import Seq2SeqModel
from keras_posenc.zoo.t5_config import CONFIGS, VOCABULARY_SIZE, T5Config
from keras_posenc.zoo.t5_layers import T5Block, T5Stack, _normal, gelu_tanh

__all__ = [
    "T5",
    "T5Block",
    "T5Config",
    "T5PaddingMask",
    "T5Stack",
    "T5TargetMask",
    "gelu_tanh",
    "query_kernel_scale",
]

REFERENCE = (
    "Raffel et al. 2020, Exploring the Limits of Transfer Learning with a Unified "
    "Text-to-Text Transformer (JMLR 21); keras-hub's T5Backbone"
)
# The released checkpoints' parameter counts (keras-hub's presets t5_small_multi,
# t5_base_multi, flan_small_multi and flan_base_multi / t5_1.1_base have these shapes).
PAPER_PARAMETERS = {
    "t5_small": 60_506_624,
    "t5_base": 222_903_552,
    "t5_1.1_small": 76_961_152,
    "t5_1.1_base": 247_577_856,
}


def _checked_mask(owner: str, argument: str, mask: Any, ids: Any) -> Any:
    """``mask`` (a ``(batch, time)`` padding mask, True or 1 for real tokens) as bool, of the
    shape of ``ids``, after `check_mask` (floating masks refused, a size of 1 broadcasts)."""
    mask = check_mask(owner, argument, mask, shape_of(ids), ("batch", "time"))
    return ops.broadcast_to(mask, ops.shape(ids))


@keras.saving.register_keras_serializable(package="keras_posenc")
class T5PaddingMask(keras.layers.Layer):
    """The source mask: an explicit padding mask when one is given, else ``ids != pad_id``.

    ``layer(encoder_token_ids)`` returns ``encoder_token_ids != pad_id``;
    ``layer(encoder_token_ids, padding_mask=mask)`` returns ``mask`` as bool
    (``(batch, time)``, True or 1 for real tokens; a size of 1 broadcasts), after
    checking its dtype (a floating mask is refused: an additive 0 / -1e9 mask cast to
    bool would be inverted) and shape. An explicit mask is what lets a source be padded
    on the left, or hold the padding id as a real token. The model's optional
    ``encoder_padding_mask`` input reaches this layer as None when not given, which is
    why the choice is a layer: the functional graph holds it.

    Args:
        pad_id: the padding id.
        **kwargs: standard layer arguments.

    Examples:

        >>> import numpy as np
        >>> from keras import ops
        >>> layer = T5PaddingMask(pad_id=0)
        >>> ops.convert_to_numpy(layer(np.array([[5, 6, 0]]))).tolist()
        [[True, True, False]]
        >>> left = layer(np.array([[0, 5, 6]]), padding_mask=np.array([[0, 1, 1]]))
        >>> ops.convert_to_numpy(left).tolist()
        [[False, True, True]]
    """

    def __init__(self, pad_id: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pad_id = check_int(type(self).__name__, "pad_id", pad_id, 0)

    def call(self, ids: Any, padding_mask: Any = None) -> Any:
        if padding_mask is None:
            return ops.not_equal(ops.cast(ids, "int32"), self.pad_id)
        owner = f"{type(self).__name__}({self.name!r})"
        return _checked_mask(owner, "padding_mask", padding_mask, ids)

    def compute_output_spec(self, ids: Any, padding_mask: Any = None) -> Any:
        return keras.KerasTensor(ids.shape, dtype="bool")

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(pad_id=self.pad_id)
        return config


@keras.saving.register_keras_serializable(package="keras_posenc")
class T5TargetMask(keras.layers.Layer):
    """Passes logits through, with the Keras mask of the decoder input T5 needs.

    ``layer([logits, decoder_token_ids])`` returns ``logits`` carrying the mask
    ``(decoder_token_ids != pad_id) | (position == 0)``: T5's decoder input
    starts with the padding id (its decoder start token), which is a real
    position, while padding after the target is not. Keras losses then skip
    the padded positions. ``layer([logits, decoder_token_ids, padding_mask])``
    with an explicit decoder padding mask (True or 1 for real positions; None
    counts as not given) gives the logits that mask instead: the target may
    then be padded on the left.

    Args:
        pad_id: the padding id.
        **kwargs: standard layer arguments.

    Examples:

        >>> import numpy as np
        >>> from keras import ops
        >>> layer = T5TargetMask(pad_id=0)
        >>> mask = layer.compute_mask([np.zeros((1, 4, 3)), np.array([[0, 7, 0, 0]])])
        >>> ops.convert_to_numpy(mask).tolist()
        [[True, True, False, False]]
        >>> explicit = np.array([[0, 1, 1, 1]])  # left padding: the start token at 1
        >>> mask = layer.compute_mask([np.zeros((1, 4, 3)), np.array([[0, 0, 7, 8]]), explicit])
        >>> ops.convert_to_numpy(mask).tolist()
        [[False, True, True, True]]
    """

    def __init__(self, pad_id: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pad_id = check_int(type(self).__name__, "pad_id", pad_id, 0)
        self.supports_masking = True

    def call(self, inputs: Any) -> Any:
        return unmasked(inputs[0])

    def compute_mask(self, inputs: Any, previous_mask: Any = None) -> Any:
        ids = ops.cast(inputs[1], "int32")
        if len(inputs) > 2 and inputs[2] is not None:
            owner = f"{type(self).__name__}({self.name!r})"
            return _checked_mask(owner, "padding_mask", inputs[2], ids)
        # Position 0 from a cumulative sum: no length is needed (unknown while symbolic).
        first = ops.equal(ops.cumsum(ops.ones_like(ids), axis=1), 1)
        return ops.logical_or(ops.not_equal(ids, self.pad_id), first)

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return tuple(input_shape[0])

    def compute_output_spec(self, inputs: Any) -> Any:
        return keras.KerasTensor(inputs[0].shape, dtype=inputs[0].dtype)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(pad_id=self.pad_id)
        return config


# --------------------------------------------------------------------------- model


@keras.saving.register_keras_serializable(package="keras_posenc")
class T5(Seq2SeqModel):
    """The T5 encoder-decoder, built from `RelativePositionBias` and `MultiHeadRelativeAttention`.

    A functional model: ``model({"encoder_token_ids": source,
    "decoder_token_ids": target_in})`` returns float32 logits ``(batch,
    target_time, vocabulary_size)``; ``target_in`` is the target shifted right,
    starting with ``decoder_start_id`` (T5: 0, the padding id). Sources are
    padded with ``pad_id`` (the mask is ``ids != pad_id``); the logits carry
    the mask ``(target_in != pad_id) | (position == 0)`` (`T5TargetMask`).

    The call also takes keras-hub's ``T5Backbone`` inputs ``encoder_padding_mask``
    and ``decoder_padding_mask`` (optional inputs of the graph: ``(batch, time)``
    bool or int 0/1, True for real tokens). Given, they replace the masks found
    from the ids: sources and targets may then be padded on either side (the
    relative bias depends on distances only, so the states at real positions are
    those of the unpadded sequence), the decoder's self-attention masks the keys
    its mask marks as padding (with the causal mask), and the decoder mask is the
    logits' Keras mask. :meth:`hidden_states` returns both stacks' outputs under
    keras-hub's names.

    It implements the decoding contract of
    :class:`~keras_posenc.zoo.seq2seq.Seq2SeqModel`: ``encode`` gives
    ``(encoder_output, source_mask, cross_0, ..)`` with every decoder block's
    projected keys and values of the encoder output; the cache adds one zero
    self-attention buffer per decoder block, ``(batch, 2, max_length, heads,
    key_value_dim)``. ``generate`` runs greedy or beam search; it takes source
    ids or keras-hub's ``{"encoder_token_ids", "encoder_padding_mask"}`` dict.

    Pretrained weights: `keras_posenc.convert.from_keras_hub_t5` converts a
    ``keras_hub.models.T5Backbone`` (any keras-hub T5 preset).

    Args:
        vocabulary_size: token ids (shared by source, target and output).
        hidden_dim: model width ``d``.
        intermediate_dim: feed-forward width.
        num_heads: attention heads.
        num_layers: blocks in the encoder, and in the decoder unless
            ``num_decoder_layers`` is given.
        num_decoder_layers: decoder blocks; None: ``num_layers``.
        key_value_dim: head size; None: ``hidden_dim // num_heads``.
        activation: feed-forward activation: ``"relu"`` (v1.0), ``"gelu_tanh"``
            (v1.1), or any Keras activation.
        gated_activation: gated feed-forward (v1.1).
        tie_embeddings: the output projection is the embedding, transposed,
            applied to the decoder output scaled by ``hidden_dim ** -0.5``
            (v1.0); False: a separate matrix, no scale (v1.1).
        dropout: dropout rate (T5: 0.1 in pre-training).
        layer_norm_epsilon: the RMS norms' epsilon.
        num_buckets: relative position buckets (32).
        max_distance: the largest bucketed distance (128).
        fused_attention: ``"auto"``, ``True`` or ``False``; see
            `MultiHeadRelativeAttention`.
        position: another bias scheme in place of the buckets, in both stacks (a
            transplant, `keras_posenc.zoo.transplant`: ``"alibi"``, ``"kerple"``, ...);
            None (default) for T5's.
        remat: recompute every block in the backward pass of training (Keras' remat:
            ``T5Block(remat=True)``): less memory, more time. Default False.
        max_source_length: the longest source accepted, or None (any).
        max_target_length: the longest target (start token included), or None.
        pad_id: padding id (0).
        eos_id: the id that ends a target (1).
        decoder_start_id: the id every target starts with (T5: 0, equal to
            ``pad_id``); the model's ``bos_id``.
        tokenizer: a keras-hub ``T5Tokenizer`` (a converted preset's,
            `keras_posenc.convert.from_keras_hub_preset`), with which ``generate`` takes
            and returns text; None (default): token ids only.
        **kwargs: ``name`` and other ``keras.Model`` arguments.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.zoo.t5 import T5
        >>> model = T5(40, hidden_dim=8, intermediate_dim=16, num_heads=2, num_layers=1)
        >>> source = np.array([[5, 6, 7, 1], [8, 9, 1, 0]])
        >>> target_in = np.array([[0, 4, 5], [0, 6, 0]])
        >>> tuple(model({"encoder_token_ids": source, "decoder_token_ids": target_in}).shape)
        (2, 3, 40)
        >>> model.generate(source, max_length=5).shape
        (2, 5)
        >>> left = {"encoder_token_ids": np.array([[5, 6, 7, 1], [0, 8, 9, 1]]),
        ...         "encoder_padding_mask": np.array([[1, 1, 1, 1], [0, 1, 1, 1]])}
        >>> bool((model.generate(left, max_length=5) == model.generate(source, max_length=5)).all())
        True

    Reference:
        Raffel, Shazeer, Roberts, Lee, Narang, Matena, Zhou, Li, Liu, "Exploring
        the Limits of Transfer Learning with a Unified Text-to-Text
        Transformer", JMLR 21, 2020.
    """

    # T5's targets start with the padding id (see Seq2SeqModel).
    decoder_start_may_be_pad = True
    #: The optional padding-mask inputs (keras-hub's names), each after its token ids;
    #: `keras_posenc.generation` passes an ``encoder_padding_mask`` on to ``encode``.
    padding_mask_names = {
        "encoder_padding_mask": "encoder_token_ids",
        "decoder_padding_mask": "decoder_token_ids",
    }

    def __init__(
        self,
        vocabulary_size: int = VOCABULARY_SIZE,
        hidden_dim: int = 512,
        intermediate_dim: int = 2048,
        num_heads: int = 8,
        num_layers: int = 6,
        num_decoder_layers: int | None = None,
        key_value_dim: int | None = None,
        activation: Any = "relu",
        gated_activation: bool = False,
        tie_embeddings: bool = True,
        dropout: float = 0.1,
        layer_norm_epsilon: float = 1e-6,
        num_buckets: int = 32,
        max_distance: int = 128,
        fused_attention: bool | str = "auto",
        position: Any = None,
        remat: bool = False,
        max_source_length: int | None = None,
        max_target_length: int | None = None,
        pad_id: int = 0,
        eos_id: int = 1,
        decoder_start_id: int = 0,
        tokenizer: Any = None,
        **kwargs: Any,
    ) -> None:
        owner = type(self).__name__
        self.hidden_dim = check_int(owner, "hidden_dim", hidden_dim, 1)
        self.num_heads = check_int(owner, "num_heads", num_heads, 1)
        if key_value_dim is None:
            if self.hidden_dim % self.num_heads:
                raise ValueError(
                    f"{owner}: `hidden_dim` must be a multiple of `num_heads` when "
                    f"`key_value_dim` is None (head size = hidden_dim / num_heads), got "
                    f"hidden_dim={hidden_dim}, num_heads={num_heads}."
                )
            key_value_dim = self.hidden_dim // self.num_heads
        self.key_value_dim = check_int(owner, "key_value_dim", key_value_dim, 1)
        self.num_layers = check_int(owner, "num_layers", num_layers, 1)
        self.num_decoder_layers = (
            self.num_layers
            if num_decoder_layers is None
            else check_int(owner, "num_decoder_layers", num_decoder_layers, 1)
        )
        self._decoder_layers_given = num_decoder_layers is not None
        self.tie_embeddings = check_bool(owner, "tie_embeddings", tie_embeddings)
        checked = self.check_seq2seq_arguments(
            vocabulary_size,
            vocabulary_size,
            pad_id,
            decoder_start_id,
            eos_id,
            max_source_length,
            max_target_length,
        )
        policy = keras.dtype_policies.get(kwargs.get("dtype") or keras.config.dtype_policy())
        stack = dict(
            intermediate_dim=intermediate_dim,
            num_heads=self.num_heads,
            key_value_dim=self.key_value_dim,
            activation=activation,
            gated_activation=gated_activation,
            dropout=dropout,
            layer_norm_epsilon=layer_norm_epsilon,
            num_buckets=num_buckets,
            max_distance=max_distance,
            fused_attention=fused_attention,
            position=position,
            remat=remat,
            dtype=policy,
        )
        try:
            self.encoder = T5Stack(self.num_layers, **stack, name="encoder")
            self.decoder = T5Stack(self.num_decoder_layers, **stack, decoder=True, name="decoder")
        except (TypeError, ValueError) as error:
            raise type(error)(f"{owner}: {error}") from error
        vocabulary = checked["source_vocab_size"]
        check_allocation(owner, "token embedding", [(vocabulary, self.hidden_dim)])
        self.token_embedding = keras.layers.ReversibleEmbedding(
            vocabulary,
            self.hidden_dim,
            tie_weights=self.tie_embeddings,
            embeddings_initializer=_normal(1.0),
            reverse_dtype="float32",
            dtype=policy,
            name="token_embedding",
        )
        self.source_mask = T5PaddingMask(checked["pad_id"], dtype=policy, name="source_mask")
        self.target_mask = T5TargetMask(checked["pad_id"], dtype=policy, name="target_mask")
        # Built before the graph: `encode` computes the cross-attention caches.
        self.token_embedding.build((None, None))
        self.decoder.build((None, None, self.hidden_dim))
        super().__init__(**checked, **kwargs)
        self._init_tokenizer(tokenizer)

    # ------------------------------------------------------------------ inputs

    def _functional_graph(self) -> tuple[dict, Any]:
        """The token ids, the optional padding masks (keras-hub's four inputs), the logits."""
        inputs = {}
        for ids_name in ("encoder_token_ids", "decoder_token_ids"):
            mask_name = ids_name.replace("token_ids", "padding_mask")
            inputs[ids_name] = keras.Input(shape=(None,), dtype="int32", name=ids_name)
            # Optional: a call without it gets None there, and the mask is found from the ids.
            inputs[mask_name] = keras.Input(
                shape=(None,), dtype="int32", name=mask_name, optional=True
            )
        state = self.encode(
            inputs["encoder_token_ids"], encoder_padding_mask=inputs["encoder_padding_mask"]
        )
        logits = self.decode(
            inputs["decoder_token_ids"], state, decoder_padding_mask=inputs["decoder_padding_mask"]
        )
        # As Seq2SeqModel's graph: the output named "logits", float32 under a mixed policy.
        logits = keras.layers.Identity(dtype="float32", name="logits")(logits)
        return inputs, logits

    def _complete_inputs(self, inputs: Any) -> Any:
        """A call's dict with each padding mask it lacks as None (the graph's inputs are
        optional, but Keras needs every key), after checking the masks it has."""
        if not isinstance(inputs, dict):
            return inputs
        owner = f"{type(self).__name__}({self.name!r})"
        inputs = dict(inputs)
        for mask_name, ids_name in self.padding_mask_names.items():
            mask = inputs.get(mask_name)
            if mask is not None and ids_name in inputs:
                # Before Keras casts the mask to the input's int32, which would turn an
                # additive (0 / -1e9) float mask into an inverted one.
                expected = shape_of(inputs[ids_name])
                check_mask(owner, mask_name, mask, expected, ("batch", "time"))
            inputs[mask_name] = mask
        return inputs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if args:
            args = (self._complete_inputs(args[0]), *args[1:])
        elif "inputs" in kwargs:
            kwargs["inputs"] = self._complete_inputs(kwargs["inputs"])
        return super().__call__(*args, **kwargs)

    def call(self, inputs: Any, training: Any = None, mask: Any = None, **kwargs: Any) -> Any:
        # `fit` and `predict` on JAX reach `call` without `__call__` (stateless_call).
        return super().call(self._complete_inputs(inputs), training=training, mask=mask, **kwargs)

    def compute_output_spec(self, inputs: Any, training: Any = None, mask: Any = None) -> Any:
        # A symbolic call (the model inside another functional model): Keras' Function reads
        # the shape of every input (keras/src/ops/function.py), so a mask left out stands in
        # as a symbolic int32 tensor of its ids' shape; the spec does not depend on values.
        inputs = self._complete_inputs(inputs)
        if isinstance(inputs, dict):
            for mask_name, ids_name in self.padding_mask_names.items():
                if inputs[mask_name] is None and ids_name in inputs:
                    inputs[mask_name] = keras.KerasTensor(shape_of(inputs[ids_name]), "int32")
        return super().compute_output_spec(inputs, training=training, mask=mask)

    def hidden_states(self, inputs: dict, training: Any = None) -> dict:
        """``{"encoder_sequence_output", "decoder_sequence_output"}``: both stacks' outputs.

        The states keras-hub's ``T5Backbone`` returns, under its names, for the inputs the
        model's call takes: ``encoder_token_ids`` and ``decoder_token_ids``, and optionally
        ``encoder_padding_mask`` and ``decoder_padding_mask``. Each state is ``(batch,
        time, hidden_dim)``, after the stack's final RMS norm (the decoder's before the
        output projection, so ``model.logits(states["decoder_sequence_output"])`` are the
        call's logits).

        A method, not a ``return_hidden_states=True`` argument of the call: the call is a
        functional Keras model whose one output, the logits, is what ``fit``, ``evaluate``,
        saving and the export rely on, and an argument that changes the outputs' structure
        would break them. keras-hub keeps the two apart the same way (``T5Seq2SeqLM``
        returns logits, its ``backbone`` the states), and this returns the backbone's dict,
        so code written for ``T5Backbone``'s outputs reads it unchanged.

        Args:
            inputs: a dict of the call's inputs (the padding masks are optional: each
                defaults to ``ids != pad_id`` for the encoder and to no decoder mask,
                as in the call).
            training: whether dropout is active.

        Returns:
            The dict of the two states.

        Raises:
            TypeError, ValueError: a missing token-id input, ids outside the vocabulary,
                or a padding mask of the wrong dtype or shape.

        Examples:

            >>> import numpy as np
            >>> model = T5(40, hidden_dim=8, intermediate_dim=16, num_heads=2, num_layers=1)
            >>> states = model.hidden_states({
            ...     "encoder_token_ids": np.array([[0, 0, 5, 6, 1]]),
            ...     "encoder_padding_mask": np.array([[0, 0, 1, 1, 1]]),  # left padding
            ...     "decoder_token_ids": np.array([[0, 4, 5]]),
            ... })
            >>> {name: tuple(state.shape) for name, state in states.items()}
            {'encoder_sequence_output': (1, 5, 8), 'decoder_sequence_output': (1, 3, 8)}
        """
        owner = f"{type(self).__name__}({self.name!r}).hidden_states"
        if not isinstance(inputs, dict):
            raise TypeError(
                f"{owner}: `inputs` must be a dict with encoder_token_ids and "
                f"decoder_token_ids (and optionally their padding masks), got "
                f"{type(inputs).__name__}."
            )
        missing = [
            name for name in ("encoder_token_ids", "decoder_token_ids") if name not in inputs
        ]
        if missing:
            raise ValueError(f"{owner}: `inputs` lacks {', '.join(missing)}; got {sorted(inputs)}.")
        self._check_token_inputs(inputs)
        inputs = self._complete_inputs(inputs)
        output, mask = self._encoder_output(
            inputs["encoder_token_ids"], inputs["encoder_padding_mask"], training
        )
        decoder_output = self._decoder_output(
            inputs["decoder_token_ids"], (output, mask), inputs["decoder_padding_mask"], training
        )
        return {"encoder_sequence_output": output, "decoder_sequence_output": decoder_output}

    # ------------------------------------------------------------------ contract

    def encode(
        self, encoder_token_ids: Any, training: Any = None, encoder_padding_mask: Any = None
    ) -> tuple:
        """``(encoder_output, source_mask, cross_0, .., cross_{n-1})``: the encoder state.

        ``encoder_output`` is ``(batch, source_time, d)`` (after the final RMS
        norm), ``source_mask`` True for real tokens (``encoder_padding_mask`` when
        given, else ``encoder_token_ids != pad_id``), ``cross_i`` decoder block
        ``i``'s projected keys and values of the encoder output, ``(batch, 2,
        source_time, heads, key_value_dim)``, computed once per source. With a
        mask, sources may be padded on the left: the bias depends on distances
        only, so the states at the real positions are those of the unpadded source.
        """
        x, mask = self._encoder_output(encoder_token_ids, encoder_padding_mask, training)
        return (x, mask, *self.decoder.cross_attention_caches(x))

    def _encoder_output(self, ids: Any, padding_mask: Any, training: Any) -> tuple:
        ids = ops.cast(ids, "int32")
        mask = self.source_mask(ids, padding_mask=padding_mask)
        x = self.encoder(self.token_embedding(ids), padding_mask=mask, training=training)
        return x, mask

    def decode(
        self,
        decoder_token_ids: Any,
        encoder_state: tuple,
        training: Any = None,
        decoder_padding_mask: Any = None,
    ) -> Any:
        """Teacher-forced float32 logits.

        Without ``decoder_padding_mask`` the target positions are 0, 1, .. (right
        padding only): the decoder's self-attention is causal and gets no padding
        mask, so a real position never sees the padding after it and ``decode``
        equals ``decode_step`` at every position; the logits carry the Keras mask
        ``(decoder_token_ids != pad_id) | (position == 0)``. With it (``(batch,
        target_time)``, True or 1 for real positions) the keys it marks as padding
        are masked too, so a target may be padded on the left, and it is the
        logits' Keras mask. A padded position whose every key is masked (left
        padding) attends to nothing: its attention output is zero.
        """
        x = self._decoder_output(decoder_token_ids, encoder_state, decoder_padding_mask, training)
        ids = ops.cast(decoder_token_ids, "int32")
        return self.target_mask([self.logits(x), ids, decoder_padding_mask])

    def _decoder_output(
        self, ids: Any, encoder_state: tuple, padding_mask: Any, training: Any
    ) -> Any:
        output, mask = encoder_state[:2]
        ids = ops.cast(ids, "int32")
        return self.decoder(
            self.token_embedding(ids),
            padding_mask=padding_mask,
            encoder_output=output,
            encoder_mask=mask,
            training=training,
        )

    def logits(self, hidden: Any) -> Any:
        """float32 logits of decoder outputs: the transposed embedding applied to
        ``hidden * hidden_dim ** -0.5`` (tied, T5 v1.0), or the separate matrix."""
        if self.tie_embeddings:
            hidden = hidden * ops.cast(self.hidden_dim**-0.5, hidden.dtype)
        return self.token_embedding(hidden, reverse=True)

    def encoder_state_names(self) -> tuple[str, ...]:
        """``encoder_output``, ``source_mask``, then ``cache_decoder_block_<i>_cross_attention``."""
        crosses = (f"cache_{block.name}_cross_attention" for block in self.decoder.blocks)
        return ("encoder_output", "source_mask", *crosses)

    def cache_names(self) -> tuple[str, ...]:
        """The encoder state's names, then ``cache_decoder_block_<i>_self_attention``."""
        buffers = (f"cache_{block.name}_self_attention" for block in self.decoder.blocks)
        return (*self.encoder_state_names(), *buffers)

    def init_cache(self, encoder_state: tuple, max_length: int) -> tuple:
        """The encoder state, then one zero self-attention buffer per decoder block."""
        batch = ops.shape(encoder_state[0])[0]
        shape = (batch, 2, max_length, self.num_heads, self.key_value_dim)
        buffers = [ops.zeros(shape, dtype=self.compute_dtype) for _ in self.decoder.blocks]
        return (*encoder_state, *buffers)

    def decode_step(self, token_ids: Any, cache: tuple, index: Any) -> tuple:
        layers = len(self.decoder.blocks)
        output, mask, *rest = cache
        crosses, buffers = rest[:layers], rest[layers:]
        ids = ops.reshape(ops.cast(token_ids, "int32"), (-1, 1))
        x, new_buffers = self.decoder(
            self.token_embedding(ids),
            encoder_mask=mask,
            caches=list(zip(buffers, crosses, strict=True)),
            cache_update_index=index,
        )
        return self.logits(x)[:, 0], (output, mask, *crosses, *new_buffers)

    def get_config(self) -> dict:
        block = self.encoder.blocks[0]
        return {
            "name": self.name,
            "vocabulary_size": self.source_vocab_size,
            "hidden_dim": self.hidden_dim,
            "intermediate_dim": block.intermediate_dim,
            "num_heads": self.num_heads,
            "num_layers": self.num_layers,
            "num_decoder_layers": self.num_decoder_layers if self._decoder_layers_given else None,
            "key_value_dim": self.key_value_dim,
            "activation": block.get_config()["activation"],
            "gated_activation": block.gated_activation,
            "tie_embeddings": self.tie_embeddings,
            "dropout": block.dropout,
            "layer_norm_epsilon": block.layer_norm_epsilon,
            "num_buckets": self.encoder.num_buckets,
            "max_distance": self.encoder.max_distance,
            "position": keras.saving.serialize_keras_object(self.encoder.position),
            "fused_attention": block.fused_attention,
            "remat": block.remat,
            "max_source_length": self.max_source_length,
            "max_target_length": self.max_target_length,
            "pad_id": self.pad_id,
            "eos_id": self.eos_id,
            "decoder_start_id": self.bos_id,
            **self._tokenizer_config(),
        }


def query_kernel_scale(key_value_dim: int) -> float:
    """Our query kernel divided by T5's: ``sqrt(key_value_dim)`` (the module docstring says why).

    Examples:

        >>> query_kernel_scale(64)
        8.0
    """
    return math.sqrt(key_value_dim)


for _name, _config in CONFIGS.items():
    register_model(
        _name,
        T5,
        family="t5",
        config=_config,
        description=(
            f"T5{' v1.1' if _config.gated_activation else ''} "
            f"{_config.num_layers}+{_config.num_layers} layers, d {_config.hidden_dim}, "
            f"FFN {_config.intermediate_dim}, {_config.num_heads} heads, log-bucket "
            "relative bias"
        ),
        paper_parameters=PAPER_PARAMETERS[_name],
        reference=REFERENCE,
    )
