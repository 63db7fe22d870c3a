"""What every benchmark shares: its arguments (options.py), separate `localspec` processes with an
empty cache and a core kept busy (processes.py), models loaded in-process at the machine's cores
(models.py), native llama.cpp's tools (native.py), interleaving, medians of paired ratios and the
tables they print (summary.py)."""
