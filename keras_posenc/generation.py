"""Greedy and beam search shared by every sequence-to-sequence zoo model.

The decoding contract every seq2seq model follows (design.md, "Decoding
caches"): a decoder step takes ``cache=None, cache_update_index=None`` and
returns ``(output, cache)``; caches are tensors (or tuples of tensors) of fixed
shape with batch first, so a step runs inside a compiled loop, beam search can
reorder them along the batch axis and an exported one-step graph takes and
returns them. Anything a step needs from the encoder lives in the cache too.
The search functions arrive with the first sequence-to-sequence family.
"""

__all__: list[str] = []
