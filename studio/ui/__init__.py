"""Widgets of the studio."""
