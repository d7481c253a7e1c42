"""The README and docs/ stay a front door and a set of pages that hold together: the README
short, every relative link (and #anchor into a page) resolving inside the repository, and
no link leaving it for a path outside the checkout."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings (outside fenced code)."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            for m in re.finditer(r"^#{1,6}\s+(.*)$", text, re.M)}


def _links(page: Path) -> list[str]:
    return LINK.findall(re.sub(r"```.*?```", "", page.read_text(), flags=re.S))


def test_readme_is_short_and_docs_exist():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
    assert len(PAGES) - 1 >= 5


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_links_resolve_inside_the_repository(page):
    links = _links(page)
    wrong = []
    for target in links:
        if re.match(r"[a-z]+:", target):   # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.is_relative_to(ROOT) or not dest.exists():
            wrong.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            wrong.append(target)
    assert not wrong, f"{page.name}: links that do not resolve: {wrong}"


def test_the_check_reads_links():
    assert any("docs/" in target for target in _links(ROOT / "README.md"))


def test_readme_python_examples_run(capsys):
    """The README's Python blocks run, in order, in one namespace (the second builds on the
    first's imports and parameters), and compute what they say."""
    import numpy as np

    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert len(blocks) >= 2
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    probs = np.asarray(namespace["probs"])
    assert probs.shape == (32, 10) and np.allclose(probs.sum(axis=1), 1, atol=1e-5)
    assert "HloModule" in capsys.readouterr().out
    assert np.isfinite(float(namespace["loss"]))
