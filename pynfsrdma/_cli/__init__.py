"""The pynfsrdma command line."""
