"""The speculative decoding engine: a generator of events, with no terminal code."""
