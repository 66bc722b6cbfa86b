"""The PySide6 desktop studio and the llm-studio command line."""
