"""The dialogs: export, and opening a pretrained model."""
