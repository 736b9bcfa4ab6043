"""Named zoo configurations: the frozen dataclasses every zoo family declares its table with.

A family module defines one :class:`ZooConfig` subclass whose fields are its builder's
keyword arguments (``CoAtNetConfig`` for ``build_coatnet``, ...), with the builder's
defaults, and a table: a list of instances, each named by ``zoo_name``. It registers each
with ``register_model(config.zoo_name, builder, config=config, ...)``; ``zoo.create``
validates overrides against the fields and builds ``builder(**config.arguments())``.
timm (``maxxvit.py``: ``MaxxVitCfg``) names its configurations the same way.

- A field that a named configuration leaves to the user (a translation model's
  vocabularies) has the value :data:`REQUIRED`; ``zoo.create`` names it when missing.
- Options of one kind of block (CoAtNet's and MaxViT's MBConv and Transformer blocks) are a
  nested :class:`BlockOptions`: a frozen dataclass whose fields are the block's options,
  None for the block's own default, and a read-only ``Mapping`` of the options it sets, so
  builders take it wherever they take a dict of options.
- Sequences are stored as tuples (lists given, e.g. read from JSON, become tuples), so a
  configuration goes to JSON and back (:meth:`ZooConfig.to_dict`,
  :meth:`ZooConfig.from_dict`) equal to itself.
- Checks: a subclass's ``__post_init__`` calls the builder's own check helpers
  (``keras_posenc.layers._checks``) on the fields it can check alone, so a bad override
  fails before anything is built; the builder checks the rest.

Examples:

    >>> import dataclasses
    >>> from keras_posenc.zoo.config import REQUIRED, ZooConfig
    >>> @dataclasses.dataclass(frozen=True, kw_only=True)
    ... class MLPConfig(ZooConfig):
    ...     units: int = REQUIRED
    ...     layers: tuple[int, ...] = (8,)
    >>> config = MLPConfig(zoo_name="mlp_small", layers=[16, 16])
    >>> config.layers, config.required()
    ((16, 16), ('units',))
    >>> dataclasses.replace(config, units=3).arguments()
    {'units': 3, 'layers': (16, 16)}
    >>> MLPConfig.from_dict(config.to_dict()) == config
    True
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar

__all__ = ["REQUIRED", "BlockOptions", "ZooConfig", "by_name"]


class _Required:
    """The type of :data:`REQUIRED`."""

    _instance: ClassVar[_Required | None] = None

    def __new__(cls) -> _Required:  # one instance: copies and pickles stay `is REQUIRED`
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "REQUIRED"

    def __reduce__(self) -> str:
        return "REQUIRED"


#: The value of a field that the named configuration does not set and ``zoo.create``
#: must be given (``zoo.create("convs2s_small", src_vocab_size=..., tgt_vocab_size=...)``).
REQUIRED: Any = _Required()

# A field's metadata marking it as the table's, not a builder argument.
_NOT_AN_ARGUMENT = {"argument": False}


def _tuples(value: Any) -> Any:
    """Lists (and the lists inside tuples) as tuples; anything else as it is."""
    if isinstance(value, list | tuple):
        return tuple(_tuples(item) for item in value)
    return value


def _jsonable(value: Any) -> Any:
    """``value`` with configurations as dicts and tuples as lists."""
    if isinstance(value, ZooConfig):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return value


def unknown_fields(who: str, given: Any, fields: Any, what: str = "field") -> ValueError | None:
    """The error for the keys of ``given`` that are not among ``fields`` (did-you-mean
    for each), or None when there are none."""
    fields = list(fields)
    unknown = [key for key in given if key not in fields]
    if not unknown:
        return None
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), fields, n=3, cutoff=0.6)
        hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
        hints.append(f"{key!r}{hint}")
    return ValueError(
        f"{who}: unknown {what}{'s' if len(unknown) > 1 else ''} {', '.join(hints)}. "
        f"Accepted: {', '.join(fields)}."
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ZooConfig:
    """The base of the zoo families' configurations (see the module docstring).

    Attributes:
        zoo_name: the name the configuration is registered under (``"coatnet_0"``);
            not a builder argument (the builder's own ``name`` field names the model).
    """

    zoo_name: str = dataclasses.field(default="", metadata=_NOT_AN_ARGUMENT)

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, list | tuple):
                object.__setattr__(self, field.name, _tuples(value))

    @classmethod
    def argument_names(cls) -> tuple[str, ...]:
        """The fields that are builder arguments: all but ``zoo_name``."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("argument", True))

    def arguments(self) -> dict[str, Any]:
        """The builder's keyword arguments: every argument field set (not ``REQUIRED``).

        Shallow: a nested :class:`BlockOptions` stays one (builders take it as a mapping).
        """
        return {
            name: getattr(self, name)
            for name in self.argument_names()
            if getattr(self, name) is not REQUIRED
        }

    def required(self) -> tuple[str, ...]:
        """The fields still :data:`REQUIRED`: ``zoo.create`` must be given them."""
        return tuple(name for name in self.argument_names() if getattr(self, name) is REQUIRED)

    def to_dict(self) -> dict[str, Any]:
        """The configuration as JSON-ready values (nested options as dicts of the options
        they set, tuples as lists, ``REQUIRED`` fields left out)."""
        return {
            field.name: _jsonable(getattr(self, field.name))
            for field in dataclasses.fields(self)
            if getattr(self, field.name) is not REQUIRED
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ZooConfig:
        """The configuration :meth:`to_dict` gave (lists become tuples, nested dicts
        options again).

        Raises:
            ValueError: for a key that is not a field (close matches named).
        """
        error = unknown_fields(cls.__name__, data, [f.name for f in dataclasses.fields(cls)])
        if error is not None:
            raise error
        return cls(**data)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BlockOptions(Mapping):
    """Options of one kind of block: None for the block's default; as a read-only
    ``Mapping``, the options set (what the builder passes to every block).

    A subclass lists the block's options as fields, and ``layer``, the block's class.
    """

    layer: ClassVar[type | None] = None

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def __getitem__(self, key: str) -> Any:
        if key in self.option_names() and getattr(self, key) is not None:
            return getattr(self, key)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (name for name in self.option_names() if getattr(self, name) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __post_init__(self) -> None:
        for name in self.option_names():
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, _tuples(value))

    @classmethod
    def of(cls, value: Any, who: str, argument: str) -> BlockOptions:
        """``value`` (None, a mapping of options, or one of these) as this class.

        Raises:
            TypeError: for anything else.
            ValueError: for a key that is not an option (close matches named).
        """
        if isinstance(value, cls):
            return value
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            layer = cls.layer.__name__ if cls.layer is not None else "block"
            raise TypeError(
                f"{who}: `{argument}` must be a {cls.__name__} or a dict of {layer} options; "
                f"got {type(value).__name__}."
            )
        error = unknown_fields(f"{who}: `{argument}`", value, cls.option_names(), "option")
        if error is not None:
            raise error
        return cls(**value)


def by_name(configs: Iterable[ZooConfig]) -> dict[str, Any]:
    """A table, a list of named configurations, as ``{zoo_name: configuration}``.

    Raises:
        ValueError: for a configuration without a name, or a name given twice.
    """
    table: dict[str, Any] = {}
    for config in configs:
        if not config.zoo_name or config.zoo_name in table:
            problem = "has no zoo_name" if not config.zoo_name else "is named twice"
            raise ValueError(f"by_name: {config.zoo_name or config!r} {problem}.")
        table[config.zoo_name] = config
    return table
