"""The repository is self-contained: nothing refers to files outside it, and every cited section of
docs/ORIGINAL.md (the description of the original) exists as a heading."""
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORIGINAL = os.path.join(ROOT, "docs", "ORIGINAL.md")

# Built from pieces so that this file does not match itself.
FORBIDDEN = (
    "shared" + "/reference",
    ".." + "/shared",
    "SPEC" + " §",
    "SPEC" + ".md",
)
# A citation of a section: docs/ORIGINAL.md, "#", its anchor (or ORIGINAL.md relative to docs/).
ORIGINAL_ANCHOR = re.compile(r"ORIGINAL\.md#([A-Za-z0-9_-]+)")
# Markdown links from docs/ORIGINAL.md: `](#anchor)` or `](OTHER.md#anchor)`.
LOCAL_LINK = re.compile(r"\]\(((?:\.\./)?[A-Za-z0-9_./-]*\.md)?#([A-Za-z0-9_-]+)\)")
# Walked when there is no git checkout (e.g. inside the Docker image, which leaves .git out).
SKIP_DIRS = {".git", ".venv", "results", "data", "__pycache__", ".pytest_cache", ".hypothesis"}


def _repository_files():
    """Tracked files (git ls-files), plus docs/ORIGINAL.md and this file even before they are committed."""
    try:
        listing = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        files = [name for name in listing.decode("utf-8").split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for directory, subdirs, names in os.walk(ROOT):
            subdirs[:] = [d for d in subdirs if d not in SKIP_DIRS]
            files += [os.path.relpath(os.path.join(directory, name), ROOT) for name in names]
    files = set(files) | {os.path.join("docs", "ORIGINAL.md"), os.path.relpath(__file__, ROOT)}
    return sorted(name for name in files if os.path.isfile(os.path.join(ROOT, name)))


def _read(name):
    with open(os.path.join(ROOT, name), "rb") as handle:
        return handle.read().decode("utf-8", errors="ignore")


def github_slug(heading):
    """GitHub's anchor for a markdown heading: lowercase, punctuation removed, spaces to '-'."""
    slug = heading.strip().lower()
    slug = re.sub(r"[^\w\- ]", "", slug)
    return slug.replace(" ", "-")


def heading_anchors(text):
    """Anchors of the headings of a markdown text (outside code fences), with GitHub's -1, -2 for repeats."""
    anchors, seen, in_fence = set(), {}, False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if in_fence or not match:
            continue
        slug = github_slug(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else "{}-{}".format(slug, count))
    return anchors


def test_github_slug():
    assert github_slug("Learning rate") == "learning-rate"
    assert github_slug("Flags of `main.py`") == "flags-of-mainpy"
    assert github_slug("Quantization-aware training and export") == "quantization-aware-training-and-export"
    assert heading_anchors("# A\n```\n# not a heading\n```\n## A\n") == {"a", "a-1"}


def test_original_md_exists_with_sections():
    anchors = heading_anchors(_read(ORIGINAL))
    for expected in ("learning-rate", "known-bugs-of-the-original", "published-results", "command-line"):
        assert expected in anchors


def test_no_reference_outside_the_repository():
    offending = []
    for name in _repository_files():
        text = _read(name)
        for needle in FORBIDDEN:
            if needle in text:
                line = text[:text.index(needle)].count("\n") + 1
                offending.append("{}:{}: {}".format(name, line, needle))
    assert not offending, "references to files outside the repository:\n" + "\n".join(offending)


def test_cited_original_anchors_exist():
    anchors = heading_anchors(_read(ORIGINAL))
    missing = []
    for name in _repository_files():
        for match in ORIGINAL_ANCHOR.finditer(_read(name)):
            if match.group(1) not in anchors:
                missing.append("{}: ORIGINAL.md#{}".format(name, match.group(1)))
    assert not missing, "cited sections missing from docs/ORIGINAL.md:\n" + "\n".join(missing)


def test_links_in_original_md_resolve():
    missing = []
    for match in LOCAL_LINK.finditer(_read(ORIGINAL)):
        target, anchor = match.group(1), match.group(2)
        path = ORIGINAL if not target else os.path.normpath(os.path.join(os.path.dirname(ORIGINAL), target))
        if not os.path.isfile(path):
            missing.append("{}#{}: no such file".format(target, anchor))
        elif anchor not in heading_anchors(_read(path)):
            missing.append("{}#{}: no such heading".format(target or "ORIGINAL.md", anchor))
    assert not missing, "broken links in docs/ORIGINAL.md:\n" + "\n".join(missing)



# Any relative markdown link: `](path)`, `](path#anchor)` or `](#anchor)` (not http(s) or mailto).
MARKDOWN_LINK = re.compile(r"\]\((?!https?:|mailto:)([^)#\s]*)(?:#([A-Za-z0-9_-]+))?\)")


@pytest.mark.parametrize("page", ["README.md"] + sorted(
    os.path.join("docs", name) for name in os.listdir(os.path.join(ROOT, "docs")) if name.endswith(".md")))
def test_links_of_the_docs_resolve(page):
    """Every relative link of the README and docs/*.md points at a file that exists, and at one of its headings
    when it names an anchor."""
    source = os.path.join(ROOT, page)
    missing = []
    for match in MARKDOWN_LINK.finditer(_read(page)):
        target, anchor = match.group(1), match.group(2)
        path = source if not target else os.path.normpath(os.path.join(os.path.dirname(source), target))
        if not os.path.exists(path):
            missing.append("{}: no such file".format(target))
        elif anchor and path.endswith(".md") and anchor not in heading_anchors(_read(os.path.relpath(path, ROOT))):
            missing.append("{}#{}: no such heading".format(target or page, anchor))
    assert not missing, "broken links in {}:\n".format(page) + "\n".join(missing)

if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
