"""The release policy as code: criteria that fail closed, the per-runtime verdicts, the checks of stored
predictions, the duel against the current release, and the pure `decide` over measured metrics. The gate stage
writes its decision; the quantize stage's search and the OCR system judge with the same criteria.
"""
