"""``python -m keras_posenc.export REQUEST``: the export worker's entry point, run in a
TensorFlow subprocess (keras_posenc/export/worker.py)."""

import sys

from keras_posenc.export.worker import _worker

if __name__ == "__main__":
    _worker(sys.argv[1])
