"""Latency of exported ONNX graphs in ONNX Runtime against Keras on the active backend.

For the backend chosen by KERAS_BACKEND, times (median of --repeats calls after
a warm-up) and prints ms/call and the ratio ONNX Runtime / Keras for:

    coatnet_0        CoAtNet-0 at 224 x 224, batch 8 and 1. Keras: the compiled
                     predict step (model.predict_on_batch) and the eager call
                     model(x); ONNX Runtime: the graph export_model writes.
    convs2s step     one decoder step of convs2s_iwslt_de_en (1k vocabularies),
                     source length 32, at target position 10, batch 8 and 1.
                     Keras: model.decode_step compiled as keras_posenc.generation
                     compiles it (tf.function / jax.jit / on PyTorch traced with
                     torch.export after its first calls, which are run before the
                     timing); ONNX Runtime: the decoder_step graph of
                     export_seq2seq, fed the same cache.

Exporting coatnet_0 to ONNX takes about a minute and 8 GB (tf2onnx), so the
weights (.weights.h5, the same on every backend) and the ONNX files are written
once to --cache and reused by later runs, from any backend. Each case also
prints the largest difference between the two outputs, as a check that both
sides compute the same thing. ONNX Runtime runs on the CPU execution provider
with its default threads.

Usage (one backend per run):
    for b in tensorflow jax torch; do
      KERAS_BACKEND=$b nice -n 10 python benchmarks/export.py
    done
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

from _timing import (  # benchmarks/_timing.py, next to this script
    library_compile_function,
    median_seconds,
    torch_trace_after,
    write_json,
)


def _median_ms(run, repeats: int) -> float:
    return 1000 * median_seconds(run, repeats)


def _weights(model, path: str) -> str:
    """Loads ``path`` into ``model`` if it exists, else writes the model's weights there."""
    if os.path.exists(path):
        model.load_weights(path)
        return "loaded"
    model.save_weights(path)
    return "written"


def _input_names(path: str) -> list[str] | None:
    """The input names of the ONNX graph at ``path`` (None if there is none): a graph
    cached by an earlier version, with other names, is exported again."""
    import onnxruntime

    if not os.path.exists(path):
        return None
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return [spec.name for spec in session.get_inputs()]


def coatnet_rows(cache: str, batches: list[int], repeats: int) -> list[tuple]:
    import keras
    import numpy as np
    import onnxruntime

    from keras_posenc import zoo
    from keras_posenc.export import export_model, export_names

    keras.utils.set_random_seed(0)
    model = zoo.create("coatnet_0")
    _weights(model, os.path.join(cache, "coatnet_0.weights.h5"))
    path = os.path.join(cache, "coatnet_0.onnx")
    (name,), _ = export_names(model)  # "images", as the export guide lists it
    if _input_names(path) != [name]:
        start = time.perf_counter()
        report = export_model(model, path, format="onnx", overwrite=True)
        print(
            f"  exported coatnet_0 in {time.perf_counter() - start:.0f} s ({report.route}), "
            f"max |difference| {report.max_abs_difference:.2g}",
            flush=True,
        )
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    rows = []
    for batch in batches:
        x = np.random.default_rng(batch).standard_normal((batch, 224, 224, 3)).astype("float32")
        expected = keras.ops.convert_to_numpy(model.predict_on_batch(x))
        difference = float(np.max(np.abs(session.run(None, {name: x})[0] - expected)))
        compiled = _median_ms(lambda x=x: model.predict_on_batch(x), repeats)
        eager = _median_ms(
            lambda x=x: keras.ops.convert_to_numpy(model(x, training=False)), repeats
        )
        runtime = _median_ms(lambda x=x: session.run(None, {name: x}), repeats)
        case = f"coatnet_0 224px b{batch}"
        rows.append((case, "keras compiled (predict_on_batch)", compiled, None, None))
        rows.append((case, "keras eager (model(x))", eager, None, None))
        rows.append((case, "onnxruntime", runtime, runtime / compiled, difference))
    return rows


def convs2s_rows(cache: str, batches: list[int], repeats: int, vocab: int) -> list[tuple]:
    import keras
    import numpy as np
    import onnxruntime

    from keras_posenc import zoo
    from keras_posenc.export import export_seq2seq
    from keras_posenc.zoo.seq2seq import decoding_names

    compile_function = library_compile_function()  # also before the backend package
    keras.utils.set_random_seed(0)
    name = "convs2s_iwslt_de_en"
    model = zoo.create(name, src_vocab_size=vocab, tgt_vocab_size=vocab)
    rng = np.random.default_rng(0)
    model.encode(rng.integers(3, vocab, (1, 8)).astype("int32"))  # builds the weights
    _weights(model, os.path.join(cache, f"{name}_{vocab}.weights.h5"))
    folder = os.path.join(cache, f"{name}_{vocab}_onnx")
    # token_ids, index, then the cache: encoder_keys, ..., cache_decoder_conv_<i>.
    names = decoding_names(model)["decoder_step"][0]
    if _input_names(os.path.join(folder, "decoder_step.onnx")) != names:
        start = time.perf_counter()
        reports = export_seq2seq(model, folder, format="onnx", overwrite=True)
        worst = max(r.max_abs_difference for r in reports.values())
        print(
            f"  exported {name} (two graphs) in {time.perf_counter() - start:.0f} s, "
            f"max |difference| {worst:.2g}",
            flush=True,
        )
    session = onnxruntime.InferenceSession(
        os.path.join(folder, "decoder_step.onnx"), providers=["CPUExecutionProvider"]
    )
    step = compile_function(
        lambda tokens, cache, index: model.decode_step(tokens, cache, index), model.variables
    )
    rows = []
    position = 10
    for batch in batches:
        source = rng.integers(3, vocab, (batch, 32)).astype("int32")
        cache = tuple(model.init_cache(model.encode(source), 64))
        tokens = rng.integers(3, vocab, (batch,)).astype("int32")
        index = keras.ops.convert_to_tensor(position, "int32")
        feed = dict(
            zip(
                names,
                [tokens, np.array([position], "int32")]
                + [keras.ops.convert_to_numpy(t) for t in cache],
            )
        )
        expected = keras.ops.convert_to_numpy(step(tokens, cache, index)[0])
        difference = float(np.max(np.abs(session.run(None, feed)[0] - expected)))
        arguments = (tokens, cache, index)
        # On PyTorch the step runs eagerly for its first TORCH_TRACE_AFTER calls and is
        # traced at the next, as in a search; time the traced graph a search runs on.
        for _ in range(torch_trace_after() + 1):
            keras.ops.convert_to_numpy(step(*arguments)[0])
        compiled = _median_ms(lambda a=arguments: keras.ops.convert_to_numpy(step(*a)[0]), repeats)
        runtime = _median_ms(lambda feed=feed: session.run(None, feed), repeats)
        case = f"{name} step b{batch}"
        rows.append((case, "keras decode_step (compiled)", compiled, None, None))
        rows.append((case, "onnxruntime", runtime, runtime / compiled, difference))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cache",
        default=os.path.join(tempfile.gettempdir(), "keras_posenc_export_benchmark"),
        help="folder for the weights and ONNX files, reused between runs",
    )
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 1])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--vocab", type=int, default=1000, help="ConvS2S vocabulary sizes")
    parser.add_argument("--cases", nargs="+", default=["coatnet", "convs2s"])
    parser.add_argument("--json", help="also write the rows (case, runtime, ms/call) here")
    args = parser.parse_args(argv)

    import keras
    import onnxruntime

    os.makedirs(args.cache, exist_ok=True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"backend {keras.backend.backend()}, keras {keras.__version__}, onnxruntime "
        f"{onnxruntime.__version__}, {os.cpu_count()} CPU cores ({platform.machine()}), "
        f"load average {load} at start",
        flush=True,
    )
    rows = []
    if "coatnet" in args.cases:
        rows += coatnet_rows(args.cache, args.batches, args.repeats)
    if "convs2s" in args.cases:
        rows += convs2s_rows(args.cache, args.batches, args.repeats, args.vocab)
    print(f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end")
    print(f"\n{'case':<30}{'runtime':<36}{'ms/call':>10}{'ORT/Keras':>11}{'max diff':>10}")
    for case, runtime, ms, ratio, difference in rows:
        ratio_text = "" if ratio is None else f"{ratio:.3g}"
        difference_text = "" if difference is None else f"{difference:.1e}"
        print(f"{case:<30}{runtime:<36}{ms:>10.1f}{ratio_text:>11}{difference_text:>10}")
    if args.json:
        records = [
            {
                "backend": keras.backend.backend(),
                "onnxruntime": onnxruntime.__version__,
                "case": case,
                "runtime": runtime,
                "ms": ms,
                "ort_over_keras": ratio,
                "max_abs_difference": difference,
            }
            for case, runtime, ms, ratio, difference in rows
        ]
        write_json(args.json, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
