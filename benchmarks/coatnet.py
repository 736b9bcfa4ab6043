"""Inference throughput (images/s) of a CoAtNet zoo model on the active Keras backend.

For the backend chosen by KERAS_BACKEND, times the forward pass of the model
(batch 8 at 224 x 224 by default) in two ways and prints images/s for each:

    eager      model(x, training=False), op by op
    compiled   model.predict_on_batch(x): Keras compiles the predict step with the
               backend's compiler (tf.function, with XLA when model.jit_compile is
               True; jax.jit; PyTorch runs eagerly unless jit_compile=True)

With --onnx it also exports the model with keras_posenc.export.export_model and
times the same batch in ONNX Runtime (CPU execution provider). Timings are the
median of --repeats runs after one warm-up run.

Usage:
    KERAS_BACKEND=jax python benchmarks/coatnet.py
    KERAS_BACKEND=tensorflow python benchmarks/coatnet.py --onnx --out /tmp/coatnet
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from _timing import median_seconds, write_json  # benchmarks/_timing.py, next to this script


def model_arguments(description: str) -> argparse.ArgumentParser:
    """A parser with the arguments every CoAtNet benchmark takes (coatnet_parts.py too)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", default="coatnet_0")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=5)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = model_arguments(__doc__.split("\n\n")[0])
    parser.add_argument("--onnx", action="store_true", help="also time ONNX Runtime")
    parser.add_argument("--out", help="folder for the ONNX file (default: a temporary one)")
    parser.add_argument("--json", help="also write the rows (mode, seconds, images/s) here")
    args = parser.parse_args(argv)

    import keras
    import numpy as np

    from keras_posenc import zoo

    model = zoo.create(args.model, input_shape=(args.size, args.size, 3))
    x = np.random.default_rng(0).standard_normal((args.batch, args.size, args.size, 3))
    x = x.astype("float32")
    backend = keras.backend.backend()
    print(
        f"{args.model} at {args.size}x{args.size}, batch {args.batch}, backend {backend}, "
        f"{model.count_params() / 1e6:.2f}M parameters, {os.cpu_count()} CPU cores"
    )
    rows = []
    seconds = median_seconds(
        lambda: keras.ops.convert_to_numpy(model(x, training=False)), args.repeats
    )
    rows.append(("eager", "model(x)", seconds))
    seconds = median_seconds(lambda: model.predict_on_batch(x), args.repeats)
    rows.append(("compiled", f"predict_on_batch, jit_compile={model.jit_compile}", seconds))

    if args.onnx:
        import onnxruntime

        from keras_posenc.export import export_model

        folder = args.out or tempfile.mkdtemp()
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{args.model}.onnx")
        start = time.perf_counter()
        report = export_model(model, path, format="onnx", overwrite=True)  # --out reused
        print(
            f"exported in {time.perf_counter() - start:.0f}s ({report.route}), "
            f"max |difference| {report.max_abs_difference:.2g}"
        )
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        seconds = median_seconds(lambda: session.run(None, {name: x}), args.repeats)
        rows.append(("onnxruntime", f"CPUExecutionProvider, opset {report.opset}", seconds))

    print(f"{'mode':<12}{'setting':<46}{'s/batch':>9}{'images/s':>10}")
    for mode, setting, seconds in rows:
        print(f"{mode:<12}{setting:<46}{seconds:>9.3f}{args.batch / seconds:>10.1f}")
    if args.json:
        records = [
            {
                "backend": backend,
                "model": args.model,
                "batch": args.batch,
                "size": args.size,
                "mode": mode,
                "setting": setting,
                "seconds": seconds,
                "images_per_second": args.batch / seconds,
            }
            for mode, setting, seconds in rows
        ]
        write_json(args.json, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
