"""Pipeline stages: plain functions that read input paths and write into a folder they are given."""

PIPELINE = ("data", "train", "export", "quantize", "convert", "evaluate", "gate", "report")
