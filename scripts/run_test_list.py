#!/usr/bin/env python3
"""Runs a build's test suite where the build tree is not: on a GPU node that received only
the executables (copied or unpacked into one folder) and a checkout of the sources.

On the machine that built it, write the list (ctest's own description of every test, with
where the build and the sources were):

    scripts/run_test_list.py --export tests.json build-cuda

On the node, with the executables in BIN and this checkout as the sources:

    scripts/run_test_list.py tests.json --bin BIN [-j N] [-R REGEX] [-E REGEX] [--json OUT]

Every path of the list that lies in the old build tree is replaced: an executable by the one
of that name in BIN, a working directory by a folder under --work (created), and the old
source tree by this checkout. The old `mpiexec` becomes the first one on PATH (or --mpiexec),
a program named by --map its replacement, and a program this node lacks (/usr/bin/cmake) the
one of that name on PATH. A test that needs the build tree itself (e.g. installing from it)
is reported as not run, with the path it needed. The test properties that decide an outcome are honoured as ctest does
(ENVIRONMENT, TIMEOUT, WORKING_DIRECTORY, PASS/FAIL/SKIP_REGULAR_EXPRESSION, WILL_FAIL,
SKIP_RETURN_CODE, DISABLED, PROCESSORS, RUN_SERIAL). Exits 1 when a test failed, 2 on bad input.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

LIST_KIND = "tessera-test-list"
HANDLED = {"ENVIRONMENT", "TIMEOUT", "WORKING_DIRECTORY", "PASS_REGULAR_EXPRESSION",
           "FAIL_REGULAR_EXPRESSION", "SKIP_REGULAR_EXPRESSION", "WILL_FAIL", "SKIP_RETURN_CODE",
           "DISABLED", "PROCESSORS", "RUN_SERIAL", "LABELS"}


def fail(message):
    print(f"run_test_list.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def export(out_path, build_dir):
    build_dir = os.path.realpath(build_dir)
    cache = os.path.join(build_dir, "CMakeCache.txt")
    if not os.path.isfile(cache):
        fail(f"'{build_dir}' is not a CMake build folder (no CMakeCache.txt)")
    values = {}
    with open(cache) as f:
        for line in f:
            m = re.match(r"^(CMAKE_HOME_DIRECTORY|MPIEXEC_EXECUTABLE):[A-Z]+=(.*)$", line.rstrip("\n"))
            if m:
                values[m.group(1)] = m.group(2)
    ctest = shutil.which("ctest") or fail("no ctest on PATH")
    listing = subprocess.run([ctest, "--test-dir", build_dir, "--show-only=json-v1"],
                             capture_output=True, text=True)
    if listing.returncode != 0:
        fail(f"ctest could not list the tests of '{build_dir}':\n{listing.stderr}")
    tests = json.loads(listing.stdout)["tests"]
    # What each path into the build tree is, since the node cannot look: an executable (found
    # there by name), a folder a test works in or a file it writes (made there), or something
    # built here that a test reads (the test cannot run there).
    in_build = re.compile(re.escape(build_dir) + r"(?:(/[^\s'\";:,=)]*)|(?![\w.-]))")
    build_paths = {}
    for t in tests:
        t.pop("backtrace", None)
        texts = list(t["command"]) + [v for p in t.get("properties", []) if p["name"] == "ENVIRONMENT"
                                      for v in p["value"]]
        for m in in_build.finditer("\n".join(texts)):
            path = m.group(0)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                build_paths[path] = "executable"
            elif os.path.exists(path) and not path.startswith(os.path.join(build_dir, "tests", "scratch")):
                build_paths[path] = "built"
            else:
                build_paths[path] = "made by the test"
    doc = {"kind": LIST_KIND, "version": 1, "build_dir": build_dir,
           "source_dir": os.path.realpath(values.get("CMAKE_HOME_DIRECTORY", "")),
           "mpiexec": values.get("MPIEXEC_EXECUTABLE", ""), "build_paths": build_paths, "tests": tests}
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"run_test_list.py: {len(tests)} tests of {build_dir} written to {out_path}")


class Remapper:
    """Rewrites the paths of a test made elsewhere to this node's."""

    def __init__(self, doc, bin_dir, source_dir, work_dir, mpiexec, maps):
        self.build = doc["build_dir"].rstrip("/")
        self.source = doc["source_dir"].rstrip("/")
        self.old_mpiexec = doc.get("mpiexec") or ""
        self.bin = bin_dir
        self.new_source = source_dir
        self.work = work_dir
        self.mpiexec = mpiexec
        self.kinds = doc.get("build_paths", {})
        self.maps = maps
        self.programs = {}
        self.lock = threading.Lock()
        # A path in the old build tree: up to a character that cannot be part of it.
        self.in_build = re.compile(re.escape(self.build) + r"(?:(/[^\s'\";:,=)]*)|(?![\w.-]))")

    def path(self, text, missing):
        """Rewrites every old path in one argument (which may be a whole shell command)."""
        for old, new in self.maps:
            text = re.sub(re.escape(old) + r"(?![\w./-])", lambda _, new=new: new, text)
        if self.old_mpiexec and self.mpiexec:
            text = re.sub(re.escape(self.old_mpiexec) + r"(?![\w./-])", lambda _: self.mpiexec, text)

        def build_path(m):
            rel = (m.group(1) or "").lstrip("/")
            kind = self.kinds.get(m.group(0), "built")
            if kind == "executable" and os.path.isfile(os.path.join(self.bin, os.path.basename(rel))):
                return os.path.join(self.bin, os.path.basename(rel))
            if kind == "made by the test":
                return os.path.join(self.work, rel)
            missing.append(m.group(0))
            return m.group(0)

        text = self.in_build.sub(build_path, text)
        if self.source and self.source != "/":
            text = re.sub(re.escape(self.source) + r"(?=/|$|[\s'\";:,=)])", lambda _: self.new_source, text)
        return text

    def program(self, arg):
        """An absolute path this node lacks (a tool of the build machine, e.g. /usr/bin/cmake)
        becomes the program of that name on PATH, when there is one."""
        if not arg.startswith("/") or os.path.exists(arg) or any(c.isspace() for c in arg):
            return arg
        with self.lock:
            if arg not in self.programs:
                found = shutil.which(os.path.basename(arg)) or arg
                self.programs[arg] = found
                if found != arg:
                    print(f"run_test_list.py: {arg} is not on this node; using {found}", flush=True)
            return self.programs[arg]

    def work_dir(self, old):
        if old == self.build or old.startswith(self.build + "/"):
            return os.path.join(self.work, os.path.relpath(old, self.build))
        if old == self.source or old.startswith(self.source + "/"):
            return self.new_source + old[len(self.source):]
        return old


def properties(test):
    return {p["name"]: p["value"] for p in test.get("properties", [])}


def as_list(value):
    return value if isinstance(value, list) else [value]


# The tests running now (each in a process group of its own), so that an interrupted run
# stops them instead of leaving them behind.
running = set()
running_lock = threading.Lock()
stopping = []  # not empty once the run was interrupted: nothing more starts


def stop_running():
    with running_lock:
        stopping.append(True)
        for proc in running:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass


class Result:
    def __init__(self, name, status, seconds=0.0, output="", why=""):
        self.name, self.status, self.seconds, self.output, self.why = name, status, seconds, output, why


def prepare(test, props, remap):
    """The test's command, environment settings and working folder on this node, and the paths
    of the build tree it needs that this node lacks."""
    missing = []
    command = [remap.program(remap.path(a, missing)) for a in test["command"]]
    settings = {}
    for item in as_list(props.get("ENVIRONMENT", [])):
        key, _, value = item.partition("=")
        settings[key] = remap.path(value, missing)
    return command, settings, remap.work_dir(props.get("WORKING_DIRECTORY", remap.work)), sorted(set(missing))


def run_one(test, props, remap, default_timeout):
    command, settings, cwd, missing = prepare(test, props, remap)
    if missing:
        return Result(test["name"], "not run", why="needs the build tree: " + ", ".join(missing))
    env = dict(os.environ, **settings)
    os.makedirs(cwd, exist_ok=True)
    timeout = float(props.get("TIMEOUT", default_timeout)) or None
    start = time.monotonic()
    with running_lock:  # started and recorded at once, so that an interruption stops it
        if stopping:
            return Result(test["name"], "not run", why="interrupted")
        try:
            proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as e:
            return Result(test["name"], "failed", why=f"could not start {command[0]}: {e.strerror}")
        running.add(proc)
    try:
        raw, _ = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raw, _ = proc.communicate()
        timed_out = True
    finally:
        with running_lock:
            running.discard(proc)
    seconds = time.monotonic() - start
    output = raw.decode(errors="replace")
    if timed_out:
        return Result(test["name"], "failed", seconds, output, f"timed out after {timeout:g} s")
    rc = proc.returncode
    if rc == props.get("SKIP_RETURN_CODE") or any(
            re.search(p, output) for p in as_list(props.get("SKIP_REGULAR_EXPRESSION", []))):
        return Result(test["name"], "skipped", seconds, output)
    if "PASS_REGULAR_EXPRESSION" in props:
        passed = any(re.search(p, output) for p in as_list(props["PASS_REGULAR_EXPRESSION"]))
        why = "" if passed else "output does not match PASS_REGULAR_EXPRESSION"
    else:
        passed = rc == 0
        why = "" if passed else (f"exit code {rc}" if rc > 0 else f"killed by signal {-rc}")
    if passed and any(re.search(p, output) for p in as_list(props.get("FAIL_REGULAR_EXPRESSION", []))):
        passed, why = False, "output matches FAIL_REGULAR_EXPRESSION"
    if props.get("WILL_FAIL"):
        passed, why = (not passed), ("" if not passed else "passed, but WILL_FAIL is set")
    return Result(test["name"], "passed" if passed else "failed", seconds, output, why)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("list", help="the test list written by --export")
    ap.add_argument("build", nargs="?", help="with --export: the build folder to list")
    ap.add_argument("--export", action="store_true", help="write LIST from BUILD's tests")
    ap.add_argument("--bin", help="the folder that holds the build's executables")
    ap.add_argument("--source", default=os.path.dirname(os.path.dirname(os.path.realpath(__file__))),
                    help="the checkout that replaces the old source tree (default: this one)")
    ap.add_argument("--work", help="where the tests' working folders are made (default: a new temporary one, "
                    "removed unless a test failed)")
    ap.add_argument("--mpiexec", help="the launcher that replaces the old one (default: mpiexec on PATH)")
    ap.add_argument("--map", action="append", default=[], metavar="OLD=NEW",
                    help="also replace the program OLD by NEW (e.g. /usr/bin/python3=python3); repeatable")
    ap.add_argument("-j", "--parallel", type=int, default=1, metavar="N",
                    help="run up to N processors' worth of tests at once (a test takes its PROCESSORS)")
    ap.add_argument("-R", "--tests-regex", metavar="REGEX", help="run only the tests whose name matches")
    ap.add_argument("-E", "--exclude-regex", metavar="REGEX", help="leave out the tests whose name matches")
    ap.add_argument("--timeout", type=float, default=1500, help="seconds for a test without TIMEOUT (1500)")
    ap.add_argument("--json", metavar="OUT", help="also write every test's outcome, time and output here")
    ap.add_argument("-q", "--quiet", action="store_true", help="print only failures and the summary")
    ap.add_argument("-N", "--show-only", action="store_true",
                    help="print each test's command as it would run here, and run nothing")
    args = ap.parse_args()

    if args.export:
        if not args.build:
            fail("--export needs the build folder: run_test_list.py --export LIST BUILD")
        export(args.list, args.build)
        return 0
    if not args.bin:
        fail("say where the executables are: --bin DIR")
    if not os.path.isdir(args.bin):
        fail(f"--bin '{args.bin}' is not a folder")
    if args.parallel < 1:
        fail(f"-j {args.parallel}: give at least 1")
    try:
        with open(args.list) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"cannot read the test list '{args.list}': {e}")
    if doc.get("kind") != LIST_KIND:
        fail(f"'{args.list}' is not a test list written by run_test_list.py --export")
    mpiexec = args.mpiexec or shutil.which("mpiexec") or ""
    maps = []
    for item in args.map:
        old, sep, new = item.partition("=")
        if not sep or not old or not new:
            fail(f"--map '{item}': write it as OLD=NEW, e.g. --map /usr/bin/python3=python3")
        maps.append((old, new))
    work = args.work or (os.path.join(tempfile.gettempdir(), "tessera-tests-XXXXXX") if args.show_only
                         else tempfile.mkdtemp(prefix="tessera-tests-"))
    remap = Remapper(doc, os.path.realpath(args.bin), os.path.realpath(args.source), os.path.realpath(work), mpiexec, maps)

    tests = []
    for t in doc["tests"]:
        if args.tests_regex and not re.search(args.tests_regex, t["name"]):
            continue
        if args.exclude_regex and re.search(args.exclude_regex, t["name"]):
            continue
        tests.append(t)
    if not tests:
        fail("no test matches -R/-E")
    if args.show_only:
        unrunnable = 0
        for t in tests:
            command, settings, cwd, missing = prepare(t, properties(t), remap)
            unrunnable += bool(missing)
            print(f"{t['name']}: " + (f"not run, needs the build tree: {', '.join(missing)}" if missing else
                                      " ".join(f"{k}={v}" for k, v in settings.items()) + " " +
                                      " ".join(shlex.quote(a) for a in command) + f"  (in {cwd})"))
        print(f"\n{len(tests)} tests, {len(tests) - unrunnable} can run here")
        return 0
    width = max(len(t["name"]) for t in tests)
    results = [None] * len(tests)
    lock = threading.Condition()
    state = {"free": args.parallel, "serial": False, "done": 0}

    def worker(index, test, props, need):
        result = (Result(test["name"], "skipped", why="DISABLED") if props.get("DISABLED")
                  else run_one(test, props, remap, args.timeout))
        with lock:
            results[index] = result
            state["free"] += need
            state["serial"] = False
            state["done"] += 1
            if not args.quiet or result.status == "failed":
                tail = f" ({result.why})" if result.why else ""
                print(f"{state['done']:4}/{len(tests)} {result.name:<{width}}  {result.status:<8} "
                      f"{result.seconds:7.2f} s{tail}", flush=True)
                if result.status == "failed" and result.output:
                    print(result.output.rstrip() + "\n", flush=True)
            lock.notify_all()

    def interrupted(signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    threads = []
    try:
        for index, test in enumerate(tests):
            props = properties(test)
            serial = bool(props.get("RUN_SERIAL"))
            need = args.parallel if serial else min(int(props.get("PROCESSORS", 1)), args.parallel)
            with lock:
                lock.wait_for(lambda: state["free"] >= need and not state["serial"])
                state["free"] -= need
                state["serial"] = serial
            th = threading.Thread(target=worker, args=(index, test, props, need), daemon=True)
            th.start()
            threads.append(th)
        for th in threads:
            th.join()
    except KeyboardInterrupt:
        stop_running()
        print(f"\nrun_test_list.py: interrupted; the tests still running were stopped (their files are in {work})",
              file=sys.stderr, flush=True)
        return 130

    counts = {s: sum(r.status == s for r in results) for s in ("passed", "failed", "skipped", "not run")}
    print(f"\n{len(results)} tests: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['skipped']} skipped, {counts['not run']} not run")
    for status in ("failed", "not run"):
        for r in results:
            if r.status == status:
                print(f"  {status}: {r.name}" + (f" ({r.why})" if r.why else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([vars(r) for r in results], f, indent=1)
    if not args.work:
        # A folder of our own: kept only when a failure may need its files.
        if counts["failed"]:
            print(f"the failed tests' files are in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
