"""Task sources: built-in generators and JSONL loaders for the built-in environments."""
