"""Benchmarks behind `kvfuzz bench`: markdown tables and PNG plots, printed, never asserted."""
