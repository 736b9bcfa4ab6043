"""What happens to a trained model when its position encoding is changed or rescaled?

A decoder-only model with RoPE (`DecoderLM`, ``decoder_lm_tiny``'s block over the length
study's 10 tokens) is trained from scratch on one of the length study's tasks
(`keras_posenc.experiments.length_generalization.task_data`: ``copy_back``, relative;
``copy_recent``, recency) at a short training length ``L``. Every transplant of
`TRANSPLANTS` (`keras_posenc.zoo.transplant.transplant`) then starts from it:

- the rotary scalings, stretched ``s`` = 16 times without fine-tuning: position
  interpolation (Chen et al. 2023), NTK-aware (bloc97 2023), dynamic NTK, YaRN (Peng et al.
  2023), Llama 3.1's; PI and YaRN also fine-tuned;
- the replacements, fine-tuned (every weight) on fresh sequences at ``L``: ALiBi (Press et
  al. 2022), KERPLE (Chi et al. 2022), FIRE (Li et al. 2023), T5's decoder buckets, and no
  position encoding at all (NoPE, Kazemnejad et al. 2023); and RoPE fine-tuned the same way,
  the control.

Each model is measured at ``L``, ``2L`` ... ``16L`` with
`keras_posenc.experiments.length_evaluation.evaluate_lengths`: the accuracy and loss over
the last half of the positions (at ``2L`` and beyond, positions the model never saw in
training). `transplant_study` runs it (``posenc experiment transplant``); `markdown_table`,
`plot` and `write_results` render its rows. The modules import each other one way:
``runs`` -> ``results`` -> ``transplants`` (what each transplant is).

Examples:

    >>> rows = transplant_study(transplants=["rope", "alibi"], verbose=0, factors=(1, 2),
    ...                         train_sequences=64, tune_sequences=32, windows=2)
    >>> sorted({(row["transplant"], row["length"]) for row in rows})
    [('alibi', 32), ('alibi', 64), ('rope', 32), ('rope', 64)]
"""

from keras_posenc.experiments.transplant_study.results import (
    COLUMNS,
    markdown_table,
    plot,
    read_results,
    redraw,
    write_results,
)
from keras_posenc.experiments.transplant_study.runs import (
    FULL_SETTINGS,
    MODEL_SETTINGS,
    QUICK_SETTINGS,
    transplant_study,
)
from keras_posenc.experiments.transplant_study.transplants import DESCRIPTIONS, TRANSPLANTS

__all__ = [
    "transplant_study",
    "markdown_table",
    "plot",
    "write_results",
    "read_results",
    "redraw",
    "TRANSPLANTS",
    "DESCRIPTIONS",
    "QUICK_SETTINGS",
    "FULL_SETTINGS",
    "MODEL_SETTINGS",
    "COLUMNS",
]
