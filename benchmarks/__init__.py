"""Speed and memory benchmarks of keras_posenc (not part of the wheel).

Each script runs on its own (``python benchmarks/NAME.py``); ``python -m benchmarks``
(benchmarks/runner.py) runs them per backend, records their results as JSON under
docs/data/benchmarks/ and renders from that JSON the tables of docs/benchmarks.md (the
summary) and docs/benchmark-notes.md (the method and history), and the summary's charts.
"""
