"""The arguments of `MultiHeadRelativeAttention` that today's decoders use (issue 49): key/value
heads, the sliding window and its sinks, query-key normalisation, logit soft-capping, the output
projection's bias and the query scale; checked at construction with the messages of
keras_posenc/layers/_checks.py. Private: the layer's module keeps what the layer computes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from keras_posenc.layers._checks import (
    check_bool,
    check_choice,
    check_int,
    check_positive_number,
)

QUERY_KEY_NORMS = ("rms", "layer")


@dataclass(frozen=True)
class DecoderOptions:
    """The checked decoder options of one attention layer (see `check_decoder_arguments`)."""

    num_key_value_heads: int
    sliding_window: int | None
    attention_sinks: int
    query_key_norm: str | None
    query_key_norm_epsilon: float
    logit_soft_cap: float | None
    output_bias: bool
    query_scale_dim: int

    @property
    def rolling_length(self) -> int | None:
        """Positions of a rolling cache (sinks + window), or None without a window."""
        if self.sliding_window is None:
            return None
        return self.attention_sinks + self.sliding_window


def check_decoder_arguments(
    caller: str,
    num_heads: int,
    key_dim: int,
    use_bias: bool,
    num_key_value_heads: Any = None,
    sliding_window: Any = None,
    attention_sinks: Any = 0,
    query_key_norm: Any = None,
    query_key_norm_epsilon: Any = 1e-6,
    logit_soft_cap: Any = None,
    output_bias: Any = None,
    query_scale_dim: Any = None,
) -> DecoderOptions:
    """Validates the decoder options at construction, naming ``caller``; the defaults filled in.

    ``num_key_value_heads`` must divide ``num_heads`` (each key/value head serves a group of
    ``num_heads / num_key_value_heads`` query heads); ``attention_sinks`` only make sense
    inside a sliding window (without one every key is visible anyway).
    """
    heads = num_heads
    if num_key_value_heads is not None:
        heads = check_int(caller, "num_key_value_heads", num_key_value_heads, minimum=1)
        if num_heads % heads:
            raise ValueError(
                f"{caller}: `num_key_value_heads` must divide num_heads={num_heads} (each "
                f"key/value head serves a group of query heads), got {num_key_value_heads}."
            )
    window = None
    if sliding_window is not None:
        window = check_int(caller, "sliding_window", sliding_window, minimum=1)
    sinks = check_int(caller, "attention_sinks", attention_sinks, minimum=0)
    if sinks and window is None:
        raise ValueError(
            f"{caller}: `attention_sinks` keep the first keys visible outside a sliding window; "
            f"without `sliding_window` every key is visible. Pass sliding_window=W, or "
            f"attention_sinks=0; got attention_sinks={attention_sinks}."
        )
    norm = None
    if query_key_norm is not None:
        norm = check_choice(caller, "query_key_norm", query_key_norm, QUERY_KEY_NORMS)
    epsilon = check_positive_number(caller, "query_key_norm_epsilon", query_key_norm_epsilon)
    cap = None
    if logit_soft_cap is not None:
        cap = check_positive_number(caller, "logit_soft_cap", logit_soft_cap)
    output = use_bias if output_bias is None else check_bool(caller, "output_bias", output_bias)
    scale = key_dim
    if query_scale_dim is not None:
        scale = check_int(caller, "query_scale_dim", query_scale_dim, minimum=1)
    return DecoderOptions(heads, window, sinks, norm, epsilon, cap, output, scale)
