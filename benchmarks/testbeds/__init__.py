"""Testbeds the benchmarks (and the tests' tiny MTP models) are built from: the MTP testbed and real
vocabulary widths."""
