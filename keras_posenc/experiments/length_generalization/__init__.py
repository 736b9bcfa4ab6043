"""Which position encodings generalise to longer sequences than they were trained on?

Small Transformer stacks, identical except for how position enters them, are
trained on synthetic token tasks at length 64 and tested at 64, 128, 256, 512
and 1024 (16 times the training length). Three tasks, generated in code
(`task_data`):

- ``"copy_back"`` (purely relative): at position ``i`` output the token at
  ``i - shift`` (``shift=4``). The answer is the same function of the
  distance wherever ``i`` is, so an encoding that sees distances should
  keep solving it at any length.
- ``"copy_position"`` (absolute): at position ``i`` output the token at
  position ``position`` (``3``). From the query's side the distance to the
  answer grows with ``i``: a purely relative encoding must find the start of
  the sequence some other way, and the table shows where it cannot.
- ``"copy_recent"`` (recency): the tokens ``0 .. marked - 1`` (``marked=3``:
  0, 1 and 2) are *marked*; at position ``i`` output the most recent marked
  token at a position ``j < i``. No fixed offset decides: the answer is the
  nearest earlier marked token, at a distance that varies (geometric, mean
  ``vocabulary_size / marked`` = 3.3 with uniform tokens), so an encoding
  that prefers near keys to far ones, ALiBi's premise, should be enough.

The models are causal (decoder-only blocks: `RelativeTransformerDecoder`
without cross-attention), so the tasks depend on the past only, ALiBi is
keras_hub's `AlibiBias` exactly as defined (a bias on key positions, which
the causal mask turns into ``-m (i - j)``), and training on full length-64
sequences trains every length up to 64 at once (position ``i`` sees only
``0..i``). The accuracy at a test length ``L`` is measured on positions
``L/2 .. L-1`` of each test sequence: at ``L >= 128`` those are all
positions never seen in training, so the number is not diluted by the
first 64 positions, which behave exactly as in training.

Every model: token embedding (10 tokens, width 32), the encoding's absolute
term if it has one (added to the embedding), 2 pre-norm blocks (2 heads of
size 16, feed-forward 64), a final layer normalisation and a 10-way softmax:
17,806 parameters, plus the encoding's own weights (``params`` in the
results). Every block's self-attention is `MultiHeadRelativeAttention`; the
encodings (`ENCODINGS`):

- `none`: no position at all (NoPE: under the causal mask only the mask
  carries order): attention with one bias bucket (``position=ClipPositions(0)``),
  a constant per head that the softmax cancels;
- `learned_absolute`: ``keras_hub.layers.PositionEmbedding(64)`` added to
  the tokens; it has no row for position 64 or later, so a longer input
  raises a ValueError and the results say "n/a";
- `sinusoidal`: ``keras_hub.layers.SinePositionEncoding`` added to the tokens;
- `rope`: rotary queries and keys (``rotary=RotaryPositions(max_wavelength=10000)``);
- `rope_pi`, `rope_ntk`, `rope_dynamic_ntk`, `rope_yarn`, `rope_llama3`,
  `rope_longrope`: the trained `rope` models, not retrained, run at test
  length ``L`` with a scaled `RotaryPositions`: position interpolation
  (``scaling="linear"``), NTK-aware, YaRN (the paper's ramp), Llama 3.1's
  scaling and LongRoPE (NTK-aware long factors: no searched ones exist for
  these models) with ``s = L / 64``, dynamic NTK with ``training_length=64``
  (it sets ``s`` from the length itself); `_scaled_rope.scaled_rotation` has
  each one's arguments. At ``L = 64`` every one is `rope`;
- `xpos`: RoPE with xPos' decay (``RotaryPositions(xpos_scale_base=512)``);
- `alibi`: ``keras_hub.layers.AlibiBias`` (its default slopes) as ``attention_bias``;
- `alibi_scheme`: the library's ``ALiBi()`` position scheme in every block's
  attention (``relative="bias", position=ALiBi()``): the paper's slopes, the
  same logits as `alibi` up to a constant per query row;
- `kerple_log`, `kerple_power`: ``KERPLE("log")`` / ``KERPLE("power")`` in
  every block's attention (learned ``r1, r2`` per head and block);
- `fire`: ``FIRE()`` in every block's attention (its MLP per block);
- `continuous_bias`: ``ContinuousBias()`` (an MLP of the log-scaled distance,
  timm's "cr" form, 512 hidden units) in every block's attention;
- `relative_bias_clip`: ``RelativePositionBias(position=ClipPositions(16))``;
- `relative_bias_log`: T5's ``RelativePositionBias(position=LogBuckets(32, 64,
  bidirectional=False))``;
- `relative_bias_piecewise`: iRPE's ``RelativePositionBias(position=PiecewiseBuckets(32))``;
- `relative_bias_multiscale`: ``MultiScaleRelativePositionEmbedding(scales=(5,
  10, 20))`` with one column per head, as a bias;
- `shaw_keys_values`: Shaw et al., ``relative="keys_values",
  position=ClipPositions(16)`` in every block;
- `sinusoidal_relative_bias`: `sinusoidal` and `relative_bias_log` together;
- `deberta`: DeBERTa v3's disentangled attention (`DisentangledSelfAttention`:
  content-to-position and position-to-content through the content projections) under the
  causal mask, with ``DebertaBuckets(32, 64)`` (exact to 16, log-spaced to 64), one table
  of 64 rows shared by both blocks after a layer normalisation, as DeBERTa shares it;
- `cope`: contextual positions (`ContextualPositionAttention`, ``max_positions=64``):
  gates from the query-key products count the keys between query and key, a table per
  block, positions past 63 clipped.

`deberta` and `cope` replace `MultiHeadRelativeAttention` by their own layer in a block
that is otherwise the same (`models._AttentionBlock`).

Each learned relative table is one table shared by both blocks (computed
once per call and passed as ``attention_bias``), as T5 does, so the four
table rows differ in their position scheme only. The computed schemes (`alibi_scheme`,
KERPLE, FIRE, the continuous bias) are the library's ``position=`` option of
each block's attention, with each block's own weights, as a user of the
library would write them.

The grid's trainings are independent: ``workers`` runs them in parallel
processes (`_workers.run_jobs`), with one progress bar over them.

The package has one module per job (docs/development.md, "Architecture"), each
importing only those before it: ``tasks`` (`task_data`, `chance`), ``models``
(`LengthGeneralizationModel`, `build_model`, `scaled_rope`), ``tables`` (the
markdown tables, the ranking, the published `CLAIMS` and their `verdict`),
``figure`` (`plot`), ``results`` (the CSV, `write_results`, `read_results`,
`render`, `redraw`) and ``runs`` (`evaluate`, `train_and_evaluate`,
`length_generalization_experiment`). Everything is importable from the package.
"""

from keras_posenc.experiments._scaled_rope import SCALED_CLAIMS, SCALED_ROPE
from keras_posenc.experiments.length_generalization.figure import plot
from keras_posenc.experiments.length_generalization.models import (
    ENCODINGS,
    MODEL_SETTINGS,
    TRAINED_ENCODINGS,
    LengthGeneralizationModel,
    build_model,
    scaled_rope,
)
from keras_posenc.experiments.length_generalization.results import (
    CLAIMS_NAME,
    COLUMNS,
    CSV_NAME,
    FIGURE_NAME,
    read_results,
    redraw,
    render,
    write_results,
)
from keras_posenc.experiments.length_generalization.runs import (
    FULL_SETTINGS,
    QUICK_SETTINGS,
    QUICK_TASKS,
    evaluate,
    length_generalization_experiment,
    train_and_evaluate,
)
from keras_posenc.experiments.length_generalization.tables import (
    CLAIMS,
    HOLD_MARGIN,
    LEARNED_FRACTION,
    RANKED_TASKS,
    claims_table,
    markdown_table,
    ranking_table,
    verdict,
)
from keras_posenc.experiments.length_generalization.tasks import (
    TASK_DESCRIPTIONS,
    TASK_SETTINGS,
    TASKS,
    chance,
    task_data,
)

# The public names of the module this package was (the API page lists its functions in
# this order: docs/api/experiments.md), with the scaled rotary rows' SCALED_ROPE and
# SCALED_CLAIMS (keras_posenc/experiments/_scaled_rope.py) it imported.
__all__ = [
    "length_generalization_experiment",
    "task_data",
    "chance",
    "LengthGeneralizationModel",
    "build_model",
    "scaled_rope",
    "evaluate",
    "train_and_evaluate",
    "markdown_table",
    "ranking_table",
    "verdict",
    "claims_table",
    "write_results",
    "read_results",
    "render",
    "redraw",
    "plot",
    "ENCODINGS",
    "TRAINED_ENCODINGS",
    "SCALED_ROPE",
    "SCALED_CLAIMS",
    "TASKS",
    "TASK_DESCRIPTIONS",
    "TASK_SETTINGS",
    "MODEL_SETTINGS",
    "FULL_SETTINGS",
    "QUICK_SETTINGS",
    "QUICK_TASKS",
    "COLUMNS",
    "RANKED_TASKS",
    "CLAIMS",
    "LEARNED_FRACTION",
    "HOLD_MARGIN",
    "CSV_NAME",
    "CLAIMS_NAME",
    "FIGURE_NAME",
]
