"""The OCR system: PaddleOCR's detector finds text lines on a page, each is cropped straight, turned by the direction
classifier where needed and read by the recognizer; the all-INT8 system is judged against the all-FP32 one end to end.

This package's pure parts need no Paddle: `crops` (reading order, straightened line crops, recognizer input width),
`matching` (read lines against a page's ground truth, and the two systems against each other) and `page_picture`
(a page with both systems' boxes and the lines they read differently, for the report).
"""
