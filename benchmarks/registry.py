"""What the benchmark runner knows about each script in this folder: the fields that
identify a row, the columns of its rendered table, the fields ``--against`` compares and
those an ``across_BACKEND`` block sets side by side.

Used by runner.py (running), render.py (the marked tables of the docs) and summary.py (the
summary page's ratios and charts); standard library only.
"""

from __future__ import annotations

import dataclasses
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
BACKENDS = ("tensorflow", "jax", "torch")
BACKEND_NAMES = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}


@dataclasses.dataclass(frozen=True)
class Column:
    """One column of a rendered table: header, the row's field, and how to write it.

    ``style`` is ``text``, ``ms`` (seconds written as milliseconds), ``mb`` (bytes as MiB),
    ``num`` (three significant figures or so), ``ratio`` (two decimals), ``sci`` or ``bool``.
    """

    header: str
    field: str
    style: str = "num"


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """What the runner knows about one script.

    ``keys`` name the fields that identify a row across rounds and trees; ``compare`` the
    fields ``--against`` compares; ``split`` an option whose comma-separated values run as
    one case each, with its default read from the script's module constant
    ``split_default``; ``script`` a file name in this folder (or an absolute path);
    ``arguments`` options the runner always passes to it first (one script measuring two
    things registered twice, e.g. decoder_attention.py's ``--part``).
    """

    name: str
    script: str
    keys: tuple[str, ...]
    columns: tuple[Column, ...]
    compare: tuple[str, ...]
    split: str | None = None
    split_default: str | None = None
    # Fields an ``across_BACKEND`` block compares between backends (see render_across).
    across: tuple[str, ...] = ()
    arguments: tuple[str, ...] = ()

    def script_path(self) -> pathlib.Path:
        return HERE / self.script


_ATTENTION_KEYS = ("implementation", "length")
# The measures of a generation benchmark's row (cached decoding against recomputation).
_GENERATION_COLUMNS = (
    Column("tokens/s", "tokens_per_second", "num"),
    Column("s per batch", "seconds", "num"),
    Column("first batch s", "first_seconds", "num"),
    Column("x recompute", "x_recompute", "ratio"),
    Column("same tokens", "same_tokens", "bool"),
)
BENCHMARKS = {
    benchmark.name: benchmark
    for benchmark in (
        Benchmark(
            "relative_attention",
            "relative_attention.py",
            keys=_ATTENTION_KEYS,
            columns=(
                Column("impl", "implementation", "text"),
                Column("L", "length", "text"),
                Column("ms", "seconds", "ms"),
                Column("x mha", "x_mha", "ratio"),
                Column("extra MB", "extra_peak_bytes", "mb"),
                Column("x S", "extra_S", "ratio"),
            ),
            compare=("x_mha", "extra_S"),
            split="--lengths",
            split_default="DEFAULT_LENGTHS",
        ),
        Benchmark(
            "training_step",
            "training_step.py",
            keys=_ATTENTION_KEYS,
            columns=(
                Column("impl", "implementation", "text"),
                Column("L", "length", "text"),
                Column("ms", "seconds", "ms"),
                Column("x mha", "x_mha", "ratio"),
                Column("extra MB", "extra_peak_bytes", "mb"),
                Column("x S", "extra_S", "ratio"),
            ),
            compare=("x_mha", "extra_S"),
            split="--lengths",
            split_default="DEFAULT_LENGTHS",
        ),
        Benchmark(
            "decoder_cache",
            "decoder_attention.py",
            keys=("case",),
            columns=(
                Column("case", "case", "text"),
                Column("L", "length", "text"),
                Column("kv heads", "kv_heads", "text"),
                Column("slots", "cache_positions", "text"),
                Column("cache MB", "cache_bytes", "mb"),
                Column("x full", "x_full_cache", "ratio"),
                Column("peak MB", "extra_peak_bytes", "mb"),
                Column("x full", "x_full_peak", "ratio"),
                Column("step ms", "step_seconds", "ms"),
                Column("x full", "x_full_time", "ratio"),
            ),
            compare=("x_full_cache", "x_full_peak", "x_full_time"),
            arguments=("--part", "cache"),
        ),
        Benchmark(
            "decoder_window",
            "decoder_attention.py",
            keys=_ATTENTION_KEYS,
            columns=(
                Column("impl", "implementation", "text"),
                Column("L", "length", "text"),
                Column("ms", "seconds", "ms"),
                Column("x full", "x_full", "ratio"),
                Column("extra MB", "extra_peak_bytes", "mb"),
                Column("x full", "x_full_memory", "ratio"),
            ),
            compare=("x_full", "x_full_memory"),
            split="--lengths",
            split_default="DEFAULT_LENGTHS",
            arguments=("--part", "window"),
        ),
        Benchmark(
            "relative_logits",
            "relative_logits.py",
            keys=("group", "method", "length"),
            columns=(
                Column("group", "group", "text"),
                Column("way", "method", "text"),
                Column("L", "length", "text"),
                Column("ms", "seconds", "ms"),
                Column("x base", "x_base", "ratio"),
            ),
            compare=("x_base",),
            split="--lengths",
            split_default="DEFAULT_LENGTHS",
        ),
        Benchmark(
            "muse",
            "muse.py",
            keys=_ATTENTION_KEYS,
            columns=(
                Column("impl", "implementation", "text"),
                Column("L", "length", "text"),
                Column("eager ms", "eager_seconds", "ms"),
                Column("x mha", "eager_x_mha", "ratio"),
                Column("compiled ms", "compiled_seconds", "ms"),
                Column("x mha", "compiled_x_mha", "ratio"),
                Column("extra MB", "extra_peak_bytes", "mb"),
                Column("x mha", "memory_x_mha", "ratio"),
            ),
            compare=("eager_x_mha", "compiled_x_mha", "memory_x_mha"),
            split="--lengths",
            split_default="DEFAULT_LENGTHS",
        ),
        Benchmark(
            "coatnet",
            "coatnet.py",
            keys=("mode",),
            columns=(
                Column("mode", "mode", "text"),
                Column("setting", "setting", "text"),
                Column("s/batch", "seconds", "num"),
                Column("images/s", "images_per_second", "num"),
            ),
            compare=("images_per_second",),
            across=("images_per_second",),
        ),
        Benchmark(
            "coatnet_parts",
            "coatnet_parts.py",
            keys=("part",),
            columns=(
                Column("part", "part", "text"),
                Column("ms", "seconds", "ms"),
                Column("share", "share", "ratio"),
            ),
            compare=("seconds",),
            across=("seconds",),
        ),
        Benchmark(
            "convs2s_generation",
            "convs2s_generation.py",
            keys=("path",),
            columns=(Column("path", "path", "text"), *_GENERATION_COLUMNS),
            compare=("x_recompute", "tokens_per_second"),
            across=("tokens_per_second", "first_seconds"),
        ),
        Benchmark(
            "generation",
            "generation.py",
            keys=("model", "search", "path"),
            columns=(
                Column("model", "model", "text"),
                Column("search", "search", "text"),
                Column("path", "path", "text"),
                *_GENERATION_COLUMNS,
            ),
            compare=("x_recompute", "tokens_per_second"),
            across=("tokens_per_second", "first_seconds"),
        ),
        Benchmark(
            "decoder_generation",
            "decoder_generation.py",
            keys=("implementation",),
            columns=(
                Column("implementation", "implementation", "text"),
                Column("tokens/s", "tokens_per_second", "num"),
                Column("s per batch", "seconds", "num"),
                Column("first batch s", "first_seconds", "num"),
                Column("x keras-hub", "x_keras_hub", "ratio"),
                Column("tokens equal", "same_tokens", "ratio"),
            ),
            compare=("x_keras_hub", "tokens_per_second"),
            across=("tokens_per_second", "first_seconds"),
        ),
        Benchmark(
            "t5_generation",
            "t5_generation.py",
            keys=("batch", "implementation"),
            columns=(
                Column("batch", "batch", "text"),
                Column("implementation", "implementation", "text"),
                Column("tokens/s", "tokens_per_second", "num"),
                Column("s per batch", "seconds", "num"),
                Column("first batch s", "first_seconds", "num"),
                Column("x keras-hub", "x_keras_hub", "ratio"),
                Column("tokens equal", "same_tokens", "ratio"),
            ),
            compare=("x_keras_hub", "tokens_per_second"),
            split="--batch",
            split_default="BATCHES",
            across=("tokens_per_second", "first_seconds"),
        ),
        Benchmark(
            "zoo_create",
            "zoo_create.py",
            keys=("model",),
            columns=(
                Column("model", "model", "text"),
                Column("cold s", "cold_seconds", "num"),
                Column("cached s", "cached_seconds", "num"),
                Column("warm s", "warm_seconds", "num"),
                Column("predict ms", "predict_seconds", "ms"),
                Column("parameters", "parameters", "num"),
            ),
            compare=("cold_seconds", "predict_seconds"),
            across=("cold_seconds", "warm_seconds"),
        ),
        Benchmark(
            "export",
            "export.py",
            keys=("case", "runtime"),
            columns=(
                Column("case", "case", "text"),
                Column("runtime", "runtime", "text"),
                Column("ms/call", "ms", "num"),
                Column("ORT / Keras", "ort_over_keras", "ratio"),
                Column("max diff", "max_abs_difference", "sci"),
            ),
            compare=("ort_over_keras", "ms"),
        ),
    )
}
