"""One module per `localspec` command."""
