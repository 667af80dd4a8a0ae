"""tools.mutations' table against the tree: every mutation still finds its guard exactly once and
names tests that exist, and no id is used twice (a refactor left three stale or pointing at the wrong
file unnoticed until the tool ran; the tool itself is minutes, outside the suite)."""

from pathlib import Path

from tools.mutations import MUTATIONS, ROOT


def test_every_mutation_finds_its_guard_once_and_names_tests_that_exist():
    ids = [m.id for m in MUTATIONS]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    for m in MUTATIONS:
        text = (ROOT / m.path).read_text(encoding="utf-8")
        for old, _new in ((m.old, m.new), *m.more):
            assert text.count(old) == 1, (m.id, m.path, old)
        for test in m.tests:
            path, _sep, name = test.partition("::")
            assert Path(ROOT / path).is_file(), (m.id, test)
            assert not name or f"def {name.split('[')[0]}(" in (ROOT / path).read_text(encoding="utf-8"), (m.id, test)
