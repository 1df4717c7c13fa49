"""Test data and real models shared by tests and benchmarks (PaddleOCR's models, rendered text lines)."""
