"""Which CoAtNet layout works best on a small task that needs texture and layout?

A small analogue of Dai et al. (2021)'s layout study: the same small CoAtNet,
built with the zoo's builder, with its stages S1..S4 as convolution (``C``,
MBConv) or relative-attention Transformer (``T``) stages in the four layouts
the paper compares (`LAYOUTS`: C-C-C-C, C-C-C-T, C-C-T-T, C-T-T-T), trained
with ``fit`` on one synthetic image task and tested on held-out images.

**The task** (`texture_layout_data`): each image holds two square textured
patches on a noisy background, one of horizontal stripes (texture ``A``) and
one of vertical stripes (texture ``B``), both of period 2 pixels with a random
phase, under the same random colour. The class says where ``A`` lies relative
to ``B`` (`CLASSES`: left of, right of, above, below; `layout_label`). The
label needs both kinds of information:

- **texture alone does not suffice**: every image holds exactly one patch of
  each texture, so which textures are present says nothing (chance, 0.25);
- **layout alone does not suffice**: swapping the two textures keeps every
  pixel position of the patches and flips the class (left <-> right, above
  <-> below), and both orders are equally likely, so the patches' positions
  alone give at best the axis (0.50);
- **the textures differ only at the finest scale**: a 2 x 2 average of
  either stripe pattern is flat, so an early stage at full resolution must
  tell them apart, while relating the two patches needs a receptive field
  spanning the image: local texture first, global layout later, the split
  that CoAtNet's convolution-then-attention design is built for.

**The model** (`MODEL_SETTINGS`): ``zoo.create("coatnet_0", layout=...,
input_shape=(64, 64, 3), num_classes=4, blocks=(1, 1, 1, 2, 1),
channels=(16, 32, 32, 64, 64), head_dim=16, pre_logits=False)``: the stem and
stages at 32, 16, 8, 4 and 2 pixels per side. A Transformer stage of the same
width has somewhat more parameters than an MBConv stage; the ``params``
column reports each layout's count.

**Training** (`FULL_SETTINGS`): AdamW (weight decay 0.05, gradient norm
clipped at 1, learning rate warmed up over the first tenth of the steps,
then cosine decay to zero), batches of 32, on a fixed training set of 2048
images for 8 epochs (a fixed, small set, so that how well a layout
generalises from limited data shows, as in the paper's comparison), then
the accuracy on the training set (capacity: how well it fits) and on
1024 held-out images (generalisation), for each seed (the seed
sets the initial weights, the training images and their order; the test
images are the same for every run). The seeds of a layout share one compiled
model, reset to the seed's fresh initial weights and a zeroed optimizer
(`train_and_evaluate`): training from scratch without compiling 12 times.
"""

from __future__ import annotations

import csv
import math
import os
import time
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc import zoo
from keras_posenc.experiments._figures import (
    new_figure,
    read_csv_rows,
    require_matplotlib,
    results_to_redraw,
    save_figure,
)
from keras_posenc.experiments._settings import merge_settings
from keras_posenc.layers._checks import check_int, check_non_negative_number
from keras_posenc.zoo.coatnet import parse_layout

__all__ = [
    "CLASSES",
    "COLUMNS",
    "FULL_SETTINGS",
    "LAYOUTS",
    "MODEL_SETTINGS",
    "QUICK_SETTINGS",
    "TASK_SETTINGS",
    "build_model",
    "layout_experiment",
    "layout_label",
    "markdown_table",
    "plot",
    "read_results",
    "redraw",
    "texture_layout_data",
    "train_and_evaluate",
    "trainable_parameters",
    "write_results",
]

LAYOUTS = ("C-C-C-C", "C-C-C-T", "C-C-T-T", "C-T-T-T")
CLASSES = ("A left of B", "A right of B", "A above B", "A below B")

COLUMNS = (
    "layout",
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


# ----------------------------------------------------------------------------- the task


def layout_label(first: Any, second: Any) -> np.ndarray:
    """The class of images whose ``A`` patch is at ``first`` and ``B`` patch at ``second``.

    The relation is read along the axis of the larger offset between the two
    patches (a tie counts as vertical; `texture_layout_data` never draws one):
    0 ``A`` left of ``B``, 1 right of, 2 above, 3 below (`CLASSES`).

    Args:
        first: ``(n, 2)`` (row, column) positions of the ``A`` patches (their
            top-left corners, or any point at the same place in the patch).
        second: the same for the ``B`` patches.

    Returns:
        ``(n,)`` int32 class ids.

    Examples:

        >>> layout_label([[10, 2], [10, 40]], [[12, 30], [12, 8]]).tolist()
        [0, 1]
        >>> layout_label([[2, 10], [40, 10]], [[30, 12], [8, 12]]).tolist()
        [2, 3]
    """
    first, second = np.asarray(first), np.asarray(second)
    if first.ndim != 2 or first.shape[1:] != (2,) or second.shape != first.shape:
        raise ValueError(
            "layout_label: `first` and `second` must both have shape (n, 2) (row, column); "
            f"got {first.shape} and {second.shape}."
        )
    rows, cols = (second - first).T
    horizontal = np.abs(cols) > np.abs(rows)
    labels = np.where(horizontal, np.where(cols > 0, 0, 1), np.where(rows > 0, 2, 3))
    return labels.astype("int32")


def _stripes(size: int, horizontal: bool, phase: int) -> np.ndarray:
    """A ``size x size`` pattern of +1/-1 stripes of period 2 (mean 0 over any 2 x 2 block)."""
    line = (np.arange(size) + phase) % 2 * 2.0 - 1.0
    return np.tile(
        line[:, None] if horizontal else line[None, :], (1, size) if horizontal else (size, 1)
    )


def texture_layout_data(
    num_images: int,
    image_size: int = 64,
    patch_size: int = 12,
    noise: float = 0.5,
    seed: int | Sequence[int] = 0,
    return_positions: bool = False,
) -> tuple[np.ndarray, ...]:
    """Images of two textured patches whose class is where one lies relative to the other.

    Each image: Gaussian noise (standard deviation ``noise``) plus two
    ``patch_size`` squares of stripes of period 2 pixels (random phase,
    amplitude uniform in [0.7, 1.0]), horizontal stripes (``A``) in one and
    vertical stripes (``B``) in the other, times one random colour per image
    (each channel uniform in [0.5, 1.0], the same for both patches). The
    class (uniform over `CLASSES`) is ``A``'s place relative to ``B``:
    `layout_label` of the patches' corners. The patches never overlap: their
    offset along the class's axis is at least ``patch_size`` and across it
    at most half of that offset, so the class is unambiguous. See the
    module's docstring for why neither texture nor layout alone suffices.

    Args:
        num_images: number of images.
        image_size: height and width in pixels (at least ``2 * patch_size``).
        patch_size: side of each patch in pixels (at least 2).
        noise: standard deviation of the background noise (>= 0).
        seed: seed of everything random (anything ``numpy.random.default_rng`` takes).
        return_positions: also return the patches' top-left corners.

    Returns:
        ``(images, labels)``: float32 ``(num_images, image_size, image_size, 3)``
        and int32 ``(num_images,)``; with ``return_positions`` also ``first``
        and ``second``, int32 ``(num_images, 2)`` (row, column) of the ``A``
        and ``B`` patches.

    Raises:
        ValueError: for a non-positive ``num_images``, a ``patch_size`` below
            2, an image too small for two patches or a negative ``noise``.

    Examples:

        >>> images, labels = texture_layout_data(8, image_size=32, patch_size=8, seed=0)
        >>> images.shape, images.dtype.name, labels.shape, labels.dtype.name
        ((8, 32, 32, 3), 'float32', (8,), 'int32')
        >>> _, labels, first, second = texture_layout_data(
        ...     8, image_size=32, patch_size=8, seed=0, return_positions=True)
        >>> bool((layout_label(first, second) == labels).all())
        True
    """
    caller = "texture_layout_data"
    num_images = check_int(caller, "num_images", num_images, 1)
    patch_size = check_int(caller, "patch_size", patch_size, 2)
    image_size = check_int(caller, "image_size", image_size, 1)
    if image_size < 2 * patch_size:
        raise ValueError(
            f"{caller}: `image_size` must be at least 2 * patch_size = {2 * patch_size} so "
            f"that two patches fit side by side; got image_size={image_size}, "
            f"patch_size={patch_size}."
        )
    check_non_negative_number(caller, "noise", noise)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(CLASSES), num_images).astype("int32")
    room = image_size - patch_size  # corners lie in 0 .. room
    # Offset along the class's axis: patch_size .. room; across it: at most half of that.
    along = rng.integers(patch_size, room + 1, num_images)
    across = np.rint((rng.random(num_images) * 2 - 1) * (along // 2)).astype(int)
    horizontal = labels < 2  # 0, 1: left/right (along columns); 2, 3: above/below
    sign = np.where(labels % 2 == 0, 1, -1)  # A before B (left of, above) or after it
    offset = np.where(
        horizontal[:, None],
        np.stack([across, sign * along], 1),
        np.stack([sign * along, across], 1),
    )
    # A's corner: anywhere that keeps both patches inside the image.
    first = rng.integers(np.maximum(0, -offset), np.minimum(room, room - offset) + 1)
    first = first.astype("int32")
    second = (first + offset).astype("int32")
    images = rng.standard_normal((num_images, image_size, image_size)) * noise
    amplitudes = rng.uniform(0.7, 1.0, (num_images, 2))
    phases = rng.integers(0, 2, (num_images, 2))
    for n in range(num_images):
        for k, (corner, horizontal) in enumerate(((first[n], True), (second[n], False))):
            pattern = amplitudes[n, k] * _stripes(patch_size, horizontal, phases[n, k])
            r, c = corner
            images[n, r : r + patch_size, c : c + patch_size] += pattern
    colours = rng.uniform(0.5, 1.0, (num_images, 1, 1, 3))
    images = (images[..., None] * colours).astype("float32")
    if return_positions:
        return images, labels, first, second
    return images, labels


# ----------------------------------------------------------------------------- models


def build_model(layout: str, seed: int | None = None, **model_settings: Any) -> keras.Model:
    """The study's CoAtNet for one layout, from the zoo's builder.

    ``zoo.create("coatnet_0", layout=layout, input_shape=(image_size,
    image_size, 3), num_classes=4, blocks=..., channels=..., head_dim=...,
    pre_logits=False)`` with `MODEL_SETTINGS`; the classifier gives logits.

    Args:
        layout: one of `LAYOUTS` (or any other four of C/T joined by ``-``).
        seed: if given, ``keras.utils.set_random_seed(seed)`` first, so the
            initial weights are reproducible.
        **model_settings: overrides of `MODEL_SETTINGS` (``image_size``,
            ``blocks``, ``channels``, ``head_dim``).

    Returns:
        The ``keras.Model``.

    The guide (docs/guides/coatnet.md) builds, trains and predicts with the
    same configuration; no example runs here, as building a model costs
    seconds on JAX (each initializer shape is compiled).
    """
    unknown = set(model_settings) - set(MODEL_SETTINGS)
    if unknown:
        raise ValueError(
            f"build_model: unknown model settings {sorted(unknown)}; "
            f"expected some of {sorted(MODEL_SETTINGS)}."
        )
    settings = {**MODEL_SETTINGS, **model_settings}
    if seed is not None:
        keras.utils.set_random_seed(seed)
    size = settings["image_size"]
    return zoo.create(
        "coatnet_0",
        layout=layout,
        input_shape=(size, size, 3),
        num_classes=len(CLASSES),
        blocks=tuple(settings["blocks"]),
        channels=tuple(settings["channels"]),
        head_dim=settings["head_dim"],
        pre_logits=False,
    )


def trainable_parameters(model: keras.Model) -> int:
    """Trainable parameters (the paper's count; without BatchNorm's moving statistics)."""
    return sum(int(np.prod(w.shape)) for w in model.trainable_weights)


# ----------------------------------------------------------------------------- training


def _accuracy(model: keras.Model, images: np.ndarray, labels: np.ndarray, batch: int) -> float:
    logits = model.predict(images, batch_size=batch, verbose=0)
    return float((np.asarray(logits).argmax(-1) == labels).mean())


def _reset_optimizer(optimizer: keras.optimizers.Optimizer) -> None:
    """Zeroes every optimizer variable (moments and the step count): a fresh optimizer."""
    for variable in optimizer.variables:
        variable.assign(ops.zeros(variable.shape, variable.dtype))


def train_and_evaluate(
    layout: str,
    seeds: Sequence[int] = (0,),
    train_images: int = 2048,
    test_images: int = 1024,
    epochs: int = 8,
    batch_size: int = 32,
    learning_rate: float = 2e-3,
    verbose: int = 0,
    model_settings: dict[str, Any] | None = None,
    task_settings: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Trains one layout from scratch once per seed and measures its accuracy.

    Training: AdamW (weight decay 0.05, gradient norm clipped at 1; the
    learning rate warms up linearly to ``learning_rate`` over the first
    tenth of the steps, then decays to zero along a cosine) for ``epochs``
    epochs over ``train_images`` images drawn with the seed, shuffled each
    epoch in an order set by the seed, from initial weights set by the seed.
    Testing: ``test_images`` images that are the same for every seed and
    layout. The seeds share one compiled model (compiling takes longer than
    training a seed): before each seed its weights are set to those of a
    model freshly built with that seed and the optimizer's variables are
    zeroed, which is training from scratch.

    Returns:
        One ``{"seed": int, "loss": float, "test_accuracy": float,
        "train_accuracy": float, "params": int, "seconds": float}`` per seed
        (``loss``: the last epoch's mean training loss); the training accuracy is
        measured after training, in inference mode, on the training images;
        the first seed's seconds include compiling.
    """
    model_settings = {**MODEL_SETTINGS, **(model_settings or {})}
    task_settings = {**TASK_SETTINGS, **(task_settings or {})}
    keras.backend.clear_session()  # no graph or name build-up across the layouts
    size = model_settings["image_size"]
    # The test images: one seed for every run, far from the training seeds.
    test, test_labels = texture_layout_data(test_images, size, seed=[10_000, 2], **task_settings)
    steps = epochs * math.ceil(train_images / batch_size)
    warmup = max(1, steps // 10)
    # Predictions in batches of up to 256 images of one shape: a single compilation.
    evaluation_batch = min(256, test_images, train_images)
    model = None
    runs = []
    for seed in seeds:
        start = time.perf_counter()
        images, labels = texture_layout_data(train_images, size, seed=[seed, 1], **task_settings)
        initial = build_model(layout, seed=seed, **model_settings)
        if model is None:
            model = initial
            schedule = keras.optimizers.schedules.CosineDecay(
                0.0, max(1, steps - warmup), warmup_target=learning_rate, warmup_steps=warmup
            )
            model.compile(
                optimizer=keras.optimizers.AdamW(schedule, weight_decay=0.05, clipnorm=1.0),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"],
            )
        else:
            model.set_weights(initial.get_weights())
            _reset_optimizer(model.optimizer)
        keras.utils.set_random_seed(seed)  # the order of the training images
        history = model.fit(images, labels, batch_size=batch_size, epochs=epochs, verbose=verbose)
        runs.append(
            {
                "seed": seed,
                "loss": float(history.history["loss"][-1]),
                "test_accuracy": _accuracy(model, test, test_labels, evaluation_batch),
                "train_accuracy": _accuracy(model, images, labels, evaluation_batch),
                "params": trainable_parameters(model),
                "seconds": time.perf_counter() - start,
            }
        )
    return runs


def layout_experiment(
    quick: bool = True,
    out: str | os.PathLike | None = None,
    seeds: Sequence[int] | None = None,
    layouts: Sequence[str] = LAYOUTS,
    verbose: int = 1,
    **settings: Any,
) -> list[dict[str, Any]]:
    """Trains the study's CoAtNet in every layout and seed and tests it.

    Args:
        quick: the quick run (one seed, one block per stage, 128 training
            images, one epoch; about a minute of CPU time, see the command
            line page; a smoke test whose numbers are not the study's)
            instead of the full one (seeds 0, 1, 2, 2048 training images,
            8 epochs, 1024 test images).
        out: a folder to write ``coatnet_layouts.csv``, ``.md`` and ``.png``
            (accuracy per layout, drawn with matplotlib, the ``experiments``
            extra; `redraw` draws it again from the CSV) into; created if missing.
        seeds: seeds; default ``(0,)`` quick, ``(0, 1, 2)`` full.
        layouts: a selection of layouts (default the paper's four, `LAYOUTS`).
        verbose: 1 prints a summary line per layout, 2 also Keras' one line
            per training (its progress bar is not used: the first step's
            estimate includes compiling and was off by minutes); 0 prints nothing.
        **settings: overrides of `QUICK_SETTINGS` / `FULL_SETTINGS`
            (``train_images``, ``test_images``, ``epochs``, ``batch_size``,
            ``learning_rate``), `MODEL_SETTINGS` and `TASK_SETTINGS`.

    Returns:
        One dict per layout with the keys of ``COLUMNS``: the mean test
        accuracy over seeds, its standard deviation, minimum and maximum,
        the mean training accuracy and its standard deviation, the number of
        seeds, trainable parameters, training images, epochs and the
        seconds of all the layout's runs (compiling included).

    Raises:
        ImportError: with ``out`` but without matplotlib, before any training.
    """
    caller = "layout_experiment"
    if out is not None:  # fail before the training, not after it
        require_matplotlib(caller)
    model_settings, budget, task_settings = merge_settings(
        caller, quick, settings, QUICK_SETTINGS, FULL_SETTINGS, MODEL_SETTINGS, TASK_SETTINGS
    )
    layouts = [layouts] if isinstance(layouts, str) else list(layouts)
    for layout in layouts:
        try:
            parse_layout(layout)
        except ValueError:
            raise ValueError(
                f"{caller}: `layouts` must be layouts of stages S1..S4 such as "
                f"{', '.join(map(repr, LAYOUTS))} (four of C/T joined by '-'); got {layout!r}."
            ) from None
    if not layouts:
        raise ValueError(f"{caller}: `layouts` must not be empty.")
    seeds = tuple(seeds if seeds is not None else ((0,) if quick else (0, 1, 2)))
    if not seeds:
        raise ValueError(f"{caller}: `seeds` must not be empty.")

    rows = []
    for layout in layouts:
        runs = train_and_evaluate(
            layout,
            seeds,
            verbose=2 if verbose >= 2 else 0,
            model_settings=model_settings,
            task_settings=task_settings,
            **budget,
        )
        test = np.array([run["test_accuracy"] for run in runs])
        train = np.array([run["train_accuracy"] for run in runs])
        row = {
            "layout": layout,
            "params": runs[0]["params"],
            "test_accuracy": float(test.mean()),
            "test_accuracy_std": float(test.std()),
            "test_accuracy_min": float(test.min()),
            "test_accuracy_max": float(test.max()),
            "train_accuracy": float(train.mean()),
            "train_accuracy_std": float(train.std()),
            "seeds": len(seeds),
            "train_images": budget["train_images"],
            "epochs": budget["epochs"],
            "seconds": float(sum(run["seconds"] for run in runs)),
        }
        rows.append(row)
        if verbose:
            print(
                f"{layout}: test accuracy {_pair(row, 'test_accuracy')}, train accuracy "
                f"{_pair(row, 'train_accuracy')} ({row['params']:,} params, {len(seeds)} "
                f"seed(s), {row['seconds']:.0f} s)",
                flush=True,
            )
    if out is not None:
        write_results(rows, out)
    return rows


# ----------------------------------------------------------------------------- outputs


def _pair(row: dict[str, Any], key: str) -> str:
    return f"{row[key]:.3f} ± {row[key + '_std']:.3f}"


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """The results as a markdown table: one row per layout, mean ± std over seeds."""
    first = rows[0]
    lines = [
        f"Accuracy, mean ± std over {first['seeds']} seed(s) (lowest .. highest test seed); "
        f"{first['train_images']} training images, {first['epochs']} epoch(s); chance "
        f"{1 / len(CLASSES):.2f}, layout without texture at most 0.50",
        "",
        "| layout | params | test accuracy | lowest .. highest | train accuracy | train - test |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        gap = row["train_accuracy"] - row["test_accuracy"]
        lines.append(
            f"| {row['layout']} | {row['params']:,} | {_pair(row, 'test_accuracy')} | "
            f"{row['test_accuracy_min']:.3f} .. {row['test_accuracy_max']:.3f} | "
            f"{_pair(row, 'train_accuracy')} | {gap:+.3f} |"
        )
    return "\n".join(lines) + "\n"


def write_results(rows: Sequence[dict[str, Any]], out: str | os.PathLike) -> list[str]:
    """Writes ``coatnet_layouts.csv``, ``.md`` and ``.png`` into ``out``.

    The CSV is the data behind the figure: `redraw` draws the PNG again from it.

    Returns:
        The paths written.

    Raises:
        ImportError: without matplotlib (the ``experiments`` extra), before anything is written.
    """
    require_matplotlib("coatnet_layouts.write_results")
    os.makedirs(out, exist_ok=True)
    csv_path = os.path.join(out, CSV_NAME)
    with open(csv_path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({key: row[key] for key in COLUMNS})
    md_path = os.path.join(out, "coatnet_layouts.md")
    with open(md_path, "w") as handle:
        handle.write(markdown_table(rows))
    png_path = save_figure(plot(rows), os.path.join(out, FIGURE_NAME))
    return [csv_path, md_path, png_path]


CSV_NAME = "coatnet_layouts.csv"
FIGURE_NAME = "coatnet_layouts.png"
_INT_COLUMNS = ("params", "seeds", "train_images", "epochs")


def read_results(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a ``coatnet_layouts.csv`` (or of the folder holding one).

    Numbers come back as ints and floats: the rows `layout_experiment`
    returned, ready for `plot` or `markdown_table`.

    Raises:
        ValueError: when the CSV lacks a column of `COLUMNS`.

    Examples:

        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> with open(os.path.join(folder, "coatnet_layouts.csv"), "w") as f:
        ...     _ = f.write(",".join(COLUMNS) + "\\n"
        ...                 "C-C-T-T,169840,0.8,0.04,0.74,0.84,0.99,0.003,3,2048,8,200.0\\n")
        >>> row = read_results(folder)[0]
        >>> row["layout"], row["params"], row["test_accuracy"]
        ('C-C-T-T', 169840, 0.8)
    """
    rows = []
    for raw in read_csv_rows(path, CSV_NAME, COLUMNS):
        row: dict[str, Any] = {"layout": raw["layout"]}
        for key in COLUMNS[1:]:
            row[key] = int(raw[key]) if key in _INT_COLUMNS else float(raw[key])
        rows.append(row)
    return rows


def redraw(folder: str | os.PathLike, out: str | os.PathLike | None = None) -> str:
    """Draws ``coatnet_layouts.png`` again from the ``coatnet_layouts.csv`` beside it.

    No training: the CSV that `write_results` wrote holds everything the figure shows.

    Args:
        folder: the folder holding the CSV.
        out: the folder for the PNG; default ``folder``.

    Returns:
        The path of the PNG.

    Raises:
        ImportError: without matplotlib (the ``experiments`` extra).
    """
    rows, out = results_to_redraw("coatnet_layouts.redraw", read_results, folder, out)
    return save_figure(plot(rows), os.path.join(out, FIGURE_NAME))


def plot(rows: Sequence[dict[str, Any]]) -> Any:
    """Test and training accuracy per layout, as a matplotlib figure.

    For each layout: the mean test accuracy with an error bar from the lowest
    to the highest seed, and the mean training accuracy with one standard
    deviation; lines at chance (0.25) and at 0.50, the best a model that
    sees the layout but not the textures can do. Each layout's label gives
    its trainable parameters; the legend sits below the axes.

    Args:
        rows: the rows of `layout_experiment` (or `read_results`).

    Returns:
        A ``matplotlib.figure.Figure`` (Agg canvas) 1000 px wide at
        `keras_posenc.experiments._figures.DPI`; save it with its ``savefig``.

    Raises:
        ImportError: without matplotlib (the ``experiments`` extra).

    Examples:

        >>> rows = [{"layout": "C-C-C-T", "params": 156936, "test_accuracy": 0.99,
        ...          "test_accuracy_min": 0.98, "test_accuracy_max": 1.0,
        ...          "train_accuracy": 1.0, "train_accuracy_std": 0.0, "seeds": 3,
        ...          "train_images": 2048, "epochs": 8}]
        >>> figure = plot(rows)
        >>> [int(v) for v in figure.get_size_inches() * figure.dpi]
        [1000, 500]
    """
    figure = new_figure("coatnet_layouts.plot", height=5.0, width=10.0)
    axis = figure.subplots()
    x = np.arange(len(rows))
    test = np.array([row["test_accuracy"] for row in rows])
    low = test - np.array([row["test_accuracy_min"] for row in rows])
    high = np.array([row["test_accuracy_max"] for row in rows]) - test
    train = np.array([row["train_accuracy"] for row in rows])
    train_std = np.array([row["train_accuracy_std"] for row in rows])
    seeds = rows[0]["seeds"]
    axis.errorbar(
        x - 0.08,
        test,
        yerr=np.maximum([low, high], 0),
        fmt="o",
        color="tab:blue",
        markersize=8,
        capsize=4,
        label=f"test accuracy: mean of {seeds} seed(s), bar from lowest to highest seed",
    )
    axis.errorbar(
        x + 0.08,
        train,
        yerr=train_std,
        fmt="s",
        color="tab:orange",
        markerfacecolor="white",
        markersize=8,
        capsize=4,
        label="training accuracy: mean, bar ± 1 standard deviation",
    )
    axis.axhline(1 / len(CLASSES), color="0.4", linestyle="--", linewidth=1, label="chance: 0.25")
    axis.axhline(
        0.5,
        color="0.4",
        linestyle=":",
        linewidth=1.2,
        label="best possible from layout without texture: 0.50",
    )
    axis.set_xticks(x, [f"{row['layout']}\n{row['params']:,} params" for row in rows])
    axis.set_xlim(-0.5, len(rows) - 0.5)
    axis.set_ylim(0, 1.05)
    axis.grid(True, axis="y", color="0.9")
    axis.set_xlabel(
        "layout of stages S1..S4 (C: MBConv convolution, T: relative-attention Transformer)"
    )
    axis.set_ylabel("accuracy (fraction correct)")
    figure.legend(loc="outside lower center", ncols=2, fontsize=9, frameon=False)
    first = rows[0]
    axis.set_title(
        f"CoAtNet layouts on the texture-layout task: {first['train_images']} training "
        f"images, {first['epochs']} epoch(s)"
    )
    return figure
