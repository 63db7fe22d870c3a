"""localspec beside its peers on the same models: native llama.cpp (built from the same source) and
llama-cpp-python."""
