"""How many text lines the validation split holds, and the words the data record keeps about it.

The INT8 search judges its candidates on the validation split, and on n lines one line is 100/n points: an
agreement of 0.99 needs 300 lines to show (the rule of three, 3 / (1 - 0.99)). So a text_lines dataset whose
`data.validation_fraction` is left null validates on at least `data.min_validation_lines` lines when the data
allow. The numbers are data settings, never `gate.*`: a policy change re-splits nothing and keeps the data
stage's digest.

Where the lines come from: with nothing trained (a model trained elsewhere) validation and calibration share
the lines that are not test, and calibration keeps `data.min_calibration_lines` (the search's trials calibrate
on that many); when training here, validation is taken from training, which keeps at least half its lines.
"""

from __future__ import annotations

from quantgate.config import DataConfig
from quantgate.data_config import DEFAULT_VALIDATION_FRACTION


def validation_share(config: DataConfig) -> float:
    """The validation split's share of all samples: the setting, or its default when left null."""
    return DEFAULT_VALIDATION_FRACTION if config.validation_fraction is None else config.validation_fraction


def validation_lines(available: int, share_lines: int, config: DataConfig, training: bool) -> int:
    """Lines to validate on out of `available` (training: the training lines; otherwise calibration's and
    validation's), given the `share_lines` the fraction alone would take: those, or more for text_lines with
    validation_fraction null (max(share, min(min_validation_lines, what the floor leaves)))."""
    if not config.validation_by_lines:
        return share_lines
    room = available // 2 if training else available - config.min_calibration_lines
    return min(available, max(share_lines, min(config.min_validation_lines, room)))


def validation_rule(config: DataConfig, validation: int, calibration: int, training: bool) -> dict:
    """How the validation split was sized, for the data record: {"rule", "lines", "wanted", "short"}; `short`
    when a text_lines default could not reach min_validation_lines (the run summary says so)."""
    wanted = config.min_validation_lines if config.validation_by_lines else None
    if not config.validation_by_lines:  # text_lines: set by the user; elsewhere the setting or its default
        unit, given = ("lines", " (set)") if config.dataset == "text_lines" else ("samples", "")
        rule = f"data.validation_fraction={config.validation_fraction:g}{given}: {validation} {unit}"
    elif validation >= config.min_validation_lines:
        rule = (f"at least {config.min_validation_lines} lines (text default): {validation} lines, "
                f"calibration {calibration}")
    elif training:
        rule = (f"training keeps at least half the lines left after test and calibration: {validation} validate, "
                f"under {config.min_validation_lines}; add labelled lines")
    else:
        rule = (f"only {validation + calibration} lines for calibration and validation: the calibration floor of "
                f"{config.min_calibration_lines} (data.min_calibration_lines) leaves {validation} for validation, "
                f"under {config.min_validation_lines}; add labelled lines")
    return {"rule": rule, "lines": validation, "wanted": wanted,
            "short": wanted is not None and validation < wanted}
