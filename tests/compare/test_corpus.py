"""Every stored compare document of the corpus (tests/compare/corpus/, tests/compare_corpus.py) is
made again by today's code and must be the same: its text exactly (a PromQL case's numbers within
1e-12, relative: VictoriaMetrics sums series in no fixed order). A document that changes on purpose
is written again with `.venv/bin/python tests/compare_corpus.py --write NAME` and named in the commit."""

from __future__ import annotations

import shutil

import pytest
from compare_corpus import CASES as CASES_FILE
from compare_corpus import CORPUS, Corpus, cases, differences, same, servers

CASES = cases()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    if not shutil.which("vmalert"):
        pytest.skip("vmalert not installed (Debian package victoria-metrics)")
    root = tmp_path_factory.mktemp("corpus")
    influx, vm = servers(root)
    made = Corpus(influx, vm, root)
    try:
        made.load()
        yield made
    finally:
        made.close()
        vm.stop()
        influx.stop()


def test_every_case_has_its_document_and_every_document_its_case():
    stored = {p.name for p in CORPUS.iterdir() if p.name != CASES_FILE.name}
    assert stored == {c.path.name for c in CASES}


@pytest.mark.servers
@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_document_is_the_stored_one(corpus, case):
    made = corpus.document(case)
    stored = case.path.read_text()
    assert same(case, stored, made), f"{case.name} differs from {case.path.name}:\n{differences(case, stored, made)}"
