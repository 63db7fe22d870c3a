"""What the person waits: separate `localspec run` processes, empty caches, loading and the prompt
included; a busy core; the server against run."""
