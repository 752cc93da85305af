"""Policy files: validation errors name file, key and problem; extends merges; changes()."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ingest.errors import ContextlensError
from replay.policy import PolicyChange, PolicyRegistry, bundled_policies_dir, load_registry

BASE = '''version = "{v}"
description = "base"

[window]
max_messages = 10

[freshness]
volatile = 6
stale_action = "omit"

[privacy.providers.openai]
blocked_classes = []
'''


def write(folder: Path, name: str, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.toml").write_text(text)


def error_of(folder: Path) -> str:
    with pytest.raises(ContextlensError) as err:
        PolicyRegistry(folder)
    return str(err.value)


def test_bundled_registry_lists_v1_to_v6_with_descriptions() -> None:
    reg = load_registry(None)
    assert reg.folder == bundled_policies_dir()
    assert reg.versions() == ["v1", "v2", "v3", "v4", "v5", "v6"]
    for v in reg.versions():
        assert reg.description(v)
    assert reg.get("v1").extends is None and reg.get("v6").extends == "v5"


def test_extends_deep_merges_tables_and_replaces_lists() -> None:
    reg = load_registry(None)
    v6 = reg.get("v6")
    # from v6 itself
    assert (v6.freshness.volatile, v6.freshness.session, v6.freshness.bounded) == (4, 24, 48)
    assert v6.rehydration.byte_budget == 32768
    # inherited through the chain, sibling keys of the same table kept
    assert v6.freshness.stale_action == "mark" and v6.freshness.broken_provenance == "mark"
    assert v6.rehydration.trigger == "exact_evidence"
    assert v6.budget.token_budget == 6000 and v6.budget.reserve_tokens == 500
    assert v6.window.max_messages == 16
    assert v6.privacy.providers["openai"].blocked_classes == ["google_derived"]
    assert v6.retention.removed_classes == ["delete", "hash_only"]  # list replaced, not appended


def test_changes_lists_dotted_keys_against_the_parent() -> None:
    reg = load_registry(None)
    assert reg.changes("v1") == []
    assert PolicyChange("freshness.volatile", 6, 168) in reg.changes("v5")
    assert {c.key for c in reg.changes("v5")} == {"freshness.volatile", "freshness.session",
                                                   "freshness.bounded"}
    v3 = {c.key: (c.parent, c.value) for c in reg.changes("v3")}
    assert v3["privacy.providers.openai.blocked_classes"] == ([], ["google_derived"])
    assert v3["retention.removed_classes"] == (["delete"], ["delete", "hash_only"])


def test_unknown_version_names_the_known_ones() -> None:
    with pytest.raises(ContextlensError, match=r"unknown policy version 'v9' \(known: v1, v2"):
        load_registry(None).get("v9")


def test_natural_sort_and_a_custom_child(tmp_path: Path) -> None:
    for v in ("v1", "v2", "v10"):
        write(tmp_path, v, BASE.format(v=v))
    write(tmp_path, "v11", 'version = "v11"\nextends = "v10"\ndescription = "child"\n'
          '[freshness]\nvolatile = 2\n')
    reg = PolicyRegistry(tmp_path)
    assert reg.versions() == ["v1", "v2", "v10", "v11"]
    assert reg.get("v11").window.max_messages == 10
    assert reg.changes("v11") == [PolicyChange("freshness.volatile", 6, 2)]


def test_unknown_key_names_file_and_key(tmp_path: Path) -> None:
    write(tmp_path, "v1", BASE.format(v="v1"))
    write(tmp_path, "v7", 'version = "v7"\nextends = "v1"\ndescription = "x"\n[freshness]\nvolatil = 3\n')
    assert error_of(tmp_path) == f"{tmp_path.name}/v7.toml: key freshness.volatil: unknown key"


def test_unknown_family_names_file_and_key(tmp_path: Path) -> None:
    write(tmp_path, "v1", BASE.format(v="v1") + "\n[windw]\nmax_messages = 3\n")
    assert error_of(tmp_path) == f"{tmp_path.name}/v1.toml: key windw: unknown key"


def test_wrong_type_names_file_key_and_value(tmp_path: Path) -> None:
    write(tmp_path, "v1", BASE.format(v="v1"))
    write(tmp_path, "v8", 'version = "v8"\nextends = "v1"\ndescription = "x"\n[window]\nmax_messages = "ten"\n')
    msg = error_of(tmp_path)
    assert msg == f"{tmp_path.name}/v8.toml: key window.max_messages: expected an integer, got 'ten'"


@pytest.mark.parametrize("table, line, problem", [
    ("budget", "reserve_tokens = -1", "must be >= 0, got -1"),
    ("freshness", 'stale_action = "drop"', "expected one of 'mark' or 'omit', got 'drop'"),
    ("contradiction", 'supersession = "newest"', "got 'newest'"),
    ("ownership", 'child_promotion = "always"', "got 'always'"),
    ("rehydration", 'trigger = "always"', "got 'always'"),
    ("freshness", 'broken_provenance = "repair"', "got 'repair'"),
    ("branch", 'lineage_only = "yes"', "expected true or false, got 'yes'"),
    ("recovery", 'protected_states = ["pending", "lost"]', "got 'lost'"),
    ("window", "max_messages = true", "expected an integer, got true"),
    # bounded: a count past 64 bits, or a window past Python's dates, failed later, exit 1
    ("budget", "token_budget = 99999999999999999999999999",
     "must be <= 1,000,000,000,000, got 99999999999999999999999999"),
    ("freshness", "volatile = 9223372036854775807", "must be <= 10,000,000, got"),
    ("rehydration", "byte_budget = 10000000000000", "must be <= 1,000,000,000,000"),
])
def test_bad_values_are_named(tmp_path: Path, table: str, line: str, problem: str) -> None:
    write(tmp_path, "v1", f'version = "v1"\ndescription = "x"\n[{table}]\n{line}\n')
    msg = error_of(tmp_path)
    assert msg.startswith(f"{tmp_path.name}/v1.toml: key {table}.")
    assert problem in msg


def test_error_in_an_inherited_key_names_the_file_that_wrote_it(tmp_path: Path) -> None:
    write(tmp_path, "v1", 'version = "v1"\ndescription = "x"\n[privacy.providers.openai]\nblocked_classes = ["gmail"]\n')
    msg = error_of(tmp_path)
    assert msg.startswith(f"{tmp_path.name}/v1.toml: key privacy.providers.openai.blocked_classes.0:")


def test_extends_cycle(tmp_path: Path) -> None:
    write(tmp_path, "v9", 'version = "v9"\nextends = "v10"\ndescription = "x"\n')
    write(tmp_path, "v10", 'version = "v10"\nextends = "v9"\ndescription = "x"\n')
    msg = error_of(tmp_path)
    assert msg == f"{tmp_path.name}/v9.toml: extends cycle v9 -> v10 -> v9"


def test_extends_unknown_version(tmp_path: Path) -> None:
    write(tmp_path, "v3", 'version = "v3"\nextends = "v0"\ndescription = "x"\n')
    assert error_of(tmp_path) == f"{tmp_path.name}/v3.toml: key extends: extends unknown version 'v0'"


def test_version_must_match_the_file_name(tmp_path: Path) -> None:
    write(tmp_path, "v2", 'version = "v3"\ndescription = "x"\n')
    assert error_of(tmp_path) == (
        f"{tmp_path.name}/v2.toml: key version: 'v3' does not match the file name 'v2'")


def test_missing_description_and_version(tmp_path: Path) -> None:
    write(tmp_path, "v1", 'version = "v1"\n')
    assert error_of(tmp_path) == f"{tmp_path.name}/v1.toml: key description: missing key"
    write(tmp_path, "v1", 'description = "x"\n')
    assert error_of(tmp_path) == f"{tmp_path.name}/v1.toml: key version: missing key"


def test_invalid_toml_names_the_line(tmp_path: Path) -> None:
    write(tmp_path, "v1", 'version = "v1"\ndescription = "x"\n[window\nmax_messages = 3\n')
    msg = error_of(tmp_path)
    assert msg.startswith(f"{tmp_path.name}/v1.toml: invalid TOML:") and "line 3" in msg


def test_missing_and_empty_folders(tmp_path: Path) -> None:
    with pytest.raises(ContextlensError, match="not found"):
        PolicyRegistry(tmp_path / "nope")
    with pytest.raises(ContextlensError, match="holds no"):
        PolicyRegistry(tmp_path)


def test_a_copy_of_the_bundled_folder_loads_the_same(tmp_path: Path) -> None:
    shutil.copytree(bundled_policies_dir(), tmp_path / "policies")
    reg = PolicyRegistry(tmp_path / "policies")
    bundled = load_registry(None)
    assert all(reg.get(v) == bundled.get(v) for v in bundled.versions())


def test_provider_tables_match_provider_names_case_insensitively(tmp_path: Path) -> None:
    write(tmp_path, "v1", BASE.format(v="v1"))
    write(tmp_path, "v2", 'version = "v2"\nextends = "v1"\ndescription = "x"\n'
          '[privacy.providers.OpenAI]\nblocked_classes = ["google_derived"]\n')
    v2 = PolicyRegistry(tmp_path).get("v2")
    # the child's OpenAI table overrides the parent's openai one instead of sitting beside it
    assert list(v2.privacy.providers) == ["openai"]
    assert v2.privacy.rule_for("openai").blocked_classes == ["google_derived"]
    assert v2.privacy.rule_for("OPENAI") is v2.privacy.rule_for("openai")


def test_provider_tables_colliding_case_insensitively_are_an_error(tmp_path: Path) -> None:
    write(tmp_path, "v1", BASE.format(v="v1") + '\n[privacy.providers.OpenAI]\nblocked_classes = []\n')
    assert error_of(tmp_path) == (
        f"{tmp_path.name}/v1.toml: key privacy.providers.OpenAI: collides with "
        "privacy.providers.openai (provider names are matched case-insensitively)")


def test_a_missing_key_is_blamed_on_the_file_that_lacks_it(tmp_path: Path) -> None:
    write(tmp_path, "v6", BASE.format(v="v6"))
    write(tmp_path, "v7", 'version = "v7"\nextends = "v6"\n[budget]\ntoken_budget = 200\n')
    assert error_of(tmp_path) == f"{tmp_path.name}/v7.toml: key description: missing key"


def test_duplicate_ranking_entries_are_rejected_naming_file_and_value(tmp_path: Path) -> None:
    write(tmp_path, "v1", BASE.format(v="v1"))
    write(tmp_path, "v2", 'version = "v2"\nextends = "v1"\ndescription = "x"\n[ranking]\n'
          'order = ["message", "tool_memory", "message"]\n')
    assert error_of(tmp_path) == f"{tmp_path.name}/v2.toml: key ranking.order: duplicate entry 'message'"


def test_missing_recorded_versions_are_one_summary_error(tmp_path: Path) -> None:
    shutil.copytree(bundled_policies_dir(), tmp_path / "policies")
    for v in ("v5", "v6"):
        (tmp_path / "policies" / f"{v}.toml").unlink()
    reg = PolicyRegistry(tmp_path / "policies")
    recorded = ["v4"] * 30 + ["v5"] * 8 + ["v6"] * 4  # one per request, as a store lists them
    with pytest.raises(ContextlensError) as err:
        reg.require(recorded)
    assert str(err.value) == f"policies folder {tmp_path / 'policies'} lacks v5, v6 recorded by 12 requests"
    reg.require({"v1": 3, "v4": 1})  # all present: no error
    with pytest.raises(ContextlensError, match=r"lacks v9 recorded by 1 request$"):
        reg.require({"v9": 1, "v4": 5})


def test_a_policy_file_given_by_path_extends_from_its_folder_then_the_registry(tmp_path: Path) -> None:
    reg = load_registry(None)
    write(tmp_path, "v7", 'version = "v7"\nextends = "v6"\ndescription = "tight"\n[budget]\ntoken_budget = 200\n')
    v7 = reg.resolve(str(tmp_path / "v7.toml"))
    assert (v7.version, v7.budget.token_budget, v7.freshness.volatile) == ("v7", 200, 4)  # v6 from the registry
    assert reg.get(str(tmp_path / "v7.toml")) == v7  # get() accepts a path too
    assert "v7" not in reg and reg.resolve("v6") == reg.get("v6")  # the registry is unchanged
    # a parent beside the file wins over the registry's version of the same name
    write(tmp_path, "v6", 'version = "v6"\nextends = "v5"\ndescription = "local v6"\n[window]\nmax_messages = 3\n')
    v7 = reg.resolve(tmp_path / "v7.toml")
    assert v7.window.max_messages == 3 and v7.freshness.volatile == 168  # local v6 over the bundled v5
    assert reg.get("v6").window.max_messages == 16


def test_a_bad_policy_file_given_by_path_is_named(tmp_path: Path) -> None:
    reg = load_registry(None)
    with pytest.raises(ContextlensError, match="policy file .*v7.toml not found"):
        reg.resolve(str(tmp_path / "v7.toml"))
    write(tmp_path, "v7", 'version = "v7"\nextends = "v6"\ndescription = "x"\n[budget]\ntoken_budget = "lots"\n')
    with pytest.raises(ContextlensError) as err:
        reg.resolve(str(tmp_path / "v7.toml"))
    assert str(err.value) == f"{tmp_path / 'v7.toml'}: key budget.token_budget: expected an integer, got 'lots'"
    write(tmp_path, "v8", 'version = "v8"\nextends = "v0"\ndescription = "x"\n')
    with pytest.raises(ContextlensError, match=r"v8.toml: key extends: extends unknown version 'v0'"):
        reg.resolve(str(tmp_path / "v8.toml"))


def test_a_policy_nested_too_deeply_is_named(tmp_path: Path) -> None:
    write(tmp_path, "v1", 'version = "v1"\ndescription = "x"\nx = ' + "[" * 5000 + "]" * 5000 + "\n")
    assert error_of(tmp_path) == f"{tmp_path.name}/v1.toml: invalid TOML: nested too deeply"
