"""`localspec serve`: an OpenAI-compatible HTTP API over one loaded engine."""
