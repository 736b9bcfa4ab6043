"""How does a language model's next-token loss change with context length and position?

`evaluate_lengths` runs any zoo language model (``decoder_lm_*``, ``music_transformer_base``,
``convs2s_lm``: ``model(token_ids) -> logits``) teacher-forced on windows of each context
length ``L``, cut from a text (with the model's tokenizer or one given), a text file, token
ids, or one of the length study's synthetic tasks
(`keras_posenc.experiments.length_generalization.task_data`), and returns a
`LengthEvaluation`: next-token loss (nats) and top-1 accuracy per length (over every
position and over the last half) and per bucket of positions, as a markdown table, a CSV and
a matplotlib figure. `LengthEvaluation.compare` puts several models in one table, CSV and
figure (e.g. one per position scheme of a model, issue 51).

The modules import each other one way (docs/development.md, "Architecture"): ``measure``
(`evaluate_lengths`) -> ``evaluation`` (`LengthEvaluation`: tables and CSV) -> ``figure``
(`plot`, imported when a figure is drawn).

Examples:

    >>> from keras_posenc import zoo
    >>> model = zoo.create("decoder_lm_tiny", num_layers=1)
    >>> result = evaluate_lengths(model, "Positions matter. " * 8, lengths=(8, 16, 32))
    >>> [(row["length"], row["windows"]) for row in result.rows]
    [(8, 18), (16, 9), (32, 4)]
"""

from keras_posenc.experiments.length_evaluation.evaluation import (
    LENGTH_COLUMNS,
    POSITION_COLUMNS,
    LengthEvaluation,
)
from keras_posenc.experiments.length_evaluation.figure import plot
from keras_posenc.experiments.length_evaluation.measure import TASK_WINDOWS, evaluate_lengths

__all__ = [
    "evaluate_lengths",
    "LengthEvaluation",
    "plot",
    "LENGTH_COLUMNS",
    "POSITION_COLUMNS",
    "TASK_WINDOWS",
]
