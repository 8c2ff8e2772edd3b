#!/usr/bin/env python3
"""One-shot: move Gregor's import names under the single package ``gregor``.

The user's top-level folders (wire/ apis/ log/ replica/ controller/ coordinator/ server/)
stay where they are; pyproject.toml maps them to ``gregor.wire``, ``gregor.apis``, ... This
tool rewrites the tree to match (run it from anywhere; it works on the repository it sits
in, or on ``--root``):

- Python (every tracked ``*.py`` and the Python scripts under ``scripts/``): import
  statements (``from log.x import y``, ``import server.config as c``, ``from server import
  topics``); string literals that are a module path, or a module path and attributes that
  exist (``"server.cli"``, ``monkeypatch.setattr("server.broker_client.encode", ...)``,
  ``logger="coordinator.membership"``), never a config key such as ``"log.retention.ms"``;
  Python code inside strings (``python -c "from log.cleaner import serve; ..."``); logger
  names in expected log lines (``"... (server.network)"``); ``-m server.cli``; and, in
  docstrings, comments and Markdown, backticked references (```server.cli.main```).
  Variables that happen to be called ``log`` or ``server`` and stdlib ``logging`` are
  never touched: only import statements and strings that resolve to one of our modules.
- pyproject.toml: packages and package-dir, the entry points, ruff's known-first-party and
  the banned bare names; setup.py: the C extensions' names.
- C extensions' module and type names (``"gregor.log._offsetmap.OffsetMap"``); the
  in-place builds of scripts/setup-test-deps and scripts/serve redo them (a changed
  source); scripts/serve also reinstalls a virtualenv whose ``gregor`` predates this.
- The launchers that give child processes a PYTHONPATH (server/broker_process.py,
  log/cleaner_manager.py) use ``gregor._paths.set_child_pythonpath``; ``gregor --version``.
- Finally ``ruff check --fix --select I`` and ``ruff format`` on the files it changed.

It is idempotent: a second run changes nothing. It needs the hand-written files of the
same change (gregor/__init__.py, gregor/_paths.py, ...) to be present already.

    python3 scripts/rename_to_gregor.py [--root DIR] [--check] [--no-ruff]

``--check`` changes nothing and exits 1 if something would change. Anything it cannot
rewrite safely is listed as a warning (exit status 2) for a human to finish.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import shutil
import subprocess
import sys
import tokenize
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "gregor"
FOLDERS = ("wire", "apis", "log", "replica", "controller", "coordinator", "server")
_NAMES = "|".join(FOLDERS)
WHOLE_PATH = re.compile(rf"(?:{_NAMES})(?:\.[A-Za-z_]\w*)*")
_MODULE = rf"(?:{_NAMES})(?:\.[A-Za-z_]\w*)*"
# Python code (in a string, a Markdown line): `from x import` / `import x [as y]`, each at
# a statement's start.
FROM_STMT = re.compile(rf"(^|[;\n])([ \t]*from[ \t]+)({_MODULE})(?=[ \t]+import\b)")
IMPORT_STMT = re.compile(
    rf"(^|[;\n])([ \t]*import[ \t]+)({_MODULE})(?=[ \t]*(?:$|[;\n]|[ \t]+as[ \t]))",
    re.MULTILINE,
)
DASH_M = re.compile(rf"(-m\s+)(?=(?:{_NAMES})(?:\.\w+)+\b)")
# A backticked reference in prose: `server.cli` or ``server.cli.main``.
BACKTICKED = re.compile(rf"(`{{1,2}})((?:{_NAMES})(?:\.[A-Za-z_]\w*)+)(?=[`(/\[ ,])")
SKIP_DIRS = {".git", ".venv", "build", ".cache", "node_modules", "data"}


@dataclass
class Result:
    changed: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class Modules:
    """Our modules (as bare dotted names) and the names each one defines."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, Path | None] = {}
        for folder in FOLDERS:
            base = root / folder
            if not (base / "__init__.py").is_file():
                raise SystemExit(f"{base} is not a package: wrong --root?")
            for path in base.rglob("*"):
                if "__pycache__" in path.parts:
                    continue
                rel = path.relative_to(root)
                if path.suffix == ".py":
                    parts = rel.with_suffix("").parts
                    if parts[-1] == "__init__":
                        parts = parts[:-1]
                    self.files[".".join(parts)] = path
                elif path.suffix == ".c":  # a C extension built in place
                    self.files[".".join(rel.with_suffix("").parts)] = None
        self._names: dict[str, dict[str, ast.AST]] = {}

    def names(self, module: str) -> dict[str, ast.AST]:
        if module not in self._names:
            path = self.files.get(module)
            found: dict[str, ast.AST] = {}
            if path is not None:
                try:
                    tree = ast.parse(path.read_text())
                except SyntaxError:
                    tree = ast.Module(body=[], type_ignores=[])
                found = _defined(tree.body)
            self._names[module] = found
        return self._names[module]

    def resolves(self, dotted: str) -> bool:
        """A module, or a module followed by names it defines (a class's attributes too)."""
        parts = dotted.split(".")
        for k in range(len(parts), 0, -1):
            module = ".".join(parts[:k])
            if module in self.files:
                break
        else:
            return False
        rest = parts[k:]
        if not rest:
            return True
        node = self.names(module).get(rest[0])
        if node is None and f"{module}.{rest[0]}" not in self.files:
            return False
        if isinstance(node, ast.ClassDef) and len(rest) > 1:
            return rest[1] in _defined(node.body)
        return True

    def is_module(self, dotted: str) -> bool:
        return dotted in self.files


def _defined(body: list[ast.stmt]) -> dict[str, ast.AST]:
    found: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        found[name.id] = node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                found[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, ast.If | ast.Try):
            inner = list(node.body) + list(getattr(node, "orelse", []))
            for handler in getattr(node, "handlers", []):
                inner += handler.body
            found.update(_defined(inner))
    return found


# --- Python sources ------------------------------------------------------------------------


def _prefix(text: str) -> str:
    return f"{PACKAGE}.{text}"


def _rewrite_prose(text: str, modules: Modules) -> str:
    """Docstrings, comments, Markdown: backticked references and ``-m x.y``."""

    def backticked(m: re.Match[str]) -> str:
        dotted = m.group(2)
        return m.group(1) + (_prefix(dotted) if modules.resolves(dotted) else dotted)

    text = BACKTICKED.sub(backticked, text)
    return _rewrite_dash_m(text, modules)


def _rewrite_dash_m(text: str, modules: Modules) -> str:
    def repl(m: re.Match[str]) -> str:
        dotted = WHOLE_PATH.match(text, m.end()).group(0)  # type: ignore[union-attr]
        return m.group(1) + (f"{PACKAGE}." if modules.is_module(dotted) else "")

    return DASH_M.sub(repl, text)


def _rewrite_code(text: str, modules: Modules) -> str:
    def repl(m: re.Match[str]) -> str:
        dotted = m.group(3)
        if not modules.is_module(dotted):
            return m.group(0)
        return m.group(1) + m.group(2) + _prefix(dotted)

    return IMPORT_STMT.sub(repl, FROM_STMT.sub(repl, text))


def _rewrite_string_body(body: str, modules: Modules) -> str:
    if WHOLE_PATH.fullmatch(body) and "." in body:
        return _prefix(body) if modules.resolves(body) else body
    if WHOLE_PATH.fullmatch(body):  # a bare folder name: "server" is too ambiguous
        return body
    if "import" in body:
        body = _rewrite_code(body, modules)
    body = _rewrite_dash_m(body, modules)

    # Logger names in expected log lines: "... (server.network)".
    def logger(m: re.Match[str]) -> str:
        dotted = m.group(1)
        return f"({_prefix(dotted)})" if modules.is_module(dotted) else m.group(0)

    body = re.sub(rf"\(((?:{_NAMES})(?:\.\w+)+)\)", logger, body)

    # ... and in regular expressions: r"\(server\.broker\)".
    def escaped(m: re.Match[str]) -> str:
        dotted = m.group(1).replace("\\.", ".")
        if not modules.is_module(dotted):
            return m.group(0)
        return "\\(" + f"{PACKAGE}.{dotted}".replace(".", "\\.") + "\\)"

    return re.sub(rf"\\\(((?:{_NAMES})(?:\\\.\w+)+)\\\)", escaped, body)


_STRING_START = re.compile(r"^([rRbBuUfF]{0,2})('''|\"\"\"|'|\")")


def _rewrite_string_token(token: str, modules: Modules, prose: bool) -> str:
    m = _STRING_START.match(token)
    if m is None:
        return token
    prefix, quote = m.groups()
    if "b" in prefix.lower():
        return token
    body = token[m.end() : len(token) - len(quote)]
    new = _rewrite_prose(body, modules) if prose else _rewrite_string_body(body, modules)
    return token[: m.end()] + new + quote


@dataclass
class _Edit:
    start: tuple[int, int]
    end: tuple[int, int]
    text: str


def _apply(source: str, edits: list[_Edit]) -> str:
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def pos(rc: tuple[int, int]) -> int:
        return offsets[rc[0] - 1] + rc[1]

    out = source
    for edit in sorted(edits, key=lambda e: pos(e.start), reverse=True):
        out = out[: pos(edit.start)] + edit.text + out[pos(edit.end) :]
    return out


def rewrite_python(source: str, modules: Modules, where: str, result: Result) -> str:
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    edits: list[_Edit] = []
    statement_start = True
    i = 0
    bare_bound: set[str] = set()  # `import server.config` binds `server`: its uses are ours
    while i < len(tokens):
        tok = tokens[i]
        kind, text = tok.type, tok.string
        if kind in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            statement_start = True
            i += 1
            continue
        if kind == tokenize.NL:  # a blank line, or a line break inside brackets
            i += 1
            continue
        if kind == tokenize.COMMENT:
            new = _rewrite_prose(text, modules)
            if new != text:
                edits.append(_Edit(tok.start, tok.end, new))
            i += 1
            continue
        if kind == tokenize.OP and text == ";":
            statement_start = True
            i += 1
            continue
        if statement_start and kind == tokenize.NAME and text == "from":
            nxt = tokens[i + 1]
            if nxt.type == tokenize.NAME and nxt.string in FOLDERS:
                edits.append(_Edit(nxt.start, nxt.start, f"{PACKAGE}."))
            statement_start = False
            i += 2
            continue
        if statement_start and kind == tokenize.NAME and text == "import":
            i = _rewrite_import(tokens, i + 1, edits, where, result, bare_bound)
            statement_start = False
            continue
        if kind == tokenize.STRING:
            prev = tokens[i - 1] if i else None
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            prose = (
                statement_start
                and nxt is not None
                and nxt.type in (tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.COMMENT)
                and (prev is None or prev.type != tokenize.OP)
            )
            new = _rewrite_string_token(text, modules, prose)
            if new != text:
                edits.append(_Edit(tok.start, tok.end, new))
            built = re.match(rf"[rRuUfF]*[\"']+(?:{_NAMES})\.(?:\w+\.)*(\{{|[\"']$)", text)
            if built and (built.group(1) == "{" or (nxt is not None and nxt.string == "+")):
                result.warnings.append(  # a module path built at run time
                    f"{where}:{tok.start[0]}: {text} may build a module path: check by hand"
                )
        statement_start = False
        i += 1
    if bare_bound:
        for j, tok in enumerate(tokens):
            if (
                tok.type == tokenize.NAME
                and tok.string in bare_bound
                and j + 1 < len(tokens)
                and tokens[j + 1].string == "."
                and not (j and tokens[j - 1].string in (".", "import", "from", "as"))
            ):
                result.warnings.append(
                    f"{where}:{tok.start[0]}: `{tok.string}.` after `import {tok.string}.…`: "
                    f"now `{PACKAGE}.{tok.string}.…`; rewrite this use by hand"
                )
    return _apply(source, edits)


def _rewrite_import(
    tokens: list[tokenize.TokenInfo],
    i: int,
    edits: list[_Edit],
    where: str,
    result: Result,
    bare_bound: set[str],
) -> int:
    """`import a.b as c, d` from tokens[i]; returns the index after the statement."""
    names: list[tuple[int, int, bool]] = []  # (first token, last token, has alias)
    while i < len(tokens) and tokens[i].type not in (tokenize.NEWLINE, tokenize.ENDMARKER):
        if tokens[i].string == ";" or tokens[i].type == tokenize.COMMENT:
            break
        first = i
        while (
            i + 2 < len(tokens)
            and tokens[i + 1].string == "."
            and tokens[i + 2].type == tokenize.NAME
        ):
            i += 2
        last = i
        i += 1
        alias = i < len(tokens) and tokens[i].string == "as"
        if alias:
            i += 2
        names.append((first, last, alias))
        if i < len(tokens) and tokens[i].string == ",":
            i += 1
    for first, last, alias in names:
        head = tokens[first]
        if head.type != tokenize.NAME or head.string not in FOLDERS:
            continue
        dotted = last > first
        if alias or dotted:
            edits.append(_Edit(head.start, head.start, f"{PACKAGE}."))
            if not alias:
                bare_bound.add(head.string)
        elif len(names) == 1:  # `import log` -> `from gregor import log`: same binding
            edits.append(_Edit(tokens[first - 1].start, head.start, f"from {PACKAGE} import "))
        else:
            result.warnings.append(
                f"{where}:{head.start[0]}: `import {head.string}` among other names: "
                f"write `from {PACKAGE} import {head.string}` by hand"
            )
    return i


# --- Markdown, TOML, setup.py, launchers -----------------------------------------------------


def rewrite_markdown(text: str, modules: Modules) -> str:
    return "".join(
        _rewrite_prose(_rewrite_code(line, modules), modules)
        for line in text.splitlines(keepends=True)
    )


def _sub_once(
    text: str, pattern: str, repl: str | Callable[[re.Match[str]], str], what: str, r: Result
) -> str:
    new, n = re.subn(pattern, repl, text, flags=re.MULTILINE)
    if n == 0:
        r.warnings.append(f"{what}: pattern not found: {pattern!r}")
    return new


BANNED = "\n".join(
    f'"{name}".msg = "Gregor\'s packages are imported as gregor.{name} (import gregor.{name})"'
    for name in FOLDERS
)


def rewrite_pyproject(text: str, r: Result) -> str:
    if f'"{PACKAGE}.server.cli:main"' in text and "banned-api" in text:
        return text  # done already
    packages = "".join(f'    "{PACKAGE}.{f}",\n' for f in FOLDERS)
    package_dir = "\n".join(f'"{PACKAGE}.{f}" = "{f}"' for f in FOLDERS)
    text = _sub_once(
        text, r'^gregor = "server\.cli:main"', f'gregor = "{PACKAGE}.server.cli:main"', "scripts", r
    )
    text = _sub_once(
        text,
        r'^gregor = "server\.pytest_plugin"',
        f'gregor = "{PACKAGE}.server.pytest_plugin"',
        "pytest11",
        r,
    )
    text = _sub_once(
        text,
        r"^packages = \[[^\]]*\]\n",
        "# One import package: `gregor` from gregor/, and the user's top-level folders as its\n"
        "# subpackages (gregor.wire from wire/, ...). In the wheel they sit under gregor/; an\n"
        "# editable install maps them (setuptools' editable finder), and gregor/__init__.py\n"
        "# finds them in a source checkout on PYTHONPATH.\n"
        f'packages = [\n    "{PACKAGE}",\n{packages}]\n\n'
        "[tool.setuptools.package-dir]\n"
        f'"{PACKAGE}" = "{PACKAGE}"\n{package_dir}\n',
        "packages",
        r,
    )
    text = _sub_once(
        text,
        r"^known-first-party = \[[^\]]*\]",
        f'known-first-party = ["{PACKAGE}", "compat_tests", "tests"]',
        "known-first-party",
        r,
    )
    text = text.rstrip("\n") + (
        "\n\n# The folders are subpackages of gregor: a bare `import log` or `from server.x import"
        "\n# y` would import another project's package (or nothing) once installed.\n"
        "[tool.ruff.lint.flake8-tidy-imports.banned-api]\n" + BANNED + "\n"
    )
    text = _sub_once(
        text, r'^select = \["E", "F", "W", "I", "B", "UP"\]', _add_tid, "ruff select", r
    )
    return text


def _add_tid(m: re.Match[str]) -> str:
    return m.group(0)[:-1] + ', "TID251"]'


def rewrite_setup_py(text: str, r: Result) -> str:
    for folder in FOLDERS:
        text = re.sub(rf'Extension\("{folder}\.', f'Extension("{PACKAGE}.{folder}.', text)
    if f'Extension("{PACKAGE}.' not in text:
        r.warnings.append("setup.py: no Extension(...) renamed")
    return text


# server/broker_process.py and log/cleaner_manager.py: a child process imports this very
# gregor: PYTHONPATH gets the directory holding `gregor` (not the one holding `server`).
_PACKAGE_ROOT_LINE = re.compile(r"^_PACKAGE_ROOT = Path\(__file__\)[^\n]*\n", re.MULTILINE)
_PYTHONPATH_ASSIGN = re.compile(
    r'env\["PYTHONPATH"\] = os\.pathsep\.join\(\s*p for p in \(str\(_PACKAGE_ROOT\), '
    r'env\.get\("PYTHONPATH"\)\) if p\s*\)'
)


def rewrite_launcher(text: str, where: str, r: Result) -> str:
    if "set_child_pythonpath" in text:
        return text
    text, n1 = _PACKAGE_ROOT_LINE.subn("", text)
    text, n2 = _PYTHONPATH_ASSIGN.subn("set_child_pythonpath(env)", text)
    if n1 != 1 or n2 != 1:
        r.warnings.append(f"{where}: the PYTHONPATH set-up was not found; use set_child_pythonpath")
        return text
    # The import goes first among our imports; ruff's isort pass puts it in its place.
    text = re.sub(
        r"^(from gregor\.|from (?:" + _NAMES + r")\.)",
        f"from {PACKAGE}._paths import set_child_pythonpath\n\\1",
        text,
        count=1,
        flags=re.MULTILINE,
    )
    if "from pathlib import Path" in text and not re.search(r"\bPath\b", _strip_import(text)):
        text = text.replace("from pathlib import Path\n", "")
    return text


def _strip_import(text: str) -> str:
    return text.replace("from pathlib import Path\n", "")


_VERSION_ARG = (
    '    root.add_argument("--version", action=_Version, help="print the version and exit")\n'
)
_VERSION_ACTION = '''

class _Version(argparse.Action):
    """``gregor --version``; the package metadata is read only when asked."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any) -> None:
        from gregor import __version__

        print(f"gregor {__version__}")
        parser.exit()
'''


def rewrite_cli_args(text: str, r: Result) -> str:
    if "--version" in text:
        return text
    text = _sub_once(
        text,
        r"^(    root = argparse\.ArgumentParser\([^\n]*\)\n)",
        lambda m: m.group(1) + _VERSION_ARG,
        "server/cli_args.py parser()",
        r,
    )
    return _sub_once(
        text,
        r"^(_Commands = Any[^\n]*\n)",
        lambda m: m.group(1) + _VERSION_ACTION,
        "server/cli_args.py _Commands",
        r,
    )


def rewrite_c(text: str, modules: Modules) -> str:
    """A C extension's module name (PyModuleDef) and its types' tp_name."""

    def repl(m: re.Match[str]) -> str:
        dotted = m.group(1)
        parts = dotted.split(".")
        if any(modules.is_module(".".join(parts[:k])) for k in range(2, len(parts) + 1)):
            return f'"{_prefix(dotted)}"'
        return m.group(0)

    return re.sub(rf'"((?:{_NAMES})(?:\.[A-Za-z_]\w*)+)"', repl, text)


# scripts/serve installs Gregor only when .venv has no `gregor`: a virtualenv made before the
# rename has the old entry point (server.cli) and editable finder, so reinstall then too.
_SERVE_OLD = "if [[ ! -x .venv/bin/gregor ]]; then\n"
_SERVE_NEW = (
    "# (Also when its entry point predates the gregor package: `server.cli`.)\n"
    "if [[ ! -x .venv/bin/gregor ]] || ! grep -q gregor.server.cli .venv/bin/gregor; then\n"
)


def rewrite_serve(text: str, r: Result) -> str:
    if _SERVE_NEW in text:
        return text
    if _SERVE_OLD not in text:
        r.warnings.append("scripts/serve: the install condition was not found")
        return text
    return text.replace(_SERVE_OLD, _SERVE_NEW)


# --- the tree --------------------------------------------------------------------------------


def _tracked(root: Path) -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True
        ).stdout
        files = [root / p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        files = [
            p
            for p in root.rglob("*")
            if p.is_file() and not SKIP_DIRS.intersection(p.relative_to(root).parts)
        ]
    return [p for p in files if p.is_file()]


def _is_python(path: Path) -> bool:
    if path.suffix == ".py":
        return True
    if path.suffix or not path.is_file():
        return False
    with open(path, "rb") as f:
        first = f.readline()
    return first.startswith(b"#!") and b"python" in first


def run(root: Path, check: bool, ruff: bool) -> Result:
    modules = Modules(root)
    result = Result()
    me = Path(__file__).resolve()
    for path in _tracked(root):
        rel = path.relative_to(root).as_posix()
        if path.resolve() == me:
            continue
        handled = _is_python(path) or path.suffix in (".md", ".toml", ".c")
        if not handled and rel != "scripts/serve":
            continue
        old = path.read_text()
        new = old
        if rel == "scripts/serve":
            new = rewrite_serve(old, result)
        elif path.suffix == ".c":
            new = rewrite_c(old, modules)
        elif rel == "pyproject.toml":
            new = rewrite_pyproject(old, result)
        elif path.suffix == ".md":
            new = rewrite_markdown(old, modules)
        elif _is_python(path):
            new = rewrite_python(old, modules, rel, result)
            if rel == "setup.py":
                new = rewrite_setup_py(new, result)
            elif rel in ("server/broker_process.py", "log/cleaner_manager.py"):
                new = rewrite_launcher(new, rel, result)
            elif rel == "server/cli_args.py":
                new = rewrite_cli_args(new, result)
        if new != old:
            result.changed.append(path)
            if not check:
                path.write_text(new)
    if ruff and not check and result.changed:
        _ruff(root, [p for p in result.changed if _is_python(p)], result)
    if not check:
        _leftovers(root, result)
    return result


def _ruff(root: Path, files: list[Path], result: Result) -> None:
    exe = root / ".venv" / "bin" / "ruff"
    found = str(exe) if exe.exists() else shutil.which("ruff")
    if not files:
        return
    if found is None:
        result.warnings.append("no ruff: run `ruff check --fix --select I . && ruff format .`")
        return
    names = [str(p) for p in files]
    subprocess.run([found, "check", "--quiet", "--fix", "--select", "I", *names], cwd=root)
    subprocess.run([found, "format", "--quiet", *names], cwd=root)


def _leftovers(root: Path, result: Result) -> None:
    """Any import of a bare folder name left (in a form this tool does not rewrite)."""
    me = Path(__file__).resolve()
    for path in _tracked(root):
        if not _is_python(path) or path.resolve() == me:
            continue
        try:
            tree = ast.parse(path.read_text())
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                heads = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                heads = [node.module.split(".")[0]]
            else:
                continue
            if set(heads) & set(FOLDERS):
                where = f"{path.relative_to(root)}:{node.lineno}"
                result.warnings.append(f"{where}: bare import left")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if needed")
    parser.add_argument("--no-ruff", action="store_true", help="skip ruff's import sort/format")
    args = parser.parse_args()
    root = args.root.resolve()
    if not (root / PACKAGE / "__init__.py").is_file():
        print(f"{root / PACKAGE / '__init__.py'} is missing: add the hand-written files first")
        return 2
    result = run(root, args.check, not args.no_ruff)
    for path in result.changed:
        print(("would change " if args.check else "changed ") + str(path.relative_to(root)))
    for warning in result.warnings:
        print("WARNING " + warning)
    if result.warnings:
        return 2
    return 1 if args.check and result.changed else 0


if __name__ == "__main__":
    sys.exit(main())
