"""Pictures for reports: a font that draws the labels (CJK included when one is installed) and a page drawn
with its boxes and transcriptions. Used by the report stage and the OCR system's report.
"""
