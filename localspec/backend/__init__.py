"""llama.cpp access: file checks, vocabulary compatibility, models with their KV caches."""
