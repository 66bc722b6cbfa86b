"""Helpers the studio tests share (pytest-qt, offscreen): set the settings panel to a tiny
model, train / chat / open a model through the window's own buttons and signals, read a plot's
points, list the window's run folders. The `settings` and `window` fixtures are in
tests/conftest.py."""

from pathlib import Path

RUN_TIMEOUT_MS = 600_000  # a bound for hangs, not a speed test: a loaded 2-core CI is slow
CHAT_TIMEOUT_MS = 60_000


def configure(win, **values):
    """The settings panel set to a tiny model (trains in seconds), `values` by spin-box name."""
    tiny = dict(dModelSpin=32, nLayerSpin=1, nHeadSpin=2, contextLengthSpin=32,
                vocabSizeSpin=512, pretrainStepsSpin=20, tuneStepsSpin=10, batchSizeSpin=8,
                warmupSpin=2, evalIntervalSpin=5, sampleIntervalSpin=10)
    tiny.update(values)
    for name, value in tiny.items():
        win.settings_panel.set_value(name, value)


def train(qtbot, win, timeout=RUN_TIMEOUT_MS):
    """Click Train and wait for the run to end; the window's RunResult."""
    button = win.findChild(type(win.run_bar.train_button), "trainButton")
    assert button.isEnabled(), win.run_bar.hint.text()
    with qtbot.waitSignal(win.trainingFinished, timeout=timeout) as blocker:
        button.click()
    return blocker.args[0]


def chat(qtbot, win, text):
    """Send `text` from the chat box; the model's answer once chatFinished comes."""
    win.chat_panel.input.setText(text)
    with qtbot.waitSignal(win.chatFinished, timeout=CHAT_TIMEOUT_MS) as blocker:
        win.findChild(type(win.run_bar.train_button), "chatSendButton").click()
    return blocker.args[0]


def assert_answered(win, answer):
    """`answer` (chatFinished's) is a whole reply of the model, shown as it is kept: a ChatReply
    that ended for a reason (</s>, the token bound or a full window) within the chat panel's
    token bound, the last assistant message (stripped, as tune turns are written), and the text
    after the chat view's last "Model:" (or the note for an empty answer). A None (the chat
    failed or was cancelled) fails, and so does a bare str."""
    from opencl_llm_studio.engine.generation.chat import ChatReply
    assert isinstance(answer, ChatReply), answer
    bound = win.chat_panel.knobs()["max_new_tokens"]
    assert answer.finish_reason in ("stop", "length", "context"), answer.finish_reason
    assert 0 <= answer.n_tokens <= bound, (answer.n_tokens, bound)   # </s> not counted
    assert answer.finish_reason != "length" or answer.n_tokens == bound
    assert answer.finish_reason != "stop" or answer.n_tokens < bound
    assert win.chat_panel.messages[-1] == {"role": "assistant", "content": answer.strip()}
    shown = win.chat_panel.view.toPlainText().rpartition("Model:")[2].strip()
    # streaming waits for whole UTF-8 characters: a last one cut off by the token bound or
    # the window ("\ufffd" in the answer) is never streamed into the view
    want = answer.strip().rstrip("\ufffd") if answer.strip() else "(empty answer"
    # the view keeps lines, not their separators: a "\r" an untrained model wrote shows as a
    # line break (seen in CI: "arom\ufffdins\r~<mp" shown as "arom\ufffdins\n~<mp")
    assert shown.startswith(want.replace("\r\n", "\n").replace("\r", "\n")), (shown, answer)


def settle():
    """Deliver the events already posted (resizes, layout requests, paints), twice, as a
    layout pass posts more: what a fixed qtbot.wait(N) before a check of the layout hoped had
    happened by then, without a guess of N that a loaded machine can outrun."""
    from PySide6.QtWidgets import QApplication
    for _ in range(2):
        QApplication.sendPostedEvents()
        QApplication.processEvents()


def curve_x(win, plot_name, curve_name):
    """The x values (steps or seconds) of the named curve of a plot."""
    import pyqtgraph as pg
    plot = win.findChild(pg.PlotWidget, plot_name)
    item = next(i for i in plot.getPlotItem().listDataItems() if i.name() == curve_name)
    return item.xData if item.xData is not None else []


def run_folders(win) -> list[Path]:
    """The run folders under the window's autosave root, sorted by name (start time)."""
    root = win.autosave_box.runs_root()
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []


def open_model(qtbot, win, path):
    """Open a checkpoint folder or a .gguf file as the menu would; the ModelSource opened."""
    opener = win.files.open_gguf if str(path).endswith(".gguf") else win.files.open_checkpoint
    with qtbot.waitSignal(win.modelOpened, timeout=CHAT_TIMEOUT_MS) as blocker:
        opener(str(path))
    return blocker.args[0]
