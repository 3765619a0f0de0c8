#!/usr/bin/env python3
"""check_docs_commands.py ROOT: every command that README.md and docs/*.md show in a code block
is run by a test (tests/CMakeLists.txt, tests/*.sh), by CI (.ci/run, scripts/) or by the perf
suite (perf/*.sh, perf/*.py), so that the docs cannot drift from what is checked.

A command is a line of a fenced code block that starts (after any VAR=value settings) with
mpiexec, srun, cmake, ctest, python3, a path under build*/, scripts/, perf/ or docs/examples/.
It counts as run when
  - an app or benchmark (build*/apps/..., build*/perf/...): its arguments, as one string, appear
    in a test or a perf script (with the tests' ${CMAKE_CURRENT_SOURCE_DIR}/ read as tests/ and
    the perf scripts' $out/ as perf/results/); with no arguments, some test runs the program;
  - a script (scripts/, perf/, docs/examples/): the file exists, is executable when it is run
    directly, and CI, a test or another script names it outside a comment line; a perf suite
    script (perf/*.sh) counts as run by tests/check_perf_scripts.sh, which runs each of them
    on its arguments, where a test runs that;
  - cmake or ctest: CI or the scripts run the same subcommand (cmake --build build, ctest
    --test-dir build, ...) on that directory or on one named by a variable ($BUILD_DIR);
    <placeholders> stand for anything.
Prints each command that is not, with its file and line, and exits 1 if there is any.
"""
import os
import re
import shlex
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "."


def read(path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


def listdir(folder, suffixes):
    full = os.path.join(root, folder)
    return sorted(os.path.join(folder, n) for n in os.listdir(full) if n.endswith(suffixes))


docs = ["README.md"] + listdir("docs", (".md",))
runners = ["tests/CMakeLists.txt", ".ci/run"] + listdir("tests", (".sh",)) + listdir("scripts", (".sh",)) + listdir(
    "perf", (".sh", ".py", "CMakeLists.txt"))


def runner_text(paths):
    """The runners' lines, less their comment lines (a script named only in a comment, its own
    usage line say, is not run by anything), with paths written as the docs write them."""
    text = "\n".join(line for p in paths for line in read(p).splitlines() if not line.lstrip().startswith("#"))
    text = text.replace("${CMAKE_CURRENT_SOURCE_DIR}/", "tests/").replace("${PROJECT_SOURCE_DIR}/", "")
    text = text.replace('"$out/', "perf/results/").replace("$out/", "perf/results/").replace('"', "")
    return re.sub(r"[ \t]+", " ", text)


# Each runner read once; a script is looked for in every runner but itself.
runner_texts = {os.path.normpath(p): runner_text([p]) for p in runners}
corpus = "\n".join(runner_texts.values())
# The perf suite's scripts (perf/*.sh) are what the docs' perf commands run; a test runs every
# one of them, found by a glob, on its arguments (--help, a bad one) before it would measure.
PERF_SUITE_TEST = "tests/check_perf_scripts.sh"
perf_suite_tested = os.path.isfile(os.path.join(root, PERF_SUITE_TEST)) and PERF_SUITE_TEST in corpus

# A program (not a folder, as in architecture.md's tree) after any VAR=value settings.
COMMAND = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S+ )*(?:(?:mpiexec|srun|cmake|ctest|python3|/usr/bin/python3)(?:\s|$)|"
                     r"(?:build[^/ ]*|scripts|perf|docs/examples)/\S*[^/\s](?:\s|$))")


def commands(path):
    """(line number, command) for every command line in the fenced code blocks of `path`."""
    in_block, pending, start = False, "", 0
    for number, line in enumerate(read(path).splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_block, pending = not in_block, ""
            continue
        if not in_block:
            continue
        text = re.sub(r"\s+#.*$", "", line).strip()
        if pending:
            text = pending + " " + text
        else:
            start = number
        if text.endswith("\\"):
            pending = text[:-1].strip()
            continue
        pending = ""
        if COMMAND.match(text):
            yield start, text


def words(text):
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def program_and_args(tokens):
    """The program a command runs (past VAR=value settings and the launcher) and its arguments."""
    i = 0
    while i < len(tokens) and re.match(r"^[A-Z_][A-Z0-9_]*=", tokens[i]):
        i += 1
    if i < len(tokens) and tokens[i] in ("mpiexec", "srun"):
        i += 1
        while i < len(tokens) and tokens[i].startswith("-"):
            # Launcher options: those that take a value (-n 4, --ntasks 4) and those that do not.
            takes_value = tokens[i] in ("-n", "-np", "-N", "--ntasks", "--nodes", "-c", "--host", "-H")
            i += 2 if takes_value else 1
    if i < len(tokens) and tokens[i] in ("python3", "/usr/bin/python3"):
        i += 1
    return (tokens[i] if i < len(tokens) else ""), tokens[i + 1:]


def covered(command):
    program, args = program_and_args(words(command))
    name = os.path.basename(program)
    if program.split("/")[0] in ("cmake", "ctest"):
        # The scripts name directories by variable ($BUILD_DIR): one matches any directory.
        head = words(command)[:3]
        pattern = r"\s".join(
            r"\S+" if re.match(r"^<.*>$", t) else re.escape(t) if i < 2 else r"(?:%s|\$\{?\w+\}?)" % re.escape(t)
            for i, t in enumerate(head))
        return re.search(pattern, corpus) is not None, "CI and the scripts run no '%s'" % " ".join(head)
    if re.match(r"^build[^/]*/(apps|perf)/", program):
        if not args:
            return name in corpus, "no test runs %s" % name
        joined = " ".join(args)
        found = re.search(r"(?<!\S)%s(?![^\s)])" % re.escape(joined), corpus) is not None
        return found, "no test or perf script runs %s with '%s'" % (name, joined)
    if program.startswith(("scripts/", "perf/", "docs/examples/")):
        path = os.path.join(root, program)
        if not os.path.isfile(path):
            return False, "%s does not exist" % program
        direct = not re.match(r"^(?:[A-Z_][A-Z0-9_]*=\S+ )*(python3|/usr/bin/python3)", command)
        if direct and not os.access(path, os.X_OK):
            return False, "%s is not executable" % program
        if perf_suite_tested and re.match(r"^perf/[^/]+\.sh$", program) and name != "script_args.sh":
            return True, ""
        others = "\n".join(t for p, t in runner_texts.items() if p != os.path.normpath(program))
        return name in others, "no test, CI step or other script runs %s" % program
    return False, "not a command this check knows how to follow: %s" % program


missing = 0
checked = 0
for doc in docs:
    for number, command in commands(doc):
        checked += 1
        ok, why = covered(command)
        if not ok:
            missing += 1
            print("%s:%d: %s\n    %s; add a test or a perf step that runs it, or change the doc" %
                  (doc, number, command, why))
print("%d command(s) in %d docs; %d not run by any test, CI step or perf script" % (checked, len(docs), missing))
if checked == 0:
    sys.exit("no commands found in the docs: the check would prove nothing (is ROOT the checkout?)")
sys.exit(1 if missing else 0)
