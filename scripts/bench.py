#!/usr/bin/env python3
"""Every table of docs/benchmarks.md, measured in one run on this machine.

Each figure is measured beside its anchor in the same run (a bare spawn and
bubblewrap, `cp -a` and `git worktree add`, an fsync'd append, one task at a
time, ...) and printed beside its goal, with a verdict computed from the two.
Normally started by scripts/bench.sh, which installs the tools and builds
release binaries first.

    scripts/bench.py --loop BIN --receipt-bench BIN [--quick] [--out FILE]
                     [--only peer,sandbox,flood,snapshot,steps,tasks,receipts,prepare,projects,queue]

--quick is a smoke run (small sizes, few repetitions): it proves the script
still works end to end, and its figures are not the ones to quote.
The queue section runs when the scale-out backend is present:
LOOP_TEST_POSTGRES_URL set (scripts/services.sh prints one) and
redis-server on PATH.
"""

import argparse
import asyncio
import base64
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def load(name):
    """A sibling script (its file name has a dash) as a module."""
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), os.path.join(HERE, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(cmd, **kw):
    """subprocess.run, captured; a failure names the command, its status and its stderr."""
    check = kw.pop("check", True)
    if "stdout" in kw:
        kw.setdefault("stderr", subprocess.PIPE)
    else:
        kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    p = subprocess.run(cmd, **kw)
    if check and p.returncode != 0:
        raise SystemExit(f"`{' '.join(map(str, cmd))}` exited {p.returncode}: {(p.stderr or '')[-2000:]}")
    return p


def median(xs):
    return statistics.median(xs)


def timed(cmd, runs, prepare=None, env=None):
    """Median wall seconds of running CMD (an argv) RUNS times."""
    out = []
    for _ in range(runs):
        if prepare:
            prepare()
        t = time.monotonic()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        out.append(time.monotonic() - t)
    return median(out)


def hyperfine(tmp, commands, runs, warmup, shell_none=True):
    """hyperfine over (name, command) pairs in one run; a list of result dicts (seconds)."""
    out = os.path.join(tmp, "hyperfine.json")
    cmd = ["hyperfine", "--style", "none", "--warmup", str(warmup), "--runs", str(runs), "--export-json", out]
    if shell_none:
        cmd.append("-N")
    for name, c in commands:
        cmd += ["-n", name, c]
    run(cmd)
    with open(out) as f:
        return json.load(f)["results"]


def ms(seconds):
    return seconds * 1000


def verdict(ok, yes="met", no="**not met**"):
    return yes if ok else no


class Report:
    def __init__(self):
        self.sections = []
        self.goals = []  # (section, goal, figure, verdict)
        self.failed = []

    def goal(self, section, what, figure, ok, note=""):
        self.goals.append((section, what, figure, verdict(ok) + (f" ({note})" if note else "")))

    def unmeasured(self, section, what, why):
        self.goals.append((section, what, "not measured", why))

    def add(self, text):
        self.sections.append(text.rstrip() + "\n")


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def positive(a, section, *figures):
    """A difference of two medians that is not above zero is noise, not a figure (a quick run, which
    only proves the script works, says so and goes on)."""
    for name, value in figures:
        if value <= 0 and a.quick:
            print(f"bench: {section}: {name} came out {value * 1000:.3f} ms (noise; a quick run goes on)",
                  file=sys.stderr)
        elif value <= 0:
            raise SystemExit(f"{section}: {name} came out {value * 1000:.3f} ms, at or below zero: the "
                             "machine was too noisy for this difference; run again on a quieter machine")


# ---- sandbox spawn ---------------------------------------------------------

OFF_ALL = "--without namespaces --without landlock --without seccomp --without cgroups"
# (name, flags, what the isolation record must say)
LAYERS = [
    ("no kernel layers: process group, rlimits, scrubbed env, private tmp", OFF_ALL, 0),
    ("+ namespaces (user, pid, mount, net; own root, fresh /proc, lo)",
     "--without landlock --without seccomp --without cgroups", 1),
    ("+ Landlock", "--without seccomp --without cgroups", 2),
    ("+ seccomp (what bwrap's line isolates, and more)", "--without cgroups", 3),
    ("+ memory/pids cgroups (full isolation)", "", 4),
]
# The isolation record's fields for each layer, in the order they are added.
LAYER_FIELDS = [("pid_namespace", "user_namespace", "mount_namespace"), ("landlock",), ("seccomp",),
                ("memory_cgroup", "pids_cgroup")]


def exec_cmd(a, ws, flags, rest):
    return " ".join(x for x in [a.loop, "exec", "--workspace", ws, flags, rest] if x)


def check_layers(a, ws, flags, on):
    """Each variant runs once with --json: the first ON layers are enforced and the others are not, so
    a layer the kernel lacks fails the run instead of being measured as present."""
    iso = json.loads(run(exec_cmd(a, ws, flags, "--json -- true").split()).stdout)["isolation"]
    for i, fields in enumerate(LAYER_FIELDS):
        for k in fields:
            got = bool(iso.get("landlock_abi")) if k == "landlock" else bool(iso.get(k))
            if got != (i < on):
                raise SystemExit(f"sandbox: `loop exec {flags or '(full isolation)'}` has {k} "
                                 f"{'on' if got else 'off'}: {iso}")


def per_command(tmp, a, ws, flags, many, pause_ms=0, env=""):
    """Marginal cost of one command inside one process: --repeat MANY+1 minus --repeat 1, / MANY; with
    PAUSE_MS between the commands (a task's come seconds apart), less the pauses; ENV (`NAME=VALUE`)
    set for both runs."""
    pause = f"--pause-ms {pause_ms} " if pause_ms else ""
    pre = f"env {env} " if env else ""
    r = hyperfine(tmp, [("one", pre + exec_cmd(a, ws, flags, "--repeat 1 -- true")),
                        ("many", pre + exec_cmd(a, ws, flags, f"--repeat {many + 1} {pause}-- true"))],
                  runs=a.reps(5, 2), warmup=a.reps(1, 0))
    return (r[1]["median"] - r[0]["median"]) / many - pause_ms / 1000


# A bare spawn from inside one process, measured as `loop exec --repeat` is: the same difference of a
# run of MANY+1 and of 1, with the same pauses, so that each column's anchor saw the same conditions
# (a spawn after 50 ms idle pays cold caches whatever spawns it).
BARE_SPAWNS = ("import os, sys, time\n"
               "n, pause = int(sys.argv[1]), float(sys.argv[2]) / 1000\n"
               "for i in range(n):\n"
               "    if i and pause: time.sleep(pause)\n"
               "    os.waitpid(os.posix_spawnp('true', ['true'], {}), 0)\n")


def bare_per_command(tmp, a, many, pause_ms=0):
    script = os.path.join(tmp, "bare_spawns.py")
    with open(script, "w") as f:
        f.write(BARE_SPAWNS)
    r = hyperfine(tmp, [("one", f"python3 {script} 1 {pause_ms}"),
                        ("many", f"python3 {script} {many + 1} {pause_ms}")],
                  runs=a.reps(5, 2), warmup=a.reps(1, 0))
    return (r[1]["median"] - r[0]["median"]) / many - pause_ms / 1000


def sandbox(rep, a, tmp):
    runs = a.reps(300, 5)
    ws = os.path.join(tmp, "ws")
    os.makedirs(ws, exist_ok=True)
    for _, flags, want in LAYERS:
        check_layers(a, ws, flags, want)
    cmds = [("bare spawn: true", "true")]
    cmds += [(f"loop exec, {name}", exec_cmd(a, ws, flags, "-- true")) for name, flags, _ in LAYERS]
    bwrap = ("bwrap --unshare-user --unshare-pid --unshare-net --die-with-parent, read-only root, "
             "writable bind of the workspace, --proc, --dev")
    cmds.append((bwrap, f"bwrap --unshare-user --unshare-pid --unshare-net --die-with-parent --ro-bind / / "
                        f"--bind {ws} {ws} --proc /proc --dev /dev true"))
    res = hyperfine(tmp, cmds, runs=runs, warmup=a.reps(30, 3))
    bare = res[0]["median"]
    rows = [(r["command"], f"{ms(r['median']):.2f}",
             f"{ms(r['mean']):.2f} ± {ms(r['stddev'] or 0):.2f}", f"{ms(r['min']):.2f}", f"{ms(r['max']):.2f}",
             f"{r['median'] / bare:.1f}×") for r in res]
    text = ["## Sandbox: a command's start, against a bare spawn and bubblewrap\n",
            f"hyperfine, {runs} runs of each, all in one run (`-N`, no shell), in an empty workspace. "
            "`loop exec`, with one more kernel layer each row (`--without LAYER` for the others); each "
            "variant was first run with `--json` and its isolation record checked (the layers named on, the "
            "others off), so a layer the kernel lacks fails the run instead of being measured as present.\n",
            table(["one process per command", "median ms", "mean ± σ ms", "min ms", "max ms", "vs bare spawn"], rows)]
    many, apart, pause = a.reps(200, 5), a.reps(20, 3), 50
    bare_near, bare_apart = bare_per_command(tmp, a, many), bare_per_command(tmp, a, apart, pause)
    per = [(name, per_command(tmp, a, ws, flags, many)) for name, flags, _ in LAYERS]
    spaced = [(name, per_command(tmp, a, ws, flags, apart, pause)) for name, flags, _ in LAYERS]
    # The same full isolation with every command building its whole root (no session), side by side.
    cold = ("full isolation, each command building its whole root (`LOOP_SANDBOX_SESSIONS=0`, for comparison)",
            per_command(tmp, a, ws, "", many, env="LOOP_SANDBOX_SESSIONS=0"),
            per_command(tmp, a, ws, "", apart, pause, env="LOOP_SANDBOX_SESSIONS=0"))
    positive(a, "sandbox", *[(f"per command, {n}", p) for n, p in per + spaced],
             ("bare spawn in one process", bare_near), ("bare spawn in one process, apart", bare_apart))
    text.append(f"\nInside one process, where the host view, the Landlock rules and the seccomp program are "
                f"prepared once: `loop exec --repeat {many + 1}` minus `--repeat 1`, divided by {many} "
                f"(hyperfine medians of {a.reps(5, 2)}); and with the commands {pause} ms apart, as a task's "
                f"are (`--repeat {apart + 1} --pause-ms {pause}`, less the pauses): a kernel lock some layers "
                "take costs its first taker a wait that back-to-back commands share. This is what every "
                "`run_command` pays inside `loop run`; a verification check pays it plus its overlay (next "
                "section). Each column is set against a bare spawn measured the same way, from one process "
                "(Python's `os.posix_spawnp` of `true` and `waitpid`, `N+1` runs minus 1, with the same "
                "pauses): the first row. The goals are judged on the larger excess of the two columns. "
                "The commands of one process share a sandbox session (`warm.rs`): its user namespace and the "
                "shared part of its root are built once, each command's own mounts, network, PID, IPC and "
                "cgroup namespaces, Landlock ruleset and seccomp filter are its own; the last row turns "
                "sessions off.\n")
    text.append(table(["layers", "back to back, ms", "over a bare spawn, ms", f"{pause} ms apart, ms",
                       "over a bare spawn, ms"],
                      [("bare spawn in one process (the anchor)", f"{ms(bare_near):.2f}", "", f"{ms(bare_apart):.2f}",
                        "")] +
                      [(n, f"{ms(p):.2f}", f"{ms(p - bare_near):+.2f}", f"{ms(q):.2f}", f"{ms(q - bare_apart):+.2f}")
                       for (n, p), (_, q) in zip(per + [cold[:2]], spaced + [(cold[0], cold[2])])]))
    text.append(phases(a, ws))
    rep.add("\n".join(text))
    bw = res[-1]["median"]
    def excess(i):
        """The larger excess over the anchor of layer row I, back to back or apart, and its words."""
        near, far = per[i][1] - bare_near, spaced[i][1] - bare_apart
        worse = max(near, far)
        words = (f"{ms(near):+.2f} ms back to back ({ms(per[i][1]):.2f} − {ms(bare_near):.2f}), "
                 f"{ms(far):+.2f} ms apart ({ms(spaced[i][1]):.2f} − {ms(bare_apart):.2f})")
        return worse, words
    equiv, equiv_words = excess(3)
    full, full_words = excess(4)
    rep.goal("sandbox", "isolation equal to bwrap's (namespaces, Landlock, seccomp) adds at most 1 ms over a "
             "bare spawn, per command in the runtime (back to back or apart)", equiv_words, equiv <= 0.001)
    rep.goal("sandbox", "full isolation (with the memory/pids cgroups) adds at most 2 ms over a bare spawn, "
             "per command in the runtime (back to back or apart)", full_words, full <= 0.002)
    rep.goal("sandbox", "one process per command: `loop exec` with bwrap's isolation (no cgroups) no slower "
             "than bwrap", f"{ms(res[4]['median']):.2f} vs {ms(bw):.2f} ms", res[4]["median"] <= bw)
    rep.goal("sandbox", "one process per command: full isolation no slower than bwrap",
             f"{ms(res[5]['median']):.2f} vs {ms(bw):.2f} ms", res[5]["median"] <= bw)


PHASES = [("view", "host view resolved (PATH trees, /etc minus secrets)"), ("landlock", "Landlock rules built"),
          ("cgroups", "cgroups made, seccomp program built"), ("plan", "child plan ready"),
          ("spawned", "spawned: fork, unshare, id maps, init, mounts, restrictions, exec"),
          ("exited", "exited, its end told once its PID namespace held nothing else"), ("cleaned", "cgroups removed")]


def phases(a, ws):
    """Where one `loop exec -- true` spends its time, from the sandbox's own marks."""
    runs = a.reps(50, 5)
    marks = {k: [] for k, _ in PHASES}
    env = dict(os.environ, LOOP_LOG="loop_sandbox::phases=debug")
    for _ in range(runs):
        err = run([a.loop, "exec", "--workspace", ws, "--", "true"], env=env).stderr
        for k, at in re.findall(r"sandbox: (\w+) at ([\d.]+) ms", err):
            if k in marks:
                marks[k].append(float(at))
    missing = [k for k, v in marks.items() if len(v) != runs]
    if missing:
        raise SystemExit(f"sandbox: no phase marks for {', '.join(missing)} (LOOP_LOG=loop_sandbox::phases=debug)")
    return (f"\nWhere one `loop exec -- true` spends its time (`LOOP_LOG=loop_sandbox::phases=debug`, the "
            f"sandbox's own marks, median of {runs}):\n\n"
            + table(["phase reached", "at, ms (cumulative)"], [(d, f"{median(marks[k]):.2f}") for k, d in PHASES]))


# ---- output flood and kill-to-reap ----------------------------------------

def peak_rss_kib(cmd, cwd):
    p = run(["/usr/bin/time", "-f", "%M"] + cmd, stdout=subprocess.DEVNULL, cwd=cwd)
    return int(p.stderr.strip().splitlines()[-1])


def flood(rep, a, tmp):
    ws = os.path.join(tmp, "ws")
    os.makedirs(ws, exist_ok=True)
    big = (64 if a.quick else 1024) * 1024 * 1024
    small = 16 * 1024 * 1024
    name = f"{big >> 20} MiB"
    base = [a.loop, "exec", "--workspace", ws]
    rss_small = peak_rss_kib(base + ["--", "head", "-c", str(small), "/dev/zero"], ws)
    rss_big = peak_rss_kib(base + ["--", "head", "-c", str(big), "/dev/zero"], ws)
    out = json.loads(run(base + ["--json", "--", "head", "-c", str(big), "/dev/zero"]).stdout)
    if out["stdout_bytes"] != big or not out["truncated"]:
        raise SystemExit(f"flood: {name} of output came back as {out['stdout_bytes']} bytes: {out}")
    wall = timed(base + ["--", "head", "-c", str(big), "/dev/zero"], 3)
    anchor = timed(["bash", "-c", f"head -c {big} /dev/zero | sha256sum"], 3)
    # Kill-to-reap, timed from outside: a command whose child and grandchild
    # (in the background, holding stdout) both outlive a 1 s deadline; the
    # whole `loop exec`, minus the deadline (its start included).
    tree = base + ["--timeout", "1", "--json", "--", "sh", "-c", "sleep 30 & sleep 30"]
    start_cost = timed(base + ["--", "true"], 5)
    kills = []
    for _ in range(a.reps(20, 5)):
        t = time.monotonic()
        p = run(tree, check=False)
        wall_k = time.monotonic() - t
        o = json.loads(p.stdout)
        if not o["timed_out"]:
            raise SystemExit(f"flood: the command past its deadline was not timed out: {o}")
        kills.append((wall_k - 1.0) * 1000)
    kills.sort()
    rep.add("\n".join([
        "## A flood of output, and a command past its deadline\n",
        f"Peak resident memory of `loop exec` (GNU time `%M`) while the command writes {name}, and then 16 MiB, "
        "to stdout, which the runtime keeps as head and tail and hashes whole (the run is checked to have "
        f"counted every byte); the wall time for the {name} beside `head -c … | sha256sum` (reading and "
        f"hashing the same bytes, nothing kept); and, {len(kills)} times, `sh -c 'sleep 30 & sleep 30'` with "
        "a 1 s timeout, timed from outside: the whole `loop exec` minus the 1 s deadline, so it covers "
        "killing the group, reaping, draining the output the background sleep held and removing the "
        "cgroups, and also the command's start, which `loop exec -- true` shows alone.\n",
        table(["measure", "this run", "anchor"], [
            (f"peak RSS, {name} of output", f"{rss_big} KiB", f"{rss_small} KiB with 16 MiB of output"),
            (f"wall time, {name} through capture and SHA-256 (median of 3)", f"{wall:.2f} s",
             f"{anchor:.2f} s for `head -c | sha256sum`"),
            ("deadline to exit, start included: min / median / max",
             f"{kills[0]:.0f} / {kills[len(kills) // 2]:.0f} / {kills[-1]:.0f} ms",
             f"{ms(start_cost):.1f} ms for `loop exec -- true` (median of 5)"),
        ])]))
    rep.goal("flood", f"flat memory under a flood: peak RSS with {name} within 4 MiB of that with 16 MiB",
             f"{rss_big} KiB vs {rss_small} KiB", rss_big - rss_small <= 4096)
    rep.goal("flood", "kill-to-reap within 100 ms of the deadline", f"max {kills[-1]:.0f} ms", kills[-1] <= 100)


# ---- verification snapshots -------------------------------------------------

def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def verify_start_ms(loop, project, script):
    """From the verifier's start to the first check's command running, inside `loop run`."""
    env = dict(os.environ, LOOP_LOG="loop_verifier=debug")
    p = run([loop, "run", "time the first check", "--check", "date +%s%N", "--allow-vacuous", "--model", f"scripted:{script}",
             "--project", project, "--json"], env=env, check=False)
    # Attempt 0 is the baseline pass before the task starts; the attempt
    # measured is the one whose report the verified event carries.
    began = {int(n): int(t) for n, t in re.findall(r"attempt (\d+) began at (\d+)", p.stderr)}
    for line in p.stdout.splitlines():
        e = json.loads(line)
        if e.get("kind") == "verified":
            r = e["report"]
            if r.get("snapshot_method") != "overlay":
                raise SystemExit(f"snapshot: the check did not run on an overlay: {r.get('snapshot_method')}")
            ran = int(r["criteria"][0]["checks"][0]["stdout"]["excerpt"].strip())
            shutil.rmtree(os.path.join(project, ".loop"), ignore_errors=True)
            return (ran - began[r["attempt"]]) / 1e6
    raise SystemExit(f"snapshot: no verification in:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")


def snapshot(rep, a, tmp):
    sizes = [200, 2000] if a.quick else [1000, 10000, 100000]
    need = sizes[-1] * 10240 * 5
    free = shutil.disk_usage(tmp).free
    if free < need:
        raise SystemExit(f"snapshot: {free >> 30} GiB free under {tmp}, and {sizes[-1]} files need about "
                         f"{need >> 30} GiB (the tree, its copy, a repository and a worktree)")
    script = os.path.join(tmp, "finish.yaml")
    with open(script, "w") as f:
        f.write("turns:\n  - calls: [{tool: finish, args: {summary: go}}]\n")
    rows, figs = [], {}
    cold_ok = None
    for n in sizes:
        ws = os.path.join(tmp, f"ws-{n}")
        run([sys.executable, os.path.join(HERE, "make-tree.py"), ws, str(n)])
        # Written out before anything is timed: a copy must not pay for
        # the tree's own write-back (nor, below, for the previous copy's).
        os.sync()
        size = run(["du", "-sh", ws]).stdout.split()[0]
        one = hyperfine(tmp, [("overlay", f"{a.loop} exec --overlay --workspace {ws} -- true")],
                        runs=a.reps(10, 5), warmup=1)[0]["median"]
        many = a.reps(20, 5)
        r = hyperfine(tmp, [("1", f"{a.loop} exec --overlay --workspace {ws} --repeat 1 -- true"),
                            ("n", f"{a.loop} exec --overlay --workspace {ws} --repeat {many + 1} -- true")],
                      runs=a.reps(5, 3), warmup=1)
        per_check = (r[1]["median"] - r[0]["median"]) / many
        positive(a, "snapshot", (f"per check at {n} files", per_check))
        starts = [verify_start_ms(a.loop, ws, script) for _ in range(a.reps(3, 1))]
        start = median(starts)
        copy = os.path.join(tmp, "copy")
        big = n >= 100000
        def fresh_target():
            shutil.rmtree(copy, True)
            os.sync()
        cp_warm = timed(["cp", "-a", ws, copy], 1 if big else 3, prepare=fresh_target)
        shutil.rmtree(copy, True)
        cp_cold = None
        if drop_caches():
            t = time.monotonic()
            run(["cp", "-a", ws, copy])
            cp_cold = time.monotonic() - t
            shutil.rmtree(copy, True)
            cold_ok = True
        else:
            cold_ok = False
        repo = os.path.join(tmp, f"repo-{n}")
        run(["cp", "-a", ws, repo])
        for args in (["init", "-q"], ["add", "-A"], ["-c", "user.email=b@b", "-c", "user.name=b", "commit", "-qm", "base"]):
            run(["git", "-C", repo] + args)
        wt = os.path.join(tmp, "wt")

        def clean_wt():
            subprocess.run(["git", "-C", repo, "worktree", "remove", "--force", wt], capture_output=True)
            subprocess.run(["git", "-C", repo, "worktree", "prune"], capture_output=True)
            shutil.rmtree(wt, True)
        git_wt = timed(["git", "-C", repo, "worktree", "add", "-q", "--detach", wt], 1 if big else 3, prepare=clean_wt)
        clean_wt()
        shutil.rmtree(repo, True)
        manifest = timed([a.loop, "manifest", ws], 1 if big else 3)
        shutil.rmtree(ws, True)
        figs[n] = (per_check, start, cp_warm, cp_cold)
        rows.append((f"{n} ({size})", f"{ms(one):.1f}", f"{ms(per_check):.1f}", f"{start:.1f}",
                     f"{ms(cp_warm):.0f}", f"{ms(cp_cold):.0f}" if cp_cold is not None else "n/a",
                     f"{ms(git_wt):.0f}", f"{ms(manifest):.0f}"))
    rep.add("\n".join([
        "## Verification snapshots: a fresh view per check, against `cp -a` and `git worktree add`\n",
        "Workspaces of ~10 KB files (`scripts/make-tree.py`). One process: `loop exec --overlay --workspace WS "
        f"-- true`, the whole CLI run (hyperfine median). Per check: `--repeat {many + 1}` minus `--repeat 1` "
        f"over {many}, what each verification check pays inside `loop run`. Verification start → first check: "
        "inside a real `loop run` (the check `date +%s%N`), from the start of the attempt that verified (the "
        "verifier's own `attempt N began at`, `LOOP_LOG=loop_verifier=debug`; not the baseline pass before the "
        "task) to the moment the check runs, its report checked to name the overlay; median of "
        f"{a.reps(3, 1)}. `cp -a` warm (the tree in the page cache, every write synced before each copy; median) and cold (after dropping the page "
        "cache; needs root); `git worktree add --detach` from a repository of the same files; the seal's "
        "manifest (SHA-256 of every file, computed once per attempt, after the first check has started). "
        "At 100,000 files the anchors run once.\n",
        table(["files (size)", "one process, ms", "per check in the runtime, ms", "verification start → first check, ms",
               "cp -a warm, ms", "cp -a cold, ms", "git worktree add, ms", "seal manifest, ms"], rows)]))
    lo, hi = sizes[0], sizes[-1]
    rep.goal("snapshot", f"time independent of the workspace's size: per check at {hi} files within 2× of {lo}",
             f"{ms(figs[hi][0]):.1f} vs {ms(figs[lo][0]):.1f} ms", figs[hi][0] <= 2 * figs[lo][0])
    rep.goal("snapshot", f"the same for verification start → first check ({hi} vs {lo} files)",
             f"{figs[hi][1]:.1f} vs {figs[lo][1]:.1f} ms", figs[hi][1] <= 2 * figs[lo][1])
    rep.goal("snapshot", f"verification start → first check under 10 ms at {hi} files", f"{figs[hi][1]:.1f} ms",
             figs[hi][1] < 10)
    mid = 10000 if 10000 in figs else hi
    per_check, start, warm, cold = figs[mid]
    rep.goal("snapshot", f"at least 100× faster than a warm `cp -a` at {mid} files (verification start → first check)",
             f"{warm * 1000 / start:.0f}× ({ms(warm):.0f} / {start:.1f} ms)", warm * 1000 / start >= 100)
    if cold is not None:
        rep.goal("snapshot", f"at least 100× faster than a cold `cp -a` at {mid} files",
                 f"{cold * 1000 / start:.0f}× ({ms(cold):.0f} / {start:.1f} ms)", cold * 1000 / start >= 100)


# ---- per-step overhead ---------------------------------------------------------

def write_script(path, steps):
    with open(path, "w") as f:
        f.write("turns:\n")
        for i in range(steps):
            f.write(f'  - calls:\n      - {{tool: write_file, args: {{path: a.txt, content: "v{i}\\n"}}}}\n')
        f.write("  - calls:\n      - {tool: finish, args: {summary: done}}\n")


def steps_run(loop, tmp, script, long, strace=None):
    p = tempfile.mkdtemp(dir=tmp, prefix="p-")
    cmd = [loop, "run", "rewrite a.txt", "--check", "test -f a.txt", "--model", f"scripted:{script}",
           "--max-steps", str(long + 10), "--max-tokens", "100000000", "--project", p]
    if strace:
        cmd = ["strace", "-f", "-c", "-o", strace] + cmd
    t = time.monotonic()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t
    if done.returncode != 0:
        raise SystemExit(f"steps: `loop run` exited {done.returncode}:\n{done.stderr[-2000:]}")
    st = json.loads(run([loop, "status", "last", "--json", "--project", p]).stdout)
    shutil.rmtree(p, True)
    if not str(st.get("outcome", "")).startswith("verified"):
        raise SystemExit(f"steps: the run ended {st.get('outcome')}, not verified")
    if strace and not os.path.exists(strace):
        raise SystemExit("steps: strace wrote nothing (can it trace here?)")
    return wall, st["used"]["steps"]


def syscall_counts(path):
    counts = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and parts[3].isdigit() and parts[-1] != "total":
                counts[parts[-1]] = int(parts[3])
    return counts


def steps(rep, a, tmp):
    long, short, runs = (60, 10, 1) if a.quick else (400, 20, 5)
    if run(["stat", "-f", "-c", "%T", tmp]).stdout.strip() == "tmpfs":
        raise SystemExit(f"steps: {tmp} is on tmpfs, where fsync costs nothing; put it on a disk")
    ls, ss = os.path.join(tmp, "long.yaml"), os.path.join(tmp, "short.yaml")
    write_script(ls, long)
    write_script(ss, short)
    per = []
    for _ in range(runs):
        wl, nl = steps_run(a.loop, tmp, ls, long)
        ws_, ns = steps_run(a.loop, tmp, ss, long)
        if (nl, ns) != (long + 1, short + 1):
            raise SystemExit(f"steps: the runs took {nl} and {ns} steps, not {long + 1} and {short + 1}")
        per.append((wl - ws_) / (nl - ns))
    step = median(per)
    positive(a, "steps", ("per step", step))
    sl, sc = os.path.join(tmp, "long.strace"), os.path.join(tmp, "short.strace")
    _, nl = steps_run(a.loop, tmp, ls, long, strace=sl)
    _, ns = steps_run(a.loop, tmp, ss, long, strace=sc)
    cl, cs = syscall_counts(sl), syscall_counts(sc)

    def count(names):
        keys = set(cl) | set(cs) if names == "*" else names
        return sum(cl.get(k, 0) - cs.get(k, 0) for k in keys) / (nl - ns)
    syncs = count(["fsync", "fdatasync"])
    # Anchor: appending one ~600-byte line to a file and fsyncing it, the
    # least a durable step can cost on this disk.
    f = os.path.join(tmp, "anchor.jsonl")
    fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    t = time.monotonic()
    for _ in range(200):
        os.write(fd, b"x" * 600 + b"\n")
        os.fsync(fd)
    fsync = (time.monotonic() - t) / 200
    os.close(fd)
    rep.add("\n".join([
        "## The runtime's cost per step\n",
        f"A scripted model that answers at once: {long} and {short} `write_file` steps (each rewrites one "
        "file), in a fresh project on the SQLite store. Per step is (long run − short run) / (the steps between "
        f"them), so start-up and verification cancel out; median of {runs}. Syscalls counted the same way "
        "under `strace -f -c`. Anchor: appending a 600-byte line to a file and `fsync`ing it, 200 times, on "
        "the same disk: the least one durable step can cost.\n",
        table(["measure", "per step", "anchor: one fsync'd append"], [
            ("wall time", f"{ms(step):.2f} ms", f"{ms(fsync):.2f} ms"),
            ("fsync + fdatasync", f"{syncs:.1f}", "1"),
            ("statx/stat family", f"{count(['statx', 'newfstatat', 'fstat', 'lstat', 'stat']):.1f}", ""),
            ("openat", f"{count(['openat', 'open']):.1f}", ""),
            ("write/pwrite/writev", f"{count(['write', 'pwrite64', 'writev']):.1f}", ""),
            ("all syscalls", f"{count('*'):.1f}", ""),
        ])]))
    durable = syncs >= 0.95
    rep.goal("steps", "under 1 ms of runtime per step on SQLite, each step synced to disk once",
             f"{ms(step):.2f} ms with {syncs:.1f} syncs a step (one fsync'd append: {ms(fsync):.2f} ms)",
             step < 0.001 and durable)


# ---- concurrent tasks, memory per task, the API under load ---------------------

def tasks(rep, a, tmp):
    serve = load("bench-serve")
    workers = load("bench-workers")
    n = a.reps(60, 10)
    # Anchor: the same task run by `loop run`, one after another, in the
    # same kind of project (a git repository: each task gets a worktree).
    script = os.path.join(tmp, "task.yaml")
    contract = os.path.join(tmp, "contract.yaml")
    with open(script, "w") as f:
        f.write(workers.SCRIPT)
    with open(contract, "w") as f:
        f.write(workers.CONTRACT)
    seq_n = a.reps(20, 5)
    p = tempfile.mkdtemp(dir=tmp, prefix="seq-")
    with open(os.path.join(p, "README.md"), "w") as f:
        f.write("bench\n")
    for args in (["init", "-q"], ["add", "."], ["-c", "user.email=b@b", "-c", "user.name=b", "commit", "-qm", "init"]):
        run(["git", "-C", p] + args)
    t = time.monotonic()
    for _ in range(seq_n):
        run([a.loop, "run", "--task", contract, "--model", f"scripted:{script}", "--project", p])
    seq_rate = seq_n / (time.monotonic() - t)
    shutil.rmtree(p, True)
    conc = workers.run(a.loop, n, "sqlite")
    held = a.reps(200, 10)
    mem = asyncio.run(serve.phase_memory(a.loop, held))
    clients, subs = (50, 50) if a.quick else (1000, 1000)
    watch = asyncio.run(serve.phase_watch(a.loop, clients, 10, 8, 0))
    submit = asyncio.run(serve.phase_submit(a.loop, subs, 32, 0))
    verified = submit["outcomes"].get("verified", 0) if isinstance(submit["outcomes"], dict) else None
    rep.add("\n".join([
        "## Concurrent tasks, memory per task, and the API under load\n",
        f"`loop serve` (SQLite store, `--jobs 32`) given {n} scripted tasks through its API, posted one after "
        "another as fast as it answers (each answer comes once the request is kept, before its preparation), in a git "
        "project (two writes, a finish, file checks; the end is seen by polling `loop list` every 0.5 s; "
        "latency from each task's creation to its end, from the store), beside the same task run by "
        f"`loop run` {seq_n} times one after another in the same kind of project. Memory: the server's "
        f"resident set with one task started and waiting for a person's approval, then {held} more such "
        "tasks (a task in the middle of its run, its thread and state held; the queue section below "
        f"measures tasks inside a running command). Streams: {clients} event streams over 10 running "
        "tasks; each must receive every event once, in order, then `end`; latency from the event's time in "
        f"the ledger to its arrival, for events recorded after the stream opened. Submissions: {subs} POSTs, "
        "32 at a time on keep-alive connections (the server at `--jobs 32`, so 32 tasks run while they "
        "come), each answered once the request is kept in the store, before its preparation; meanwhile "
        "one client reads the status of the task answered last, every 10 ms "
        "(`scripts/bench-serve.py`, `scripts/bench-workers.py`; a Python client on the same cores).\n",
        table(["measure", "this run", "anchor"], [
            (f"{n} tasks through `loop serve`", f"{conc['rate']:.2f} tasks/s, {conc['verified']} verified, "
             f"latency p50 {conc['p50']:.2f} s / p99 {conc['p99']:.2f} s", f"{seq_rate:.2f} tasks/s one at a time"),
            (f"server RSS, 1 task then {held} more waiting", f"{mem['one_mib']:.1f} → {mem['many_mib']:.1f} MiB, "
             f"**{mem['per_task_kib']:.0f} KiB per task** beyond the first, {mem['threads']} threads", ""),
            (f"{clients} event streams over 10 tasks", f"{watch['errors']} errors, {watch['delivered']} events, "
             f"latency p50 {watch['p50']:.1f} ms / p99 {watch['p99']:.1f} ms / max {watch['max']:.1f} ms; "
             f"server CPU {watch['server_cpu']:.1f} s, RSS {watch['rss_mib']:.1f} MiB", ""),
            (f"{subs} submissions, 32 at a time", f"{submit['errors']} errors"
             f"{' (the first: ' + '; '.join(submit['first_errors']) + ')' if submit['errors'] else ''}, {submit['rate']:.1f} accepted/s, POST "
             f"p50 {submit['p50']:.0f} ms / p99 {submit['p99']:.0f} ms, GET from a reader process of its own p50 "
             f"{submit['own_get_p50']:.1f} ms / p99 {submit['own_get_p99']:.1f} ms ({submit['own_gets']} reads), "
             f"GET in the posting clients' event loop p50 {submit['get_p50']:.1f} ms / "
             f"p99 {submit['get_p99']:.1f} ms ({submit['gets']} reads); all ended after {submit['drain_wall']:.0f} s: "
             f"{', '.join(f'{v} {k}' for k, v in sorted(submit['outcomes'].items()))}, {submit['unfinished']} unfinished; RSS {submit['rss_mib']:.1f} MiB", ""),
        ])]))
    rep.goal("tasks", "under 2 MiB of server memory per started task beyond the first (tasks held for approval)",
             f"{mem['per_task_kib']:.0f} KiB", mem["per_task_kib"] < 2048)
    rep.goal("tasks", "tasks run together by the server go at least as fast as one at a time",
             f"{conc['rate']:.2f} vs {seq_rate:.2f} tasks/s", conc["rate"] >= seq_rate and conc["verified"] == n)
    rep.goal("tasks", f"{clients} event streams without an error", f"{watch['errors']} errors", watch["errors"] == 0)
    rep.goal("tasks", "`POST /api/v1/tasks`, 32 at a time with 32 tasks running: p99 under 250 ms",
             f"{submit['p99']:.0f} ms", submit["p99"] < 250 and submit["errors"] == 0)
    # Judged from a reader process of its own: in the posting clients'
    # event loop a read also waits for their work on the same cores.
    rep.goal("tasks", "`GET /api/v1/tasks/{id}` under the same load: p99 under 20 ms (a reader process of its own)",
             f"{submit['own_get_p99']:.1f} ms ({submit['get_p99']:.1f} ms in the posting clients' event loop)",
             submit["own_get_p99"] < 20 and submit["own_gets"] > 0)
    rep.goal("tasks", f"{subs} submissions without an error, every task verified",
             f"{submit['errors']} errors, {verified} verified", submit["errors"] == 0 and verified == subs)


# ---- receipts ------------------------------------------------------------------

def receipts(rep, a, tmp):
    entries = 10000
    out = run([a.receipt_bench, str(entries)]).stdout
    sign = float(re.search(r"sign \+ write receipt: median ([\d.]+) ms", out).group(1))
    verify = float(re.search(r"verify .*: median ([\d.]+) ms", out).group(1))
    size = int(re.search(r"ledger file: (\d+) bytes", out).group(1))
    append = float(re.search(r"\(fsync each\): (\d+) ms", out).group(1))
    chain = re.search(r"chain alone: stored canonical lines median ([\d.]+) ms; .* median ([\d.]+) ms", out)
    chain_stored, chain_decoded = float(chain.group(1)), float(chain.group(2))
    blob = os.urandom(size)
    times = []
    for _ in range(15):
        t = time.monotonic()
        hashlib.sha256(blob).hexdigest()
        times.append(time.monotonic() - t)
    rep.add("\n".join([
        "## Receipts at 10,000 ledger entries\n",
        f"`{os.path.basename(a.receipt_bench)} {entries}` (the `bench_receipt` example of `loop-receipt`): "
        f"a ledger of {entries + 1} entries ({size / 1e6:.1f} MB), then 15 times: hash it, build the in-toto "
        "statement, sign the DSSE envelope (Ed25519) and write it; then verify the receipt offline (signature, "
        "statement, the ledger's digest, the chain entry by entry re-hashed over JCS, head, length, genesis): "
        "each line is stored as its entry's canonical JSON, so its hash is taken over its own bytes less its "
        "`hash` member; a line in another form would be decoded and canonicalised. "
        "Medians. Anchor: SHA-256 of the same number of bytes in memory, the floor of any check of the file.\n",
        table(["measure", "median", "anchor"], [
            ("hash the ledger, sign and write the receipt", f"{sign:.1f} ms", f"{ms(median(times)):.1f} ms to hash {size} bytes"),
            (f"verify the receipt and its {entries + 1} entries", f"{verify:.1f} ms", ""),
            (f"(for reference) appending the {entries + 1} entries, each fsynced", f"{append:.0f} ms", ""),
            ("(for reference) the chain alone, its stored canonical lines hashed as they are",
             f"{chain_stored:.1f} ms", f"{chain_decoded:.1f} ms for the same entries as older ledgers wrote them "
             "(members in another order: each decoded and canonicalised)"),
        ])]))
    rep.goal("receipts", f"sign and write a receipt over {entries} entries in under 50 ms", f"{sign:.1f} ms", sign < 50)
    rep.goal("receipts", f"verify it offline in under 25 ms", f"{verify:.1f} ms", verify < 25)


# ---- preparing a task: the baseline kept between tasks of one tree -------------

def prepared_in(a, project, base, name):
    """Seconds from `loop run` to its `task_started` event (the task prepared: workspace, contract
    settled, baseline run, stored), and the baseline checks the receipt says were reused."""
    task = os.path.join(base, "task.yaml")
    script = os.path.join(base, "script.yaml")
    env = {**os.environ, "LOOP_STATE_DIR": os.path.join(base, "state")}
    t = time.monotonic()
    proc = subprocess.Popen([a.loop, "run", "--json", "--task", task, "--model", f"scripted:{script}",
                             "--project", project], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    took, receipt = None, None
    for line in proc.stdout:
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        if event.get("kind") == "task_started" and took is None:
            took = time.monotonic() - t
        if event.get("kind") == "receipt":
            receipt = event
    err = proc.stderr.read()
    proc.wait()
    if took is None or receipt is None or receipt["outcome"]["kind"] != "verified":
        raise SystemExit(f"prepare: {name}: the task did not verify: {err[-1500:]}")
    with open(receipt["path"]) as f:
        predicate = json.loads(base64.b64decode(json.load(f)["payload"]))["predicate"]
    checks = [c for k in predicate["baseline"]["criteria"] for c in k["checks"]]
    reused = sum(1 for c in checks if c.get("reused_from"))
    run([a.loop, "discard", receipt["task_id"], "--project", project], env=env, check=False)
    return took, reused, len(checks)


def prepare(rep, a, tmp):
    base = os.path.join(tmp, "prepare")
    project = os.path.join(base, "project")
    os.makedirs(os.path.join(project, "tests"))
    tests = a.reps(200, 40)
    with open(os.path.join(project, "calc.py"), "w") as f:
        f.write("def add(a, b):\n    return a + b\n")
    with open(os.path.join(project, "tests", "__init__.py"), "w") as f:
        f.write("")
    with open(os.path.join(project, "tests", "test_calc.py"), "w") as f:
        f.write("import time\nimport unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n")
        for i in range(tests):
            f.write(f"    def test_{i}(self):\n        time.sleep(0.01)\n        self.assertEqual(add({i}, 1), {i + 1})\n")
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.email=b@e", "-c", "user.name=b", "commit", "-qm", "i"]):
        run(["git", *args], cwd=project)
    with open(os.path.join(base, "task.yaml"), "w") as f:
        f.write("instruction: write hello.txt saying hello\ncriteria:\n  - id: hello\n    checks:\n"
                "      - run: grep -q hello hello.txt\n")
    with open(os.path.join(base, "script.yaml"), "w") as f:
        f.write("turns:\n  - calls:\n      - {tool: write_file, args: {path: hello.txt, content: \"hello\\n\"}}\n"
                "      - {tool: finish, args: {summary: done}}\n")
    t = time.monotonic()
    run(["python3", "-m", "unittest", "discover", "-q"], cwd=project)
    suite = time.monotonic() - t
    first, _, _ = prepared_in(a, project, base, "unseen")
    seen = [prepared_in(a, project, base, "seen") for _ in range(a.reps(5, 2))]
    again = median([s[0] for s in seen])
    reused, of = seen[-1][1], seen[-1][2]
    rep.add("\n".join([
        "## Preparing a task: the baseline kept between tasks of one tree\n",
        f"A git project whose own check, detected, is `python3 -m unittest discover -v` ({tests} tests, 10 ms "
        "each); the contract's one check is `grep -q hello hello.txt` (failing before the work). Preparation: "
        "from `loop run --json` to its `task_started` event (workspace made, contract settled with the project's "
        "check as a guard, baseline run, task stored). The first task on the tree runs the suite for its "
        "baseline; the next ones take its passing result (the receipt's baseline marks it `reused_from`) and run "
        "only what failed. Anchor: the suite itself in the checkout. Each task discarded after, untimed.\n",
        table(["measure", "time", "anchor"], [
            ("the project's suite, in the checkout", f"{suite:.2f} s", ""),
            ("preparing the first task on the tree", f"{first:.2f} s", "runs the suite for its baseline"),
            (f"preparing a task on the seen tree (median of {len(seen)})", f"{again:.2f} s",
             f"{reused} of {of} baseline checks reused"),
        ])]))
    rep.goal("prepare", "preparing a task on a tree seen before under 1 s", f"{again:.2f} s (first: {first:.2f} s)",
             again < 1.0 and reused > 0)


# ---- real projects: a task beside the suite ------------------------------------

def project_task(a, project, base, n):
    """`loop run` of the right fix in PROJECT (a fresh task from the checkout each time: its workspace,
    the baseline run of the check, the model's write, the verification); wall seconds and the
    receipt's figures of the last run."""
    fix_path, fix_text = project["fix"]
    task = os.path.join(base, "task.yaml")
    script = os.path.join(base, "script.yaml")
    with open(task, "w") as f:
        f.write(f"instruction: {json.dumps(project['instruction'])}\ncriteria:\n  - id: tests\n    checks:\n"
                f"      - run: {json.dumps(project['check'])}\n        timeout_secs: 600\n"
                "limits: { max_steps: 4, max_verifications: 2, timeout_secs: 1200 }\n")
    with open(script, "w") as f:
        f.write(f"turns:\n  - calls:\n      - {{tool: write_file, args: {{path: {fix_path}, content: "
                f"{json.dumps(fix_text)}}}}}\n      - {{tool: finish, args: {{summary: fixed}}}}\n")
    env = {**os.environ, "LOOP_STATE_DIR": os.path.join(base, "state")}
    env.pop("CARGO_TARGET_DIR", None)
    times, last = [], None
    for _ in range(n):
        t = time.monotonic()
        out = run([a.loop, "run", "--json", "--task", task, "--model", f"scripted:{script}", "--project",
                   project["dir"]], env=env, check=False)
        times.append(time.monotonic() - t)
        events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        receipt = next((e for e in events if e.get("kind") == "receipt"), None)
        if receipt is None or receipt["outcome"]["kind"] != "verified":
            raise SystemExit(f"{project['stack']}: the right fix was not verified: {out.stdout[-1500:]}"
                             f"{out.stderr[-1500:]}")
        last = receipt
        run([a.loop, "discard", receipt["task_id"], "--project", project["dir"]], env=env, check=False)
    with open(last["path"]) as f:
        envelope = json.load(f)
    predicate = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
    check = lambda r: (r or {}).get("criteria", [{}])[0].get("checks", [{}])[0].get("duration_ms", 0) / 1000
    return median(times), check(predicate.get("baseline")), check(predicate.get("verification"))


def projects(rep, a, tmp):
    real = load("real-projects")
    made = real.make(os.path.join(tmp, "real-projects"))
    n = a.reps(3, 1)
    rows = []
    for p in made:
        base = tempfile.mkdtemp(dir=tmp, prefix=f"{p['stack']}-")
        task, baseline_s, final_s = project_task(a, p, base, n)
        # The developer's own cost of the same proof: the fix in the checkout, the suite run after
        # touching the fixed file (so a build rebuilds what the edit would), median of N.
        fix_path, fix_text = p["fix"]
        with open(os.path.join(p["dir"], fix_path), "w") as f:
            f.write(fix_text)
        env = {k: v for k, v in os.environ.items() if k != "CARGO_TARGET_DIR"}
        run(["sh", "-c", p["suite"]], cwd=p["dir"], env=env)
        suite = []
        for _ in range(n):
            os.utime(os.path.join(p["dir"], fix_path))
            t = time.monotonic()
            run(["sh", "-c", p["suite"]], cwd=p["dir"], env=env)
            suite.append(time.monotonic() - t)
        s = median(suite)
        goal = 1.5 * s + 2
        rows.append((p["stack"], p["suite"], f"{s:.2f} s", f"{task:.2f} s", f"{baseline_s:.2f} s", f"{final_s:.2f} s",
                     f"{task / s:.1f}×", f"{goal:.2f} s"))
        rep.goal("projects", f"{p['stack']}: the right-fix task within 1.5× the suite + 2 s", f"{task:.2f} vs "
                 f"{s:.2f} s (limit {goal:.2f} s)", task <= goal)
    rep.add("\n".join([
        "## Real projects: a task beside the project's own suite\n",
        "Projects made by `scripts/real-projects.py` with their dependencies from the package registries: one "
        "small real-layout project per stack (a src-layout Python package with a version from git installed "
        "editable, tested by pytest; a TypeScript package tested by vitest 2; a Rust crate with a registry "
        "dependency, built once in the checkout; a C library built with CMake into `build/` and tested by "
        f"CTest), and two real public projects as their registries publish them: prettytable "
        f"{real.PRETTYTABLE}'s PyPI sdist (342 pytest tests, installed editable) and textwrap {real.TEXTWRAP}'s "
        "crate (unit, integration and some sixty doc tests, built once in the checkout), each with one bug put "
        "in the developer's checkout. **Task**: `loop run` of "
        "a contract whose one check is the project's detected test command, a scripted model writing the "
        f"right fix: a fresh workspace from the checkout, the baseline run of the check, the write, the "
        f"verification (median of {n}; each task discarded after, untimed). **Suite**: the developer's own test "
        "command in the checkout with the same fix, run after touching the fixed file (so a build "
        f"recompiles what the edit would; median of {n}). Baseline and final check: the check's own run "
        "times inside the task, from the receipt.\n",
        table(["stack", "the developer's suite", "suite", "task", "baseline check", "final check", "task / suite",
               "goal: 1.5 × suite + 2 s"], rows)]))


# ---- the scale-out queue ---------------------------------------------------------

def queue(rep, a, tmp):
    if not os.environ.get("LOOP_TEST_POSTGRES_URL") and os.geteuid() == 0 and os.path.isdir("/usr/lib/postgresql") \
            and shutil.which("redis-server"):
        # PostgreSQL from Debian's package on 127.0.0.1 (started only now,
        # so it is not running during the other sections).
        os.environ["LOOP_TEST_POSTGRES_URL"] = run(["bash", os.path.join(HERE, "services.sh")]).stdout.strip()
    if not os.environ.get("LOOP_TEST_POSTGRES_URL") or not shutil.which("redis-server") or not shutil.which("psql"):
        rep.add("## Tasks through PostgreSQL and Redis Streams\n\nNot measured: the scale-out backend is not "
                "present (no PostgreSQL: LOOP_TEST_POSTGRES_URL unset and no Debian package to start; or no "
                "redis-server or psql).\n")
        rep.unmeasured("queue", "tasks through PostgreSQL + Redis Streams", "no backend on this machine")
        return
    workers = load("bench-workers")
    n = a.reps(60, 10)
    modes = ["sqlite", "workers:1", "workers:2"] + ([] if a.quick else ["workers:4"])
    res = [workers.run(a.loop, n, m) for m in modes]
    mem = workers.memory(a.loop)
    rep.add("\n".join([
        "## Tasks through PostgreSQL and Redis Streams\n",
        f"{n} scripted tasks (two writes, a finish, file checks) posted to `loop serve` one after another as "
        "fast as it answers. `sqlite` (the "
        "anchor) runs them in the server itself (`--jobs 32`); `workers:N` hands them through a Redis Streams "
        "queue to N `loop worker` processes of `--jobs 2` on a PostgreSQL store (Redis with `appendfsync "
        "always`). Latency is each task's creation to its end, from the store. Memory: one worker of "
        "`--jobs 16` with tasks waiting in a `sleep 20` command (its own resident set; the commands are "
        "processes of their own). The server, PostgreSQL, Redis and the workers share the machine's cores.\n",
        table(["mode", "tasks", "verified", "tasks/s", "p50 latency s", "p99 latency s"],
              [(r["mode"], r["tasks"], r["verified"], f"{r['rate']:.2f}", f"{r['p50']:.2f}", f"{r['p99']:.2f}")
               for r in res]),
        table(["worker, --jobs 16", "idle", "one task", "sixteen tasks", "per task beyond the first"],
              [("resident set", f"{mem['idle_mib']:.1f} MiB", f"{mem['one_mib']:.1f} MiB",
                f"{mem['sixteen_mib']:.1f} MiB", f"{mem['per_task_mib']:.2f} MiB")])]))
    rep.goal("queue", "every task through the queue verified, none lost or run twice",
             ", ".join(f"{r['mode']} {r['verified']}/{r['tasks']}" for r in res),
             all(r["verified"] == r["tasks"] for r in res))
    w2 = next(r for r in res if r["mode"] == "workers:2")
    w1 = next(r for r in res if r["mode"] == "workers:1")
    rep.goal("queue", "two workers at least as fast as one", f"{w2['rate']:.2f} vs {w1['rate']:.2f} tasks/s",
             w2["rate"] >= w1["rate"])
    rep.goal("queue", "under 2 MiB of worker memory per running task beyond the first",
             f"{mem['per_task_mib']:.2f} MiB", mem["per_task_mib"] < 2)


# ---- a peer's headline loop ---------------------------------------------------

PEER = os.path.join(HERE, "peers", "loop-engineering")

PEER_TASK = """instruction: "A 3-step task: step1.txt, step2.txt and step3.txt each say their step is done"
criteria:
  - id: step-1
    text: step 1 is done
    checks: [{file_contains: step1.txt, text: "step 1 done"}]
  - id: step-2
    text: step 2 is done
    checks: [{file_contains: step2.txt, text: "step 2 done"}]
  - id: step-3
    text: step 3 is done
    checks: [{file_contains: step3.txt, text: "step 3 done"}]
limits: {max_steps: 10}
"""

# Step 2 is wrong once: the verification rejects it, the evidence goes back
# to the model, which repairs it; the second verification accepts.
PEER_SCRIPT = """turns:
  - calls: [{tool: write_file, args: {path: step1.txt, content: "step 1 done\\n"}}]
  - calls: [{tool: write_file, args: {path: step2.txt, content: "step 2 wrong\\n"}}]
  - calls: [{tool: write_file, args: {path: step3.txt, content: "step 3 done\\n"}}]
  - calls: [{tool: finish, args: {summary: done}}]
  - calls: [{tool: write_file, args: {path: step2.txt, content: "step 2 done\\n"}}]
  - calls: [{tool: finish, args: {summary: repaired}}]
"""


def measured(cmd, cwd, env=None):
    """(wall s, user+system CPU s, peak RSS KiB) of one run of CMD, which must succeed. bash's `time`
    gives wall and CPU to the millisecond (GNU time rounds CPU to 10 ms); GNU time gives the peak RSS of
    bash and what it ran. Neither is forked straight from this large Python: a child's peak RSS counts
    what it held before its exec, and CPU what it did before it."""
    p = subprocess.run(["/usr/bin/time", "-f", "RSS %M", "bash", "-c",
                        'TIMEFORMAT="CPU %3R %3U %3S"; time "$@" >/dev/null 2>&1', "_"] + cmd,
                       cwd=cwd, env=env, text=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    found = dict(line.split(" ", 1) for line in p.stderr.splitlines() if line.startswith(("CPU ", "RSS ")))
    if p.returncode != 0 or set(found) != {"CPU", "RSS"}:
        raise SystemExit(f"peer: `{' '.join(cmd)}` exited {p.returncode}: {p.stderr[-2000:]}")
    wall, user, sys_ = map(float, found["CPU"].split())
    return wall, user + sys_, int(found["RSS"])


def plain_dir(tmp):
    """A scratch directory on a disk (not tmpfs, where syncs cost nothing) and outside any git
    repository, as the peer's example runs: inside one (this checkout's target/), ours would ask git
    about it first. The bench's own scratch directory when nothing else qualifies."""
    for base in (tempfile.gettempdir(), os.path.expanduser("~")):
        on_disk = run(["stat", "-f", "-c", "%T", base], check=False).stdout.strip() != "tmpfs"
        no_repo = run(["git", "-C", base, "rev-parse", "--git-dir"], check=False).returncode != 0
        if on_disk and no_repo:
            return tempfile.mkdtemp(dir=base, prefix="loop-bench-peer-"), True
    return tempfile.mkdtemp(dir=tmp, prefix="peer-"), False


def link_order(loop):
    """How much of crates/loop-cli/link-order.txt the measured binary holds: the release build places
    those functions together, and names a later change renamed are skipped, which costs memory (the
    pages a run touches spread out again) and start-up time. Run scripts/link-order.sh when it falls."""
    order = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "loop-cli", "link-order.txt")
    names = set(open(order).read().split())
    nm = run(["nm", "--defined-only", loop], check=False)
    if nm.returncode != 0 or not names:
        return "The link order could not be checked (`nm` failed).\n"
    found = len(names & {line.rsplit(" ", 1)[-1] for line in nm.stdout.splitlines()})
    return (f"The binary holds {found} of the {len(names)} functions `crates/loop-cli/link-order.txt` places "
            f"together ({100 * found / len(names):.0f}%; `scripts/link-order.sh` makes the list again).\n")


def peer(rep, a, tmp):
    runs = a.reps(15, 3)
    d, plain = plain_dir(tmp)
    try:
        peer_in(rep, a, d, plain, runs)
    finally:
        shutil.rmtree(d, True)


def peer_in(rep, a, d, plain, runs):
    task, script = os.path.join(d, "task.yaml"), os.path.join(d, "script.yaml")
    with open(task, "w") as f:
        f.write(PEER_TASK)
    with open(script, "w") as f:
        f.write(PEER_SCRIPT)
    example = os.path.join(PEER, "examples", "deterministic_multistep_loop.py")
    theirs, ours = [], []
    for i in range(runs):
        # Each in a fresh directory, alternating, so both see the same machine.
        w = os.path.join(d, f"theirs-{i}")
        os.mkdir(w)
        theirs.append(measured([sys.executable, example], w))
        p = os.path.join(d, f"ours-{i}")
        os.mkdir(p)
        ours.append(measured([a.loop, "run", "--task", task, "--model", f"scripted:{script}", "--project", p], p))
        st = json.loads(run([a.loop, "status", "last", "--json", "--project", p]).stdout)
        if not str(st.get("outcome", "")).startswith("verified") or st["used"]["verifications"] != 2:
            raise SystemExit(f"peer: ours ended {st.get('outcome')} after {st['used'].get('verifications')} "
                             "verifications, not verified on the second")
    med = [[median([r[k] for r in rs]) for k in range(3)] for rs in (theirs, ours)]
    spread = [[(min(r[k] for r in rs), max(r[k] for r in rs)) for k in range(3)] for rs in (theirs, ours)]
    (tw, tc, tm), (ow, oc, om) = med
    rows = []
    for k, (name, unit, scale) in enumerate([("wall time", "ms", 1000), ("CPU (user + system)", "ms", 1000),
                                              ("peak memory (RSS)", "MiB", 1 / 1024)]):
        fmt = (lambda v: f"{v * scale:.1f}")
        rows.append((name, f"{fmt(med[1][k])} {unit} ({fmt(spread[1][k][0])}–{fmt(spread[1][k][1])})",
                     f"{fmt(med[0][k])} {unit} ({fmt(spread[0][k][0])}–{fmt(spread[0][k][1])})",
                     f"{med[1][k] / med[0][k]:.2f}×"))
    rep.add("\n".join([
        "## A peer's headline loop\n",
        "The public project chillum-codeX/loop-engineering (Python, MIT) shows its loop with "
        "`examples/deterministic_multistep_loop.py`: a 3-step task whose step 2 is wrong once, rejected, "
        "recovered and accepted (vendored unchanged in `scripts/peers/loop-engineering/`, run with this "
        "machine's Python). Ours: the same three steps as three `file_contains` criteria, a scripted model "
        "that writes step 2 wrong, is rejected by the first verification, repairs it and is accepted by the "
        "second — with everything a task always does (a workspace, a hash-chained ledger on SQLite synced "
        f"each step, two sealed verifications, a signed receipt). Median of {runs} runs each, alternating, "
        + ("each in a fresh plain directory outside any repository, as the example runs "
           if plain else "each in a fresh directory inside this checkout (no plain one was found: ours asks "
           "git about it first) ") + "(spread in brackets); wall and CPU from bash's `time` (milliseconds), peak memory from GNU time. "
        "This section runs first, before the ones that delete trees of thousands of files: on an ext4 "
        "without a journal, each new file's inode is chosen past those deleted in the last minute, a cost "
        "of the script's own earlier sections that would weigh on ours (about 30 new files a task) more "
        "than on the peer's.\n",
        table(["measure", "ours", "peer", "ours / peer"], rows), link_order(a.loop)]))
    rep.goal("peer", "the peer's 3-step loop: ours at most 0.2× its CPU", f"{oc * 1000:.0f} vs {tc * 1000:.0f} ms "
             f"({oc / tc:.2f}×)", oc <= 0.2 * tc)
    rep.goal("peer", "the same: ours at most 0.5× its peak memory", f"{om / 1024:.1f} vs {tm / 1024:.1f} MiB "
             f"({om / tm:.2f}×)", om <= 0.5 * tm)
    rep.goal("peer", "the same: ours at most 0.5× its wall time", f"{ow * 1000:.0f} vs {tw * 1000:.0f} ms "
             f"({ow / tw:.2f}×)", ow <= 0.5 * tw)


# In this order. The peer's comparison runs first, before the sections that
# delete trees of thousands of files (the snapshots', the projects'
# dependencies): on an ext4 without a journal, as this machine's disk may
# be, every new file's inode is then chosen past the ones deleted in the
# last minute, reading each one's inode table; a cost of this script's own
# earlier sections that neither loop would meet on its own.
SECTIONS = {"peer": peer, "sandbox": sandbox, "flood": flood, "snapshot": snapshot, "steps": steps,
            "tasks": tasks, "receipts": receipts, "prepare": prepare, "projects": projects, "queue": queue}


def said(value, number_as=None):
    """A `loop doctor --json` value as the benchmark page says it."""
    if value is None:
        return "?"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if number_as and isinstance(value, int):
        return f"{number_as} {value}" if value > 0 else "NO"
    return str(value)


def machine(a):
    def out(cmd):
        try:
            return run(cmd).stdout.strip().splitlines()[0]
        except (OSError, subprocess.CalledProcessError, SystemExit, IndexError):
            return "?"
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) / 1048576
    doctor = json.loads(run([a.loop, "doctor", "--json"], check=False).stdout or "{}")
    rev = out(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    # Changes to what is built or run (not to the docs this run rewrites).
    dirty = run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no", "--", "crates", "scripts",
                 "evals", "Cargo.toml", "Cargo.lock"], check=False).stdout.strip()
    fs = out(["stat", "-f", "-c", "%T", os.path.join(ROOT, "target")])
    shown = os.path.relpath(a.loop, ROOT) if a.loop.startswith(ROOT + os.sep) else a.loop
    return [
        f"- {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {rev}{' (with local changes to the code)' if dirty else ''}",
        f"- {platform.system()} {platform.release()}, {os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, "
        f"user {out(['id', '-un'])}, scratch files on {fs} (`target/bench-tmp`)",
        f"- {out([a.loop, '--version'])} (`{shown}`); {out(['bwrap', '--version'])}; {out(['hyperfine', '--version'])}; "
        f"Python {platform.python_version()}",
        f"- sandbox: Landlock {said(doctor.get('landlock'), 'ABI')}, seccomp {said(doctor.get('seccomp'))}, memory cgroup "
        f"{said(doctor.get('memory_cgroup'))} (cgroup {'v2' if out(['stat', '-f', '-c', '%T', '/sys/fs/cgroup']) == 'cgroup2fs' else 'v1'})",
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loop", required=True)
    ap.add_argument("--receipt-bench", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None, help="default: docs/benchmarks.md (a full run of every section only)")
    ap.add_argument("--only", default=",".join(SECTIONS))
    ap.add_argument("--command", default="scripts/bench.py " + " ".join(sys.argv[1:]),
                    help="the command named in the output")
    a = ap.parse_args()
    a.loop = os.path.realpath(a.loop)
    a.receipt_bench = os.path.realpath(a.receipt_bench)
    a.reps = lambda full, quick: quick if a.quick else full
    only = [s for s in a.only.split(",") if s]
    unknown = [s for s in only if s not in SECTIONS]
    if unknown:
        ap.error(f"unknown section(s) {', '.join(unknown)}; the sections are {', '.join(SECTIONS)}")
    if a.out is None:
        if a.quick or only != list(SECTIONS):
            ap.error("docs/benchmarks.md is written by a full run of every section; give --out FILE")
        a.out = os.path.join(ROOT, "docs", "benchmarks.md")
    # What is measured is this machine's embedded store and its own
    # processes: a store or queue in the environment would move the
    # "SQLite" sections elsewhere.
    for var in ("LOOP_STORE_URL", "LOOP_QUEUE_URL"):
        os.environ.pop(var, None)
    # On the repository's disk (not a tmpfs /tmp, where fsync costs nothing).
    scratch = os.path.join(ROOT, "target", "bench-tmp")
    os.makedirs(scratch, exist_ok=True)
    # The machine, the commit and the tree as the run starts.
    a.machine = machine(a)
    # The tasks' workspaces (kept outside their projects, beside the state
    # directory, for `loop show` and `apply`) go with the run's projects: a
    # run made ~17 GB of them (five copies of the 100,000-file tree) that
    # nothing would ever remove. Beside the default place (the same disk,
    # and ancestors the runtime trusts), removed at the end.
    own_workspaces = None
    if "LOOP_WORKSPACES_DIR" not in os.environ:
        state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
        os.makedirs(state, mode=0o700, exist_ok=True)
        own_workspaces = tempfile.mkdtemp(prefix="loop-engine-bench-workspaces-", dir=state)
        os.environ["LOOP_WORKSPACES_DIR"] = own_workspaces
    try:
        return run_sections(a, only, scratch)
    finally:
        if own_workspaces:
            shutil.rmtree(own_workspaces, ignore_errors=True)


def run_sections(a, only, scratch):
    """Every section asked for, in one scratch directory; the report written after each."""
    rep = Report()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="loop-bench-", dir=scratch) as tmp:
        for name in only:
            t = time.monotonic()
            print(f"bench: {name} ...", file=sys.stderr, flush=True)
            try:
                SECTIONS[name](rep, a, tmp)
            except (Exception, SystemExit) as e:  # noqa: BLE001 - one section's failure is reported, the rest run
                why = str(e) or type(e).__name__
                print(f"bench: {name} FAILED: {why}", file=sys.stderr, flush=True)
                rep.failed.append(name)
                rep.add(f"## {name}: failed\n\nThis section failed in this run, so it has no figures:\n\n"
                        f"```\n{why[-3000:]}\n```\n")
                rep.unmeasured(name, "(every goal of this section)", "**failed** (see its section)")
            print(f"bench: {name} took {time.monotonic() - t:.0f} s", file=sys.stderr, flush=True)
            write(a, rep, time.monotonic() - started, done=False)
    took = time.monotonic() - started
    write(a, rep, took, done=True)
    met = sum(1 for g in rep.goals if g[3].startswith("met"))
    print(f"bench: {a.out} written in {took:.0f} s; {met} of {len(rep.goals)} goals met"
          + (f"; FAILED: {', '.join(rep.failed)}" if rep.failed else ""), file=sys.stderr)
    return 1 if rep.failed else 0


def write(a, rep, took, done):
    """The report so far (after every section, so a failure late keeps what was measured)."""
    head = [
        "# Benchmarks\n",
        f"Generated by `{a.command}` in one run ({took / 60:.0f} min); every table below comes from that run, "
        "each figure beside its anchor measured in the same run, and each goal beside the figure it judges. "
        "Re-run `scripts/bench.sh` to regenerate this file on your machine (it installs what it needs, "
        "builds release binaries, and measures the scale-out queue where PostgreSQL and Redis are "
        "installed). Speed and memory goals are checked here, never in timed tests. Earlier measurements, "
        "with the builds they compared, are in [benchmark-history.md](benchmark-history.md).\n",
    ]
    if not done:
        head.append("**Incomplete**: the run was still going, or stopped, when this was written.\n")
    if a.quick:
        head.append("**A quick run** (`--quick`: small sizes, few repetitions; a smoke test of the script). "
                    "Its figures are not the ones to quote.\n")
    head += ["## Machine\n", "\n".join(a.machine) + "\n", "## Goals\n",
             table(["section", "goal", "this run", "verdict"], rep.goals)]
    text = "\n".join(head) + "\n" + "\n".join(rep.sections)
    with open(a.out + ".part", "w") as f:
        f.write(text)
    os.replace(a.out + ".part", a.out)


if __name__ == "__main__":
    sys.exit(main())
