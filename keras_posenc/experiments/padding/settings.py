"""The padding study's vocabulary and budgets: its columns, parts, tables and settings.

What every other module of the study reads (`keras_posenc.experiments.padding`'s
docstring describes the parts); the quick and full settings are the budgets of
`padding_experiment`.
"""

from __future__ import annotations

COLUMNS = (
    "padding",
    "input",
    "target",
    "spc",
    "spc_std",
    "mae",
    "constant",
    "seeds",
    "table",
    "network",
    "weights",
    "readout",
    "readout_layers",
    "kernel_size",
    "readout_padding",
    "taps",
    "task_accuracy",
)
STUDIES = (
    "padding",
    "trained_readout",
    "trained_backbone",
    "applications",
    "readout_alone",
    "readout_shape",
    "stages",
)
TABLES = ("padding", "readout_alone", "readout_shape", "stages")
APPLICATIONS = ("vgg16", "resnet50")
# Table 2 of the paper: (readout layers, kernel size).
READOUT_SHAPES = ((1, 1), (1, 3), (1, 7), (2, 3), (3, 3))
# Table 4 of the paper: zeros around the readout's input.
READOUT_PADDINGS = (0, 1, 2)

# Quick: a tiny network on 32 px (measured times in docs/data/cli_timings.csv).
# Full: the 64-112 px range, 3 seeds; the recorded run (673 s of CPU time, peak
# memory 6.6 GB) is on docs/experiments/position-information.md. Hidden readout layers
# (Table 2) are 16 wide to keep VGG16's deeper readouts affordable; the learning rate None
# scales with the fan-in.
QUICK_SETTINGS = {
    "image_size": 32,
    "stages": 3,
    "width": 8,
    "feature_size": 16,
    "train_images": 32,
    "test_images": 16,
    "kernel_size": 3,
    "application_size": 32,
    "readout_steps": 40,
    "readout_batch_size": 8,
    "readout_learning_rate": None,
    "readout_filters": 16,
    "pretrain_size": 32,
    "pretrain_images": 512,
    "pretrain_epochs": 1,
}
FULL_SETTINGS = {
    **QUICK_SETTINGS,
    "image_size": 96,
    "stages": 4,
    "width": 16,
    "feature_size": 28,
    "application_size": 112,
    "readout_steps": 150,
    # 'valid' padding needs 68 px for four stages; all modes pretrain at the same size.
    "pretrain_size": 72,
    "pretrain_images": 1024,
    "pretrain_epochs": 3,
}
