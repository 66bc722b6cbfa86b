"""Kernel tuning and Auto's speed measure on the training worker's thread (Device › Tune kernels for this model…, issue 24
goal 4): engine.model.gemm_tune.tune on the job's device and model shape, its progress as
studio.protocol.TuneProgress, the winners stored (gemm_tune.save) unless Stop cancelled it.

A part of studio.ui.run.worker.TrainingWorker, composed like studio.ui.run.worker_tasks.ModelTasks: it
holds the worker's stop flag (Stop cancels the tuning) and error reporter, and never
runs beside a training step (the worker's slots run one at a time on its thread). No Qt here.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from opencl_llm_studio.engine.progress import Monitor
from opencl_llm_studio.studio.protocol import (SpeedJob, SpeedReport, TuneJob, TuneProgress,
                                              TuneReport)


class KernelTuning:
    """tune(job, on_progress) -> TuneReport, or None when it failed (report_error says why)."""

    def __init__(self, stop: threading.Event,
                 report_error: Callable[[str, BaseException], None]):
        self.stop = stop
        self.report_error = report_error

    def tune(self, job: TuneJob, on_progress: Callable[[TuneProgress], None]
             ) -> TuneReport | None:
        from opencl_llm_studio.engine.model import gemm_tune
        from opencl_llm_studio.engine.opencl.runtime import Runtime
        on_progress(TuneProgress("opening the device", 0, 0, 0.0))
        cfg, B = job.model_config, job.batch_size
        try:
            rt = Runtime(job.device)   # compiles the kernels: seconds on a busy CPU
        except Exception as e:
            self.report_error("Could not tune the kernels", e)
            return None
        start = time.monotonic()
        prefix = gemm_tune.PHASE + ": "

        def on_phase(phase: str, done: int, total: int) -> None:
            if phase.startswith(prefix):
                on_progress(TuneProgress(phase[len(prefix):], done, total,
                                         time.monotonic() - start))

        tuning = Monitor(on_phase, event=self.stop)   # Stop cancels it at the next candidate
        try:
            result = gemm_tune.tune(rt, cfg, B, job.seconds, tuning)
            saved = None if result.cancelled else str(gemm_tune.save(rt, cfg, B, result))
        except Exception as e:
            self.report_error("Could not tune the kernels", e)
            return None
        return TuneReport(rt.info.name, result.seconds, gemm_tune.step_speedup(result, cfg, B),
                          len(gemm_tune.winners(result.rows)), len(result.rows), result.complete,
                          result.cancelled, saved)


def measure_speed(job: SpeedJob, report_error: Callable[[str, BaseException], None]
                  ) -> SpeedReport | None:
    """The SpeedReport of the job's device for Auto (engine.training.auto_size.measure_speed),
    or None when it failed (report_error says why)."""
    from opencl_llm_studio.engine.opencl.runtime import Runtime
    from opencl_llm_studio.engine.training import auto_size
    try:
        rt = Runtime(job.device)   # compiles the kernels: seconds on a busy CPU, once
        return SpeedReport(auto_size.measure_speed(rt), rt.info)
    except Exception as e:
        report_error("Could not measure the device for Auto", e)
        return None
