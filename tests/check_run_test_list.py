#!/usr/bin/env python3
"""check_run_test_list.py ROOT BUILD: scripts/run_test_list.py runs a build's tests where the
build tree is not.

1. Exports BUILD's test list, then rewrites every path of it to folders that do not exist (the
   list of a build made on another machine), gives the executables in a folder of their own, and
   runs a few real tests from it: they pass only if each path was mapped to this machine's
   (the executables folder, this checkout, a fresh working folder), and the test that installs
   from the build tree is reported as not run.
2. Runs a made-up list to check each outcome: exit code, PASS/FAIL/SKIP regular expressions,
   WILL_FAIL, TIMEOUT, and an executable that was not given.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

root, build = (os.path.realpath(p) for p in sys.argv[1:3])
runner = os.path.join(root, "scripts", "run_test_list.py")
errors = []


def check(condition, message):
    if not condition:
        errors.append(message)


def run(*args, tmpdir=None):
    env = dict(os.environ, TMPDIR=tmpdir) if tmpdir else None
    proc = subprocess.run([sys.executable, runner, *args], capture_output=True, text=True, env=env)
    return proc.returncode, proc.stdout + proc.stderr


def outcomes(path):
    with open(path) as f:
        return {r["name"]: r for r in json.load(f)}


with tempfile.TemporaryDirectory() as tmp:
    # 1. A real build's list, moved.
    listed = os.path.join(tmp, "tests.json")
    rc, out = run("--export", listed, build)
    check(rc == 0, f"--export failed:\n{out}")
    with open(listed) as f:
        text = f.read()
    doc = json.loads(text)
    moved_build, moved_source = "/nonexistent/elsewhere/build", "/nonexistent/elsewhere/src"
    text = text.replace(doc["build_dir"], moved_build).replace(doc["source_dir"], moved_source)
    with open(os.path.join(tmp, "moved.json"), "w") as f:
        f.write(text)
    bin_dir = os.path.join(tmp, "bin")
    os.mkdir(bin_dir)
    for path, kind in doc["build_paths"].items():
        if kind == "executable":
            os.symlink(path, os.path.join(bin_dir, os.path.basename(path)))
    wanted = ["unit_core", "app_train_bad_optimizer", "app_collectives_check_mode_np2", "app_train_help",
              "install_and_consume"]
    rc, out = run(os.path.join(tmp, "moved.json"), "--bin", bin_dir, "--work", os.path.join(tmp, "work"),
                  "-R", "^(" + "|".join(wanted) + ")$", "--json", os.path.join(tmp, "moved-out.json"))
    check(rc == 0, f"the moved list did not pass (exit {rc}):\n{out}")
    got = outcomes(os.path.join(tmp, "moved-out.json"))
    for name in wanted[:-1]:
        check(got.get(name, {}).get("status") == "passed", f"{name} from the moved list: {got.get(name)}")
    install = got.get("install_and_consume", {})
    check(install.get("status") == "not run" and moved_build in install.get("why", ""),
          f"install_and_consume needs the build tree and should be 'not run': {install}")
    check("not run: install_and_consume" in out, f"the summary does not list the test not run:\n{out}")

    # -N shows the moved commands and runs nothing.
    rc, out = run(os.path.join(tmp, "moved.json"), "--bin", bin_dir, "-N", "-R", "^unit_core$")
    check(rc == 0 and os.path.join(bin_dir, "unit_core") in out and "1 tests, 1 can run here" in out,
          f"-N: exit {rc}:\n{out}")

    # 2. Each outcome, on a made-up list.
    def test(name, command, **props):
        return {"name": name, "command": command,
                "properties": [{"name": k, "value": v} for k, v in props.items()]}

    fake_build = "/nonexistent/fake-build"
    made_up = {
        "kind": "tessera-test-list", "version": 1, "build_dir": fake_build, "source_dir": "/nonexistent/fake-src",
        "mpiexec": "", "build_paths": {fake_build + "/tests/gone": "executable"},
        "tests": [
            test("exit_0", ["sh", "-c", "exit 0"]),
            test("exit_3", ["sh", "-c", "exit 3"]),
            test("pass_regex_hit", ["sh", "-c", "echo all good; exit 1"], PASS_REGULAR_EXPRESSION=["all go+d"]),
            test("pass_regex_miss", ["sh", "-c", "echo not this"], PASS_REGULAR_EXPRESSION=["all good"]),
            test("fail_regex", ["sh", "-c", "echo ERROR here"], FAIL_REGULAR_EXPRESSION=["ERROR"]),
            test("skip_regex", ["sh", "-c", "echo no GPU; exit 1"], SKIP_REGULAR_EXPRESSION=["no GPU"]),
            test("will_fail", ["sh", "-c", "exit 1"], WILL_FAIL=True),
            test("timeout", ["sh", "-c", "sleep 30"], TIMEOUT=1.0),
            test("env_and_dir", ["sh", "-c", 'test "$X" = 7 && test "$(basename "$PWD")" = here'],
                 ENVIRONMENT=["X=7"], WORKING_DIRECTORY=fake_build + "/tests/here"),
            test("gone", [fake_build + "/tests/gone"]),
            test("mapped", ["/nonexistent/bin/sh", "-c", "exit 0"]),
            test("from_path", ["/nonexistent/usr/bin/true"]),
        ],
    }
    with open(os.path.join(tmp, "made-up.json"), "w") as f:
        json.dump(made_up, f)
    rc, out = run(os.path.join(tmp, "made-up.json"), "--bin", bin_dir, "-j", "4", "--map", "/nonexistent/bin/sh=sh",
                  "--json", os.path.join(tmp, "made-up-out.json"))
    check(rc == 1, f"a list with failures should exit 1, not {rc}:\n{out}")
    got = outcomes(os.path.join(tmp, "made-up-out.json"))
    expected = {"exit_0": "passed", "exit_3": "failed", "pass_regex_hit": "passed", "pass_regex_miss": "failed",
                "fail_regex": "failed", "skip_regex": "skipped", "will_fail": "passed", "timeout": "failed",
                "env_and_dir": "passed", "gone": "not run", "mapped": "passed",
                "from_path": "passed"}
    for name, status in expected.items():
        check(got.get(name, {}).get("status") == status, f"{name}: expected {status}, got {got.get(name)}")
    check("timed out" in got.get("timeout", {}).get("why", ""), f"timeout's reason: {got.get('timeout')}")
    kept = [line.split(" are in ", 1)[1] for line in out.splitlines() if line.startswith("the failed tests' files are in ")]
    check(len(kept) == 1 and os.path.isdir(os.path.join(kept[0], "tests", "here")),
          f"after failures the temporary working folder should be kept and named:\n{out}")
    if kept:
        shutil.rmtree(kept[0], ignore_errors=True)
    own_tmp = os.path.join(tmp, "own-tmp")
    os.mkdir(own_tmp)
    rc, out = run(os.path.join(tmp, "made-up.json"), "--bin", bin_dir, "-R", "^env_and_dir$", tmpdir=own_tmp)
    check(rc == 0 and not os.listdir(own_tmp), f"a passing run keeps no folder: exit {rc}, left {os.listdir(own_tmp)}")
    check(got.get("timeout", {}).get("seconds", 99) < 10, "the timed-out test was not stopped at its TIMEOUT")

    # A path that only begins like the build folder (build-other beside build) is not in it.
    sibling = {"kind": "tessera-test-list", "version": 1, "build_dir": fake_build, "source_dir": "/nonexistent/src",
               "mpiexec": "", "build_paths": {},
               "tests": [test("sibling", ["sh", "-c", "test \"$0\" = " + fake_build + "-other/x", fake_build + "-other/x"])]}
    with open(os.path.join(tmp, "sibling.json"), "w") as f:
        json.dump(sibling, f)
    rc, out = run(os.path.join(tmp, "sibling.json"), "--bin", bin_dir)
    check(rc == 0, f"a sibling of the build folder was taken for a path in it: exit {rc}:\n{out}")

    # Interrupted (SIGTERM, as Ctrl-C or a job's end): the tests running are stopped, not left.
    pid_file = os.path.join(tmp, "sleeper.pid")
    slow = {"kind": "tessera-test-list", "version": 1, "build_dir": fake_build, "source_dir": "/nonexistent/src",
            "mpiexec": "", "build_paths": {},
            "tests": [test("sleeper", ["sh", "-c", f"echo $$ > {pid_file}; exec sleep 60"])]}
    with open(os.path.join(tmp, "slow.json"), "w") as f:
        json.dump(slow, f)
    proc = subprocess.Popen([sys.executable, runner, os.path.join(tmp, "slow.json"), "--bin", bin_dir],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for _ in range(100):
        if os.path.exists(pid_file) and open(pid_file).read().strip():
            break
        time.sleep(0.05)
    sleeper = int(open(pid_file).read())
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    check(proc.returncode == 130 and "interrupted" in out, f"SIGTERM: exit {proc.returncode}:\n{out}")
    if "their files are in " in out:
        shutil.rmtree(out.split("their files are in ", 1)[1].split(")", 1)[0], ignore_errors=True)
    for _ in range(100):
        try:
            os.kill(sleeper, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(sleeper, signal.SIGKILL)
        errors.append("the test that was running when the run was interrupted was left running")

    # 3. Bad input is refused with a message, not a traceback.
    rc, out = run(os.path.join(tmp, "made-up.json"))
    check(rc == 2 and "--bin" in out, f"no --bin: exit {rc}:\n{out}")
    rc, out = run(os.path.join(tmp, "made-up.json"), "--bin", bin_dir, "--map", "sh")
    check(rc == 2 and "OLD=NEW" in out, f"a --map without '=': exit {rc}:\n{out}")
    rc, out = run(os.path.join(tmp, "bin"), "--bin", bin_dir)
    check(rc == 2 and "cannot read the test list" in out, f"a folder as the list: exit {rc}:\n{out}")

if errors:
    print("check_run_test_list.py: FAILED:\n  " + "\n  ".join(errors))
    sys.exit(1)
print("check_run_test_list.py: passed")
