"""Where does position information come from? Padding modes, content-free inputs, PosENet.

A frozen random network sees inputs with no content (uniform noise, constant
grey, constant white); a linear readout with 'valid' support then tries to
decode the position maps from its features. With circular padding (or none)
the network is shift-equivariant and nothing is decoded; with zero padding the
border marks every position (Islam et al. 2020; Kayhan and van Gemert 2020).

The readout here is PosENet's one k x k 'valid' convolution fitted in closed
form (ridge-regularised least squares in numpy) on the frozen features, which
is fast and deterministic; :func:`keras_posenc.probe.train` fits the same
readout by gradient descent.
"""

from __future__ import annotations

import csv
import os
import struct
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
from keras import ops

from keras_posenc.layers.relative_position_2d import bilinear_matrix
from keras_posenc.probe.backbone import BACKBONE_PADDINGS, probe_backbone
from keras_posenc.probe.inputs import INPUT_KINDS, content_free_images
from keras_posenc.probe.metrics import mae, spc
from keras_posenc.probe.patterns import PATTERN_NAMES, position_patterns
from keras_posenc.probe.posenet import PosENet

COLUMNS = ("padding", "input", "target", "spc", "spc_std", "mae", "constant", "seeds")

# Quick: a tiny network on 32 px; full: the 64-112 px range, 3 seeds.
QUICK_SETTINGS = {
    "image_size": 32,
    "stages": 3,
    "width": 8,
    "feature_size": 16,
    "train_images": 32,
    "test_images": 16,
}
FULL_SETTINGS = {
    "image_size": 96,
    "stages": 4,
    "width": 16,
    "feature_size": 28,
    "train_images": 32,
    "test_images": 16,
}


def _patches(features: np.ndarray, kernel_size: int) -> np.ndarray:
    """``(n, h, w, c)`` -> ``(n, h-k+1, w-k+1, k*k*c)``: the inputs of a 'valid' k x k conv."""
    windows = np.lib.stride_tricks.sliding_window_view(
        features, (kernel_size, kernel_size), axis=(1, 2)
    )
    count, rows, cols = windows.shape[:3]
    return windows.reshape(count, rows, cols, -1)


class LinearReadout:
    """A k x k 'valid' convolution fitted by ridge-regularised least squares.

    Features that do not vary over the training set (standard deviation below
    ``1e-4`` times the mean feature magnitude) are dropped before fitting, so
    float rounding in a feature that should be constant is not read as signal;
    if none vary, the readout predicts the mean target (a constant map, which ``spc`` flags).
    """

    def __init__(self, kernel_size: int = 3, ridge: float = 1e-3) -> None:
        self.kernel_size = kernel_size
        self.ridge = ridge

    def fit(self, features: np.ndarray, targets: np.ndarray) -> LinearReadout:
        """``features`` ``(n, h, w, c)``; ``targets`` ``(n, h-k+1, w-k+1, t)``.

        The normal equations are accumulated image by image, so memory stays at
        one image's patches whatever the number of images.
        """
        gram = cross = total = target_total = None
        count = 0
        for image, goal in zip(features, targets):
            x = _patches(image[None].astype(np.float64), self.kernel_size)
            x = x.reshape(-1, x.shape[-1])
            y = np.asarray(goal, dtype=np.float64).reshape(-1, goal.shape[-1])
            if gram is None:
                gram, cross = x.T @ x, x.T @ y
                total, target_total = x.sum(axis=0), y.sum(axis=0)
            else:
                gram += x.T @ x
                cross += x.T @ y
                total += x.sum(axis=0)
                target_total += y.sum(axis=0)
            count += len(x)
        self.mean, self.offset = total / count, target_total / count
        covariance = gram / count - np.outer(self.mean, self.mean)
        self.scale = np.sqrt(np.maximum(np.diag(covariance), 0.0))
        self.keep = self.scale > 1e-4 * (np.abs(self.mean).mean() + 1e-12)
        if not self.keep.any():
            self.weights = np.zeros((0, cross.shape[1]))
            return self
        keep, scale = self.keep, self.scale[self.keep]
        # Standardised features: correlation matrix plus ridge; cross-covariance with targets.
        normal = covariance[np.ix_(keep, keep)] / np.outer(scale, scale)
        normal += self.ridge * np.eye(len(normal))
        cross_covariance = cross[keep] / count - np.outer(self.mean[keep], self.offset)
        self.weights = np.linalg.solve(normal, cross_covariance / scale[:, None])
        return self

    def predict(self, features: np.ndarray) -> np.ndarray:
        x = _patches(features.astype(np.float64), self.kernel_size)
        shape = x.shape[:3]
        z = (x[..., self.keep] - self.mean[self.keep]) / self.scale[self.keep]
        return (z @ self.weights + self.offset).reshape(*shape, -1)


def _resize_maps(maps: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize (half-pixel centres) of ``(n, h, w, t)`` maps."""
    rows = bilinear_matrix(maps.shape[1], height)
    cols = bilinear_matrix(maps.shape[2], width)
    return np.einsum("ah,nhwt,bw->nabt", rows, maps, cols)


def _score(
    predictions: np.ndarray, targets: dict[str, np.ndarray], names: Sequence[str]
) -> dict[str, tuple[float, float, bool]]:
    scores = {}
    for channel, name in enumerate(names):
        predicted = predictions[..., channel]
        value, flagged = spc(predicted, targets[name], return_flag=True)
        # The readout is linear, not a sigmoid: clip to the targets' range for MAE.
        scores[name] = (value, mae(np.clip(predicted, 0.0, 1.0), targets[name]), flagged)
    return scores


def probe_padding_mode(
    padding: str,
    seed: int = 0,
    inputs: Sequence[str] = INPUT_KINDS,
    targets: Sequence[str] = PATTERN_NAMES,
    image_size: int = 32,
    stages: int = 3,
    width: int = 8,
    feature_size: int = 16,
    kernel_size: int = 3,
    train_images: int = 32,
    test_images: int = 16,
) -> dict[str, tuple[dict[str, tuple[float, float, bool]], np.ndarray]]:
    """One padding mode and seed: a frozen random probe backbone, a least-squares readout.

    The backbone's stage outputs are resized to ``feature_size`` and
    concatenated exactly as :class:`~keras_posenc.probe.PosENet` does, and
    computed once for every input kind in one ``predict``. For noise the
    readout is fitted on ``train_images`` images and scored on ``test_images``
    others; a constant input (grey, white) has only one image, so the readout
    is fitted and scored on it.

    Returns:
        ``{input kind: ({target: (spc, mae, constant)}, predicted maps (images,
        size, size, targets))}``.
    """
    grid = feature_size - kernel_size + 1
    if grid < 3:
        raise ValueError(
            f"probe_padding_mode: feature_size {feature_size} with kernel {kernel_size} leaves "
            f"a {grid} x {grid} readout; the targets need at least 3 x 3"
        )
    backbone = probe_backbone(
        padding, input_shape=(image_size, image_size, 3), stages=stages, width=width, seed=seed
    )
    posenet = PosENet(backbone, feature_size=feature_size, kernel_size=kernel_size)
    batches = {}
    for kind in inputs:
        if kind == "noise":
            train = content_free_images("noise", train_images, image_size, image_size, seed=seed)
            test = content_free_images(
                "noise", test_images, image_size, image_size, seed=seed + 1000
            )
            batches[kind] = (train, test)
        else:
            single = content_free_images(kind, 1, image_size, image_size)
            batches[kind] = (single, None)
    everything = np.concatenate([x for pair in batches.values() for x in pair if x is not None])
    # An eager call, not predict: no per-model compilation, and the network is tiny.
    features = ops.convert_to_numpy(posenet.feature_model()(everything, training=False))

    small = position_patterns(grid, grid)
    wanted = np.stack([small[name] for name in targets], axis=-1)[None]
    full = position_patterns(image_size, image_size)
    results, start = {}, 0
    for kind, (train, test) in batches.items():
        train_features = features[start : start + len(train)]
        start += len(train)
        if test is None:
            test_features = train_features
        else:
            test_features = features[start : start + len(test)]
            start += len(test)
        goal = np.broadcast_to(wanted, (len(train_features), *wanted.shape[1:]))
        readout = LinearReadout(kernel_size).fit(train_features, goal)
        maps = _resize_maps(readout.predict(test_features), image_size, image_size)
        results[kind] = (_score(maps, full, targets), maps)
    return results


def padding_experiment(
    quick: bool = True,
    out: str | os.PathLike | None = None,
    seeds: Sequence[int] | None = None,
    paddings: Sequence[str] = BACKBONE_PADDINGS,
    inputs: Sequence[str] = INPUT_KINDS,
    targets: Sequence[str] = PATTERN_NAMES,
    **settings: Any,
) -> list[dict[str, Any]]:
    """Runs the padding study and returns its table; writes it to ``out`` if given.

    For every padding mode, input kind and seed, a frozen random
    :func:`~keras_posenc.probe.probe_backbone` is probed with a least-squares
    PosENet readout (:func:`probe_padding_mode`); SPC and MAE are averaged
    over the seeds.

    Args:
        quick: the tiny setting (32 px, 3 stages of width 8, one seed; seconds on
            2 CPU cores) instead of the full one (96 px, 4 stages of width 16,
            seeds 0, 1, 2).
        out: a folder to write ``padding.csv``, ``padding.md`` and
            ``padding_maps.png`` (first seed, the first noise image, or the first
            input kind without noise: for each padding mode a row of target /
            prediction pairs) into; created if missing.
        seeds: network seeds; default ``(0,)`` quick, ``(0, 1, 2)`` full.
        paddings: padding modes of the backbone (``BACKBONE_PADDINGS``).
        inputs: input kinds (``INPUT_KINDS``).
        targets: target names (``PATTERN_NAMES``).
        **settings: overrides of ``QUICK_SETTINGS`` / ``FULL_SETTINGS``
            (``image_size``, ``stages``, ``width``, ``feature_size``,
            ``train_images``, ``test_images``, ``kernel_size``).

    Returns:
        One dict per (padding, input, target) with the keys of ``COLUMNS``:
        mean ``spc`` and its standard deviation over seeds ``spc_std``, mean
        ``mae``, ``constant`` (some prediction was constant and scored 0) and
        the number of ``seeds``.

    Examples:

        >>> from keras_posenc.experiments import padding_experiment
        >>> rows = padding_experiment(paddings=["zeros"], inputs=["grey"], targets=["H"])
        >>> [(r["padding"], r["input"], r["target"], r["spc"] > 0.5) for r in rows]
        [('zeros', 'grey', 'H', True)]
    """
    chosen = {**(QUICK_SETTINGS if quick else FULL_SETTINGS), **settings}
    paddings, inputs, targets = (
        [v] if isinstance(v, str) else list(v) for v in (paddings, inputs, targets)
    )
    seeds = tuple(seeds if seeds is not None else ((0,) if quick else (0, 1, 2)))
    for name, values, allowed in (
        ("paddings", paddings, BACKBONE_PADDINGS),
        ("inputs", inputs, INPUT_KINDS),
        ("targets", targets, PATTERN_NAMES),
    ):
        wrong = [v for v in values if v not in allowed]
        if wrong or not values:
            raise ValueError(
                f"padding_experiment: `{name}` must be a non-empty selection of {list(allowed)}; "
                f"received {list(values)!r}"
            )
    if not seeds:
        raise ValueError("padding_experiment: `seeds` must not be empty")

    rows, figure_maps = [], {}
    for padding in paddings:
        cells = [
            probe_padding_mode(padding, seed=seed, inputs=inputs, targets=targets, **chosen)
            for seed in seeds
        ]
        figure_kind = "noise" if "noise" in inputs else inputs[0]
        figure_maps[padding] = cells[0][figure_kind][1][0]
        for kind in inputs:
            per_seed = [cell[kind][0] for cell in cells]
            for target in targets:
                values = np.array([s[target][0] for s in per_seed])
                rows.append(
                    {
                        "padding": padding,
                        "input": kind,
                        "target": target,
                        "spc": float(values.mean()),
                        "spc_std": float(values.std()),
                        "mae": float(np.mean([s[target][1] for s in per_seed])),
                        "constant": any(s[target][2] for s in per_seed),
                        "seeds": len(seeds),
                    }
                )
    if out is not None:
        write_results(rows, out, figure_maps, targets, chosen["image_size"])
    return rows


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """The experiment's rows as a markdown table (constant predictions marked with *)."""
    lines = [
        "| padding | input | target | SPC | SPC std | MAE | seeds |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        mark = "*" if row["constant"] else ""
        lines.append(
            f"| {row['padding']} | {row['input']} | {row['target']} | {row['spc']:.3f}{mark} | "
            f"{row['spc_std']:.3f} | {row['mae']:.3f} | {row['seeds']} |"
        )
    lines.append("")
    lines.append("\\* a prediction was constant: SPC is undefined and counted as 0.")
    return "\n".join(lines) + "\n"


def write_results(
    rows: Sequence[dict[str, Any]],
    out: str | os.PathLike,
    figure_maps: dict[str, np.ndarray] | None = None,
    targets: Sequence[str] = PATTERN_NAMES,
    image_size: int | None = None,
) -> list[str]:
    """Writes ``padding.csv``, ``padding.md`` and, given maps, ``padding_maps.png``.

    Returns:
        The paths written.
    """
    os.makedirs(out, exist_ok=True)
    csv_path = os.path.join(out, "padding.csv")
    with open(csv_path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({key: row[key] for key in COLUMNS})
    md_path = os.path.join(out, "padding.md")
    with open(md_path, "w") as handle:
        handle.write(markdown_table(rows))
    paths = [csv_path, md_path]
    if figure_maps:
        size = image_size or next(iter(figure_maps.values())).shape[0]
        expected = position_patterns(size, size)
        tiles = []
        for maps in figure_maps.values():
            row = []
            for channel, name in enumerate(targets):
                row += [expected[name], np.clip(maps[..., channel], 0.0, 1.0)]
            tiles.append(row)
        png_path = os.path.join(out, "padding_maps.png")
        write_png(png_path, _mosaic(tiles))
        paths.append(png_path)
    return paths


def _mosaic(tiles: list[list[np.ndarray]], gap: int = 2) -> np.ndarray:
    """A grid of equally sized [0, 1] maps separated by white lines, as uint8."""
    height, width = tiles[0][0].shape
    rows, cols = len(tiles), len(tiles[0])
    canvas = np.ones((rows * (height + gap) + gap, cols * (width + gap) + gap))
    for r, row in enumerate(tiles):
        for c, tile in enumerate(row):
            top, left = gap + r * (height + gap), gap + c * (width + gap)
            canvas[top : top + height, left : left + width] = tile
    return np.round(canvas * 255).astype(np.uint8)


def write_png(path: str | os.PathLike, image: np.ndarray) -> None:
    """Writes a 2D uint8 array as an 8-bit greyscale PNG (no imaging library needed)."""
    image = np.ascontiguousarray(image, dtype=np.uint8)
    height, width = image.shape
    raw = b"".join(b"\x00" + image[row].tobytes() for row in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    with open(path, "wb") as handle:
        handle.write(b"\x89PNG\r\n\x1a\n")
        handle.write(chunk(b"IHDR", header))
        handle.write(chunk(b"IDAT", zlib.compress(raw, 9)))
        handle.write(chunk(b"IEND", b""))
