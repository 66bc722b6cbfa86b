"""The main window and its parts: the window (main_window), its layout, menus and actions, which controls are on and why, its saved settings."""
