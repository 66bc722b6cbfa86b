"""Texts and tokens: reading files (textio, longtext), tokenizers (tokenizer: the app's SentencePiece;
open_tokenizer, open_folder_tokenizer: pretrained models' own), the pretraining corpus (corpus) and tune dialogues
(dialogue, dialogue_json, chat_template)."""
