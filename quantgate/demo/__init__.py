"""Demo data a user can make offline: Chinese financial text, and document pages with PaddleOCR box labels.

`quantgate demo-pages OUT` writes pages and label files a text-detection config can name; the test suite draws
its text lines with the same generators.
"""
