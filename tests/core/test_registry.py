"""The plug-in registry: lazy entries, aliases, suggestions, and third-party entry points."""

from importlib.metadata import EntryPoint

import pytest

from jetflow_bench.core import registry as registry_module
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.registry import Registry


def plugins(monkeypatch: pytest.MonkeyPatch, *points: tuple[str, str]) -> None:
    found = [EntryPoint(name, value, "jfbench.test") for name, value in points]
    monkeypatch.setattr(registry_module, "entry_points", lambda group: found if group == "jfbench.test" else [])


def test_entry_point_plugins_load_lazily(monkeypatch):
    plugins(monkeypatch, ("Fancy", "collections:OrderedDict"))
    reg: Registry[type] = Registry("drafter", "jfbench.test")
    reg.register("ngram", dict)
    assert reg.names() == ["fancy", "ngram"]
    from collections import OrderedDict

    assert reg.get("FANCY") is OrderedDict


def test_entry_point_clashing_with_a_builtin_is_an_error_naming_both(monkeypatch):
    plugins(monkeypatch, ("ngram", "theirs.drafters:Ngram"))
    reg: Registry[type] = Registry("drafter", "jfbench.test")
    reg.register("ngram", "drafters.ngram.drafter:NgramDrafter")
    with pytest.raises(JfbenchError, match=r"'theirs.drafters:Ngram'.*clashes with the registered drafter 'ngram' = 'drafters.ngram.drafter:NgramDrafter'"):
        reg.names()


def test_entry_point_clashing_with_an_alias_is_an_error(monkeypatch):
    plugins(monkeypatch, ("pld", "theirs:Lookup"))
    reg: Registry[type] = Registry("drafter", "jfbench.test")
    reg.register("ngram", dict, aliases=("pld",))
    with pytest.raises(JfbenchError, match="clashes"):
        reg.get("ngram")


def test_unknown_names_get_a_suggestion():
    reg: Registry[type] = Registry("suite")
    reg.register("gsm8k", dict)
    with pytest.raises(JfbenchError, match="did you mean 'gsm8k'"):
        reg.get("gsm8")
    with pytest.raises(ValueError, match="already registered"):
        reg.register("gsm8k", list)
