"""The repository is self-contained: nothing refers to files outside it, and every cited section of
docs/ORIGINAL.md (the description of the original) exists as a heading."""
import argparse
import os
import re
import subprocess
import sys

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


README_MAX_LINES = 250


def test_readme_is_a_short_user_guide():
    """The README stays a user guide: at most README_MAX_LINES lines (measurements live in docs/BENCHMARKS.md,
    messages in docs/TROUBLESHOOTING.md, the flags in docs/FLAGS.md), opening with the two commands."""
    lines = _read("README.md").splitlines()
    assert len(lines) <= README_MAX_LINES, "README.md has {} lines (at most {}): move detail to docs/".format(
        len(lines), README_MAX_LINES)
    opening = "\n".join(lines[:6])
    assert "bash scripts/install.sh && bash scripts/quickstart.sh" in opening
    assert ".venv/bin/python -m pytest" in opening


def test_flags_reference_is_generated_from_runconfig():
    """docs/FLAGS.md is exactly what runtime/config.py renders, by the command written at its top."""
    from runtime import config
    with open(os.path.join(ROOT, "docs", "FLAGS.md"), encoding="utf-8") as handle:
        written = handle.read()
    assert written == config.flags_markdown(), (
        "docs/FLAGS.md is out of date with runtime/config.py; regenerate it with:\n    "
        + config.FLAGS_REFERENCE_COMMAND)
    assert config.FLAGS_REFERENCE_COMMAND in written.splitlines()[0]
    # The documented command itself works (run with this interpreter, stdout instead of the redirect).
    command = config.FLAGS_REFERENCE_COMMAND.split(">")[0].split()
    assert command[:3] == [".venv/bin/python", "-m", "runtime.config"]
    output = subprocess.run([sys.executable] + command[1:], cwd=ROOT, capture_output=True, check=True,
                            text=True).stdout
    assert output == written


def test_flags_reference_lists_every_flag_of_the_parser():
    """Every option string of main.py's parser (aliases included) is in docs/FLAGS.md, and the README points there
    and at --help instead of keeping a table of its own."""
    from runtime.config import build_parser
    reference = _read(os.path.join("docs", "FLAGS.md"))
    options = [option for action in build_parser()._actions if action.help != argparse.SUPPRESS
               for option in action.option_strings if option.startswith("--") and option != "--help"]
    assert options and not [option for option in options if "`{}`".format(option) not in reference]
    readme = _read("README.md")
    assert "](docs/FLAGS.md)" in readme and "python main.py --help" in readme
    assert "| `--batch_size` |" not in readme, "the README keeps no flag table of its own: docs/FLAGS.md is the one"


# Commands named in the README: `python -m MODULE ARGS`, `python FILE.py ARGS` and `bash FILE.sh`.
INVOCATION = re.compile(r"(?:\.venv/bin/)?python3?\s+(?:-m\s+([A-Za-z_][\w.]*)|([\w./-]+\.py)\b)"
                        r"((?:\s+(?!&&|\||#)\S+)*)")
BASH_COMMAND = re.compile(r"\bbash\s+([\w./-]+\.sh)\b")
FLAG = re.compile(r"--[a-z][\w-]*")
THIRD_PARTY_MODULES = {"pytest", "pip"}


def _readme_commands():
    """The README's code: the lines of its code blocks (backslash continuations joined) and its inline code spans,
    whitespace collapsed."""
    text = _read("README.md")
    pieces, block = [], None
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if block is not None:
                pieces += block
            block = [] if block is None else None
        elif block is not None:
            if block and block[-1].endswith("\\"):
                block[-1] = block[-1][:-1] + " " + line.strip()
            else:
                block.append(line)
    outside = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    pieces += re.findall(r"`([^`]+)`", outside)
    return [" ".join(piece.split()) for piece in pieces if piece.strip()]


def test_commands_named_in_the_readme_exist():
    """Every script and module the README runs exists; main.py's flags and modes are its parser's, and another
    tool's flags appear as option strings in that tool's source."""
    from runtime.config import MODE_CHOICES, build_parser
    options = {option for action in build_parser()._actions for option in action.option_strings}
    problems = []
    for command in _readme_commands():
        for path in BASH_COMMAND.findall(command):
            if not os.path.isfile(os.path.join(ROOT, path)):
                problems.append("no file {}: {}".format(path, command))
        for module, script, tail in INVOCATION.findall(command):
            if module.split(".")[0] in THIRD_PARTY_MODULES:
                continue
            path = script or module.replace(".", "/") + ".py"
            if module and not os.path.isfile(os.path.join(ROOT, path)):
                path = module.replace(".", "/") + "/__init__.py"
            if not os.path.isfile(os.path.join(ROOT, path)):
                problems.append("no file {}: {}".format(path, command))
                continue
            arguments = [argument.strip("[]") for argument in tail.split()]
            source = _read(path)
            for index, argument in enumerate(arguments):
                flag = argument.split("=", 1)[0]
                if not FLAG.fullmatch(flag):
                    continue
                if path == "main.py":
                    if flag not in options:
                        problems.append("main.py has no flag {}: {}".format(flag, command))
                    elif flag == "--mode" and index + 1 < len(arguments) and arguments[index + 1] not in MODE_CHOICES:
                        problems.append("main.py has no mode {}: {}".format(arguments[index + 1], command))
                elif '"{}"'.format(flag) not in source and "'{}'".format(flag) not in source:
                    problems.append("{} has no flag {}: {}".format(path, flag, command))
    assert not problems, "commands of README.md that do not exist:\n" + "\n".join(problems)


REPOSITORY_PATH = re.compile(r"(?:model|runtime|utils|dataprep|datasets|training|scripts|bench|tests|docs)/[\w./-]*"
                             r"|[\w-]+\.(?:py|ini)")  # a bare name: a top-level file


def test_paths_named_in_the_readme_exist():
    """A file or folder of the repository named in the README's inline code (`model/checkpoint_names.py`,
    `pytest.ini`, ...) exists."""
    text = re.sub(r"```.*?```", "", _read("README.md"), flags=re.DOTALL)
    named = {span for span in re.findall(r"`([^`\s]+)`", text) if REPOSITORY_PATH.fullmatch(span)}
    assert "model/checkpoint_names.py" in named
    missing = sorted(path for path in named if not os.path.exists(os.path.join(ROOT, path)))
    assert not missing, "paths named in README.md that do not exist: " + ", ".join(missing)


def test_readme_commands_are_found():
    """The command check above sees the README's commands (so it cannot pass by finding none)."""
    commands = _readme_commands()
    assert any("main.py --mode training_benchmark" in command for command in commands)
    assert any(module for command in commands for module, _, _ in INVOCATION.findall(command))
    assert any(script != "main.py" for command in commands for _, script, _ in INVOCATION.findall(command) if script)
    assert any(BASH_COMMAND.search(command) for command in commands)
    assert any("--moving_average_decay 0.999 --grad_accum_steps 2" in command for command in commands)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
