"""The studio's GUI (PySide6 + pyqtgraph), in folders that match the window's composition:
window/ (the main window built from parts), panels/ (one widget per panel), dialogs/, and run/
(the run controller, the worker host and the training worker on its thread); app.py starts it,
theme.py and widgets.py serve every part. studio.protocol is its Qt-free contract with the
worker."""
