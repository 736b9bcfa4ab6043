"""T5's named configurations: :class:`T5Config` and the table ``zoo.t5`` registers.

One of T5's modules by job, beside keras_posenc/zoo/t5.py (the model, which registers the
table) and keras_posenc/zoo/t5_layers.py (its layers); ``keras_posenc.zoo.t5`` re-exports both.

Examples:

    >>> from keras_posenc.zoo.t5_config import CONFIGS
    >>> config = CONFIGS["t5_1.1_small"]
    >>> config.name, config.gated_activation, config.num_buckets
    ('t5_1_1_small', True, 32)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from keras_posenc.layers._checks import check_int
from keras_posenc.zoo.config import ZooConfig, by_name

__all__ = ["CONFIGS", "VOCABULARY_SIZE", "T5Config"]

#: The released checkpoints' vocabulary size (rows of their token embedding).
VOCABULARY_SIZE = 32128


@dataclasses.dataclass(frozen=True, kw_only=True)
class T5Config(ZooConfig):
    """A named T5: the arguments of ``zoo.t5.T5`` (its docstring says what each does), with
    its defaults. The sizes and the relative bias's buckets are checked when made."""

    # The vocabulary and the special ids.
    vocabulary_size: int = VOCABULARY_SIZE
    pad_id: int = 0
    eos_id: int = 1
    decoder_start_id: int = 0
    # Widths, heads and layers.
    hidden_dim: int = 512
    intermediate_dim: int = 2048
    num_heads: int = 8
    num_layers: int = 6
    num_decoder_layers: int | None = None
    key_value_dim: int | None = None
    # The feed-forward network, the head and the norms (v1.0: ReLU, tied; v1.1: gated GELU).
    activation: Any = "relu"
    gated_activation: bool = False
    tie_embeddings: bool = True
    dropout: float = 0.1
    layer_norm_epsilon: float = 1e-6
    # The log-bucket relative bias (T5's own hyperparameters) and the attention kernel.
    num_buckets: int = 32
    max_distance: int = 128
    fused_attention: bool | str = "auto"
    # Another bias scheme in place of the buckets (keras_posenc/zoo/transplant.py).
    position: Any = None
    # Keras' remat of every block in training (less memory, more time).
    remat: bool = False
    # A keras-hub T5Tokenizer: text in and out of generate.
    tokenizer: Any = None
    # Longest sequences (None: any) and the model.
    max_source_length: int | None = None
    max_target_length: int | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        who = type(self).__name__
        for field in ("vocabulary_size", "hidden_dim", "num_heads", "num_layers", "num_buckets"):
            check_int(who, field, getattr(self, field), 1)


_V1_0 = dict(key_value_dim=64, activation="relu", gated_activation=False, tie_embeddings=True)
_V1_1 = dict(key_value_dim=64, activation="gelu_tanh", gated_activation=True, tie_embeddings=False)
#: Every registered T5 (the released checkpoints' shapes): zoo name -> :class:`T5Config`;
#: the model's name is the zoo name without dots (Keras names have none).
CONFIGS: dict[str, T5Config] = by_name([
    T5Config(zoo_name="t5_small", name="t5_small", hidden_dim=512, intermediate_dim=2048,
             num_heads=8, num_layers=6, **_V1_0),
    T5Config(zoo_name="t5_base", name="t5_base", hidden_dim=768, intermediate_dim=3072,
             num_heads=12, num_layers=12, **_V1_0),
    T5Config(zoo_name="t5_1.1_small", name="t5_1_1_small", hidden_dim=512,
             intermediate_dim=1024, num_heads=6, num_layers=8, **_V1_1),
    T5Config(zoo_name="t5_1.1_base", name="t5_1_1_base", hidden_dim=768,
             intermediate_dim=2048, num_heads=12, num_layers=12, **_V1_1),
])  # fmt: skip
