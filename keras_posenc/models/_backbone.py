"""The zoo's networks as keras-hub ``Backbone``\\ s: one base class for every family.

keras-hub meets a model through its ``Backbone`` (the network up to its last hidden
states or feature map), a ``Task`` around it (``ImageClassifier``, ``Seq2SeqLM``,
``CausalLM``, ...) and the task's preprocessor, saved and loaded by ``save_to_preset``
and ``from_preset`` (keras_hub/src/utils/preset_utils.py: ``config.json`` names the
backbone's registered class, ``task.json`` the task's). A family of the zoo becomes a
keras-hub family by a :class:`ZooBackbone` subclass that says which builder of the zoo
makes its network and which builder arguments belong to the task's head
(:attr:`ZooBackbone.head_arguments`): the backbone's configuration is the named
configuration's fields without them, so ``zoo.create(name)`` and
``Backbone.from_zoo(name)`` build the same layers from the same code.

Examples:

    >>> from keras_posenc import models
    >>> issubclass(models.ZooBackbone, __import__("keras_hub").models.Backbone)
    True
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

import keras
import keras_hub

from keras_posenc.zoo.config import _jsonable
from keras_posenc.zoo.registry import _configure, get_spec

__all__ = ["ZooBackbone", "copy_weights"]


class ZooBackbone(keras_hub.models.Backbone):
    """A zoo family's network as a keras-hub ``Backbone``.

    A subclass sets :attr:`family` (the zoo family, ``"coatnet"``), :attr:`builder`
    (the zoo's function or class that builds the family's network from its
    configuration's fields), :attr:`head_arguments` (the fields that belong to the task,
    left out of the backbone's configuration) and :attr:`network_arguments` (what the
    builder is called with besides, to build the network without its head, e.g.
    ``{"include_top": False, "pooling": None}``). It is registered with
    ``keras.saving.register_keras_serializable(package="keras_posenc")``, so that
    keras-hub's ``Backbone.from_preset`` finds it by its ``config.json``.

    The backbone is a functional model over the built network's inputs and outputs: the
    same layers, weights and names as ``zoo.create`` builds. Its configuration
    (``get_config``) is keras-hub's (``name``, ``trainable``, ``dtype``) and the
    network's fields, JSON-ready.

    Args:
        **arguments: fields of the family's configuration (those of a named one:
            :meth:`from_zoo`), and ``name``, ``trainable``, ``dtype``.

    Raises:
        ValueError: a head argument given to the backbone (it belongs to the task), or
            what the family's builder refuses.
    """

    family: ClassVar[str] = ""
    # A subclass sets it as ``staticmethod(build_...)`` (or the model class).
    builder: ClassVar[Callable[..., keras.Model] | None] = None
    head_arguments: ClassVar[tuple[str, ...]] = ()
    network_arguments: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, *, dtype: Any = None, name: str | None = None, **arguments: Any) -> None:
        who = type(self).__name__
        given = sorted(set(arguments) & {*self.head_arguments, *self.network_arguments})
        if given:
            raise ValueError(
                f"{who}: {', '.join(map(repr, given))} belong to the task (its head), not "
                f"to the backbone; give them to the family's task (its from_zoo takes them)."
            )
        trainable = arguments.pop("trainable", True)
        network = self.build_network(dtype=dtype, name=name, **arguments)
        super().__init__(
            inputs=network.input,  # the network's structure (a dict of inputs stays one)
            outputs=network.output,
            name=name or network.name,
            trainable=trainable,
            dtype=dtype,
        )
        # JSON-ready (tuples as lists, block options as dicts): what config.json holds.
        self.network_config = _jsonable(arguments)
        self.network = network

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "network":
            # The built model, for what a family reads of it (its pyramid levels, its
            # generation steps); kept out of Keras' tracking, whose layers the
            # functional graph already holds (their weights save once, under the graph).
            object.__setattr__(self, name, value)
            return
        super().__setattr__(name, value)

    @classmethod
    def build_network(
        cls, *, dtype: Any = None, name: str | None = None, **arguments: Any
    ) -> keras.Model:
        """The family's network without its head: ``builder(**arguments,
        **network_arguments)``, with ``name`` and ``dtype`` when given."""
        if cls.builder is None:
            raise TypeError(f"{cls.__name__}: a ZooBackbone subclass sets `builder`.")
        extra: dict[str, Any] = {"name": name} if name is not None else {}
        if dtype is None:
            return cls.builder(**arguments, **cls.network_arguments, **extra)
        try:
            accepts_dtype = "dtype" in inspect.signature(cls.builder).parameters
        except (TypeError, ValueError):  # a builder without a signature
            accepts_dtype = False
        if accepts_dtype:
            return cls.builder(**arguments, **cls.network_arguments, **extra, dtype=dtype)
        # keras-hub's from_preset gives the backbone a dtype (its config's, or the caller's);
        # a builder without one builds its layers under the global policy, set meanwhile.
        with dtype_policy(dtype):
            return cls.builder(**arguments, **cls.network_arguments, **extra)

    @classmethod
    def zoo_arguments(cls, name: str, **overrides: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """The named configuration ``name`` (with ``overrides``) split into the backbone's
        arguments and the head's (:attr:`head_arguments`).

        Raises:
            ValueError: an unknown name, a name of another family, or an override that is
                no field of the configuration (close matches named).
        """
        spec = get_spec(name)
        if spec.family != cls.family:
            raise ValueError(
                f"{cls.__name__}.from_zoo: {name!r} is a {spec.family!r} model; this "
                f"backbone builds the {cls.family!r} family's."
            )
        return cls.split_arguments(_configure(spec, overrides))

    @classmethod
    def split_arguments(cls, arguments: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The builder's ``arguments`` split into the backbone's and the head's."""
        head = {k: v for k, v in arguments.items() if k in cls.head_arguments}
        backbone = {
            k: v
            for k, v in arguments.items()
            if k not in cls.head_arguments and k not in cls.network_arguments
        }
        return backbone, head

    @classmethod
    def from_zoo(cls, name: str, **overrides: Any) -> ZooBackbone:
        """The backbone of the zoo's named configuration ``name`` (``zoo.list_models``),
        with fresh weights; ``overrides`` replace fields as in ``zoo.create``.

        Raises:
            ValueError: see :meth:`zoo_arguments`.
        """
        backbone, _ = cls.zoo_arguments(name, **overrides)
        return cls(**backbone)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(self.network_config)
        return config


@contextlib.contextmanager
def dtype_policy(dtype: Any) -> Iterator[None]:
    """Keras' global dtype policy set to ``dtype`` (a name, a ``DTypePolicy``) meanwhile:
    the layers the zoo's builders and heads make, which take no ``dtype``, get it."""
    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy(keras.dtype_policies.get(dtype))
    try:
        yield
    finally:
        keras.config.set_dtype_policy(before)


def copy_weights(source: keras.Model, target: keras.Model, who: str = "copy_weights") -> None:
    """Copies every weight of ``source`` into ``target``: by variable path (a layer's name and
    the variable's, the same in ``zoo.create``'s model and in a task built from the same
    configuration, whatever the nesting), or, where the paths are not one to one, by order.

    The one weight copy between the zoo's models and the keras-hub classes
    (``Task.from_zoo`` and ``task.to_zoo``).

    Raises:
        ValueError: the models differ in their weights' count, paths or shapes (the message
            names the first that differ).

    Examples:

        >>> import keras, numpy as np
        >>> def dense():
        ...     inputs = keras.Input((2,))
        ...     return keras.Model(inputs, keras.layers.Dense(3, name="out")(inputs))
        >>> source, target = dense(), dense()
        >>> copy_weights(source, target)
        >>> all(np.array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))
        ...     for a, b in zip(source.weights, target.weights))
        True
    """
    mine, theirs = list(source.weights), list(target.weights)
    if len(mine) != len(theirs):
        raise ValueError(
            f"{who}: the models do not match: {source.name!r} has {len(mine)} weights, "
            f"{target.name!r} has {len(theirs)}."
        )
    paths = {variable.path: variable for variable in theirs}
    by_path = len(paths) == len(theirs) and len({v.path for v in mine}) == len(mine)
    if by_path and set(paths) == {variable.path for variable in mine}:
        pairs = [(variable, paths[variable.path]) for variable in mine]
    else:  # nested names that differ: the order of creation, which the same code keeps
        pairs = list(zip(mine, theirs))
    for origin, destination in pairs:
        if tuple(origin.shape) != tuple(destination.shape):
            raise ValueError(
                f"{who}: the models do not match: weight {origin.path!r} of {source.name!r} "
                f"has shape {tuple(origin.shape)}, {destination.path!r} of {target.name!r} "
                f"{tuple(destination.shape)}."
            )
    for origin, destination in pairs:
        destination.assign(keras.ops.convert_to_numpy(origin))
