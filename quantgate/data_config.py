"""The `data` section of the configuration: which dataset, where its files lie, how they are split,
read, transformed and augmented. Re-exported by `quantgate.config`, the one schema."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from quantgate.config_base import Section
from quantgate.detection_config import DetPostprocessConfig
from quantgate.quantize_config import SearchConfig

TEXT_DATASETS = ("text_lines", "digit_strings")  # the datasets of task text_recognition
BOX_DATASETS = ("text_boxes",)  # the datasets of task text_detection
FILE_DATASETS = ("image_folder", "text_lines", "text_boxes")  # read from files the data stage records
LABEL_FILE_DATASETS = ("text_lines", "text_boxes")  # listed by a PaddleOCR label file


class TransformsConfig(Section):
    """Deterministic pre-processing, applied as each image is read, the same for calibration, validation,
    test and (without `augment`) training; recorded in the data manifest as the deployed model's pre-processing."""

    resize: int | tuple[int, int] | None = Field(
        None, description="Resize: one number scales the shorter side to it, [height, width] is exact; null keeps the size."
    )
    center_crop: int | tuple[int, int] | None = Field(
        None, description="Center crop after resizing: one number for a square, or [height, width]; null for none."
    )
    color: Literal["rgb", "bgr", "grayscale"] = Field(
        "rgb", description="Channel order fed to the model: 3-channel RGB, 3-channel BGR (models trained on OpenCV "
        "decodes: PaddleOCR) or 1-channel grayscale."
    )
    mean: tuple[float, ...] = Field((0.0,), description="Per-channel mean subtracted from pixels scaled to [0, 1] (one value or one per channel).")
    std: tuple[float, ...] = Field((1.0,), description="Per-channel standard deviation the pixels are divided by (one value or one per channel).")
    resize_pad: tuple[int, int] | None = Field(
        None, description="image_folder: [H, W]: resize each image to height H keeping its aspect ratio (at most W "
        "wide) and pad it on the right to W, as PaddleOCR's text-line models read (direction classifier: [48, 192]); "
        "replaces resize and center_crop; null: off."
    )
    line_padding: Literal["background", "zero"] = Field(
        "background", description="text lines and resize_pad: pad on the right with the line's own background "
        "('background') or with zeros after normalization ('zero', PaddleOCR's resize_norm_img)."
    )
    rec_image_shape: tuple[int, int, int] = Field(
        (1, 32, 320), description="text_lines, digit_strings: [C, H, W] of the recognizer's input; each line is "
        "resized to height H keeping its aspect ratio and padded on the right to W (C 1: grayscale, 3: RGB)."
    )
    det_limit_side_len: int = Field(
        960, ge=32, le=8192, description="text_boxes: the side length a page is resized against (PaddleOCR's "
        "DetResizeForTest limit_side_len); each side is then rounded to a multiple of 32."
    )
    det_limit_type: Literal["max", "min", "resize_long"] = Field(
        "max", description="text_boxes: 'max' shrinks pages whose longer side exceeds det_limit_side_len, 'min' "
        "enlarges pages whose shorter side is below it, 'resize_long' sets the longer side to it."
    )
    det_canvas: tuple[int, int] = Field(
        (960, 960), description="text_boxes: [H, W] every resized page is padded to (zeros after normalizing), so "
        "every runtime runs one static shape; multiples of 32."
    )

    @field_validator("resize", "center_crop", "resize_pad")
    @classmethod
    def _sizes_are_positive(cls, size):
        sizes = (size,) if isinstance(size, int) else size or ()
        if any(value < 1 for value in sizes):
            raise ValueError(f"sizes must be positive pixel counts, got {size}")
        return size

    @field_validator("det_canvas")
    @classmethod
    def _canvas_multiple_of_32(cls, canvas):
        if any(side < 32 or side % 32 for side in canvas):
            raise ValueError(f"det_canvas needs sides that are multiples of 32 (DB detectors downsample by 32), "
                             f"got {list(canvas)}")
        return canvas

    @field_validator("rec_image_shape")
    @classmethod
    def _line_shape(cls, shape):
        channels, height, width = shape
        if channels not in (1, 3) or height < 8 or width < height:
            raise ValueError(f"rec_image_shape needs C 1 or 3, H >= 8 and W >= H, got {list(shape)}")
        return shape

    @model_validator(mode="after")
    def _mean_std_match_channels(self) -> "TransformsConfig":
        if self.resize_pad is not None and (self.resize is not None or self.center_crop is not None):
            raise ValueError("resize_pad resizes and pads each image itself: remove resize and center_crop")
        channels = 1 if self.color == "grayscale" else 3
        for name in ("mean", "std"):
            if len(getattr(self, name)) not in (1, channels):
                allowed = "1 value" if channels == 1 else "1 or 3 values"
                raise ValueError(f"{name} needs {allowed} for color={self.color!r}, got {list(getattr(self, name))}")
        if any(value <= 0 for value in self.std):
            raise ValueError(f"std values must be positive, got {list(self.std)}")
        return self


class AugmentConfig(Section):
    """Random changes to training images only, seeded by (data.seed, epoch, image), so a run is reproducible;
    calibration, validation and test always see the deterministic `transforms`."""

    crop_scale: tuple[float, float] | None = Field(
        None, description="Random resized crop: [smallest, largest] share of the image area kept, then resized to "
        "the transforms' output size; null: no random crop."
    )
    horizontal_flip: bool = Field(False, description="Flip half the training images left to right.")
    rotation_degrees: float = Field(0.0, ge=0, le=180, description="Rotate by a random angle in [-d, d] degrees.")
    color_jitter: float = Field(
        0.0, ge=0, le=1, description="Random brightness, contrast and saturation change of up to this share (0: none)."
    )

    @field_validator("crop_scale")
    @classmethod
    def _scale_is_a_range(cls, scale):
        if scale is not None and not 0 < scale[0] <= scale[1] <= 1:
            raise ValueError(f"crop_scale needs 0 < smallest <= largest <= 1, got {list(scale)}")
        return scale

    @property
    def active(self) -> bool:
        return self != AugmentConfig()


class DigitStringsConfig(Section):
    """The built-in text lines: strings of scikit-learn's handwritten digits, each digit image in one split only."""

    lines: int = Field(2400, ge=40, le=200_000, description="Text lines generated over all splits.")
    min_digits: int = Field(4, ge=1, le=32, description="Shortest line, in digits.")
    max_digits: int = Field(8, ge=1, le=32, description="Longest line, in digits.")

    @model_validator(mode="after")
    def _range(self) -> "DigitStringsConfig":
        if self.min_digits > self.max_digits:
            raise ValueError(f"min_digits {self.min_digits} exceeds max_digits {self.max_digits}")
        return self


def digit_layout(rec_image_shape: tuple[int, int, int], max_digits: int) -> tuple[int, int]:
    """(digit width, largest gap) in pixels at which digit_strings renders its lines, so that the longest
    line, its left margin and its gaps fit W: digits are H pixels wide (square) unless that is too wide."""
    _, height, width = rec_image_shape
    gap = max(1, height // 8)
    return min(height, (width - max_digits * gap) // max_digits), gap


DEFAULT_VALIDATION_FRACTION = 0.1  # validation_fraction when left null (text_lines: see min_validation_lines)
DEFAULT_CALIBRATION_FLOOR = SearchConfig.model_fields["trial_calibration_samples"].default  # 256, spelled once


class DataConfig(Section):
    dataset: Literal["digits", "image_folder", "text_lines", "digit_strings", "text_boxes"] = Field(
        "digits", description="'digits' (built-in 8x8 digits), 'image_folder' (one sub-folder of images per class), "
        "'text_lines' (text-line images with a PaddleOCR label file), 'digit_strings' (built-in handwritten "
        "digit strings; these two need task: text_recognition) or 'text_boxes' (pages with PaddleOCR's detection "
        "labels; task: text_detection)."
    )
    path: str | None = Field(
        None, description="image_folder: the folder of class sub-folders (train folder when test_path is set); "
        "text_lines, text_boxes: the root folder the label file's image paths are relative to."
    )
    test_path: str | None = Field(
        None, description="image_folder: a separate test folder with the same classes; null splits `path` by seed."
    )
    label_file: str | None = Field(
        None, description="text_lines: UTF-8 file with one `relative/path.png<TAB>label` line per image (PaddleOCR); "
        "text_boxes: `relative/path.png<TAB>[{\"transcription\": ..., \"points\": [[x, y], ...]}, ...]` per page "
        "(PaddleOCR's detection labels; '###' marks a region to ignore)."
    )
    test_label_file: str | None = Field(
        None, description="text_lines, text_boxes: a separate label file for the test split; null splits "
        "label_file by seed."
    )
    character_dict: str | None = Field(
        None, description="text_lines, digit_strings: a file with one character per line (PaddleOCR's "
        "dictionaries); null builds it from the training labels and stores it with the version."
    )
    use_space_char: bool = Field(
        False, description="text datasets: a space is the dictionary's last character, after character_dict's "
        "(PaddleOCR's use_space_char; its Chinese models: true)."
    )
    class_names: tuple[str, ...] | None = Field(
        None, description="classification: every class of the model in output order (e.g. ['0', '180']); image "
        "folders are named after classes in it and may cover a subset; null: the sorted sub-folder names."
    )
    unknown_chars: Literal["error", "skip"] = Field(
        "error", description="text_lines: a label with a character missing from character_dict stops the run "
        "('error', naming the line and character) or its line is left out and listed ('skip')."
    )
    too_wide: Literal["error", "squeeze"] = Field(
        "error", description="text_lines: a line wider than W after resizing to height H stops the run ('error'), "
        "or is squeezed to W ('squeeze')."
    )
    det_postprocess: DetPostprocessConfig = Field(
        default_factory=DetPostprocessConfig, description="text_boxes: DB post-processing of the detector's "
        "probability map into boxes (PaddleOCR's defaults)."
    )
    digit_strings: DigitStringsConfig = Field(
        default_factory=DigitStringsConfig, description="digit_strings: how many lines, how many digits each."
    )
    transforms: TransformsConfig = Field(
        default_factory=TransformsConfig, description="image_folder pre-processing (resize, crop, color, normalize); text datasets: "
        "rec_image_shape, mean and std."
    )
    seed: int = Field(0, ge=0, description="Seed of the stratified train/calibration/validation/test split.")
    calibration_fraction: float = Field(
        0.15, gt=0, lt=0.5, description="Share of the data held out for INT8 calibration."
    )
    test_fraction: float = Field(
        0.2, gt=0, lt=0.5, description="Share of the data held out for the FP32 vs INT8 accuracy check."
    )
    validation_fraction: float | None = Field(
        None, ge=0, lt=0.5, description="Share of the data held out for the INT8 recipe search (0: none; "
        "quantize.strategy 'search' needs it). Taken from training data; calibration and test are not touched. "
        f"null: {DEFAULT_VALIDATION_FRACTION}; text_lines: that share but at least min_validation_lines lines when "
        "the data allow (the data record's validation_rule says how the split was decided)."
    )
    min_validation_lines: int = Field(
        300, ge=1, description="text_lines with validation_fraction null: the validation split holds at least this "
        "many lines when the data allow; 300 shows an agreement of 0.99 (rule of three: 3 / (1 - 0.99)). A data "
        "setting, not read from gate.*, so a policy change re-splits nothing."
    )
    min_calibration_lines: int = Field(
        DEFAULT_CALIBRATION_FLOOR, ge=1, description="text_lines with validation_fraction null and nothing trained "
        "(trained_model): calibration keeps at least this many lines when validation grows to min_validation_lines "
        "(quantize.search.trial_calibration_samples' default: each search trial calibrates on that many)."
    )
    augment: AugmentConfig = Field(
        default_factory=AugmentConfig, description="image_folder, text_lines: random augmentation of training images only "
        "(text lines: rotation and color jitter)."
    )
    num_workers: int = Field(
        2, ge=0, le=64, description="image_folder, text_lines: DataLoader worker processes decoding images "
        "(0: in the main process)."
    )
    scan_workers: int = Field(
        8, ge=1, le=256, description="image_folder, text_lines: threads hashing and checking image files when the "
        "data stage scans."
    )
    on_bad_image: Literal["error", "skip"] = Field(
        "error", description="image_folder, text_lines: a corrupt or truncated image stops the run ('error') or is left out and "
        "listed in the data manifest ('skip')."
    )

    @model_validator(mode="before")
    @classmethod
    def _default_validation_share(cls, data):
        """A null validation_fraction is the default share except for text_lines, whose split then follows
        min_validation_lines (stages/data/validation_size.py): every other dataset splits, and records, as before."""
        if isinstance(data, dict) and data.get("validation_fraction") is None \
                and data.get("dataset", "digits") != "text_lines":
            return {**data, "validation_fraction": DEFAULT_VALIDATION_FRACTION}
        return data

    @property
    def validation_by_lines(self) -> bool:
        """Whether the validation split is sized by min_validation_lines (text_lines, validation_fraction null)."""
        return self.validation_fraction is None

    @model_validator(mode="after")
    def _paths_match_dataset(self) -> "DataConfig":
        if self.dataset == "image_folder" and not self.path:
            raise ValueError("dataset 'image_folder' needs data.path, the folder with one sub-folder per class")
        if self.dataset == "text_lines" and not (self.path and self.label_file):
            raise ValueError("dataset 'text_lines' needs data.path (the images' root folder) and data.label_file "
                             "(one `relative/path.png<TAB>label` line per image)")
        if self.dataset == "text_boxes" and not (self.path and self.label_file):
            raise ValueError("dataset 'text_boxes' needs data.path (the pages' root folder) and data.label_file "
                             "(one `relative/path.png<TAB>[boxes as JSON]` line per page, PaddleOCR's detection labels)")
        if self.dataset not in LABEL_FILE_DATASETS and (self.label_file or self.test_label_file):
            raise ValueError("data.label_file and data.test_label_file apply to datasets 'text_lines' and "
                             "'text_boxes' only")
        if self.dataset not in TEXT_DATASETS and (self.character_dict or self.use_space_char):
            raise ValueError("data.character_dict and data.use_space_char apply to datasets 'text_lines' and "
                             "'digit_strings' only")
        if self.dataset == "digit_strings" and self.use_space_char:
            raise ValueError("data.use_space_char applies to dataset 'text_lines'; digit strings hold no spaces")
        if self.dataset in TEXT_DATASETS and self.class_names is not None:
            raise ValueError("data.class_names applies to classification; a text dataset's outputs are the "
                             "characters of data.character_dict")
        if self.class_names is not None and (not self.class_names or len(set(self.class_names)) != len(self.class_names)):
            raise ValueError(f"data.class_names needs distinct names, got {list(self.class_names)[:20]}")
        if self.dataset == "digits" and self.class_names is not None:
            raise ValueError("data.class_names applies to image folders; the built-in digits are classes 0-9")
        if self.dataset == "digit_strings" and (self.path or self.test_path):
            raise ValueError("dataset 'digit_strings' is built in: remove data.path and data.test_path")
        if self.dataset in LABEL_FILE_DATASETS and self.test_path:
            raise ValueError(f"dataset {self.dataset!r} takes its test split from data.test_label_file, not "
                             "data.test_path")
        if self.dataset in BOX_DATASETS and self.class_names is not None:
            raise ValueError("data.class_names applies to classification; a detector outputs text boxes")
        if self.dataset == "digits" and (self.path or self.test_path or self.transforms != TransformsConfig()
                                         or self.augment.active):
            raise ValueError("data.path, data.test_path, data.transforms and data.augment apply to dataset "
                             "'image_folder' only")
        return self

    @model_validator(mode="after")
    def _page_transforms(self) -> "DataConfig":
        if self.dataset not in BOX_DATASETS:
            return self
        transforms = self.transforms
        if transforms.resize is not None or transforms.center_crop is not None or transforms.resize_pad is not None:
            raise ValueError("dataset 'text_boxes' resizes each page as PaddleOCR's DetResizeForTest does "
                             "(data.transforms.det_limit_side_len, det_limit_type) and pads it to det_canvas: remove "
                             "data.transforms.resize, center_crop and resize_pad")
        if transforms.color == "grayscale":
            raise ValueError("a text detector reads 3-channel pages: set data.transforms.color to 'rgb' or 'bgr' "
                             "(PaddleOCR: bgr)")
        return self

    @model_validator(mode="after")
    def _text_transforms(self) -> "DataConfig":
        if self.dataset not in TEXT_DATASETS:
            return self
        transforms, augment = self.transforms, self.augment
        channels, height, _ = transforms.rec_image_shape
        if transforms.resize is not None or transforms.center_crop is not None:
            raise ValueError(f"dataset {self.dataset!r} resizes each line to height H of data.transforms."
                             "rec_image_shape keeping its aspect ratio: remove data.transforms.resize and center_crop")
        allowed = ("grayscale",) if channels == 1 else ("rgb", "bgr")
        if "color" in transforms.model_fields_set and transforms.color not in allowed:
            raise ValueError(f"data.transforms.color {transforms.color!r} contradicts rec_image_shape's C={channels} "
                             f"(1: grayscale, 3: rgb or bgr): remove data.transforms.color or set it to "
                             f"{' or '.join(map(repr, allowed))}")
        if transforms.resize_pad is not None:
            raise ValueError(f"dataset {self.dataset!r} resizes and pads each line to data.transforms.rec_image_shape: "
                             "remove data.transforms.resize_pad (it is for image folders)")
        for name in ("mean", "std"):
            if len(getattr(transforms, name)) not in (1, channels):
                raise ValueError(f"data.transforms.{name} needs 1 or C={channels} values for rec_image_shape "
                                 f"{list(transforms.rec_image_shape)}, got {list(getattr(transforms, name))}")
        if augment.horizontal_flip or augment.crop_scale is not None:
            raise ValueError("text lines cannot be flipped or randomly cropped (a flipped or cut line no longer reads "
                             "as its label): remove data.augment.horizontal_flip and data.augment.crop_scale; "
                             "rotation_degrees and color_jitter apply")
        if self.dataset == "digit_strings":
            if augment.active:
                raise ValueError("dataset 'digit_strings' is built in memory and not augmented: remove data.augment")
            digit_width, _ = digit_layout(transforms.rec_image_shape, self.digit_strings.max_digits)
            if digit_width < (height + 1) // 2:
                raise ValueError(
                    f"data.transforms.rec_image_shape {list(transforms.rec_image_shape)} cannot hold "
                    f"{self.digit_strings.max_digits} digits of height {height} (each would be {digit_width} pixels "
                    f"wide, under half its height): widen W or lower data.digit_strings.max_digits")
        return self


