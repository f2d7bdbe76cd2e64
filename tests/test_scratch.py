"""Scratch space (edgeport.core.scratch): a ``convert`` writes its temporary files, and the libraries' it
runs, inside its own staging directory, never into the system temp dir (a CI gate writes nothing outside
--out; a failed or cancelled run leaves nothing behind)."""

import ctypes
import os
import struct
import tempfile
from pathlib import Path

import pytest

from conftest import run_cli, write_model_file
from edgeport.core import scratch

IN_CREATE, IN_MOVED_TO, IN_NONBLOCK = 0x100, 0x80, 0o4000


class Created:
    """Every entry created in (or moved into) the watched directories, by any process (inotify: nothing
    short-lived is missed, unlike polling; a deeper path needs a top-level entry of an empty directory first)."""

    def __init__(self, *directories: Path):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(IN_NONBLOCK)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        self.names = {}
        for directory in directories:
            wd = self.libc.inotify_add_watch(self.fd, str(directory).encode(), IN_CREATE | IN_MOVED_TO)
            assert wd >= 0, os.strerror(ctypes.get_errno())
            self.names[wd] = directory

    def entries(self) -> list[str]:
        found = []
        try:
            while True:
                buffer = os.read(self.fd, 1 << 16)
                offset = 0
                while offset < len(buffer):
                    wd, _mask, _cookie, length = struct.unpack_from("iIII", buffer, offset)
                    name = buffer[offset + 16:offset + 16 + length].rstrip(b"\0").decode()
                    found.append(f"{self.names[wd].name}/{name}")
                    offset += 16 + length
        except BlockingIOError:
            pass
        finally:
            os.close(self.fd)
        return found


def test_a_convert_writes_nothing_into_the_temp_dir_or_home(tmp_path):
    """ONNX (onnxruntime, which records telemetry in $TMPDIR and ~/.cache unless told not to) and TPU (its
    AOT compiles run in a child process fed through scratch files): with TMPDIR and HOME pointing at empty
    directories, nothing is created in either during the run, and nothing scratch is in --out. A fresh
    interpreter, not the prewarmed CLI server: that one imported its libraries under another TMPDIR."""
    temp, home, out = tmp_path / "tmp", tmp_path / "home", tmp_path / "out"
    temp.mkdir()
    home.mkdir()
    model = write_model_file(tmp_path, "def build():\n    return nn.Linear(4, 2).eval(), (torch.randn(1, 4),)\n")
    env = {k: v for k, v in os.environ.items() if k not in (scratch.ENV, "ORT_DISABLE_TELEMETRY")}
    watch = Created(temp, home)
    result = run_cli("convert", f"{model}:build", "--out", out, "-t", "onnx", "-t", "tpu", "--no-latency",
                     "--samples", "2", "--no-cache", env={**env, "TMPDIR": str(temp), "HOME": str(home)}, fresh=True)
    created = watch.entries()
    assert result.returncode == 0, result.stdout + result.stderr
    assert created == [], f"the run wrote outside --out: {created}"
    assert list(temp.iterdir()) == [] and list(home.iterdir()) == []
    assert not (out / scratch.FOLDER).exists()
    marker = (out / ".edgeport").read_text()
    assert scratch.FOLDER not in marker and "edgeport-aot" not in marker
    assert (out / "tpu").is_dir() and (out / "onnx" / "model.onnx").is_file()


def test_run_scratch_holds_every_temp_file_and_is_removed_with_everything_restored(tmp_path, monkeypatch):
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "elsewhere"))
    monkeypatch.delenv(scratch.ENV, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", None)
    staging = tmp_path / "staging"
    staging.mkdir()
    with pytest.raises(KeyboardInterrupt):  # a cancelled run: the folder goes all the same
        with scratch.run_scratch(staging) as folder:
            assert scratch.root() == folder == staging.resolve() / scratch.FOLDER
            own, library = scratch.scratch_dir("x-"), Path(tempfile.mkdtemp())
            assert own.parent == folder and library.parent == folder
            assert os.environ["TMPDIR"] == str(folder)
            assert tempfile.gettempdir() == str(folder)
            with scratch.scratch("y-") as block:
                (block / "f").write_text("x")
            assert not block.exists()
            raise KeyboardInterrupt
    assert not folder.exists() and list(staging.iterdir()) == []
    assert os.environ["TMPDIR"] == str(tmp_path / "elsewhere") and scratch.ENV not in os.environ
    assert tempfile.tempdir is None and scratch.root() is None
    without_a_run = scratch.scratch_dir("z-")   # no run: the system temp dir
    assert without_a_run.parent == Path(tempfile.gettempdir())
    without_a_run.rmdir()


def test_a_temporary_capture_is_removed_when_its_block_fails(tmp_path, monkeypatch):
    from edgeport.core.proc import redirected

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(RuntimeError):
        with redirected(fds=(2,)):
            raise RuntimeError("the block failed")
    assert list(tmp_path.iterdir()) == []
