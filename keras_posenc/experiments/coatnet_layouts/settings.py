"""The study's settings: the layouts, the position encodings of the Transformer stages,
the model, the task and the training budgets, and the results' columns."""

from __future__ import annotations

LAYOUTS = ("C-C-C-C", "C-C-C-T", "C-C-T-T", "C-T-T-T")
CLASSES = ("A left of B", "A right of B", "A above B", "A below B")

#: The position encodings of the Transformer stages (``positions``): the options of
#: every Transformer block (``zoo.coatnet_options.TransformerBlockConfig``).
#: ``"table"``, the default, is CoAtNet's relative bias table; ``"rotary_axial"`` and
#: ``"rotary_mixed"`` 2D rotary alone (axial, fixed frequencies; RoPE-Mixed, learned);
#: ``"rotary_mixed_table"`` RoPE-Mixed with the table; ``"swin"`` the table within 2 x 2
#: windows, every second block of a stage shifted by one cell (Swin's windows; a stage's
#: first block, which downsamples, attends over its whole map).
POSITION_OPTIONS = {
    "table": {},
    "rotary_axial": {"rotary": "axial", "position_bias": "none"},
    "rotary_mixed": {"rotary": "mixed", "position_bias": "none"},
    "rotary_mixed_table": {"rotary": "mixed"},
    "swin": {"partition": "block", "partition_size": 2, "shift": "half"},
}
POSITIONS = tuple(POSITION_OPTIONS)

COLUMNS = (
    "layout",
    "positions",
    "params",
    "test_accuracy",
    "test_accuracy_std",
    "test_accuracy_min",
    "test_accuracy_max",
    "train_accuracy",
    "train_accuracy_std",
    "seeds",
    "train_images",
    "epochs",
    "seconds",
)

# The model and the task: the same for the quick and the full run.
MODEL_SETTINGS = {
    "image_size": 64,
    "blocks": (1, 1, 1, 2, 1),
    "channels": (16, 32, 32, 64, 64),
    "head_dim": 16,
}
TASK_SETTINGS = {"patch_size": 12, "noise": 0.3}
# The training budget. Full: 12 trainings (4 layouts, 3 seeds), 4 compilations.
FULL_SETTINGS = {
    "train_images": 2048,
    "test_images": 1024,
    "epochs": 8,
    "batch_size": 32,
    "learning_rate": 2e-3,
}
# Quick: one seed, one block per stage and a short training (most of its time is
# compiling the 4 models; measured times in docs/data/cli_timings.csv). A smoke
# test: its numbers are not the study's.
QUICK_SETTINGS = {
    "blocks": (1, 1, 1, 1, 1),
    "train_images": 128,
    "test_images": 128,
    "epochs": 1,
    "batch_size": 32,
    "learning_rate": 2e-3,
}
