"""`llm-studio runs` and `llm-studio plot`, and what `train` adds: health records and warnings
in metrics.jsonl / on stderr, and TensorBoard event files with --tensorboard."""

import json
import sys

import numpy as np
import pytest
from PySide6.QtGui import QColor, QImage

from opencl_llm_studio.studio.cli import main
from opencl_llm_studio.studio.runs import RUN_COLOURS
from tests.runs_helpers import make_run


def test_runs_lists_a_table(tmp_path, capsys):
    make_run(tmp_path, "first run", bpb=True, stamp="20261102-000000")
    make_run(tmp_path, "second", steps_done=20, saved_step=10, stamp="20261101-000000")
    assert main(["runs", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["name", "date", "status"]
    assert lines[1].startswith("first run") and "finished" in lines[1] and "40/40" in lines[1]
    assert "crashed" in lines[2] and "20/40" in lines[2] and "Test CPU" in lines[2]


def test_runs_errors_and_empty(tmp_path, capsys):
    assert main(["runs", str(tmp_path / "missing")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert main(["runs", str(tmp_path)]) == 0
    assert "No runs" in capsys.readouterr().out


def colour_pixels(img: QImage, colour: str, tol: int = 40) -> int:
    """Pixels within tol (per channel) of colour."""
    img = img.convertToFormat(QImage.Format_RGB32)
    arr = np.frombuffer(img.constBits(), np.uint8).reshape(img.height(), img.bytesPerLine())
    arr = arr[:, : img.width() * 4].reshape(img.height(), img.width(), 4)[..., :3][..., ::-1]
    c = QColor(colour)
    want = np.array([c.red(), c.green(), c.blue()])
    return int((np.abs(arr.astype(int) - want).max(axis=-1) <= tol).sum())


def test_plot_writes_a_png_with_one_curve_per_run(tmp_path, capsys):
    a = make_run(tmp_path, "a", lr=1e-2, stamp="20261101-000001")
    b = make_run(tmp_path, "b", lr=1e-3, stamp="20261101-000002")
    out = tmp_path / "curves.png"
    assert main(["plot", str(a), str(b), "-o", str(out), "--width", "900", "--height", "600"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = QImage(str(out))
    assert (img.width(), img.height()) == (900, 600)
    first, second, third = (colour_pixels(img, c) for c in RUN_COLOURS[:3])
    assert first > 300 and second > 300  # each run's curves drawn in its colour
    assert third < 50                    # and no third run
    one = tmp_path / "one.png"
    assert main(["plot", str(a), "-o", str(one), "--x", "wall"]) == 0
    assert colour_pixels(QImage(str(one)), RUN_COLOURS[1]) < 50


def test_plot_rejects_what_is_not_a_run(tmp_path, capsys):
    assert main(["plot", str(tmp_path), "-o", str(tmp_path / "x.png")]) == 2
    assert "not a run folder" in capsys.readouterr().err
    a = make_run(tmp_path, "a")
    assert main(["plot", str(a), "-o", str(tmp_path / "x.jpg")]) == 2


TRAIN = ["train", "--no-tune", "--d-model", "32", "--n-layer", "1", "--n-head", "2",
         "--context-length", "16", "--vocab-size", "384", "--batch-size", "4", "--quiet",
         "--checkpoint-every", "0"]


def test_train_too_high_lr_warns_and_records_health(tmp_path, capsys):
    out = tmp_path / "hot"
    assert main(TRAIN + ["--out", str(out), "--steps", "200", "--lr", "0.5"]) == 0
    err = capsys.readouterr().err
    assert "warning (step" in err and "far too high" in err
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    health = [r for r in recs if "health" in r]
    assert [r["step"] for r in health] == [50, 100, 150, 200]
    assert set(health[0]["health"]["grad_norm"]) == {"attention", "feed_forward", "embedding",
                                                     "norms"}
    assert any(r.get("warnings") for r in recs)


def test_train_good_lr_does_not_warn(tmp_path, capsys):
    out = tmp_path / "ok"
    assert main(TRAIN + ["--out", str(out), "--steps", "120", "--lr", "3e-3"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_tensorboard_missing_library_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # import fails
    assert main(TRAIN + ["--out", str(tmp_path / "r"), "--steps", "2", "--tensorboard"]) == 2
    assert "tensorboardX" in capsys.readouterr().err


def test_tensorboard_event_files(tmp_path):
    pytest.importorskip("tensorboardX")
    from tensorboardX.event_file_writer import EventFileWriter  # noqa: F401
    out = tmp_path / "tb"
    assert main(TRAIN + ["--out", str(out), "--steps", "50", "--tensorboard"]) == 0
    files = list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert len(files) == 1
    from tensorboardX.proto import event_pb2
    tags, data = set(), files[0].read_bytes()
    pos = 0
    while pos < len(data):  # TFRecord: u64 length, u32 crc, payload, u32 crc
        n = int.from_bytes(data[pos:pos + 8], "little")
        ev = event_pb2.Event.FromString(data[pos + 12:pos + 12 + n])
        tags |= {v.tag for v in ev.summary.value}
        pos += 12 + n + 4
    assert {"loss", "grad_norm", "lr", "pretrain/val_loss",
            "health/update_ratio/norms"} <= tags
