"""Position-scheme transplant: a trained model with its position encoding replaced or rescaled.

`transplant(model, scheme)` builds the model again from its config with another position
encoding and copies every weight that keeps its path and shape, bit for bit; the weights the
new encoding brings (a T5 bucket table, KERPLE's two parameters per head, FIRE's MLP, ...)
keep their initializer's draw and are listed, by path, in the returned `Transplant`, as are
the weights the old encoding leaves behind. So a model converted from keras-hub
(`keras_posenc.convert.from_keras_hub_preset`) or trained here can be stretched with PI,
NTK, YaRN or Llama 3's rotary scaling, or moved to ALiBi, KERPLE, FIRE, a continuous bias,
T5's buckets or no position at all (NoPE), then fine-tuned (`Transplant.fine_tune`: the new
weights only, or all) and measured across lengths
(``keras_posenc.experiments.length_evaluation``).

What a scheme becomes (`changes_of`):

    scheme                                   rotary       relative   position
    "nope"                                   None         None       None
    "rope"                                   RoPE()       None       None
    a RotaryPositions (any scaling)          it           kept       kept
    "alibi", "kerple", "fire", "continuous",
    "t5", "t5_decoder", ... or a scheme      None         "bias"     it

and ``rotary=``, ``relative=``, ``position=`` (and a Gemma 3's ``global_rotary=``) say any
combination explicitly. A model takes the keys its config has: `DecoderLM` all of them.

The names of the new weights are the layers' own: in a `DecoderLM`,
``transformer_layer_<i>/attention/relative_bias/<weight>`` (``table`` for a bucketed or
clipped scheme, ``r1``/``r2`` for KERPLE, FIRE's and the continuous bias' MLP kernels and
biases, ...; ALiBi has none).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import keras
import numpy as np

from keras_posenc import tokenizers
from keras_posenc.layers import position_schemes
from keras_posenc.layers._checks import check_choice, check_int, check_positive_number
from keras_posenc.layers.rotary import RotaryPositions

__all__ = ["Transplant", "changes_of", "transplant"]

#: What `transplant` may change in a model's config: the position arguments.
POSITION_KEYS = ("rotary", "relative", "position", "global_rotary")
_KEEP = object()


def changes_of(scheme: Any, caller: str = "transplant") -> dict[str, Any]:
    """The config changes a ``scheme`` shorthand stands for (the module's table).

    Examples:

        >>> changes_of("nope")
        {'rotary': None, 'relative': None, 'position': None}
        >>> changes_of("alibi")["relative"]
        'bias'
        >>> changes_of(RotaryPositions(scaling="linear", scaling_factor=4.0))["rotary"].scaling
        'linear'

    Raises:
        ValueError: for an unknown name (listing the names).
        TypeError: for anything else.
    """
    if scheme is None:
        return {}
    if isinstance(scheme, str) and scheme == "nope":
        return {"rotary": None, "relative": None, "position": None}
    if isinstance(scheme, str) and scheme == "rope":
        return {"rotary": RotaryPositions(), "relative": None, "position": None}
    if isinstance(scheme, RotaryPositions):
        return {"rotary": scheme}
    if isinstance(scheme, dict) and scheme.get("class_name") == "RotaryPositions":
        return {"rotary": keras.saving.deserialize_keras_object(scheme)}
    if isinstance(scheme, str) and scheme not in position_schemes.names():
        names = ", ".join(["nope", "rope", *position_schemes.names()])
        raise ValueError(
            f"{caller}: `scheme` must be 'nope', 'rope', a RotaryPositions or a position "
            f"scheme ({names}), got {scheme!r}."
        )
    position = position_schemes.get(scheme, caller, "scheme")
    return {"rotary": None, "relative": "bias", "position": position}


@dataclasses.dataclass
class Transplant:
    """What `transplant` returns: the new model and what happened to each weight.

    Attributes:
        model: the model with the new position encoding.
        source: the model it came from (unchanged).
        changes: the config entries that changed (``rotary``, ``relative``, ...).
        new_weights: paths of the weights the new encoding brings (initialised, not copied),
            and of any weight whose shape changed.
        removed_weights: paths of the source's weights the new model has no place for (the
            old encoding's).
        copied_weights: paths of the weights copied bit for bit.
    """

    model: keras.Model
    source: keras.Model
    changes: dict
    new_weights: list[str]
    removed_weights: list[str]
    copied_weights: list[str]

    def summary(self) -> str:
        """One paragraph: the changes, and the weights new, removed and copied."""
        changes = ", ".join(f"{k}={_describe(v)}" for k, v in self.changes.items())
        lines = [
            f"{self.source.name} -> {self.model.name}: {changes or 'no change'}",
            f"  copied {len(self.copied_weights)} weights bit for bit",
            f"  new ({len(self.new_weights)}): {', '.join(self.new_weights) or 'none'}",
            f"  removed ({len(self.removed_weights)}): {', '.join(self.removed_weights) or 'none'}",
        ]
        return "\n".join(lines)

    def fine_tune(
        self,
        text: str | os.PathLike,
        sequence_length: int,
        train: str = "new",
        tokenizer: Any = None,
        epochs: int = 1,
        batch_size: int = 8,
        learning_rate: float = 1e-3,
        stride: int | None = None,
        verbose: Any = "auto",
    ) -> keras.callbacks.History:
        """Fine-tunes the transplanted language model on ``text`` (a string, or the path
        of a UTF-8 text file: a ``pathlib.Path`` or an existing file's name) with ``fit``.

        The text is tokenized (``tokenizer``, default the model's) and cut into next-token
        windows of ``sequence_length`` (`keras_posenc.tokenizers.next_token_windows`); the
        model is compiled with Adam and a sparse cross-entropy on its logits and fitted,
        with Keras' progress bar (``verbose``). ``train="new"`` trains the `new_weights` only
        (every other weight frozen for the fit, then trainable again as it was); ``"all"``
        trains everything.

        Returns:
            The fit's ``History``.

        Raises:
            TypeError: for a model that is not a language model, or text without a tokenizer.
            ValueError: for ``train`` other than ``"new"``/``"all"``, ``"new"`` with no new
                weight, or a text shorter than one window.
        """
        who = "Transplant.fine_tune"
        train = check_choice(who, "train", train, ("new", "all"))
        check_int(who, "epochs", epochs, 1)
        check_int(who, "batch_size", batch_size, 1)
        check_positive_number(who, "learning_rate", learning_rate)
        if not getattr(self.model, "is_decoder_only", False):
            raise TypeError(
                f"{who}: fine-tuning on text needs a language model (a decoder-only zoo "
                f"model), got {type(self.model).__name__}."
            )
        tokenizer = tokenizers.get(tokenizer, who) or getattr(self.model, "tokenizer", None)
        if tokenizer is None:
            raise TypeError(
                f"{who}: `tokenizer` must be given for a model without one (e.g. "
                f"tokenizer='byte' for a byte-level model), got None."
            )
        if train == "new" and not self.new_weights:
            raise ValueError(
                f"{who}: train='new' needs new weights, and this transplant has none "
                f"({_describe_changes(self.changes)}); pass train='all'."
            )
        if isinstance(text, os.PathLike) or (isinstance(text, str) and os.path.isfile(text)):
            with open(text, encoding="utf-8") as handle:
                text = handle.read()
        inputs, targets = tokenizers.next_token_windows(tokenizer, text, sequence_length, stride)
        frozen = []
        if train == "new":
            new = set(self.new_weights)
            for weight in self.model.weights:
                if weight.trainable and weight.path not in new:
                    weight.trainable = False
                    frozen.append(weight)
        try:
            self.model.compile(
                optimizer=keras.optimizers.Adam(learning_rate),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
            return self.model.fit(
                inputs, targets, batch_size=batch_size, epochs=epochs, verbose=verbose
            )
        finally:
            for weight in frozen:
                weight.trainable = True


def _describe(value: Any) -> str:
    if isinstance(value, RotaryPositions):
        scaling = value.scaling or "none"
        return f"RotaryPositions(scaling={scaling!r}, scaling_factor={value.scaling_factor})"
    return repr(value)


def _describe_changes(changes: dict) -> str:
    return ", ".join(f"{k}={_describe(v)}" for k, v in changes.items()) or "no change"


def transplant(
    model: keras.Model,
    scheme: Any = None,
    *,
    rotary: Any = _KEEP,
    relative: Any = _KEEP,
    position: Any = _KEEP,
    global_rotary: Any = _KEEP,
    name: str | None = None,
) -> Transplant:
    """``model`` with its position encoding replaced or rescaled, its other weights copied.

    Args:
        model: a zoo model whose config has the position arguments changed (`DecoderLM`:
            ``rotary``, ``relative``, ``position``, ``global_rotary``).
        scheme: a shorthand (the module's table): ``"nope"``, ``"rope"``, a
            `RotaryPositions` (e.g. ``RotaryPositions(scaling="yarn", scaling_factor=4.0,
            training_length=...)``), or a position scheme or its name (``"alibi"``,
            ``"kerple"``, ``"fire"``, ``"continuous"``, ``"t5_decoder"``, ...) as a bias
            without rotary. The shorthand sets the global layers' rotary too where the model
            has one (Gemma 3), except a `RotaryPositions`, which rescales the local one.
        rotary: the new rotary embedding (a `RotaryPositions`, its config, or None).
        relative: the new relative mode (``"bias"``, ``"keys"``, ... or None).
        position: the relative term's scheme.
        global_rotary: the rotary embedding of a Gemma 3's global layers.
        name: the new model's name (default the source's, with ``"_transplant"``).

    Returns:
        A `Transplant`: the model, and the paths of its new, removed and copied weights.

    Raises:
        TypeError: for a model without a config of those arguments, or a scheme of no known
            kind.
        ValueError: for an unknown scheme name, or a combination the model refuses (its
            own message, e.g. FIRE needs causal attention).

    Examples:

        >>> import numpy as np
        >>> from keras import ops
        >>> from keras_posenc import zoo
        >>> model = zoo.create("decoder_lm_tiny")
        >>> kerple = transplant(model, "kerple")
        >>> kerple.new_weights[0], len(kerple.new_weights)  # two per layer
        ('transformer_layer_0/attention/relative_bias/r1', 4)
        >>> len(kerple.copied_weights) == len(model.weights)
        True
        >>> same = transplant(model, RotaryPositions())  # RoPE to RoPE, scale 1
        >>> ids = np.array([[1, 72, 105, 33]])
        >>> bool(np.array_equal(ops.convert_to_numpy(same.model(ids)),
        ...                     ops.convert_to_numpy(model(ids))))
        True
    """
    who = "transplant"
    if not hasattr(model, "get_config") or not hasattr(type(model), "from_config"):
        raise TypeError(f"{who}: `model` must be a zoo model, got {type(model).__name__}.")
    config = model.get_config()
    changes = changes_of(scheme, who)
    if scheme is not None and not isinstance(scheme, RotaryPositions | dict):
        if config.get("global_rotary") is not None:
            changes["global_rotary"] = changes["rotary"]
    for key, value in (
        ("rotary", rotary),
        ("relative", relative),
        ("position", position),
        ("global_rotary", global_rotary),
    ):
        if value is not _KEEP:
            changes[key] = value
    if not changes:
        raise TypeError(
            f"{who}: say what changes: a `scheme`, or rotary=, relative=, position= "
            "(all were left as they are)."
        )
    # A model whose position is always a bias and has no rotary (T5) takes a scheme's
    # position alone: its implicit relative="bias" and rotary=None are not changes.
    implicit = {"rotary": None, "relative": "bias", "global_rotary": None}
    for key, value in list(changes.items()):
        if "position" in config and key not in config and value == implicit.get(key, key):
            del changes[key]
    unknown = [key for key in changes if key not in config]
    if unknown:
        taken = [key for key in POSITION_KEYS if key in config]
        raise TypeError(
            f"{who}: {type(model).__name__} has no {', '.join(map(repr, unknown))} in its "
            f"config; it takes {', '.join(map(repr, taken)) or 'no position argument'}."
        )
    config.update(changes)
    config["name"] = name or f"{model.name}_transplant"
    if getattr(model, "tokenizer", None) is not None:
        config["tokenizer"] = model.tokenizer  # the same layer: its vocabulary is loaded
    new_model = type(model).from_config(config)
    source = {weight.path: weight for weight in model.weights}
    new, copied = [], []
    for weight in new_model.weights:
        old = source.get(weight.path)
        if old is None or tuple(old.shape) != tuple(weight.shape):
            new.append(weight.path)
            continue
        weight.assign(keras.ops.convert_to_numpy(old))
        copied.append(weight.path)
    kept = {weight.path for weight in new_model.weights}
    removed = [path for path in source if path not in kept]
    return Transplant(new_model, model, changes, new, removed, copied)


def equal_weights(first: keras.Model, second: keras.Model, paths: list[str]) -> bool:
    """Whether the weights at ``paths`` are bit for bit the same in both models."""
    a = {w.path: w for w in first.weights}
    b = {w.path: w for w in second.weights}
    return all(
        np.array_equal(keras.ops.convert_to_numpy(a[p]), keras.ops.convert_to_numpy(b[p]))
        for p in paths
    )
