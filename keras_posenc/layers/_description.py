"""The plumbing of a serialisable description: a plain object (no weights) that a layer
takes as an argument and writes into its config, such as a position scheme or a rotary
embedding. Private: the public classes inherit it."""

from __future__ import annotations

from typing import Any


class Description:
    """Config, equality and hashing from the checked constructor arguments.

    A subclass sets ``self._arguments`` (a dict of the checked arguments, by the
    constructor's names) and registers itself with
    ``keras.saving.register_keras_serializable``, so a layer's config can hold it.
    """

    _arguments: dict

    def get_config(self) -> dict:
        return dict(self._arguments)

    @classmethod
    def from_config(cls, config: dict) -> Any:
        return cls(**config)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.get_config() == self.get_config()

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(sorted(self.get_config().items()))))
