"""GUI responsiveness while the studio trains: the 200 ms aim, measured (issue 11).

Trains the default-size model (d_model 128, 4 blocks, 4 heads, context 64, batch 16) for 40 + 20
steps in the studio window (offscreen unless QT_QPA_PLATFORM says otherwise), autosaving every
`--every` steps, and reports per busy stretch of the GUI thread (benchmarks/gui_busy.py) its CPU
time, its held time (wall minus run-queue time) and its wall time, plus the gaps of a 10 ms timer:
p50 / p99 / max, against the aim that no stretch exceeds 200 ms. Run it on an idle machine for
the figure (`--idle-busy 0.3` waits for one); under load, cpu stays put and wall grows.

    python benchmarks/gui_latency.py [--every 5] [--device 0] [--idle-busy 0.3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PySide6.QtCore import QEventLoop, QSettings, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from benchmarks.common import cpu_busy, machine_line, md_table, wait_idle  # noqa: E402
from benchmarks.gui_busy import GuiBusyMeter, percentile  # noqa: E402

AIM_S = 0.200
DEFAULT_RUN = dict(dModelSpin=128, nLayerSpin=4, nHeadSpin=4, contextLengthSpin=64,
                   vocabSizeSpin=512, batchSizeSpin=16, pretrainStepsSpin=40, tuneStepsSpin=20,
                   evalIntervalSpin=10, sampleIntervalSpin=20, warmupSpin=5)


def run(every: int, device: str | None) -> GuiBusyMeter:
    """One training run in a fresh window; the meter of its GUI thread."""
    from opencl_llm_studio.studio.ui.window.main_window import MainWindow
    folder = tempfile.mkdtemp(prefix="gui-latency-")
    settings = QSettings(str(Path(folder) / "studio.ini"), QSettings.IniFormat)
    settings.setValue("autosave/runs_dir", str(Path(folder) / "runs"))
    win = MainWindow(device=device, settings=settings)
    win.resize(1400, 880)
    win.show()
    for name, value in DEFAULT_RUN.items():
        win.settings_panel.set_value(name, value)
    win.autosave_box.every_spin.setValue(every)
    loop = QEventLoop()
    win.trainingFinished.connect(lambda result: loop.quit())
    QTimer.singleShot(1_800_000, loop.quit)  # a hang ends the benchmark, not the machine
    with GuiBusyMeter() as meter:
        win.run_bar.train_button.click()
        loop.exec()
    win.close()
    return meter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=int, default=5, help="autosave every N steps (5)")
    ap.add_argument("--device", default=None, help="OpenCL device index or name part")
    ap.add_argument("--idle-busy", type=float, default=None,
                    help="first wait (up to 10 min) until the CPUs are at most this busy (0-1)")
    args = ap.parse_args()
    app = QApplication.instance() or QApplication([])  # noqa: F841 (kept alive)
    if args.idle_busy is not None:
        wait_idle(args.idle_busy, 600)
    busy_before = cpu_busy()
    meter = run(args.every, args.device)
    rows = [[name, f"{percentile(v, 50) * 1000:.0f}", f"{percentile(v, 99) * 1000:.0f}",
             f"{max(v, default=0) * 1000:.0f}", "yes" if max(v, default=0) <= AIM_S else "no"]
            for name, v in (("GUI CPU per stretch", meter.cpu),
                            ("held per stretch", meter.held),
                            ("wall per stretch", meter.wall),
                            ("10 ms-timer gap (wall)", meter.timer_gaps))]
    print(machine_line())
    print(f"CPU busy before the run: {busy_before:.0%}; {len(meter.cpu)} busy stretches; "
          f"autosave every {args.every} steps; worst by CPU: {meter.describe('cpu')}")
    print(md_table(["measure", "p50 ms", "p99 ms", "max ms", f"<= {AIM_S * 1000:.0f} ms"], rows))


if __name__ == "__main__":
    main()
