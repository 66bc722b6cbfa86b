"""The Runs panel: every run folder under the autosave root and any folder the person adds, in a
sortable table (name editable), with Open, Continue, Export, Rename and Delete (to the system
trash, after a confirmation); ticked runs are compared below: curves (studio.ui.panels.compare_plot)
and the settings that differ between them. Reading runs is studio.runs (no Qt there)."""

from __future__ import annotations

import math
import time
from pathlib import Path

from PySide6.QtCore import QFile, Qt, Signal
from PySide6.QtWidgets import (QAbstractItemView, QFileDialog, QHBoxLayout, QHeaderView,
                               QMessageBox, QPushButton, QSplitter, QTableWidget,
                               QTableWidgetItem, QTabWidget, QVBoxLayout, QWidget)

from opencl_llm_studio.engine.errors import StudioError
from opencl_llm_studio.studio.runs import (RunInfo, config_diff, fmt_duration, rename, scan,
                                          short_device, short_tokenizer)
from opencl_llm_studio.studio.ui.panels.compare_plot import ComparePlots
from opencl_llm_studio.studio.ui.widgets import ElidedLabel

# Short headers (a 1200 px window shows every column with the name and device whole); each has
# its meaning in words as the header's tooltip (HEADER_TIPS)
COLUMNS = ("Compare", "Name", "Date", "Status", "Device", "Params", "Tokenizer", "Steps",
           "Loss", "Held-out", "Bits/byte", "Time", "Clip/skip")
HEADER_TIPS = {"Params": "Parameters", "Loss": "Last training loss (nats per token)",
               "Held-out": "Last held-out loss (nats per token) on text never trained on",
               "Bits/byte": "Held-out bits per UTF-8 byte (comparable across tokenizers)",
               "Time": "Wall time of training", "Clip/skip": "Steps clipped / skipped"}
NAME_COL, STATUS_COL, DEVICE_COL, TOKENIZER_COL = 1, 3, 4, 6
NAME_MAX_PX = 150   # a timestamp name ("20261205-115959") fits whole; a longer one is elided


def h_hint(table, col: int) -> int:
    """The header label's own width in `col`."""
    return table.horizontalHeader().sectionSizeFromContents(col).width()
STATUS_TIPS = {
    "finished": "Trained all its steps.",
    "stopped": "Stopped before the end; its checkpoint holds every step done. Continue it.",
    "crashed": "Ended without its last save (crash, kill, power loss): steps after the last "
               "checkpoint are lost. Continue from the checkpoint.",
    "running": "metrics.jsonl is still being written.",
}


def move_to_trash(path: Path) -> bool:
    """Move a folder to the system trash (Qt >= 5.15, freedesktop / Windows / macOS trash).
    False when the platform has no trash or the move failed; tests replace this function."""
    ok = QFile.moveToTrash(str(path))
    return ok[0] if isinstance(ok, tuple) else bool(ok)


class _Item(QTableWidgetItem):
    """A cell sorted by its value (numbers as numbers, missing last), shown as text."""

    def __init__(self, text: str, key=None):
        super().__init__(text)
        self.key = key
        self.setFlags(self.flags() & ~Qt.ItemIsEditable)

    def __lt__(self, other):
        a, b = self.key, getattr(other, "key", None)
        if a is None or b is None:
            return (a is None) < (b is None)
        try:
            return a < b
        except TypeError:
            return str(a) < str(b)


def _cells(r: RunInfo) -> list[_Item]:
    def num(v, fmt):
        return _Item("" if v is None or not math.isfinite(v) else fmt.format(v), v)
    date = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.date)) if r.date else ""
    return [_Item("", None), _Item(r.name, r.name.lower()), _Item(date, r.date),
            _Item(r.status, r.status), _Item(short_device(r.device), r.device),
            _Item(f"{r.params:,}" if r.params else "", r.params),
            _Item(short_tokenizer(r.tokenizer), r.tokenizer),
            _Item(f"{r.step}/{r.total_steps}", r.step), num(r.loss, "{:.3f}"),
            num(r.val_loss, "{:.3f}"), num(r.val_bpb, "{:.3f}"),
            _Item(fmt_duration(r.wall_s), r.wall_s), _Item(f"{r.clipped} / {r.skipped}",
                                                           (r.clipped, r.skipped))]


BUSY_TIP = ("The studio is training (or opening / exporting a model): Stop it or let it finish, "
            "then open a run.")
OPEN_TIPS = {"open": "Open the selected run: chat with it or export it",
             "continue": "Open the selected run to train it further (the Continue button)",
             "export": "Open the selected run and export it (GGUF or Hugging Face)"}


class RunsPanel(QWidget):
    openRequested = Signal(str)      # run folder: open it (chat, export)
    continueRequested = Signal(str)  # run folder: open it and train further
    exportRequested = Signal(str)    # run folder: open it and export a GGUF

    def __init__(self, root: Path | None = None, parent=None):
        super().__init__(parent)
        self.root = Path(root) if root else None
        self.extra: list[Path] = []   # folders the person added
        self.runs: dict[str, RunInfo] = {}
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("runsTable")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        for col, name in enumerate(COLUMNS):
            self.table.horizontalHeaderItem(col).setToolTip(HEADER_TIPS.get(name, name))
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.DoubleClicked | QAbstractItemView.EditKeyPressed)
        self.table.verticalHeader().setVisible(False)
        self.table.setAlternatingRowColors(True)
        # Every column as wide as its content (header included; the device and tokenizer in
        # short forms, whole in their tooltips) but the device, which takes the rest of the
        # width and is elided when that is short: the name is never cut ("20...59" at 1200 px
        # once) and the last columns are never behind a horizontal scroll bar.
        h = self.table.horizontalHeader()
        h.setSectionResizeMode(QHeaderView.ResizeToContents)
        h.setSectionResizeMode(DEVICE_COL, QHeaderView.Stretch)
        h.setSectionResizeMode(NAME_COL, QHeaderView.Interactive)   # sized in _fill, capped
        h.setStretchLastSection(False)
        h.setMinimumSectionSize(40)
        self.table.setTextElideMode(Qt.ElideMiddle)
        self.table.setWordWrap(False)  # one line per run; long names and devices are elided
        self.table.itemChanged.connect(self._item_changed)
        self.table.itemSelectionChanged.connect(self._update_buttons)

        self.buttons = {}
        bar = QHBoxLayout()
        for key, text, slot in (("refresh", "Refresh", self.refresh),
                                ("add", "Add folder…", self.ask_folder),
                                ("open", "Open", lambda: self._emit(self.openRequested)),
                                ("continue", "Continue", lambda: self._emit(self.continueRequested)),
                                ("export", "Export GGUF…", lambda: self._emit(self.exportRequested)),
                                ("rename", "Rename", self.rename_selected),
                                ("delete", "Delete…", self.delete_selected)):
            b = QPushButton(text)
            b.setObjectName(f"runs{key.title()}Button")
            b.clicked.connect(slot)
            self.buttons[key] = b
            bar.addWidget(b)
            if key == "add":
                bar.addSpacing(16)
        bar.addSpacing(12)
        # "3 runs in <folder>": a long runs folder is shortened in the middle, never widening
        # the window (a QLabel's minimum width is its whole text)
        self.summary = ElidedLabel(min_width=80)
        self.summary.setObjectName("runsSummary")
        self.summary.setProperty("role", "muted")
        self.summary.setAlignment(Qt.AlignRight | Qt.AlignVCenter)
        bar.addWidget(self.summary, 1)

        self.compare = ComparePlots()
        self.diff_table = QTableWidget(0, 1)
        self.diff_table.setObjectName("configDiffTable")
        self.diff_table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.diff_table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.diff_table.horizontalHeader().setStretchLastSection(True)
        self.tabs = QTabWidget()
        self.tabs.setObjectName("compareTabs")
        self.tabs.addTab(self.compare, "Curves")
        self.tabs.addTab(self.diff_table, "Settings that differ")
        split = QSplitter(Qt.Vertical)
        top = QWidget()
        tl = QVBoxLayout(top)
        tl.setContentsMargins(0, 0, 0, 0)
        tl.addLayout(bar)
        tl.addWidget(self.table, 1)
        split.addWidget(top)
        split.addWidget(self.tabs)
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 3)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 8, 8)
        lay.addWidget(split)
        self._filling = False
        self._busy = False
        self.refresh()
        self.table.sortItems(COLUMNS.index("Date"), Qt.DescendingOrder)  # newest first

    # -- listing -----------------------------------------------------------------------------
    def set_root(self, root) -> None:
        self.root = Path(root)
        self.refresh()

    def add_folder(self, path) -> None:
        p = Path(path)
        if p not in self.extra:
            self.extra.append(p)
        self.refresh()

    def ask_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "A run folder, or a folder of runs",
                                                str(self.root or Path.home()))
        if path:
            self.add_folder(path)

    def refresh(self) -> None:
        ticked = set(self.ticked_paths())
        selected = self.selected_path()
        runs = scan([self.root] if self.root else [], self.extra)
        self.runs = {str(r.path): r for r in runs}
        self._filling = True
        self.table.setSortingEnabled(False)
        self.table.setRowCount(len(runs))
        for row, r in enumerate(runs):
            for col, item in enumerate(_cells(r)):
                item.setData(Qt.UserRole, str(r.path))
                self.table.setItem(row, col, item)
            tick = self.table.item(row, 0)
            tick.setFlags(Qt.ItemIsUserCheckable | Qt.ItemIsEnabled | Qt.ItemIsSelectable)
            tick.setCheckState(Qt.Checked if str(r.path) in ticked else Qt.Unchecked)
            name = self.table.item(row, NAME_COL)
            name.setFlags(name.flags() | Qt.ItemIsEditable)
            name.setToolTip(f"{r.path}\nDouble-click to rename." +
                            ("\n\n" + "\n".join(r.warnings) if r.warnings else ""))
            self.table.item(row, STATUS_COL).setToolTip(STATUS_TIPS.get(r.status, ""))
            self.table.item(row, DEVICE_COL).setToolTip(r.device)
            self.table.item(row, TOKENIZER_COL).setToolTip(r.tokenizer)
        self.table.setSortingEnabled(True)
        # the name as wide as the longest (a timestamp name whole), at most NAME_MAX_PX: a long
        # name is elided in the middle rather than pushing the columns off the window
        self.table.setColumnWidth(NAME_COL, min(max(self.table.sizeHintForColumn(NAME_COL),
                                                    h_hint(self.table, NAME_COL)), NAME_MAX_PX))
        self._filling = False
        if selected:
            self.select(selected)
        n = len(runs)
        where = str(self.root) if self.root else "no runs folder"
        self.summary.setText(f"{n} run{'s' * (n != 1)} in {where}"
                             + (f" and {len(self.extra)} added folder(s)" if self.extra else ""))
        self._compare()
        self._update_buttons()

    def row_of(self, path) -> int:
        for row in range(self.table.rowCount()):
            if self.table.item(row, 0).data(Qt.UserRole) == str(path):
                return row
        return -1

    def select(self, path) -> None:
        row = self.row_of(path)
        if row >= 0:
            self.table.selectRow(row)

    def selected_path(self) -> str | None:
        rows = self.table.selectionModel().selectedRows()
        return self.table.item(rows[0].row(), 0).data(Qt.UserRole) if rows else None

    def ticked_paths(self) -> list[str]:
        return [self.table.item(r, 0).data(Qt.UserRole) for r in range(self.table.rowCount())
                if self.table.item(r, 0).checkState() == Qt.Checked]

    def set_ticked(self, path, on: bool = True) -> None:
        row = self.row_of(path)
        if row >= 0:
            self.table.item(row, 0).setCheckState(Qt.Checked if on else Qt.Unchecked)

    # -- editing -------------------------------------------------------------------------------
    def _item_changed(self, item: QTableWidgetItem) -> None:
        if self._filling:
            return
        if item.column() == 0:
            self._compare()
        elif item.column() == NAME_COL:
            path = item.data(Qt.UserRole)
            run = self.runs.get(path)
            if run is None or item.text() == run.name:
                return
            try:
                rename(path, item.text())
            except StudioError as e:
                QMessageBox.warning(self, "Cannot rename the run", e.describe())
            self.refresh()

    def rename_selected(self) -> None:
        row = self.row_of(self.selected_path())
        if row >= 0:
            self.table.editItem(self.table.item(row, NAME_COL))

    def delete_selected(self) -> None:
        path = self.selected_path()
        if not path:
            return
        run = self.runs[path]
        answer = QMessageBox.question(
            self, "Move the run to the trash?",
            f"Move “{run.name}” ({path}) to the trash? Its checkpoint and metrics go with it; "
            "the trash can restore them.", QMessageBox.Yes | QMessageBox.Cancel,
            QMessageBox.Cancel)
        if answer != QMessageBox.Yes:
            return
        if not move_to_trash(Path(path)):
            QMessageBox.warning(self, "Could not move the run to the trash",
                                f"{path} is unchanged. This system may have no trash for that "
                                "folder: delete it with the file manager.")
        self.refresh()

    def _emit(self, signal) -> None:
        path = self.selected_path()
        if path:
            signal.emit(path)

    def set_busy(self, busy: bool) -> None:
        """While training or a job runs, the buttons that open a model are off."""
        self._busy = busy
        self._update_buttons()

    def _update_buttons(self) -> None:
        path = self.selected_path()
        run = self.runs.get(path) if path else None
        has_ck = run is not None and run.header is not None
        running = run is not None and run.status == "running"
        why = ("Select a run in the table." if run is None
               else "This run is training now: wait for it to end." if running
               else "This run has no readable checkpoint." if not has_ck
               else BUSY_TIP if self._busy else "")
        for key in ("open", "continue", "export"):
            self.buttons[key].setEnabled(not why)
            self.buttons[key].setToolTip(why or OPEN_TIPS[key])
        self.buttons["rename"].setEnabled(run is not None)
        self.buttons["delete"].setEnabled(run is not None and not running)
        self.buttons["delete"].setToolTip(
            "This run is training now: wait for it to end." if running
            else "Move the selected run folder to the trash")

    # -- comparison ------------------------------------------------------------------------------
    def _compare(self) -> None:
        runs = [self.runs[p] for p in self.ticked_paths() if p in self.runs]
        self.compare.set_runs(runs)
        rows = config_diff(runs) if len(runs) > 1 else []
        t = self.diff_table
        t.clear()
        t.setColumnCount(max(len(runs), 1))
        t.setHorizontalHeaderLabels([r.name for r in runs] or ["Tick two runs or more"])
        t.setRowCount(len(rows))
        t.setVerticalHeaderLabels([k for k, _ in rows])
        for i, (_, vals) in enumerate(rows):
            for j, v in enumerate(vals):
                t.setItem(i, j, QTableWidgetItem("—" if v is None else str(v)))
