"""An OCR system of stored models: the detector, the optional direction classifier and the recognizer run
page by page (`engine`), with crops in reading order, the FP32/INT8 combinations, and the matching of read
boxes to labelled ones. The system stage evaluates it; the bundle deploys it.
"""
