"""Names become path components, so anything that could escape the store is refused."""

import pytest

from quantgate.artifacts import InvalidName, StageRef

BAD_NAMES = ["../etc", "/abs", "A B", "", "a..b", "Upper", ".hidden", "x/y", "a\n", "a" * 65, None,
             "a\x00b", "caf\u00e9", "-lead", "x\\y", "..", "~root"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_model_names_are_refused(store, name):
    with pytest.raises(InvalidName) as caught:
        store.create_version(name)
    message = str(caught.value)
    assert repr(name) in message and "must match" in message and "'mnist-cnn'" in message
    assert caught.value.exit_code == 2
    assert list(store.root.iterdir()) == []


@pytest.mark.parametrize("name", BAD_NAMES + ["version.json"])
def test_bad_stage_names_are_refused(store, name):
    version = store.create_version("m")
    with pytest.raises(InvalidName):
        store.write_stage(version, name, config={}, inputs={})


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_alias_names_are_refused(store, name):
    with pytest.raises(InvalidName, match="alias name"):
        store.alias("m", name)
    with pytest.raises(InvalidName, match="alias name"):
        store.set_alias("m", name, "v1")


@pytest.mark.parametrize("version", ["1", "v0", "v01", "v1/../v2", "../v1", "V1", ""])
def test_bad_versions_are_refused(store, version):
    with pytest.raises(InvalidName, match=r"for example 'v3'"):
        store.version("m", version)


def test_stage_ref_with_traversal_is_refused(store):
    with pytest.raises(InvalidName):
        store.verify_stage(StageRef("m", "v1", "../../../etc", "/etc", "0" * 64))


def test_good_names_are_accepted(store):
    ref = store.create_version("resnet18.int8_v2-a")
    assert store.version("resnet18.int8_v2-a", "v1") == ref


def test_the_alias_constants_spell_the_alias_files_existing_stores_hold():
    from quantgate.artifacts import LATEST, RELEASE

    assert (RELEASE, LATEST) == ("release", "latest")
