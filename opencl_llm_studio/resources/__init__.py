"""Bundled default corpora and icons. Data only."""
