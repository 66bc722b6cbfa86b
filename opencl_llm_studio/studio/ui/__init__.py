"""The studio's GUI (PySide6 + pyqtgraph): the application start (app.py), the main window
built from parts (main_window.py and the modules it names), the run controller, the worker host
and the training worker on its thread, and the widgets. studio.protocol is its Qt-free contract
with the worker."""
