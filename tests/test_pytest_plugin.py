"""Issue 31: the ``memory_audit`` pytest fixture (audit/pytest_plugin.py), in real pytest
runs of their own."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent

MEMORIES = '''
from compressors import Compressor, dump, load, pack


class NewestFirst(Compressor):
    """Newest whole records that fit (the README's example)."""

    name = "newest_first"
    version = "1"
    summary = "newest whole records that fit"

    def update(self, memory, chunk, query_keys, budget):
        return dump(pack([*load(memory), *chunk.records][::-1], budget)[::-1])


class Forgets(Compressor):
    """Keeps nothing."""

    name = "forgets"
    version = "1"
    summary = "keeps nothing"

    def update(self, memory, chunk, query_keys, budget):
        return ""


class Raises(Compressor):
    name = "raises"
    version = "1"
    summary = "raises"

    def update(self, memory, chunk, query_keys, budget):
        raise KeyError("boom")
'''


def test_the_fixture_is_registered_as_a_pytest_plugin():
    found = [e for e in metadata.entry_points(group="pytest11") if e.name == "memory_audit"]
    assert [e.value for e in found] == ["audit.pytest_plugin"]


def test_the_plugin_imports_nothing_of_the_audit_until_a_test_asks():
    """pytest imports every installed plugin at start-up: importing this one must not
    import the audit (a broken installation would break every test session)."""
    probe = (
        "import sys, audit.pytest_plugin; "
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('compressors', 'histories', 'pandas', 'numpy', 'pyarrow') or "
        "(m.startswith('audit.') and m != 'audit.pytest_plugin')); print(heavy)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    assert done.stdout.strip() == "[]"


def test_a_compressor_that_keeps_less_than_the_baseline_fails_its_test(pytester: pytest.Pytester):
    """The entry point loads the fixture in a pytest run of its own (no ``-p``)."""
    pytester.makepyfile(memories=MEMORIES)
    pytester.makepyfile(
        test_memories="""
        from memories import Forgets, NewestFirst


        def test_newest_first_keeps_what_tail_keeps(memory_audit):
            result = memory_audit(NewestFirst)
            assert (result.compressor.condition, result.baseline.condition) == (
                "newest_first", "tail")
            assert result.compressor.n == result.baseline.n == 24
            result.assert_keeps_at_least()


        def test_forgets_keeps_what_tail_keeps(memory_audit):
            memory_audit(Forgets).assert_keeps_at_least()


        def test_newest_first_keeps_what_frontier_keeps(memory_audit):
            memory_audit("memories:NewestFirst", baseline="frontier").assert_keeps_at_least()


        def test_within_a_margin(memory_audit):
            memory_audit(NewestFirst, baseline="frontier").assert_keeps_at_least(margin=0.2)
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    text = " ".join(result.stdout.str().split())
    assert re.search(
        r"AssertionError: forgets keeps less than tail on joint J: forgets 0/24 source pairs "
        r"against tail (\d+)/24; tail alone passes \1, forgets alone 0; the run: ",
        text,
    ), text
    assert re.search(
        r"newest_first keeps less than frontier on joint J: newest_first (\d+)/24 source "
        r"pairs against frontier (\d+)/24; frontier alone passes \d+, newest_first alone \d+",
        text,
    ), text


def test_a_compressor_that_raises_fails_naming_its_error(pytester: pytest.Pytester):
    pytester.makepyfile(memories=MEMORIES)
    pytester.makepyfile(
        test_raises="""
        from memories import Raises


        def test_raises(memory_audit):
            memory_audit(Raises, score="adequacy").assert_keeps_at_least()


        def test_a_class_defined_in_a_test_cannot_be_found_again(memory_audit):
            from compressors import Compressor

            class Local(Compressor):
                name = "local"
                version = "1"

                def update(self, memory, chunk, query_keys, budget):
                    return memory

            memory_audit(Local)
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    text = " ".join(result.stdout.str().split())
    assert "AssertionError: raises raised (its reads score 0): KeyError: 'boom' at" in text
    assert "memory_audit: " in text
    assert "define it at the top level of an importable module" in text
