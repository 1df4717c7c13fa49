"""Samples as the stages read them: a data stage's folder opened as splits and batches (arrays in memory, or files on
disk decoded by DataLoader workers and checked against what the data stage recorded), the pre-processing a
deployment repeats (image folders, text lines, pages), label files and dictionaries, and stable sample ids.

The data stage writes this format; every later stage, the bundle and the benchmarks read it through here.
"""
