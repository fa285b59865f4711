"""scripts/README.md is the index of the measuring programs: it names every one by its path, its
links lead somewhere, the docs link it, and no file in scripts/ passes 450 lines. Reads text only."""

from pathlib import Path

from test_docs_links import broken_links, links

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
INDEX = SCRIPTS / "README.md"
MAX_LINES = 450


def programs() -> list[Path]:
    """What runs as a script: a .py file with a __main__ block outside a package, and the shell scripts."""
    py = [p for p in SCRIPTS.rglob("*.py")
          if 'if __name__ == "__main__":' in p.read_text() and not (p.parent / "__init__.py").exists()]
    return sorted(py + list(SCRIPTS.rglob("*.sh")))


def test_the_index_names_every_program_by_its_path():
    linked = {target.partition("#")[0] for _, target in links(INDEX)}
    missing = [str(p.relative_to(SCRIPTS)) for p in programs() if str(p.relative_to(SCRIPTS)) not in linked]
    assert len(programs()) >= 17
    assert not missing, f"scripts/README.md does not link {missing}"


def test_the_index_links_lead_somewhere_and_the_docs_link_it():
    problems = broken_links(INDEX)
    assert not problems, "\n".join(problems)
    development = ROOT / "docs" / "development.md"
    assert "../scripts/README.md" in {target.partition("#")[0] for _, target in links(development)}


def test_no_file_in_scripts_passes_450_lines():
    long = {str(p.relative_to(SCRIPTS)): n for p in SCRIPTS.rglob("*") if p.is_file() and p.suffix in (".py", ".sh")
            and (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these by concept: {long}"
