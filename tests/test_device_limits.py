"""Device limits (issue 13 item 4): no buffer above the largest single allocation, long GPU
launches split, and a clear error where a device cannot run a kernel's work-group."""

import numpy as np
import pytest

import tests.reference as ref
from opencl_llm_studio.engine.opencl import ops
from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.engine.errors import ConfigError, DeviceError
from opencl_llm_studio.engine.model.memory import check_fits
from opencl_llm_studio.engine.opencl.runtime import Runtime
from tests.kernel_helpers import close, down, plan_rt, up


def test_max_alloc_override_refuses_big_buffers_and_configs(rt, monkeypatch):
    small = Runtime(rt.info, max_alloc_bytes=2**20)
    assert small.info.max_alloc_bytes == 2**20
    small.empty(2**18)  # exactly 1 MiB is allowed
    with pytest.raises(DeviceError, match="CL_DEVICE_MAX_MEM_ALLOC_SIZE") as e:
        small.empty(2**18 + 1)
    assert "smaller" in e.value.hint
    cfg = ModelConfig(vocab_size=4096, d_model=128, context_length=256)
    with pytest.raises(ConfigError, match="largest single buffer"):
        check_fits(cfg, 16, small.info)  # logits alone: 16 * 256 * 4096 floats
    monkeypatch.setenv("LLM_STUDIO_MAX_ALLOC_MB", "2")
    assert Runtime(rt.info).info.max_alloc_bytes == 2 * 2**20


def test_work_group_above_the_kernel_limit_is_a_clear_error(rt):
    rt.main.kernel("sum_slices")  # fetched once: its limit is read then
    too_many = 2 * rt.main.max_group["sum_slices"]
    with pytest.raises(DeviceError, match="work-items per group"):
        rt.launch_local("sum_slices", (too_many,), (too_many,), rt.empty(1), rt.empty(1), 1, 1,
                        0.0)


@pytest.mark.parametrize("gemm", ["blocked", "tiled64"])
def test_long_gemms_are_split_and_still_right(rt, gemm):
    """With a cap on the work per launch (display GPUs), products over many rows run in
    chunks of rows (nn) or of the summed dimension (tn, accumulating): same results."""
    M, N, K = 300, 24, 40
    rng = np.random.default_rng(1)
    x, w, dout = rng.normal(size=(M, K)), rng.normal(size=(N, K)), rng.normal(size=(M, N))
    rt = plan_rt(rt, gemm)  # a copy: its cap leaves the session's runtime as it was
    rt.max_launch_flops = 1.0
    n0 = rt.launches
    out, scratch, bx, bw = rt.empty(M * N), rt.empty(N * K), up(rt, x), up(rt, w)
    ops.matmul_forward(rt, out, bx, bw, scratch, M, N, K)
    close(down(rt, out, (M, N)), ref.matmul_forward(x, w))
    dx, dw = rt.empty(M * K), rt.zeros(N * K)
    ops.matmul_backward(rt, dx, dw, up(rt, dout), bx, bw, M, N, K)
    rdx, rdw = ref.matmul_backward(dout, x, w)
    close(down(rt, dx, (M, K)), rdx)
    close(down(rt, dw, (N, K)), rdw)
    assert rt.launches - n0 >= 3 + 2 * 3  # 3 chunks of 128 rows in each of three products


def test_no_choice_by_local_memory_takes_all_a_device_reports(rt):
    """A kernel using exactly the local memory NVIDIA reports failed at launch (OUT_OF_RESOURCES
    on an H200): a device reporting exactly what a GEMM tile pair, a flash tile set or the tiled
    attention's tiles need is given the next smaller choice, by every chooser."""
    from opencl_llm_studio.engine.model import attention, attention_flash
    from opencl_llm_studio.engine.opencl import gemm_tiles
    exact = 2 * gemm_tiles.tiled_local_bytes(128)
    assert 128 not in Runtime(rt.info, limits={"local_mem_bytes": exact}).limits.tile_edges()
    assert 128 in Runtime(rt.info, limits={"local_mem_bytes": exact + 512}).limits.tile_edges()
    name, hd = "attention_forward", 64
    first = attention_flash.CANDIDATES[name][0]
    exact = 4 * attention_flash.local_floats(name, first, hd)
    edge = Runtime(rt.info, limits={"local_mem_bytes": exact})
    assert attention_flash.program(edge, name, hd, 1)[1] != first
    hd = 64
    bk = attention.TILES["tiled"].bk
    exact = (2 * bk * hd + 2 * bk) * 4
    edge = Runtime(rt.info, limits={"local_mem_bytes": exact})
    assert attention.tiles_for(edge, hd).bk < bk


def test_a_cpu_device_counts_the_hosts_available_memory(rt, monkeypatch):
    """PoCL reports most of the machine's RAM as a CPU device's memory whatever else runs: the
    refusal now counts what the host has available (a 135M model's tuning was allowed and met
    the OOM killer at 18.9 GB). A GPU's own memory is not the host's."""
    from dataclasses import replace

    from opencl_llm_studio.engine.model import memory
    cfg = ModelConfig(vocab_size=512, d_model=64, n_layer=2, n_head=4, context_length=64)
    cpu = replace(rt.info, type="CPU", global_mem_bytes=64 * 2**30, max_alloc_bytes=16 * 2**30)
    need, _ = memory.training_bytes(cfg, 16, cpu)
    monkeypatch.setattr(memory, "available_host_bytes", lambda: need // 2)
    with pytest.raises(ConfigError) as e:
        check_fits(cfg, 16, cpu)
    assert "available in this machine's memory" in str(e.value)
    assert "Largest that fits: batch size" in e.value.hint
    monkeypatch.setattr(memory, "available_host_bytes", lambda: 100 * need)
    assert check_fits(cfg, 16, cpu) == need
    gpu = replace(cpu, type="GPU")
    monkeypatch.setattr(memory, "available_host_bytes", lambda: need // 2)
    assert check_fits(cfg, 16, gpu) == memory.training_bytes(cfg, 16, gpu)[0]


def test_the_hosts_available_memory_is_read():
    from opencl_llm_studio.engine.model.memory import available_host_bytes
    n = available_host_bytes()
    assert n is None or 2**20 < n < 2**50


def test_an_opened_model_is_checked_for_itself_and_its_training_for_its_batch(tmp_path,
                                                                              monkeypatch):
    """Opening a run to chat needs no training batch: with memory for the model but not for its
    stored batch of 16, the run opens (it was refused, and `train --continue --batch-size 4`
    could never lower the batch); training at 16 is refused before a step, at a batch that fits
    it goes on."""
    from opencl_llm_studio.engine.model import memory
    from opencl_llm_studio.engine.training.opening import load_session
    from opencl_llm_studio.engine.training.trainer import Trainer
    from opencl_llm_studio.studio.cli import main
    from tests.helpers import TINY
    run = tmp_path / "run"
    assert main(["train", "--out", str(run), "--steps", "2", "--no-tune", *TINY,
                 "--batch-size", "16"]) == 0
    s = load_session(run)
    info = s.rt.info
    cfg = s.model_config
    one, _ = memory.training_bytes(cfg, 1, info, s.rt.plan.attention_path, s.rt)
    sixteen, _ = memory.training_bytes(cfg, 16, info, s.rt.plan.attention_path, s.rt)
    monkeypatch.setattr(memory, "usable_bytes", lambda d: int((one + sixteen) / 2 / 0.9))
    s = load_session(run)                     # opens: the model itself fits
    with pytest.raises(ConfigError) as e:
        Trainer(s)
    assert "Largest that fits: batch size" in e.value.hint
    with pytest.raises(ConfigError):
        s.retrain_with(batch_size=16)
    s.retrain_with(batch_size=1)
    s.continue_training(3)
    assert next(iter(Trainer(s).run())).step == 3


def test_a_model_opened_to_chat_holds_its_weights_alone_until_it_trains(tmp_path, monkeypatch):
    """Chatting with a model allocated its gradients and both AdamW moments too (SmolLM2-135M's
    chat took 3.9 GB; a 1.1B model's would take 17.6 GB of float32 training state): an opened
    model holds its weights alone, opens where only chatting fits (it was refused there),
    chats, and makes its training state when it trains, checked against its batch first."""
    from opencl_llm_studio.engine.data.dialogue import Message
    from opencl_llm_studio.engine.model import memory
    from opencl_llm_studio.engine.training.opening import load_session
    from opencl_llm_studio.engine.training.trainer import Trainer
    from opencl_llm_studio.studio.cli import main
    from tests.helpers import TINY
    run = tmp_path / "run"
    assert main(["train", "--out", str(run), "--steps", "2", "--no-tune", *TINY,
                 "--batch-size", "2"]) == 0
    s = load_session(run)
    assert not s.model.holds_training_state
    reply = s.chat([Message("user", "Hi")], max_new_tokens=4, greedy=True)
    assert reply.n_tokens >= 1 and not s.model.holds_training_state
    cfg, info = s.model_config, s.rt.info
    chat, _ = memory.chat_bytes(cfg, info, s.rt.plan.attention_path)
    train, _ = memory.training_bytes(cfg, 1, info, s.rt.plan.attention_path, s.rt)
    assert chat < train - 2 * 4 * s.model.table.size          # no gradients, no moments
    monkeypatch.setattr(memory, "usable_bytes", lambda d: int((chat + train) / 2 / 0.9))
    s = load_session(run)                   # opens to chat where training does not fit
    assert s.chat([Message("user", "Hi")], max_new_tokens=4, greedy=True).n_tokens >= 1
    with pytest.raises(ConfigError):
        Trainer(s)                                  # refused before anything is allocated
    assert not s.model.holds_training_state
    monkeypatch.setattr(memory, "usable_bytes", lambda d: int(chat / 2))
    with pytest.raises(ConfigError, match="just to chat"):
        load_session(run)
    monkeypatch.undo()
    s = load_session(run)
    s.continue_training(3)
    assert next(iter(Trainer(s).run())).step == 3 and s.model.holds_training_state
