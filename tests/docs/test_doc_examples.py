"""Every command and example that README.md and docs/*.md show is run by a test.

Each fenced block of the README and of every page under docs/ gets one verdict:

- **run here**: ``python`` blocks run as scripts, ``prolog`` blocks as ``?-`` queries
  (each must succeed) or as a program that must load without an error or warning,
  ``sh``/``bash``/``console`` blocks line by line in bash; all in a fresh directory
  under tmp_path with this checkout's code.  Where the text leaves a name to the reader
  (``rows_csv``, ``my_fn``) a prelude in :data:`PRELUDES` binds it; the block itself
  runs as written.
- **run elsewhere** (:data:`ELSEWHERE`): a named test runs it (and names the page).
- **not run** (:data:`NOT_RUN`): the one allow-list, each entry with its reason
  (installs packages, needs a real upstream, a signature list, a data shape).

Bench commands (``bench/<name>.py --flags``, fenced or inline) take minutes to hours:
each is checked by its ``--help``, which must list every flag the docs show.  Commands
shown inline in prose (```ctxrelay serve --store DIR ...```) must parse: every
subcommand, flag and relay option they use exists.

A new runnable block is run here by default; an unlabelled block that looks like a
command and has no verdict fails :func:`test_every_block_has_a_verdict`, and a shell
block that installs or fetches is refused rather than run.  An entry that matches no
block any more warns.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from support import ROOT, run_swipl

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = {"python", "prolog", "sh", "bash", "console"}
#: an unlabelled block is a command when a line starts like one (else it is output,
#: a formula or a layout, which nothing runs)
COMMAND_LINE = re.compile(r"^\s*(\$ |ctxrelay |\.venv/bin/python |python3? |pip |make )")


@dataclass(frozen=True)
class Block:
    page: str           # "README.md", "docs/tokens.md"
    lang: str
    body: str
    key: str            # "docs/tokens.md: <its first line>" (" #2" for a repeat)


def fenced_blocks() -> list[Block]:
    out: list[Block] = []
    for path in PAGES:
        page = str(path.relative_to(ROOT))
        seen: dict[str, int] = {}
        for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", path.read_text(encoding="utf-8"),
                                     flags=re.S | re.M):
            first = next((ln.strip() for ln in body.splitlines() if ln.strip()), "")
            key = f"{page}: {first}"
            seen[key] = seen.get(key, 0) + 1
            out.append(Block(page, lang, body, key if seen[key] == 1 else f"{key} #{seen[key]}"))
    return out


BLOCKS = fenced_blocks()

#: blocks another test runs: key -> the test (its file must name the page)
ELSEWHERE = {
    "docs/cli.md: ctxrelay init                                          # a store in ./.ctxrelay":
        "tests/apps/cli/test_cli_docs.py",
    "docs/cli.md: ctxrelay init": "tests/apps/cli/test_cli_docs.py",
    "docs/cli.md: ctxrelay serve --store store --port 8000 --upstream echo":
        "tests/apps/cli/test_cli_docs.py",
    "docs/cli.md: $ ctxrelay turn ops 'what was the quota again?' --max-context-tokens 4096 "
    "--output-reserve 512 --explain": "tests/apps/cli/test_cli_docs.py",
    "docs/embedders.md: from ctxrelay.text import embed": "tests/text/test_embed.py",
    "docs/storage.md: import tempfile": "tests/storage/test_storage_doc.py",
    # the PostgreSQL section: needs the servers of `make services` (and a schema per run)
    "docs/storage.md: bash scripts/services.sh status && cat .services.env":
        "tests/storage/test_storage_doc_postgres.py",
    "docs/storage.md: import os": "tests/storage/test_storage_doc_postgres.py",
    "docs/storage.md: ctxrelay init": "tests/storage/test_storage_doc_postgres.py",
    "docs/cli.md: ctxrelay init #2": "tests/apps/cli/test_cli_docs.py",
    "docs/packer.md: ?- use_module(library(ctxrelay)), use_module(library(clpfd)).":
        "tests/docs/test_packer_docs.py",
    "docs/packer.md: import ctxrelay": "tests/docs/test_packer_docs.py",
    "docs/packer.md: import ctxrelay                      # loads library(ctxrelay) into the "
    "embedded Prolog": "tests/docs/test_packer_docs.py",
    "README.md: ?- use_module(library(ctxrelay)), use_module(library(clpfd)).":
        "tests/docs/test_packer_docs.py",
    "README.md: import ctxrelay": "tests/docs/test_packer_docs.py",
    "docs/prolog_pack.md: mkdir -p ~/packsrc/ctxrelay": "tests/docs/test_examples.py",
    "docs/prolog_pack.md: ?- pack_install('file:///home/me/packsrc/ctxrelay',":
        "tests/docs/test_examples.py",
    "README.md: make demo    # set up (SWI-Prolog 9.2 + janus, .venv), replay a 75-turn ops "
    "chat, run managed turns": "tests/docs/test_doc_examples.py",
    "docs/server.md: pip install -e '.[server]'": "tests/docs/test_doc_examples.py",
    "docs/server.md: from openai import OpenAI": "tests/docs/test_doc_examples.py",
    # The relay as a service: one script runs these blocks in order (the serve line in
    # the background, until its /readyz answers), then stops the relay.
    "docs/deploy.md: ctxrelay keys create acme --keys relay-keys.json --name ci "
    "--requests-per-minute 600 | head -1 > acme.key": "tests/apps/server/test_relay_docs.py",
    "docs/deploy.md: ctxrelay serve --store store --host 0.0.0.0 --port 8000 --upstream echo "
    "--workers 2 --keys relay-keys.json": "tests/apps/server/test_relay_docs.py",
    "docs/deploy.md: curl -fsS http://127.0.0.1:8000/readyz": "tests/apps/server/test_relay_docs.py",
    # relays on PostgreSQL: needs the servers of `make services` (and a schema per run)
    "docs/deploy.md: ctxrelay serve --store \"$CTXRELAY_STORE_URL\" --cache "
    "\"$CTXRELAY_CACHE_URL\" --port 8000 --upstream echo --workers 2":
        "tests/apps/server/test_relay_docs.py",
}

#: the allow-list: blocks no test runs, and why
NOT_RUN = {
    "docs/embedders.md: pip install torch==2.13.0                                             "
    "# CPU build, from local disk":
        "installs packages into the environment; a test never changes the venv",
    "docs/prolog_pack.md: git clone <the ctxrelay repository> ~/src/ctxrelay":
        "fetches the repository and builds the environment (network, minutes); the pack "
        "install that follows is run by tests/docs/test_examples.py",
    "docs/prolog_pack.md: ?- pack_install('file:///home/me/src/ctxrelay',":
        "installs the checkout itself, which runs its Makefile (`make` is `make setup`); "
        "tests/docs/test_examples.py installs the linked directory of the next blocks instead",
    "docs/providers.md: from ctxrelay import providers":
        "calls a real OpenAI-compatible endpoint and OpenAI itself (network); "
        "tests/runtime/test_providers.py makes the same calls against a local upstream",
    "docs/providers.md: {\"content\": str, \"role\": \"assistant\", \"model\": str, "
    "\"provider\": str,": "the shape of a reply dict, not code",
    "docs/packer.md: pack_constraints(+Units, +Constraints, +Budget, -Vars, -Cost, -Utility)"
    "           % semidet": "a list of signatures (modes), not a query",
    "docs/references_and_intent.md: % ctxrelay_references":
        "a list of signatures (modes), not a query",
}

#: names a block leaves to the reader, bound before it runs (Python: code before the
#: block; Prolog: a goal conjoined before each query; sh: lines before the block)
PRELUDES = {
    "README.md: sid = rt.record_tool_output(\"ops\", \"sql\", {\"query\": \"select ...\"}, "
    "raw_csv)  # blob on disk":
        "from ctxrelay import Runtime\n"
        "rt = Runtime('store')\nrt.create_session('ops')\n"
        "raw_csv = 'id,amount\\n1,0.5\\n2,0.7\\n'\n",
    "docs/ckf.md: from pathlib import Path":
        "import pathlib\npathlib.Path('docs').mkdir()\n"
        "pathlib.Path('docs/runbook.md').write_text('# etcd\\nThe etcd quota is 8 GiB.\\n')\n",
    "docs/embedders.md: embed.register(\"e5\", lambda: embed.CallableEmbedder(my_fn, dim=768, "
    "model_id=\"e5-base-v2\",":
        "import numpy as np\nfrom ctxrelay.text import embed\n"
        "def my_fn(texts):\n"
        "    rows = np.ones((len(texts), 768), dtype=np.float32)\n"
        "    return rows / np.linalg.norm(rows, axis=1, keepdims=True)\n",
    "docs/lifecycle.md: from ctxrelay.knowledge.promotion import promote_after_turn, "
    "promote_scratch_entry":
        "from ctxrelay.storage import open_stores\n"
        "stores = open_stores('store')\nsession_id = 's1'\n"
        "stores.transcript.create_session(session_id)\n"
        "user_turn = stores.transcript.append(session_id, 'user', "
        "'The budget is 4.2M USD. Call that the budget figure.')\n"
        "assistant_turn = stores.transcript.append(session_id, 'assistant', 'Noted.')\n"
        "referenced_turns = []\n",
    "docs/lifecycle.md: ?- use_module(library(ctxrelay/promotion)).       "
    "% not in library(ctxrelay)'s exports":
        "store_open(\"store\", Store), session_create(Store, \"s1\", []), "
        "forall(between(1, 41, I), ( format(string(T), \"turn ~d about the budget\", [I]), "
        "turn_append(Store, \"s1\", message(user, T), _, []) ))",
    "docs/references_and_intent.md: import ctxrelay, janus_swi as janus":
        "text = 'what does that output mean?'\nsim = 0.1\nwords = []\n"
        "turns = []\nscratch = []\n",
    "docs/rolling_and_cache.md: from ctxrelay.storage.rolling import RollingLog":
        "import numpy as np\nquery_embedding = np.ones(8, dtype=np.float32)\n"
        "ckf_etag = old_etag = 'etag-1'\n"
        "def assemble(*args):\n    return {'messages': []}\n",
    "docs/scratch.md: from ctxrelay.storage.lmdb.scratch import ScratchStore, gate, render":
        "rows_csv = 'id,name,amount\\n' + ''.join(f'{i},user{i},{i * 0.37:.2f}\\n' "
        "for i in range(1, 50))\n",
    "docs/tokens.md: from ctxrelay.text import tokens":
        "class my_tok:\n    encode = staticmethod(str.split)\n",
    "docs/reliability.md: ctxrelay check            # verify; exit 1 on a problem":
        "ctxrelay init\n",
}

#: ``bench/<name>.py`` and the options after it (``--flag [value]``, ``[--optional ...]``)
BENCH = re.compile(r"bench/(\w+)\.py"
                   r"((?:[ \t]+\[?--?[\w-]+(?:[ \t]+[^\s`|\[\]#-][^\s`|\[\]#]*)?\]?)*)")


def verdict(block: Block) -> str:
    if block.key in ELSEWHERE:
        return "elsewhere"
    if block.key in NOT_RUN:
        return "not run"
    lines = [ln for ln in block.body.splitlines() if ln.strip()]
    if block.lang in ("", "sh") and lines and all(BENCH.search(ln) for ln in lines):
        return "bench"                  # checked by test_bench_commands_take_their_flags
    if block.lang in RUNNABLE:
        return "run"
    if any(COMMAND_LINE.match(ln) for ln in lines):
        return "run" if block.key in PRELUDES else "unknown command"
    return "not a command"


def test_every_block_has_a_verdict():
    unknown = [b.key for b in BLOCKS if verdict(b) == "unknown command"]
    assert not unknown, f"commands no test runs (run them, or list them with a reason): {unknown}"
    keys = {b.key for b in BLOCKS}
    stale = [k for k in [*ELSEWHERE, *NOT_RUN, *PRELUDES] if k not in keys]
    if stale:       # a warning: the block they named now runs here (or is refused above)
        warnings.warn(f"entries that match no block any more (update them): {stale}")


def test_the_allow_list_stays_small():
    assert len(NOT_RUN) <= 8 and all(len(reason) > 20 for reason in NOT_RUN.values())


@pytest.mark.parametrize("key", [k for k in ELSEWHERE if ELSEWHERE[k] != __name__])
def test_the_test_named_for_a_block_reads_its_page(key):
    test_file = ROOT / ELSEWHERE[key]
    page = key.split(":")[0]
    assert test_file.is_file(), test_file
    text = test_file.read_text(encoding="utf-8")
    assert Path(page).name in text or (page == "README.md" and "README" in text), \
        f"{test_file} does not read {page}"


# -- running the blocks ------------------------------------------------------------------

def python_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "python"), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "NO_PROXY": "127.0.0.1,localhost"}


def run_python(code: str, cwd: Path, what: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=python_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{what}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def without_comment(line: str) -> str:
    """``line`` up to a ``%`` comment outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'`":
            quote = ch
        elif ch == "%":
            return line[:i]
    return line


def prolog_queries(body: str) -> list[str]:
    """The ``?-`` queries of a block (answer lines and comments dropped)."""
    queries, current = [], []
    for line in body.splitlines():
        code = without_comment(line).rstrip()
        if code.startswith("?- "):
            current = [code[3:]]
        elif current and code:
            current.append(code)
        else:
            continue
        if code.endswith("."):
            queries.append("\n".join(current)[:-1])
            current = []
    return queries


LOADING = re.compile(r"^\s*(use_module\(library\([\w/]+\)\)\s*,?\s*)+$")


def run_prolog(block: Block, cwd: Path) -> None:
    program = cwd / "doc_example.pl"
    queries = prolog_queries(block.body)
    prelude = PRELUDES.get(block.key)
    if queries:
        loads = [q for q in queries if LOADING.match(q)]
        goals = [q for q in queries if not LOADING.match(q)]
        text = ":- use_module(library(ctxrelay)).\n" + "".join(f":- {q}.\n" for q in loads)
        for i, q in enumerate(goals):
            text += f"q({i}) :-\n    " + (f"{prelude},\n    " if prelude else "") + f"{q}.\n"
        text += (":- initialization(main, main).\n"
                 f"main :- forall(between(0, {len(goals) - 1}, I),\n"
                 "    ( once(q(I)) -> true\n"
                 "    ; format(user_error, 'query ~d failed~n', [I]), halt(1) )).\n")
        program.write_text(text, encoding="utf-8")
        proc = run_swipl([str(program)], cwd=cwd, env=python_env())
    else:                               # a program: it must load cleanly
        program.write_text(":- use_module(library(ctxrelay)).\n" + block.body, encoding="utf-8")
        proc = run_swipl(["--on-error=status", "--on-warning=status", "-g", "halt",
                          str(program)], cwd=cwd, env=python_env())
    assert proc.returncode == 0, f"{block.key}:\n{program.read_text()}\n{proc.stdout}\n" \
                                 f"{proc.stderr[-3000:]}"


def shell_env() -> dict[str, str]:
    """This checkout's code, its console script first on PATH, no store preset."""
    env = {k: v for k, v in python_env().items() if k != "CTXRELAY_STORE"}
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


#: commands a test must never run: they change the shared environment or need network
#: (any `make` target runs `make setup`, which reinstalls the venv)
NEVER_RUN = re.compile(r"^\s*(pip3? install|python3? -m pip|make\b|git clone|(sudo )?apt(-get)? )",
                       flags=re.M)


def run_shell(block: Block, cwd: Path) -> None:
    assert not NEVER_RUN.search(block.body), \
        f"{block.key}: installs or fetches; list it in NOT_RUN or ELSEWHERE with the reason"
    script = PRELUDES.get(block.key, "") + block.body
    done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], cwd=cwd,
                          env=shell_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{block.key}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("block", [b for b in BLOCKS if verdict(b) == "run"],
                         ids=lambda b: b.key[:80])
def test_the_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    if block.lang == "python":
        run_python(PRELUDES.get(block.key, "") + block.body, tmp_path, block.key)
    elif block.lang == "prolog":
        run_prolog(block, tmp_path)
    else:
        run_shell(block, tmp_path)


# -- the README's first commands ---------------------------------------------------------

def test_readme_opens_with_make_demo_and_make_test():
    # The first block a newcomer sees: the two commands, each doing its own set-up.
    # `make test` is this suite; `make demo` runs examples/demo.py after the set-up, and
    # tests/docs/test_examples.py::test_demo runs that script.
    first = BLOCKS[0]
    assert first.page == "README.md" and first.lang == "sh"
    commands = [ln.split("#")[0].strip() for ln in first.body.splitlines() if ln.strip()]
    assert commands == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    rules = {target: (deps, recipe) for target, deps, recipe in
             re.findall(r"^(\w+):([^\n]*)\n((?:\t[^\n]*\n)*)", makefile, flags=re.M)}
    for target, runs in (("demo", "examples/demo.py"), ("test", "-m pytest")):
        deps, recipe = rules[target]
        assert "setup" in deps.split(), f"`make {target}` must set itself up"
        assert runs in recipe, f"`make {target}` should run {runs}: {recipe!r}"
    assert "scripts/setup.sh" in rules["setup"][1]
    assert "def test_demo" in (ROOT / "tests" / "docs" / "test_examples.py").read_text()


def test_the_readme_names_every_cli_command():
    from ctxrelay.apps import cli
    section = re.search(r"^## Command line.*?(?=^## )", (ROOT / "README.md").read_text(),
                        flags=re.S | re.M).group(0)
    top = next(a for a in cli.build_parser()._actions if a.dest == "command")
    missing = [name for name in top.choices if f"`{name}" not in section]
    assert not missing, f"README's command-line section does not name {missing}"


# -- commands shown inline ---------------------------------------------------------------

INLINE_CLI = re.compile(r"`(ctxrelay [^`]+)`")
#: placeholders of inline commands, and a value that stands for each
PLACEHOLDERS = {"DIR": "store", "ID": "s1", "echo|URL": "echo"}


def inline_cli_commands() -> list[str]:
    found = {m for path in PAGES for m in INLINE_CLI.findall(path.read_text(encoding="utf-8"))}
    # "ctxrelay -> ~/src/ctxrelay" is a symlink, COMMAND/VERSION/... stand for anything
    return sorted(c for c in found if not re.search(r"->|COMMAND|VERSION|\.\.\.", c))


def test_the_docs_show_inline_commands():
    assert "ctxrelay --help" in inline_cli_commands()


@pytest.mark.parametrize("command", inline_cli_commands())
def test_each_inline_command_parses(command: str) -> None:
    # Inline commands in prose run against no particular store: each must be a valid
    # command line (every subcommand, flag and pass-through relay option exists).
    from ctxrelay.apps import cli
    from ctxrelay.apps.cli.app import parse
    from ctxrelay.apps.server import _parser as relay_parser
    argv = [PLACEHOLDERS.get(word, word) for word in command.split()[1:]]
    parser = cli.build_parser()
    if argv == ["--help"]:
        with pytest.raises(SystemExit) as done:
            parser.parse_args(argv)
        assert done.value.code == 0
        return
    top = next(a for a in parser._actions if a.dest == "command")
    if len(argv) == 1 and argv[0] in top.choices:
        return                          # the prose names a command ("`ctxrelay turn`")
    args = parse(parser, argv)
    if args.command == "serve":
        relay_parser().parse_args(["--store", "store", *args.server_args])


# -- the relay of docs/server.md ---------------------------------------------------------

def server_commands() -> list[str]:
    [block] = [b for b in BLOCKS if b.key == "docs/server.md: pip install -e '.[server]'"]
    joined = block.body.replace("\\\n", " ")
    return [ln for ln in joined.splitlines() if ln.startswith("python -m ctxrelay.apps.server")]


@pytest.mark.slow
def test_the_relay_commands_of_docs_server_md_start_and_answer(tmp_path: Path) -> None:
    # `pip install -e '.[server]'` is not run (it would change the venv); the relay's
    # extras are installed here.  Each relay command starts and answers /health; the
    # echo one also answers the OpenAI client example shown after it.
    sys.path.insert(0, str(ROOT / "tests" / "apps" / "cli"))
    from cli_support import start_relay, stop_relay
    commands = server_commands()
    assert len(commands) == 2
    [client] = [b for b in BLOCKS if b.key == "docs/server.md: from openai import OpenAI"]
    for i, command in enumerate(commands):
        argv = command.split()
        argv[0] = sys.executable
        argv[argv.index("--port") + 1] = "PORT"
        cwd = tmp_path / f"relay{i}"
        cwd.mkdir()
        proc, port = start_relay(argv, cwd=cwd, env=python_env())
        try:
            if "echo" in argv:
                code = client.body.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
                code += "\nassert raw.headers['CRP-Context-Tokens-Used'].split('/')[0].isdigit()\n"
                code += "assert raw.parse().choices[0].message.content.startswith('echo')\n"
                run_python(code, cwd, "docs/server.md's client example")
        finally:
            stop_relay(proc)


# -- bench commands ----------------------------------------------------------------------

def bench_commands() -> dict[str, set[str]]:
    """bench script -> the flags the README and docs show for it."""
    shown: dict[str, set[str]] = {}
    for path in PAGES:
        for name, args in BENCH.findall(path.read_text(encoding="utf-8")):
            shown.setdefault(name, set()).update(re.findall(r"--[\w-]+", args))
    return shown


def test_the_docs_show_bench_commands():
    shown = bench_commands()
    assert {"e2e_bench", "assembly_bench", "packer_bench", "locomo"} <= set(shown)
    assert "--repeat" in shown["e2e_bench"] and "--user-constraints" in shown["packer_bench"]


@pytest.mark.parametrize("name", sorted(bench_commands()))
def test_bench_commands_take_their_flags(name: str) -> None:
    script = ROOT / "bench" / f"{name}.py"
    assert script.is_file(), f"the docs show bench/{name}.py, which does not exist"
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run([sys.executable, str(script), "--help"], cwd=cwd,
                              env=python_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    missing = [f for f in bench_commands()[name] if f not in done.stdout]
    assert not missing, f"bench/{name}.py --help does not know {missing}"
