"""The zoo registry: named model configurations, listed and created by name.

A family module declares its table as frozen dataclasses (``keras_posenc.zoo.config``:
a :class:`~keras_posenc.zoo.config.ZooConfig` subclass whose fields are the builder's
keyword arguments) and registers each named configuration once, at import time, with
:func:`register_model`::

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class CoAtNetConfig(ZooConfig):
        blocks: tuple[int, ...]
        channels: tuple[int, ...]
        num_classes: int = 1000
        ...

    CONFIGS = by_name([CoAtNetConfig(zoo_name="coatnet_0", blocks=..., channels=...), ...])
    for name, config in CONFIGS.items():
        register_model(name, build_coatnet, family="coatnet", config=config,
                       paper_parameters=25_000_000, reference="Dai et al. 2021")

Users then call :func:`list_models` and :func:`create`. ``create`` checks that every
override names a field (or one of ``keras.Model``'s ``name``, ``dtype``, ``trainable``
that the builder takes), replaces those fields (``dataclasses.replace``: the dataclass
checks the values) and calls the builder with the result's arguments. A plain mapping
of keyword arguments still works as a configuration (a user's own builder), checked
against the builder's signature.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import inspect
import io
import os
import re
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import h5py
import keras

from keras_posenc.layers._checks import excerpt, innermost_error
from keras_posenc.zoo import shipped
from keras_posenc.zoo.config import ZooConfig

# Dots only between other characters, for release names such as "t5_1.1_small".
_NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$")
_WEIGHT_SUFFIXES = (".weights.h5", ".keras")


# keras.Model's own constructor arguments, which zoo model classes pass on in **kwargs.
_MODEL_ARGUMENTS = ("name", "trainable", "dtype")


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One registered zoo configuration.

    Attributes:
        name: the name ``create`` takes, lower case with underscores (``"coatnet_0"``).
        builder: a function that takes the configuration as keyword arguments and
            returns a ``keras.Model``.
        family: the family the model belongs to (``"coatnet"``, ``"convs2s"``, ...).
        config: the named configuration: the family's frozen dataclass
            (:class:`~keras_posenc.zoo.config.ZooConfig`), or, for a builder registered
            with a plain mapping, the keyword arguments themselves.
        description: one line for listings.
        paper_parameters: the parameter count the paper reports, when it reports one.
        reference: the paper, e.g. ``"Dai et al. 2021, CoAtNet"``.
    """

    name: str
    builder: Callable[..., keras.Model]
    family: str
    config: ZooConfig | Mapping[str, Any]
    description: str = ""
    paper_parameters: int | None = None
    reference: str | None = None

    def builder_arguments(self) -> tuple[str, ...] | None:
        """The keyword arguments the builder accepts, or None if it takes ``**kwargs``.

        A ``keras.Model`` subclass whose ``**kwargs`` go to ``keras.Model`` accepts its own
        arguments and ``keras.Model``'s: Keras' functional constructor ignored any other
        (``zoo.create("muse_tiny", vocab_size=40000)`` built a vocabulary of 1,000).
        """
        parameters = inspect.signature(self.builder).parameters.values()
        named = tuple(
            p.name
            for p in parameters
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        )
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            if isinstance(self.builder, type) and issubclass(self.builder, keras.Model):
                return named + tuple(a for a in _MODEL_ARGUMENTS if a not in named)
            return None
        return named

    def arguments(self) -> dict[str, Any]:
        """The keyword arguments the builder is called with (the configuration's)."""
        if isinstance(self.config, ZooConfig):
            return self.config.arguments()
        return dict(self.config)

    def required_arguments(self) -> tuple[str, ...]:
        """The builder's arguments that the named configuration does not set: each
        ``zoo.create`` call must give them (a translation model's vocabularies)."""
        if isinstance(self.config, ZooConfig):
            return self.config.required()
        parameters = inspect.signature(self.builder).parameters.values()
        return tuple(
            p.name
            for p in parameters
            if p.default is inspect.Parameter.empty
            and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
            and p.name not in self.config
        )


_REGISTRY: dict[str, ModelSpec] = {}


def register_model(
    name: str,
    builder: Callable[..., keras.Model],
    *,
    family: str,
    config: Mapping[str, Any] | None = None,
    description: str = "",
    paper_parameters: int | None = None,
    reference: str | None = None,
) -> ModelSpec:
    """Registers a named configuration of a model builder in the zoo.

    Args:
        name: the unique name users pass to :func:`create`; lower case letters,
            digits and underscores (dots between them, as in ``"t5_1.1_small"``),
            starting with a letter.
        builder: a callable returning a ``keras.Model`` from keyword arguments.
        family: the family the model belongs to.
        config: the named configuration: an instance of the family's
            :class:`~keras_posenc.zoo.config.ZooConfig` subclass, whose ``zoo_name`` (when
            set) is ``name``, or a mapping of keyword arguments. Every field (key) must be
            an argument of ``builder``.
        description: one line shown by ``posenc info`` and the docs.
        paper_parameters: the parameter count the paper reports, if any.
        reference: the paper the configuration comes from.

    Returns:
        The registered :class:`ModelSpec`.

    Raises:
        ValueError: for a malformed or already registered name, a config field or
            key that the builder does not accept, or a configuration named otherwise.
        TypeError: if ``builder`` is not callable.

    Examples:

        >>> import keras
        >>> def build_tiny(units=4):
        ...     inputs = keras.Input((3,))
        ...     return keras.Model(inputs, keras.layers.Dense(units)(inputs))
        >>> spec = register_model("doc_tiny", build_tiny, family="doc", config={"units": 2})
        >>> create("doc_tiny").output_shape
        (None, 2)
        >>> unregister_model("doc_tiny")
    """
    if not isinstance(name, str) or not _NAME_PATTERN.match(name):
        raise ValueError(
            "zoo.register_model: `name` must be lower case letters, digits and underscores "
            f"(dots between them) starting with a letter; got {name!r}."
        )
    if name in _REGISTRY:
        raise ValueError(
            f"zoo.register_model: a model named {name!r} is already registered "
            f"(family {_REGISTRY[name].family!r})."
        )
    if not callable(builder):
        raise TypeError(
            f"zoo.register_model: `builder` must be callable; got {type(builder).__name__}."
        )
    if isinstance(config, ZooConfig):
        if config.zoo_name not in ("", name):
            raise ValueError(
                f"zoo.register_model: the configuration is named {config.zoo_name!r}, "
                f"registered as {name!r}."
            )
    else:
        config = dict(config or {})
    spec = ModelSpec(
        name=name,
        builder=builder,
        family=family,
        config=config,
        description=description,
        paper_parameters=paper_parameters,
        reference=reference,
    )
    _check_arguments(spec, spec.arguments(), what="config key")
    _REGISTRY[name] = spec
    return spec


def unregister_model(name: str) -> None:
    """Removes a registered model; for tests and interactive experiments."""
    get_spec(name)
    del _REGISTRY[name]


def list_models(family: str | None = None) -> list[str]:
    """Names of the registered zoo models, sorted; optionally one family only.

    Examples:

        >>> from keras_posenc import zoo
        >>> all(isinstance(name, str) for name in zoo.list_models())
        True
    """
    return sorted(name for name, spec in _REGISTRY.items() if family in (None, spec.family))


def get_spec(name: str) -> ModelSpec:
    """The :class:`ModelSpec` registered under ``name``.

    Raises:
        ValueError: if no model has that name; the message lists close matches.
    """
    if name not in _REGISTRY:
        raise ValueError(
            f"zoo: unknown model {name!r}."
            + _suggestions(str(name), list(_REGISTRY))
            + f" Registered models: {', '.join(list_models()) or 'none'}."
        )
    return _REGISTRY[name]


def create(name: str, weights: str | os.PathLike | None = None, **overrides: Any) -> keras.Model:
    """Builds a registered zoo model, optionally loading weights into it.

    Args:
        name: a name from :func:`list_models`.
        weights: None for fresh initialisation (nothing is downloaded); the tag of
            weights shipped in the package for ``name`` (:func:`shipped_presets`:
            ``zoo.create("coatnet_0", weights="digits")``, a digits classifier, read
            offline, with the configuration fields the preset changes); the path of a
            ``.weights.h5`` file (``model.save_weights``) or a ``.keras`` file
            (``model.save``) saved from the same configuration; or a preset source
            (:func:`~keras_posenc.hub.preset_path`): a preset folder (ours, or a
            keras-hub preset of a ``keras_posenc.models`` classifier), or
            ``hf://ORG/REPO``, a timm checkpoint on the Hugging Face hub
            (``zoo.create("coatnet_0_rw_224", weights="hf://timm/coatnet_0_rw_224.sw_in1k")``),
            which **is downloaded and converted on first use**, then read from the cache.
        **overrides: fields of the named configuration to replace (for example
            ``num_classes=10``), and ``keras.Model``'s ``name``, ``dtype`` and
            ``trainable`` where the builder takes them.

    Returns:
        The ``keras.Model``.

    Raises:
        ValueError: for an unknown name, an override that is no field of the
            configuration (both list close matches), a tag of no shipped weights (the
            message lists those shipped), a value the configuration
            refuses (``TypeError`` for a wrong type), a weights file of another kind, a
            ``.keras`` file that is not a valid one (e.g. truncated), or
            weights saved from another configuration: variables the model does
            not have are listed (a larger configuration's extra blocks), and
            Keras itself refuses missing variables and shapes that differ.
            Relative position tables (``RelativePositionBias2D``) saved at
            another grid size are resized instead.
        TypeError: a field the named configuration leaves to the call (a translation
            model's vocabularies) not given; the message names it.
        FileNotFoundError: if ``weights`` does not exist.
        ConnectionError: a hub source neither cached nor reachable.

    Examples:

        >>> import keras
        >>> from keras_posenc import zoo
        >>> def build_mlp(hidden=8, num_classes=3):
        ...     inputs = keras.Input((4,))
        ...     x = keras.layers.Dense(hidden, activation="relu")(inputs)
        ...     return keras.Model(inputs, keras.layers.Dense(num_classes)(x))
        >>> _ = zoo.register_model("doc_mlp", build_mlp, family="doc", config={"hidden": 16})
        >>> zoo.create("doc_mlp", num_classes=5).output_shape
        (None, 5)
        >>> zoo.create("doc_mlp", num_clases=5)
        Traceback (most recent call last):
        ValueError: zoo model 'doc_mlp': unknown override 'num_clases'. Did you mean ...
        >>> zoo.unregister_model("doc_mlp")
    """
    spec = get_spec(name)
    arguments, weights = create_arguments(name, weights, **overrides)
    model = spec.builder(**arguments)
    if not isinstance(model, keras.Model):
        raise TypeError(
            f"zoo.create({name!r}): the builder returned {type(model).__name__}, "
            "expected a keras.Model."
        )
    if weights is not None:
        _load_weights(model, name, weights)
    return model


def create_arguments(
    name: str, weights: str | os.PathLike | None = None, **overrides: Any
) -> tuple[dict[str, Any], str | os.PathLike | None]:
    """What :func:`create` builds and loads: the builder's arguments (with the fields a
    shipped preset changes and a preset's class count) and the weights file to load (None
    without ``weights``), checked to exist. keras_posenc.models' ``from_zoo`` builds its
    backbone and head from the same arguments.

    Raises:
        ValueError, FileNotFoundError: see :func:`create`.
    """
    spec = get_spec(name)
    if shipped.is_tag(weights):  # a preset shipped in the package, with its fields
        weights, changed = shipped.shipped_weights(name, weights)
        overrides = {**changed, **overrides}
    arguments = _configure(spec, overrides)
    if weights is not None:  # before building: a bad file fails fast
        weights, classes = _preset_weights(weights)
        _check_weights_file(name, weights)
        accepted = spec.builder_arguments()
        given = "num_classes" in overrides
        if classes is not None and not given and (accepted is None or "num_classes" in accepted):
            # A preset's head decides (timm's ImageNet-12k checkpoints have 11821 classes).
            arguments = _configure(spec, {**overrides, "num_classes": classes})
    return arguments, weights


def _configure(spec: ModelSpec, overrides: dict[str, Any]) -> dict[str, Any]:
    """The builder's keyword arguments: the named configuration with ``overrides``.

    A dataclass configuration takes overrides of its fields (and of ``keras.Model``'s
    arguments the builder takes besides) through ``dataclasses.replace``, which runs its
    checks; a mapping takes any argument of the builder.
    """
    who = f"zoo.create({spec.name!r})"
    config = spec.config
    if isinstance(config, ZooConfig):
        fields = config.argument_names()
        accepted = spec.builder_arguments()
        extra = [a for a in _MODEL_ARGUMENTS if a not in fields and a in (accepted or ())]
        _check_keys(spec, overrides, [*fields, *extra], what="override")
        try:
            config = dataclasses.replace(
                config, **{key: value for key, value in overrides.items() if key in fields}
            )
        except (TypeError, ValueError) as error:
            raise type(error)(f"{who}: {error}") from error
        missing = config.required()
        arguments = {
            **config.arguments(),
            **{key: value for key, value in overrides.items() if key not in fields},
        }
    else:
        _check_arguments(spec, overrides, what="override")
        arguments = {**config, **overrides}
        missing = [a for a in spec.required_arguments() if a not in overrides]
    if missing:
        # Called without them, the builder failed with Python's "missing 1 required
        # positional argument", naming a private function.
        example = ", ".join(f"{argument}=..." for argument in missing)
        raise TypeError(
            f"{who}: the model needs {', '.join(map(repr, missing))}, which its named "
            f"configuration does not set: zoo.create({spec.name!r}, {example})."
        )
    return arguments


def _check_keys(spec: ModelSpec, arguments: Mapping[str, Any], accepted: Any, what: str) -> None:
    accepted = list(accepted)
    for key in arguments:
        if key not in accepted:
            raise ValueError(
                f"zoo model {spec.name!r}: unknown {what} {key!r}."
                + _suggestions(key, accepted)
                + f" Accepted: {', '.join(accepted) or 'none'}."
            )


def _check_arguments(spec: ModelSpec, arguments: Mapping[str, Any], what: str) -> None:
    accepted = spec.builder_arguments()
    if accepted is not None:
        _check_keys(spec, arguments, accepted, what)


def check_keras_file(path: str | os.PathLike, who: str = "") -> None:
    """Raises unless ``path`` is a readable ``.keras`` archive (a zip with a config
    and weights); Keras itself reports a truncated one as "File not found".

    Args:
        path: the file.
        who: the function named at the start of the message (none if empty,
            e.g. where the CLI names its command itself).

    Raises:
        FileNotFoundError: nothing is at ``path``.
        ValueError: ``not a valid .keras file: PATH``, with the reason.
    """
    path = os.fspath(path)
    prefix = f"{who}: " if who else ""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{prefix}{path!r} does not exist.")
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
    except (zipfile.BadZipFile, OSError) as error:
        raise ValueError(f"{prefix}not a valid .keras file: {path!r} ({error}).") from error
    needed = {"config.json", "model.weights.h5"}
    if not needed <= names:
        raise ValueError(
            f"{prefix}not a valid .keras file: {path!r} (it lacks "
            f"{', '.join(sorted(needed - names))})."
        )


@contextlib.contextmanager
def configuration_errors(path: str | os.PathLike, who: str = "") -> Iterator[None]:
    """Reraises an error of deserializing ``path``'s configuration with its cause first.

    Keras buries the library's own message (a layer refusing a value of a hand-edited
    config) under one "could not be deserialized properly" paragraph per level of
    nesting, each quoting the whole configuration (`_checks.innermost_error`).
    """
    try:
        yield
    except (TypeError, ValueError) as error:
        cause = innermost_error(error)
        if cause is error:
            raise
        prefix = f"{who}: " if who else ""
        raise ValueError(
            f"{prefix}the configuration in {os.fspath(path)!r} cannot be loaded: "
            f"{type(cause).__name__}: {excerpt(cause, 25)}"
        ) from error


def load_keras_file(path: str | os.PathLike, who: str = "") -> keras.Model:
    """``keras.saving.load_model(path)`` after `check_keras_file`, with the cause of a
    configuration error first (`configuration_errors`)."""
    check_keras_file(path, who)
    with configuration_errors(path, who):
        return keras.saving.load_model(path)


def _preset_weights(weights: str | os.PathLike) -> tuple[str | os.PathLike, int | None]:
    """A preset source's weights file and class count (a hub source downloaded and
    converted first); other ``weights`` as they are, with no class count."""
    path = os.fspath(weights) if isinstance(weights, str | os.PathLike) else weights
    if isinstance(path, str) and (path.startswith("hf://") or os.path.isdir(path)):
        return preset_function("weights")(path)
    return weights, None


# The preset functions of keras_posenc.hub, which sits above the zoo (docs/development.md,
# "Architecture"): the hub hands them over when it is imported (set_preset_functions), so
# the zoo reaches presets without importing them.
_PRESET_FUNCTIONS: dict[str, Callable[..., Any]] = {}


def set_preset_functions(**functions: Callable[..., Any]) -> None:
    """Registers the hub's preset functions by role: ``from_preset``, ``load_preset``,
    ``save_preset`` and ``weights`` (a source -> its weights file and class count).

    Called by ``keras_posenc/hub/__init__.py``; a role given again replaces the first.

    >>> sorted(_PRESET_FUNCTIONS) == sorted(
    ...     ["from_preset", "load_preset", "save_preset", "weights"])  # the hub is loaded
    True
    """
    for role, function in functions.items():
        if not callable(function):
            raise TypeError(
                f"set_preset_functions: `{role}` must be callable, got {type(function).__name__}."
            )
    _PRESET_FUNCTIONS.update(functions)


def preset_function(role: str) -> Callable[..., Any]:
    """The hub's preset function for ``role`` (see :func:`set_preset_functions`); the
    registering packages are imported first if the hub was not (keras_posenc/_registration.py)."""
    if role not in _PRESET_FUNCTIONS:
        from keras_posenc import _registration

        _registration.register_all()  # imports keras_posenc.hub, which registers its functions
    if role not in _PRESET_FUNCTIONS:
        raise ValueError(
            f"zoo: no preset function {role!r} is registered (keras_posenc.hub registers "
            f"{', '.join(['from_preset', 'load_preset', 'save_preset', 'weights'])})."
        )
    return _PRESET_FUNCTIONS[role]


def _check_weights_file(name: str, weights: str | os.PathLike) -> None:
    path = os.fspath(weights)
    who = f"zoo.create({name!r})"
    if not path.endswith(_WEIGHT_SUFFIXES):
        raise ValueError(
            f"{who}: `weights` must be a path ending in "
            f"{' or '.join(_WEIGHT_SUFFIXES)}, a preset folder or hf://ORG/REPO; got "
            f"{path!r}. Checkpoints of other libraries "
            "(timm .safetensors/.pth, fairseq .pt) convert with keras_posenc.convert "
            "(`posenc convert timm|fairseq SRC --out FILE.keras`)."
        )
    if not os.path.exists(path):
        raise FileNotFoundError(f"{who}: weights file {path!r} does not exist.")
    if path.endswith(".keras"):
        check_keras_file(path, who)


def _stored_variables(path: str) -> set[str]:
    """The paths of the arrays in a ``.weights.h5`` file, or in a ``.keras`` file's weights."""
    found: set[str] = set()

    def visit(name: str, item: Any) -> None:
        if isinstance(item, h5py.Dataset):
            found.add(name)

    source: Any = path
    if path.endswith(".keras"):
        with zipfile.ZipFile(path) as archive:
            source = io.BytesIO(archive.read("model.weights.h5"))
    with h5py.File(source, "r") as stored:
        stored.visititems(visit)
    return found


def _load_weights(model: keras.Model, name: str, weights: str | os.PathLike) -> None:
    """Loads ``weights`` into ``model``, refusing saved variables it has no place for.

    Keras refuses a file that lacks some of the model's variables or holds
    another shape, but silently skips saved variables the model does not have:
    a larger configuration's weights would load into a smaller one. A file with
    no more arrays than the model has weights has none to skip; otherwise the
    model's own variable paths come from saving it once to a temporary file
    (the paths Keras writes are the paths it reads).
    """
    path = os.fspath(weights)
    stored = _stored_variables(path)
    extra: list[str] = []
    if len(stored) > len(model.weights):
        with tempfile.TemporaryDirectory() as folder:
            fresh = os.path.join(folder, "model.weights.h5")
            model.save_weights(fresh)
            own = _stored_variables(fresh)
        # Only the groups the model saves: a .keras file may also hold optimizer state.
        groups = {variable.split("/")[0] for variable in own}
        extra = sorted(v for v in stored - own if v.split("/")[0] in groups)
    if extra:
        raise ValueError(
            f"zoo.create({name!r}): {path!r} holds {len(extra)} saved variables this "
            "configuration has no place for (saved from a larger or different "
            f"configuration?): {excerpt(extra)}. Create the model with the configuration "
            "the weights were saved with."
        )
    model.load_weights(path)


def _suggestions(word: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(word, candidates, n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
