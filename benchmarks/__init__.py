"""localspec's benchmarks, run as modules from the project root (`python -m benchmarks.wait.first_runs
...`), grouped by what they measure; every script takes its arguments, runs and summarises through
benchmarks/harness. See benchmarks/README.md."""

# llama.cpp's libraries load before NumPy's in every benchmark, whichever it imports first (see
# localspec/__init__.py): the package's own import does it.
import localspec  # noqa: F401
