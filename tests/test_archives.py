"""Archives that expand implausibly are refused before they are decompressed, and the scratch
folder of a killed conversion is removed by the next run (keras_posenc/hub/archives.py).

Pure Python (tarfile, processes): backend-neutral.
"""

from __future__ import annotations

import bz2
import os
import signal
import socket
import subprocess
import sys
import tarfile
import time

import pytest
from fairseq_archive import NAME, write_archive

from keras_posenc import zoo
from keras_posenc.hub import archives

pytestmark = pytest.mark.neutral

GIB = 1 << 30


def bomb_archive(path, declared: int = 3 * GIB) -> str:
    """A bzip2 tar whose one member declares ``declared`` bytes of zeros (the sweep's bomb was
    a 20 KB archive of one 3 GiB member). Only the member's first MiB is in the file: a reader
    that decompressed the member before checking its size would fail on the missing rest (a
    truncated archive) instead of refusing it."""
    member = tarfile.TarInfo(f"{NAME}/model.pt")
    member.size = declared
    with open(path, "wb") as handle:
        handle.write(bz2.compress(member.tobuf(format=tarfile.GNU_FORMAT) + bytes(1 << 20)))
    return os.fspath(path)


def test_an_archive_declaring_gigabytes_is_refused_before_anything_is_written(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("KERAS_POSENC_HOME", str(tmp_path / "posenc"))
    path = bomb_archive(tmp_path / "bomb.tar.bz2")
    assert os.path.getsize(path) < 4096
    target = tmp_path / "out"
    with pytest.raises(ValueError) as error:
        archives.extract_archive(path, target)
    message = str(error.value)
    assert f"its members declare at least {3 * GIB} bytes (from '{NAME}/model.pt' on)" in message
    assert f"over max_expansion=100.0 times the archive's {os.path.getsize(path)} bytes" in message
    assert "MAX_EXPANSION / MAX_EXTRACTED_BYTES" in message  # how to raise the limit
    assert not target.exists()
    # Through the preset code: the same refusal, and no scratch folder left in the cache.
    with pytest.raises(ValueError, match="its members declare at least"):
        zoo.from_preset(path, progress=False)
    assert os.listdir(tmp_path / "posenc" / "archives") == []


def test_the_limits_are_stated_and_can_be_raised(tmp_path, monkeypatch):
    path = write_archive(tmp_path)  # a real (tiny) fairseq archive
    extracted = archives.extract_archive(path, tmp_path / "default")
    assert sorted(os.listdir(os.path.join(extracted, NAME)))[0] == "bpecodes"
    with pytest.raises(ValueError, match=r"over max_extracted_bytes=100;"):
        archives.extract_archive(path, tmp_path / "a", max_extracted_bytes=100)
    # The ratio applies beyond a floor for tiny archives; without the floor it refuses too.
    monkeypatch.setattr(archives, "MIN_ALLOWANCE", 0)
    with pytest.raises(ValueError, match=r"over max_expansion=0.5 times the archive's"):
        archives.extract_archive(path, tmp_path / "b", max_expansion=0.5)
    # The module's limits are the defaults, as a user raises (or lowers) them.
    monkeypatch.setattr(archives, "MAX_EXTRACTED_BYTES", 100)
    with pytest.raises(ValueError, match="over max_extracted_bytes=100;"):
        archives.extract_archive(path, tmp_path / "c")
    assert archives.extract_archive(path, tmp_path / "d", max_extracted_bytes=GIB)
    for bad in (0, -1, float("nan"), "10", True):
        with pytest.raises(ValueError, match="extract_archive: `max_expansion`"):
            archives.extract_archive(path, tmp_path / "e", max_expansion=bad)
    with pytest.raises(ValueError, match="extract_archive: `max_extracted_bytes`"):
        archives.extract_archive(path, tmp_path / "e", max_extracted_bytes=0)
    assert not (tmp_path / "e").exists()


KILLED_RUN = """
import sys, time
from keras_posenc.hub import archives
with archives.scratch_folder(sys.argv[1]) as scratch:
    open(scratch + "/model.pt", "wb").write(bytes(1000))
    print(scratch, flush=True)
    time.sleep(600)
"""


def test_the_scratch_folder_of_a_killed_run_is_removed_by_the_next_run(tmp_path):
    parent = tmp_path / "archives"
    process = subprocess.Popen(
        [sys.executable, "-c", KILLED_RUN, str(parent)], stdout=subprocess.PIPE, text=True
    )
    left = process.stdout.readline().strip()
    process.send_signal(signal.SIGKILL)  # no cleanup runs
    process.wait(timeout=60)
    assert os.path.isfile(os.path.join(left, "model.pt"))
    with archives.scratch_folder(parent) as scratch:
        assert os.listdir(parent) == [os.path.basename(scratch)]
    assert os.listdir(parent) == []


def test_scratch_folders_of_live_runs_and_other_hosts_are_left_alone(tmp_path):
    def scratch(name, owner=None, age=0.0):
        path = tmp_path / f".convert-{name}"
        path.mkdir()
        if owner is not None:
            (path / "owner").write_text(owner)
        os.utime(path, (time.time() - age,) * 2)
        return path

    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)  # fmt: skip
    host = socket.gethostname()
    dead = scratch("dead", f"{host} {finished.stdout.strip()}")
    old = scratch("unowned-old", age=2 * 3600)
    kept = [
        scratch("alive", f"{host} {os.getpid()}"),
        scratch("other-host", f"{host}-elsewhere 1"),
        scratch("unowned-new"),
        scratch("unreadable", "not an owner line"),
    ]
    (tmp_path / "a-preset").mkdir()
    assert archives.remove_stale_scratch(tmp_path) == [str(dead), str(old)]
    assert sorted(os.listdir(tmp_path)) == sorted(["a-preset", *(path.name for path in kept)])
