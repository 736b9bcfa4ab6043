"""Greedy search, sampling and beam search for every generating zoo model.

Two kinds of model generate:

- **encoder-decoders** (:class:`keras_posenc.zoo.seq2seq.Seq2SeqModel`:
  ConvS2S, MUSE, T5, ...): ``encode`` a source once, ``init_cache(state,
  max_length)`` a fixed-shape, batch-first cache that holds the encoder state
  and every decoder layer's buffer, then one ``decode_step`` per target
  position. Targets start with ``bos_id``; the searches return the tokens
  after it, ``(batch, max_length)``.
- **decoder-only language models**
  (:class:`keras_posenc.zoo.language_model.LanguageModel`: ``convs2s_lm``,
  ...): ``init_cache(batch, max_length)``, then one ``decode_step`` per
  position, starting from the prompt's first token. The searches return the
  whole sequence, prompt included, ``(batch, max_length)``.

Both kinds follow one decoding contract (docs/development.md, "Compiled decoding
and model creation", and the cache format in "Conventions"), so one
implementation of each search serves both. The step (cache reordering, the
decoder step, the rules below) is compiled once per batch shape
(``tf.function`` on TensorFlow, ``jax.jit`` on JAX; on PyTorch a graph traced
with ``torch.export`` once a shape has run eagerly a few times, see
``keras_posenc.backend.compile_function``), and its cost does not grow
with the prefix. Greedy search and sampling are one compiled loop (on
PyTorch, the compiled step in a Python loop); beam search's bookkeeping
between steps (beam candidates, finished hypotheses) runs in numpy. Work on
the weights alone (the model's ``step_constants()``, e.g. ConvS2S's weight
normalisation) is done once per search, not once per step.

``use_cache=False`` decodes by recomputing the whole prefix at every step
(the full decoder on a fixed-length buffer, also compiled); it gives the same
tokens and is there to check the cache and to measure what the cache saves.

Rules every search shares:

- ``pad_id`` and ``bos_id`` are never generated (their log-probabilities are
  set to -inf: a generated pad would change how the model counts positions).
- ``min_length``: ``eos_id`` is forbidden before that many tokens (an
  encoder-decoder counts the generated tokens; a language model counts the
  whole sequence, prompt included).
- **Forced tokens**: an encoder-decoder's ``prefix_tokens`` (fairseq's prefix)
  and the rest of a language model's prompt are fed as they are, whatever the
  model predicts; their log-probabilities still count in beam search's score.
  Rows of different lengths are right-padded with ``pad_id``; a row goes on
  with its own generation once its forced tokens end. Forced tokens may not
  hold ``eos_id`` (a forced end would end a row before it started).
- ``no_repeat_ngram_size = n > 0``: a token that would complete an n-gram the
  sequence already holds (starting token and forced tokens included) is
  forbidden, as fairseq's ``--no-repeat-ngram-size``.
- Each row ends with ``eos_id`` (unless ``max_length`` ran out) and is padded
  with ``pad_id`` after it.
- Checks that cannot run inside the compiled step run first, in Python: ids
  outside the vocabulary, inputs longer than the model's position table,
  empty sources or prompts and a ``max_length`` beyond the model's limit
  raise ``ValueError``. An empty batch returns empty results without running
  the model.
- Logits that are not finite (NaN or Inf) raise ``ValueError`` once the step
  that produced them returns: such a row has no most likely token.

**Sampling** (:func:`sample`) draws each token with a ``keras_hub.samplers``
sampler (``"greedy"``, ``"random"``, ``"top_k"``, ``"top_p"``, or an instance
such as ``TopKSampler(k=10, temperature=0.7)``): the sampler's
``compute_probabilities`` (temperature) and ``get_next_token`` (the filter and
the draw) run inside the compiled loop, after the rules above have set
forbidden tokens' logits to -1e9. The sampler's random state is a loop
variable, so ``seed=`` reproduces the same tokens on a backend; without it the
sampler's own seed generator is used and advanced, as keras_hub's
``generate`` does.

**Beam search** follows fairseq's ``SequenceGenerator``: each step takes the
``2 * beam_size`` best continuations of the live hypotheses; a continuation
ending in ``eos_id`` among the best ``beam_size`` is finished with the score
``sum(log p) / length ** length_penalty`` (``length`` counts the generated
tokens, ``eos`` included, and for a language model the prompt after its first
token: ``length_penalty > 1`` favours longer outputs, ``0`` ranks by raw
log-probability); the best ``beam_size`` others stay live. A sentence is done
once it has ``beam_size`` finished hypotheses; at ``max_length`` every live
hypothesis is finished. The best finished hypothesis is returned, or with
``return_n_best=N`` the N best, best first (ties keep the order in which they
finished, so the first equals the default result). keras_hub's
``BeamSampler`` has neither the length penalty nor this finalisation, so it
is not used.

The package has one module per job, importing each other one way (``searches`` ->
``loops`` -> ``compiled`` -> ``rules``, ``sampling``, ``tasks``; docs/development.md,
"Compiled decoding and model creation"): ``tasks`` (the argument checks and what a
search decodes), ``rules`` (the forbidden tokens), ``sampling`` (keras_hub's samplers
in the loop), ``compiled`` (the compiled loop and steps, made once per model),
``loops`` (greedy search and sampling's loop, beam search's bookkeeping) and
``searches`` (the public functions). The compilers themselves
(``keras_posenc.backend.compile_function``, ``compiled_while_loop`` and PyTorch's
``TorchTracedFunction``) stay in ``keras_posenc/backend/``, the one home of backend
branches: nothing in this package asks which backend runs.
"""

# The sampler names `sample` takes, where they were before the package (not in __all__).
from keras_posenc.generation.sampling import SAMPLERS as SAMPLERS
from keras_posenc.generation.searches import beam_search, generate, greedy_search, sample

# In the order of the API page (docs/api/generation.md orders its members by this list).
__all__ = ["greedy_search", "sample", "beam_search", "generate"]
