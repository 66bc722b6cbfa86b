"""Generation from a trained model: next-token sampling (sampling), KV-cache decoding (decode), chat turns in
a context window (chat) and the Generator that a session composes (generator)."""
