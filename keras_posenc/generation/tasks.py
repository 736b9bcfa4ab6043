"""What a search decodes: the argument checks and the ``_Task`` of either kind of model.

A ``_Task`` says which token starts each row, which tokens are forced (an
encoder-decoder's ``prefix_tokens``, a language model's prompt), the rules' settings
and how to build the cache; every search in :mod:`keras_posenc.generation.searches`
runs over one. The checks here run first, in Python (they cannot run inside a
compiled step).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from keras import ops

from keras_posenc.layers._checks import check_bool, check_int, check_mask

# --------------------------------------------------------------------------- checks


def _owner(model: Any) -> str:
    return f"{type(model).__name__}({getattr(model, 'name', '?')!r})"


def _decoder_only(model: Any) -> bool:
    return bool(getattr(model, "is_decoder_only", False))


def _check_model(model: Any, function: str) -> None:
    if _decoder_only(model):
        needed, contract = (
            ("init_cache", "decode_step", "check_token_ids", "bos_id", "eos_id", "pad_id"),
            "keras_posenc.zoo.language_model.LanguageModel",
        )
    else:
        needed, contract = (
            ("encode", "decode", "init_cache", "decode_step", "check_token_ids", "bos_id"),
            "keras_posenc.zoo.seq2seq.Seq2SeqModel",
        )
    missing = [name for name in needed if not hasattr(model, name)]
    if missing:
        raise TypeError(
            f"{function}: `model` must follow the decoding contract of {contract} (or "
            f"keras_posenc.zoo.seq2seq.Seq2SeqModel); {type(model).__name__} lacks "
            f"{', '.join(missing)}."
        )


def _max_length(model: Any, function: str, max_length: Any, source_length: int) -> int:
    limit = model.max_target_length
    if max_length is None:
        max_length = 2 * source_length + 10
        return max_length if limit is None else min(max_length, limit)
    max_length = check_int(function, "max_length", max_length, 1)
    if limit is not None and max_length > limit:
        raise ValueError(
            f"{function}: `max_length` = {max_length} needs {max_length} target positions, "
            f"more than {_owner(model)}'s max_target_length = {limit}."
        )
    return max_length


def _check_forced(model: Any, function: str, argument: str, forced: np.ndarray) -> np.ndarray:
    """Where ``forced`` (right-padded rows) holds tokens; raises for eos or inner padding."""
    real = forced != model.pad_id
    if forced.shape[1] > 1 and np.any(real[:, 1:] & ~real[:, :-1]):
        row = int(np.flatnonzero(np.any(real[:, 1:] & ~real[:, :-1], axis=1))[0])
        raise ValueError(
            f"{function}: `{argument}` must be padded on the right only (pad_id = "
            f"{model.pad_id} after a row's last token); row {row} has padding before a token."
        )
    if np.any(forced == model.eos_id):
        raise ValueError(
            f"{function}: `{argument}` may not hold eos_id = {model.eos_id} (a forced end "
            "would end the row before it starts); leave it out."
        )
    return real


# --------------------------------------------------------------------------- tasks


@dataclasses.dataclass
class _Task:
    """What a search decodes, for either kind of model.

    ``steps`` tokens are chosen, one per ``decode_step``; step ``i`` feeds the token
    at position ``i`` (``first`` at 0) and chooses the token at ``i + 1``, unless
    ``forced_mask[:, i]`` forces ``forced[:, i]``. ``eos`` is forbidden at steps
    below ``min_index``.
    """

    model: Any
    function: str
    first: np.ndarray  # (batch,) int32
    forced: np.ndarray  # (batch, steps) int32
    forced_mask: np.ndarray  # (batch, steps) bool
    min_index: int
    source: np.ndarray | None = None  # an encoder-decoder's sources
    source_mask: np.ndarray | None = None  # their explicit padding mask, if one was given
    no_repeat_ngram_size: int = 0
    use_cache: bool = True

    @property
    def batch(self) -> int:
        return int(self.first.shape[0])

    @property
    def steps(self) -> int:
        return int(self.forced.shape[1])

    def state(self, repeat: int = 1) -> tuple:
        """The encoder state of every source, each repeated ``repeat`` times (beams)."""
        source = np.repeat(self.source, repeat, axis=0)
        masks = {}
        if self.source_mask is not None:
            mask = np.repeat(self.source_mask, repeat, axis=0)
            masks["encoder_padding_mask"] = ops.convert_to_tensor(mask, "bool")
        source = ops.convert_to_tensor(source, "int32")
        return tuple(self.model.encode(source, training=False, **masks))

    def configure(self, no_repeat_ngram_size: Any, use_cache: Any) -> None:
        """Checks and sets the options every search shares."""
        ngram = check_int(self.function, "no_repeat_ngram_size", no_repeat_ngram_size, 0)
        # An n-gram longer than any sequence never repeats: the rule is void.
        self.no_repeat_ngram_size = 0 if ngram > self.steps + 1 else ngram
        self.use_cache = check_bool(self.function, "use_cache", use_cache)

    def cache(self, repeat: int = 1) -> tuple:
        """The decoding cache (``use_cache``), or a prefix buffer and the encoder state."""
        rows = self.batch * repeat
        state = () if _decoder_only(self.model) else self.state(repeat)
        if self.use_cache:
            if _decoder_only(self.model):
                return tuple(self.model.init_cache(rows, self.steps + 1))
            return tuple(self.model.init_cache(state, self.steps))
        prefix = np.full((rows, self.steps), self.model.pad_id, "int32")
        return (ops.convert_to_tensor(prefix, "int32"), *state)

    def result(self, tokens: np.ndarray) -> np.ndarray:
        """The returned ids: a language model's start token, then the chosen tokens."""
        if not _decoder_only(self.model):
            return tokens
        first = self.first.reshape(self.first.shape + (1,) * (tokens.ndim - 1))
        first = np.broadcast_to(first, tokens.shape[:-1] + (1,))
        return np.concatenate([first, tokens], axis=-1).astype("int32")


def _task(
    model: Any,
    function: str,
    inputs: Any,
    max_length: Any,
    min_length: Any,
    prefix_tokens: Any,
) -> _Task:
    _check_model(model, function)
    min_length = check_int(function, "min_length", min_length, 0)
    if _decoder_only(model):
        return _language_model_task(model, function, inputs, max_length, min_length, prefix_tokens)
    return _seq2seq_task(model, function, inputs, max_length, min_length, prefix_tokens)


def _seq2seq_task(
    model: Any,
    function: str,
    inputs: Any,
    max_length: Any,
    min_length: int,
    prefix_tokens: Any,
) -> _Task:
    source, source_mask = _source(model, function, inputs)
    if source.shape[1] == 0:
        raise ValueError(
            f"{function}: `encoder_token_ids` must hold at least one token per row "
            f"(e.g. just eos_id = {model.eos_id}), got shape {source.shape}."
        )
    max_length = _max_length(model, function, max_length, source.shape[1])
    if min_length > max_length:
        raise ValueError(
            f"{function}: `min_length` = {min_length} is larger than `max_length` = {max_length}."
        )
    forced = np.full((source.shape[0], max_length), model.pad_id, "int32")
    if prefix_tokens is not None:
        prefix = model.check_token_ids(prefix_tokens, "prefix_tokens", source=False)
        if prefix.shape[0] != source.shape[0]:
            raise ValueError(
                f"{function}: `prefix_tokens` must have one row per source ({source.shape[0]}), "
                f"got shape {prefix.shape}."
            )
        if prefix.shape[1] > max_length:
            raise ValueError(
                f"{function}: `prefix_tokens` has {prefix.shape[1]} tokens, more than "
                f"`max_length` = {max_length}."
            )
        forced[:, : prefix.shape[1]] = prefix
    return _Task(
        model,
        function,
        first=np.full(source.shape[0], model.bos_id, "int32"),
        forced=forced,
        forced_mask=_check_forced(model, function, "prefix_tokens", forced),
        min_index=min_length,
        source=source,
        source_mask=source_mask,
    )


def _source(model: Any, function: str, inputs: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """An encoder-decoder's checked source ids, and its explicit padding mask or None.

    ``inputs`` is the ids, or (a model whose ``padding_mask_names`` has
    ``encoder_padding_mask``, T5) keras-hub's ``generate`` dict
    ``{"encoder_token_ids": .., "encoder_padding_mask": ..}``, the mask optional.
    """
    if not isinstance(inputs, dict):
        return model.check_token_ids(inputs, "encoder_token_ids"), None
    accepted = ["encoder_token_ids"]
    if "encoder_padding_mask" in getattr(model, "padding_mask_names", ()):
        accepted.append("encoder_padding_mask")
    unknown = sorted(set(inputs) - set(accepted))
    if unknown or "encoder_token_ids" not in inputs:
        raise ValueError(
            f"{function}: a dict of inputs for {_owner(model)} takes the keys "
            f"{', '.join(accepted)} (encoder_token_ids required), got {sorted(inputs)}."
        )
    source = model.check_token_ids(inputs["encoder_token_ids"], "encoder_token_ids")
    mask = inputs.get("encoder_padding_mask")
    if mask is None:
        return source, None
    mask = check_mask(function, "encoder_padding_mask", mask, source.shape, ("batch", "time"))
    return source, np.broadcast_to(ops.convert_to_numpy(mask), source.shape).copy()


def _language_model_task(
    model: Any,
    function: str,
    prompt: Any,
    max_length: Any,
    min_length: int,
    prefix_tokens: Any,
) -> _Task:
    if prefix_tokens is not None:
        raise ValueError(
            f"{function}: `prefix_tokens` is for encoder-decoders; a language model's forced "
            f"tokens are its prompt (got prefix_tokens for {_owner(model)})."
        )
    prompt = model.check_token_ids(prompt, "prompt")
    if prompt.shape[1] == 0 or np.any(prompt[:, 0] == model.pad_id):
        raise ValueError(
            f"{function}: every row of `prompt` must start with a token (e.g. bos_id = "
            f"{model.bos_id}), not pad_id = {model.pad_id}; got shape {prompt.shape}."
        )
    if max_length is None:
        raise ValueError(
            f"{function}: a language model needs `max_length` (the length of the returned "
            "sequences, prompt included)."
        )
    max_length = check_int(function, "max_length", max_length, 2)
    limit = model.max_length
    if limit is not None and max_length > limit:
        raise ValueError(
            f"{function}: `max_length` = {max_length} is more than {_owner(model)}'s "
            f"max_length = {limit}."
        )
    longest = int((prompt != model.pad_id).sum(axis=1).max(initial=0))  # 0 rows: empty result
    if longest >= max_length:
        raise ValueError(
            f"{function}: `max_length` = {max_length} leaves no room to generate after a "
            f"prompt of {longest} tokens; give more than {longest}."
        )
    if min_length > max_length:
        raise ValueError(
            f"{function}: `min_length` = {min_length} is larger than `max_length` = {max_length}."
        )
    forced = np.full((prompt.shape[0], max_length - 1), model.pad_id, "int32")
    rest = prompt[:, 1:max_length]
    forced[:, : rest.shape[1]] = rest
    return _Task(
        model,
        function,
        first=prompt[:, 0].copy(),
        forced=forced,
        forced_mask=_check_forced(model, function, "prompt", forced),
        min_index=max(min_length - 1, 0),
    )
