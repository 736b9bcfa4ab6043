"""Adapting zoo models: LoRA, and the variables weight decay leaves alone.

Every zoo model derives from :class:`ZooModel`: the encoder-decoders and language
models through ``FunctionalModel`` (below), PosENet directly, and the image and
encoder models (CoAtNet, MaxViT, MUSE's encoders) as :class:`ZooFunctional`, a
functional ``keras.Model`` with nothing else added. So one implementation serves
every family:

- ``enable_lora(rank, target_layer_names=None)``, keras-hub's ``Backbone.enable_lora``
  (keras_hub/src/models/backbone.py): every weight is frozen, then each
  ``Dense``/``EinsumDense`` whose name is a target gets Keras' own LoRA
  (``layer.enable_lora``: a frozen kernel plus ``(alpha / rank) * A @ B``, A and B
  trainable) and stays trainable itself, so its bias trains too. Everything else,
  the relative position tables included, stays frozen.
- ``no_weight_decay_names()``: the names to pass to Keras'
  ``optimizer.exclude_from_weight_decay(var_names=...)``.

Examples:

    >>> import keras
    >>> from keras_posenc.zoo.t5 import T5
    >>> model = T5(31, hidden_dim=8, intermediate_dim=12, num_heads=2, num_layers=1,
    ...            num_buckets=8, max_distance=12)
    >>> model.no_weight_decay_names()
    ['scale', 'table']
    >>> model.enable_lora(2)
    >>> sorted({v.name for v in model.trainable_variables})
    ['lora_kernel_a', 'lora_kernel_b']
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

import keras

from keras_posenc.layers._checks import check_int, excerpt

#: The layers ``enable_lora`` adapts by default: each attention's query and value
#: projections, as keras-hub's ``Backbone.default_lora_layer_names`` and Hu et al.
#: (2021, section 7.1: W_q and W_v). By family: ``query`` and ``value`` in
#: ``MultiHeadRelativeAttention`` (T5, Shaw's Transformer, the Music Transformer), MUSE's
#: attention and keras_hub's cross-attention; ``qkv`` in ``RelativeTransformerBlock2D``
#: (CoAtNet, MaxViT: one layer computes queries, keys and values, so all three adapt);
#: ``in_projection`` and ``out_projection`` in ``ConvS2SAttention``, whose keys and
#: values are the encoder's outputs with no projection of their own.
DEFAULT_LORA_LAYER_NAMES = ("query", "value", "qkv", "in_projection", "out_projection")


#: The variable name of a learned *absolute* position table (ConvS2S's
#: ``position_embedding`` layer, a ``convs2s_layers.PositionEmbedding``): not ``embeddings``,
#: the token tables' name, so that a name can exclude it from weight decay.
POSITION_TABLE_NAME = "position_embeddings"

# The names of the position tables: the relative tables (``table``, ``table_0``, ...
# for several scales) and the learned absolute ones.
_POSITION_TABLE = re.compile(rf"(table|{POSITION_TABLE_NAME})(_\d+)?")


def is_no_decay(variable: keras.Variable) -> bool:
    """Whether weight decay should leave ``variable`` alone.

    timm's rule (``param_groups_weight_decay``: one dimension or fewer, or a bias),
    which covers biases, normalisation scales and offsets and layer scales, plus the
    position tables: the relative tables, which the zoo names ``table`` (``table_0``,
    ... for several scales), as CoAtNet's and MaxViT's papers and timm (their
    ``no_weight_decay``: ``relative_position_bias_table``) exclude them, and the
    learned absolute position tables, named ``position_embeddings`` (ConvS2S's), as
    timm excludes its ``pos_embed``.
    """
    name = variable.name
    return len(variable.shape) <= 1 or name == "bias" or bool(_POSITION_TABLE.fullmatch(name))


_QUANTIZED = "quantized_layers"


def _leaves(model: keras.Model) -> list:
    """The model's layers that hold weights and no sublayers, in a fixed order (the
    layers ``Model.quantize`` quantizes; names repeat, so they are told apart by their
    place in this list, as keras-hub's ``save_lora_weights`` does)."""
    return [
        layer
        for layer in model._flatten_layers(include_self=False)
        if layer.weights and len(list(layer._flatten_layers())) == 1
    ]


def _with_quantization(get_config: Callable) -> Callable:
    @functools.wraps(get_config)
    def wrapped(self: keras.Model) -> dict:
        config = get_config(self)
        modes: dict[str, list[int]] = {}
        for index, layer in enumerate(_leaves(self)):
            mode = getattr(layer, "quantization_mode", None)
            if mode:
                modes.setdefault(mode, []).append(index)
        if modes:
            config = {**config, _QUANTIZED: modes}
        if getattr(self, "layers_dtype", None) is not None:  # seq2seq.FunctionalModel's
            config = {"dtype": self.layers_dtype, **config}
        return config

    return wrapped


def _requantized(from_config: Callable) -> classmethod:
    @functools.wraps(from_config)
    def wrapped(cls: type, config: dict, *args: Any, **kwargs: Any) -> keras.Model:
        config = dict(config)
        modes = config.pop(_QUANTIZED, None)
        model = from_config(cls, config, *args, **kwargs)
        if modes:
            # Before Keras loads the weights into the model: the saved int8 kernels and
            # their scales need the quantized layers' variables.
            leaves = _leaves(model)
            for mode, indices in modes.items():
                # A nested zoo model (PosENet's backbone) quantized its own already.
                chosen = {
                    id(leaves[index]) for index in indices if not leaves[index].quantization_mode
                }
                if chosen:
                    model.quantize(mode, filters=lambda layer, ids=chosen: id(layer) in ids)
        return model

    return classmethod(wrapped)


class ZooModel:
    """What every zoo model can do beyond ``keras.Model``: LoRA, its no-decay names, and
    ``.keras`` files of quantized models.

    A mixin placed before ``keras.Model`` in a zoo model's bases. ``model.quantize``
    (Keras) replaces the weights of the projections it quantizes, but a zoo model's
    configuration is its constructor's arguments, which rebuild float layers: the
    configuration therefore also lists the quantized layers (``"quantized_layers"``,
    by mode), and ``from_config`` quantizes them again before Keras loads the weights.
    Every ``get_config`` and ``from_config`` a zoo model class defines is wrapped so
    (``__init_subclass__``).
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "get_config" in cls.__dict__:
            cls.get_config = _with_quantization(cls.__dict__["get_config"])
        if "from_config" in cls.__dict__:
            cls.from_config = _requantized(cls.__dict__["from_config"].__func__)

    def get_config(self) -> dict:
        return super().get_config()  # type: ignore[misc]

    @classmethod
    def from_config(cls, config: dict, custom_objects: Any = None) -> keras.Model:
        return super().from_config(config, custom_objects=custom_objects)  # type: ignore[misc]

    def default_lora_layer_names(self) -> list[str]:
        """The names of the layers :meth:`enable_lora` adapts when given no targets
        (`DEFAULT_LORA_LAYER_NAMES`)."""
        return list(DEFAULT_LORA_LAYER_NAMES)

    def enable_lora(self, rank: int, target_layer_names: Sequence[str] | None = None) -> None:
        """Freezes the model and adds Keras' LoRA to its target projections.

        keras-hub's ``Backbone.enable_lora``: every layer is frozen, then each layer
        named in ``target_layer_names`` that has ``enable_lora`` (Keras' ``Dense`` and
        ``EinsumDense``) is made trainable again and computes ``x @ (W + (alpha /
        rank) * A @ B) + b`` with ``W`` frozen, ``A`` ``he_uniform`` and ``B`` zeros
        (so the model's outputs are unchanged until it trains), ``alpha = rank``.
        The adapted layers' biases train; the relative position tables, norms and
        everything else stay frozen (set a layer's ``trainable`` back to train it too).

        Saving: ``.keras`` files hold each adapted kernel with ``A @ B`` merged into
        it (Keras' ``save_own_variables``), so a loaded model computes the adapted
        outputs without LoRA factors.

        Args:
            rank: the rank of ``A @ B``, an integer >= 1.
            target_layer_names: names of the layers to adapt (a layer's ``name``,
                matched in every nested layer); None means
                :meth:`default_lora_layer_names`.

        Raises:
            TypeError: ``rank`` not an integer, or ``target_layer_names`` not a
                sequence of strings.
            ValueError: ``rank`` below 1, no layer of the model has one of the
                names and ``enable_lora`` (the message lists the names that do),
                or LoRA already enabled on a target.
        """
        who = f"{type(self).__name__}({self.name!r}).enable_lora"
        rank = check_int(who, "rank", rank, 1)
        if target_layer_names is None:
            target_layer_names = self.default_lora_layer_names()
        if isinstance(target_layer_names, str) or not all(
            isinstance(name, str) for name in target_layer_names
        ):
            raise TypeError(
                f"{who}: `target_layer_names` must be a list of layer names, "
                f"got {target_layer_names!r}."
            )
        names = set(target_layer_names)
        layers = [layer for layer in self._flatten_layers(include_self=False) if layer.weights]
        targets = [
            layer for layer in layers if layer.name in names and hasattr(layer, "enable_lora")
        ]
        if not targets:
            adaptable = sorted({layer.name for layer in layers if hasattr(layer, "enable_lora")})
            raise ValueError(
                f"{who}: no layer named {excerpt(sorted(names))} has `enable_lora`; "
                f"the model's layers that have it: {excerpt(adaptable, 20) or 'none'}."
            )
        enabled = [layer.path for layer in targets if getattr(layer, "lora_enabled", False)]
        if enabled:
            raise ValueError(f"{who}: LoRA is already enabled on {excerpt(enabled)}.")
        self.trainable = True
        for layer in layers:
            layer.trainable = False
        for layer in targets:
            layer.trainable = True
            layer.enable_lora(rank)

    def no_weight_decay_names(self) -> list[str]:
        """The names of the trainable variables weight decay should leave alone, for
        ``optimizer.exclude_from_weight_decay(var_names=...)``.

        Biases, normalisation scales and offsets, other one-dimensional weights (layer
        scales, MUSE's kernel gates, ConvS2S's weight-norm magnitudes) and the position
        tables (`is_no_decay`): the relative tables (``table``) and the learned absolute
        ones (ConvS2S's ``position_embeddings``; its token tables, ``embeddings``,
        decay). Keras matches these strings inside each variable's ``name`` (its last
        path component), so every zoo variable weight decay should leave alone has a
        name no decayed variable contains (checked here).

        Raises:
            ValueError: a no-decay name occurs in the name of a variable that should
                decay (a model whose names cannot separate them).
        """
        variables = self.trainable_variables
        names = sorted({v.name for v in variables if is_no_decay(v)})
        clash = sorted(
            {v.path for v in variables if not is_no_decay(v) for name in names if name in v.name}
        )
        if clash:
            raise ValueError(
                f"{type(self).__name__}({self.name!r}).no_weight_decay_names: the names "
                f"{names} also occur in variables weight decay should apply to: "
                f"{excerpt(clash)}; pass the variables themselves "
                "(`exclude_from_weight_decay(var_list=...)`) instead."
            )
        return names


ZooModel.get_config = _with_quantization(ZooModel.__dict__["get_config"])
ZooModel.from_config = _requantized(ZooModel.__dict__["from_config"].__func__)


@keras.saving.register_keras_serializable(package="keras_posenc")
class ZooFunctional(ZooModel, keras.Model):
    """A functional ``keras.Model`` with :class:`ZooModel`'s methods: the zoo's image
    models, MUSE's, DeBERTa's and RoFormer's encoders (``ZooFunctional(inputs, outputs,
    name=...)``); it saves and loads as a functional model.

    A model built on a dict of inputs also takes them as a flat list in Keras' order (the
    names sorted, as ``keras.tree.flatten`` gives them): what the export's sample call
    passes (keras_posenc/export/model.py).
    """

    def _structured(self, inputs: Any) -> Any:
        struct = getattr(self, "_inputs_struct", None)
        if isinstance(struct, dict) and isinstance(inputs, list | tuple):
            if len(inputs) == len(struct):
                return keras.tree.pack_sequence_as(struct, list(inputs))
        return inputs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if args:
            args = (self._structured(args[0]), *args[1:])
        return super().__call__(*args, **kwargs)

    def call(self, inputs: Any, training: Any = None, mask: Any = None, **kwargs: Any) -> Any:
        return super().call(self._structured(inputs), training=training, mask=mask, **kwargs)


class FunctionalModel(ZooModel, keras.Model):
    """A functional ``keras.Model`` subclass that creates its layers before ``__init__``.

    Zoo models build their layers as attributes, wire them into a graph, then
    call ``keras.Model.__init__(inputs, outputs)``. Until then attributes are
    set as plain Python attributes (on PyTorch, Keras layers are
    ``torch.nn.Module``s, which refuse sublayers before ``Module.__init__``);
    the functional graph tracks every layer that holds state, so nothing is
    lost. keras_hub's ``Backbone`` does the same.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # keras.Model's functional constructor ignores arguments it does not know: a
        # misspelt one (`ShawTransformer(..., num_layer=2)`) built the default silently.
        unknown = sorted(set(kwargs) - {"inputs", "outputs", "name", "trainable", "dtype"})
        if unknown:
            raise TypeError(
                f"{type(self).__name__}: unknown argument(s) {', '.join(map(repr, unknown))}; "
                "besides its own, a zoo model takes keras.Model's name, trainable and dtype."
            )
        policy = keras.dtype_policies.get(kwargs.get("dtype") or keras.config.dtype_policy())
        super().__init__(*args, **kwargs)
        self._initialized = True
        # A functional model's config holds no policy: ZooModel's get_config adds the layers'.
        self.layers_dtype = policy.name

    def __setattr__(self, name: str, value: Any) -> None:
        if not hasattr(self, "_initialized"):
            object.__setattr__(self, name, value)
            return
        super().__setattr__(name, value)
