"""What localspec costs beside llama.cpp: the Python between passes, loading, memory."""
