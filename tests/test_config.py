import pytest

from quantgate.config import ConfigError, EvaluateConfig, PipelineConfig, validate_config
from quantgate.config_files import apply_override, read_yaml


def test_defaults_validate_and_every_field_is_described():
    config = validate_config({})
    assert config == PipelineConfig()

    def undescribed(model):
        for name, field in model.model_fields.items():
            if not field.description:
                yield f"{model.__name__}.{name}"
            annotation = field.annotation
            if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
                yield from undescribed(annotation)

    assert list(undescribed(PipelineConfig)) == []


def test_every_bad_field_is_reported_together():
    with pytest.raises(ConfigError) as caught:
        validate_config({
            "train": {"epochs": 0, "amp": {"level": "O3", "dtype": "float8"}, "epoch": 3},
            "gate": {"max_accuracy_drop": 200, "min_agreement": 1.5},
        })
    message = str(caught.value)
    assert "5 problem" not in message  # all six, not the first few
    assert len(caught.value.problems) == 6
    for expected in ("train.epochs", "train.amp.level", "'O1' or 'O2'", "train.amp.dtype", "'float16' or 'bfloat16'",
                     "train.epoch: unknown key", "gate.max_accuracy_drop", "200", "gate.min_agreement", "1.5"):
        assert expected in message


def test_invalid_yaml_and_non_mapping_are_clear_errors(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("train: {epochs: 3\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        read_yaml(broken)
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        read_yaml(listing)
    with pytest.raises(ConfigError, match="cannot be read"):
        read_yaml(tmp_path / "missing.yaml")


def test_overrides_parse_values_as_yaml():
    raw = {}
    apply_override(raw, "train.amp.level=O2")
    apply_override(raw, "train.epochs=4")
    apply_override(raw, "gate.min_agreement=0.5")
    config = validate_config(raw)
    assert (config.train.amp.level, config.train.epochs, config.gate.min_agreement) == ("O2", 4, 0.5)
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        apply_override(raw, "train.epochs")


def test_model_names_that_could_escape_the_store_are_refused():
    for name in ("../etc", "/abs", "Has Space", ""):
        with pytest.raises(ConfigError, match="model_name"):
            validate_config({"model_name": name})


def test_the_printed_example_is_commented_and_parses_back_to_the_defaults(capsys):
    import yaml

    from quantgate.cli import main

    assert main(["config", "--example"]) == 0
    printed = capsys.readouterr().out
    assert validate_config(yaml.safe_load(printed)) == PipelineConfig()
    # Every field's description is there as a comment, right above the field.
    lines = printed.splitlines()
    for section in ("data", "train", "quantize", "evaluate", "gate"):
        for name, field in PipelineConfig.model_fields[section].annotation.model_fields.items():
            index = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{name}:")
                         and lines[i - 1].strip() == f"# {field.description}")
            assert index > 0


def test_image_folder_settings_are_validated_together():
    with pytest.raises(ConfigError) as caught:
        validate_config({"data": {"dataset": "image_folder", "transforms": {"color": "grayscale", "mean": [0.1, 0.2, 0.3],
                                                                           "resize": 0, "crop": 3}},
                         "train": {"architecture": "my pkg:net", "nproc": 0}})
    message = str(caught.value)
    for expected in ("data.transforms.resize", "data.transforms.crop: unknown key", "train.architecture",
                     "train.nproc"):
        assert expected in message
    with pytest.raises(ConfigError, match="needs data.path"):
        validate_config({"data": {"dataset": "image_folder"}})
    with pytest.raises(ConfigError, match="apply to dataset 'image_folder' only"):
        validate_config({"data": {"path": "/images"}})
    with pytest.raises(ConfigError, match="needs RGB input; set data.transforms.color: rgb"):
        validate_config({"data": {"dataset": "image_folder", "path": "/i", "transforms": {"color": "grayscale"}},
                         "train": {"architecture": "resnet18"}})
    config = validate_config({"data": {"dataset": "image_folder", "path": "/i", "transforms": {"resize": [24, 32]}},
                              "train": {"architecture": "my_pkg.nets:small_net", "nproc": 4}})
    assert config.data.transforms.resize == (24, 32) and config.train.nproc == 4


def test_yaml_overrides_and_flags_resolve_through_the_one_schema(tmp_path):
    from quantgate.cli import build_parser
    from quantgate.cli.run import resolve_config

    config_file = tmp_path / "release.yaml"
    config_file.write_text("data: {dataset: image_folder, path: /images, transforms: {resize: 64}}\n"
                           "train: {architecture: mobilenet_v2, epochs: 5}\n")
    args = build_parser().parse_args(["run", "--config", str(config_file), "--set", "data.transforms.center_crop=56",
                                      "--nproc", "2", "--epochs", "7"])
    config = resolve_config(args)
    assert (config.data.transforms.resize, config.data.transforms.center_crop) == (64, 56)
    assert (config.train.architecture, config.train.nproc, config.train.epochs) == ("mobilenet_v2", 2, 7)
    bad = build_parser().parse_args(["run", "--architecture", "resnet18"])  # digits are 1-channel 8x8
    with pytest.raises(ConfigError, match="needs RGB images"):
        resolve_config(bad)


# Six lines that expand to 20,000 strings: echoed whole, the error was 1 MB long (one more line: 10 MB).
ANCHOR_BOMB = """\
a: &a ["xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
train: {epochs: *e}
"""


@pytest.mark.parametrize("text", [ANCHOR_BOMB, "train: &t {amp: {custom_white_list: [*t]}}\n"],
                         ids=["anchor-bomb", "alias-inside-itself"])
def test_yaml_that_expands_without_bound_is_refused_in_a_few_lines(tmp_path, text):
    config = tmp_path / "bomb.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError) as caught:
        read_yaml(config)
    message = str(caught.value)
    assert f"config file {config}: expands to more than 10000 values" in message and "no anchors" in message
    assert len(message) < 1000


def test_an_override_that_expands_without_bound_is_refused():
    bomb = "[" + ", ".join(f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 10 if i else ["1"] * 10) + "]"
                           for i in range(6)) + "]"
    with pytest.raises(ConfigError, match="expands to more than 10000 values"):
        apply_override({}, f"train.amp.custom_white_list={bomb}")


def test_a_huge_bad_value_is_echoed_cut_to_a_few_hundred_characters():
    with pytest.raises(ConfigError) as caught:
        validate_config({"train": {"epochs": "9" * 100_000 + "x", "amp": {"custom_white_list": ["bad op"] * 5000}}})
    message = str(caught.value)
    assert "train.epochs: " in message and "… (100003 characters)" in message
    assert "train.amp.custom_white_list" in message
    assert len(message) < 2500


def test_thousands_of_bad_keys_list_the_first_fifty_and_count_the_rest():
    with pytest.raises(ConfigError) as caught:
        validate_config({f"key{i}": 1 for i in range(500)})
    message = str(caught.value)
    assert "invalid configuration (500 problem(s))" in message and "... and 450 more" in message
    assert len(caught.value.problems) == 500 and message.count("unknown key") == 50


def test_a_gate_threshold_is_one_number_for_every_runtime_or_a_map_by_runtime():
    listed = {"runtimes": ["onnxruntime", "paddle_inference"]}
    config = validate_config({"evaluate": listed, "gate": {"min_speedup": {"onnxruntime": 1.5, "paddle_inference": 0},
                                                           "min_agreement": 0.97}})
    assert config.gate.min_speedup == {"onnxruntime": 1.5, "paddle_inference": 0.0}
    assert [config.gate.threshold("min_speedup", name) for name in listed["runtimes"]] == [1.5, 0.0]
    assert [config.gate.threshold("min_agreement", name) for name in listed["runtimes"]] == [0.97, 0.97]
    # Naming a runtime that is not listed is fine: a team may drop one for a while and keep its policy.
    assert validate_config({"gate": {"min_speedup": {"onnxruntime": 1, "openvino": 0}}}).gate.min_speedup == {
        "onnxruntime": 1.0, "openvino": 0.0}
    # The example, written from a config with a map, reads back to that config.
    import yaml

    from quantgate.config_example import example_yaml

    assert validate_config(yaml.safe_load(example_yaml(config))) == config


def test_a_threshold_map_with_an_unknown_runtime_is_refused_naming_it_and_the_known_ones():
    with pytest.raises(ConfigError) as caught:
        validate_config({"gate": {"min_speedup": {"onnxruntime": 1, "tensorrt": 0}, "max_accuracy_drop": {},
                                  "min_agreement": {"onnxruntime": 1.5}}})
    assert [problem.split(": ")[0] for problem in caught.value.problems] == [
        "gate.max_accuracy_drop.by_runtime", "gate.min_agreement.by_runtime.onnxruntime",
        "gate.min_speedup.by_runtime.tensorrt.[key]"]
    assert ("Input should be 'onnxruntime', 'openvino' or 'paddle_inference' (got 'tensorrt')"
            in caught.value.problems[-1])
    # A plain number is judged as it always was, and reported once.
    with pytest.raises(ConfigError) as caught:
        validate_config({"gate": {"min_agreement": 1.5}})
    assert caught.value.problems == ["gate.min_agreement.number: Input should be less than or equal to 1 (got 1.5)"]


def test_a_threshold_map_missing_a_listed_runtime_is_refused_before_any_run():
    with pytest.raises(ConfigError) as caught:
        validate_config({"evaluate": {"runtimes": ["onnxruntime", "openvino", "paddle_inference"]},
                         "gate": {"min_speedup": {"onnxruntime": 1}, "min_agreement": {"onnxruntime": 0.98,
                                                                                       "openvino": 0.98}}})
    message = str(caught.value)
    assert ("gate.min_agreement names no threshold for paddle_inference, which evaluate.runtimes lists: add "
            "paddle_inference: <number> to the map, or give one number for every runtime") in message
    assert "gate.min_speedup names no threshold for openvino, paddle_inference" in message


def test_the_deployment_parameter_schema_offers_a_number_or_a_map_by_runtime():
    gate = PipelineConfig.model_json_schema()["$defs"]["GatePolicy"]["properties"]
    number, by_runtime = gate["min_agreement"]["oneOf"]
    assert number == {"type": "number", "minimum": 0, "maximum": 1}
    assert by_runtime["propertyNames"] == {"enum": ["onnxruntime", "openvino", "paddle_inference"]}
    assert by_runtime["additionalProperties"] == number and by_runtime["minProperties"] == 1
    assert gate["max_release_regression"]["type"] == "number"  # judged on the primary runtime only


def test_batch_sizes_default_to_the_memory_budget_and_the_latency_batch_is_fixed():
    config = validate_config({})
    assert config.quantize.batch_size is None and config.evaluate.batch_size is None
    assert config.evaluate.latency_batch_size == 16
    assert validate_config({"quantize": {"batch_size": 8}}).quantize.batch_size == 8


def test_the_latency_batch_left_unset_is_the_tasks_and_one_set_is_kept():
    import yaml

    from quantgate.config_example import example_yaml

    detector = {"task": "text_detection", "trained_model": {"path": "det"},
                "data": {"dataset": "text_boxes", "path": "pages", "label_file": "pages/calibration.txt"}}
    recognizer = {"task": "text_recognition", "data": {"dataset": "digit_strings"}, "train": {"architecture": "crnn"}}
    # a page at a time for a detector, as the OCR system runs it; 16 for the others, as always
    assert validate_config(detector).evaluate.latency_batch_size == 1
    assert validate_config({**detector, "evaluate": {"latency_batch_size": None}}).evaluate.latency_batch_size == 1
    assert validate_config(recognizer).evaluate.latency_batch_size == 16
    assert validate_config({}).evaluate.latency_batch_size == 16 == EvaluateConfig().latency_batch_size
    # a batch the user sets is theirs, whatever the task
    assert validate_config({**detector, "evaluate": {"latency_batch_size": 16}}).evaluate.latency_batch_size == 16
    assert validate_config({"evaluate": {"latency_batch_size": 4}}).evaluate.latency_batch_size == 4
    # the classification default dumps as it always did, so earlier runs' reuse keys still match
    assert validate_config({}).evaluate.model_dump(mode="json")["latency_batch_size"] == 16
    # the example shows the unset batch as null (the task decides), and reads back to the same config
    config = validate_config(detector)
    printed = example_yaml(config)
    assert "  latency_batch_size: null" in printed.splitlines()
    assert validate_config(yaml.safe_load(printed)) == config
    with pytest.raises(ConfigError, match="evaluate.latency_batch_size"):
        validate_config({**detector, "evaluate": {"latency_batch_size": 0}})


def test_calibration_batches_without_a_batch_size_are_refused_naming_both_settings():
    with pytest.raises(ConfigError, match=r"quantize.batch_nums=4 needs quantize.batch_size: set both"):
        validate_config({"quantize": {"batch_nums": 4}})
    assert validate_config({"quantize": {"batch_nums": 4, "batch_size": 8}}).quantize.batch_nums == 4
