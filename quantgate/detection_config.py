"""Text detection's settings in the `data` section: DB post-processing of the probability map into boxes.

PaddleOCR's DB post-process turns the detector's [N, 1, H, W] map into quadrilaterals; its parameters are
part of what the detector *is* in deployment, so they are recorded with the data stage and the bundle,
and the FP32 and INT8 maps go through the same ones. The defaults are PaddleOCR's (`det_db_*`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from quantgate.config_base import Section


class DetPostprocessConfig(Section):
    """DB post-processing (PaddleOCR's DBPostProcess), applied alike to the FP32 and the INT8 maps."""

    thresh: float = Field(0.3, gt=0, lt=1, description="Pixels above this probability are text (det_db_thresh).")
    box_thresh: float = Field(
        0.6, gt=0, lt=1, description="A box whose mean probability is below this is dropped (det_db_box_thresh)."
    )
    unclip_ratio: float = Field(
        1.5, gt=0, le=10, description="How far a shrunk text region is grown back: area * ratio / perimeter "
        "(det_db_unclip_ratio)."
    )
    max_candidates: int = Field(1000, ge=1, le=100_000, description="Contours looked at per page, at most.")
    min_size: int = Field(3, ge=1, le=1000, description="Boxes whose short side is below this (pixels) are dropped.")
    use_dilation: bool = Field(False, description="Dilate the binary map 2x2 before finding contours.")
    score_mode: Literal["fast", "slow"] = Field(
        "fast", description="Box score: mean probability inside the box ('fast') or inside the contour ('slow')."
    )
