#!/usr/bin/env python3
"""Scripted tasks through the API, end to end: throughput and latency.

Modes (each in a fresh project and, for PostgreSQL, a fresh database):
  sqlite      `loop serve` on the embedded store runs the tasks itself
  workers:N   `loop serve --queue` hands them to N `loop worker` processes
              (PostgreSQL store, Redis Streams queue)
  memory      one worker, --jobs 16, tasks that wait in a slow command:
              the worker's resident memory with 1 and with 16 running

Usage: bench-workers.py LOOP TASKS MODE [MODE...]
Needs LOOP_TEST_POSTGRES_URL (scripts/services.sh) and redis-server.
Prints one markdown row per mode.
"""

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

SCRIPT = """turns:
  - calls:
      - {tool: write_file, args: {path: a.txt, content: "alpha\\n"}}
  - calls:
      - {tool: write_file, args: {path: b.txt, content: "beta\\n"}}
  - calls:
      - {tool: finish, args: {summary: done}}
"""

SLOW = """turns:
  - calls:
      - {tool: run_command, args: {command: "sleep 20"}}
  - calls:
      - {tool: finish, args: {summary: done}}
"""

CONTRACT = """instruction: write a.txt and b.txt
criteria:
  - id: files
    checks:
      - file_contains: a.txt
        text: alpha
      - file_contains: b.txt
        text: beta
limits: { max_steps: 6, max_verifications: 2, timeout_secs: 120 }
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def psql_admin(sql):
    import urllib.parse

    url = os.environ["LOOP_TEST_POSTGRES_URL"]
    subprocess.run(["psql", url, "-q", "-c", sql], check=True, capture_output=True)


class Env:
    def __init__(self, loop, mode):
        self.loop = loop
        self.dir = tempfile.mkdtemp(prefix="loop-bench-workers-")
        self.project = os.path.join(self.dir, "project")
        os.makedirs(self.project)
        with open(os.path.join(self.project, "README.md"), "w") as f:
            f.write("bench\n")
        for args in (["init", "-q"], ["add", "."], ["-c", "user.email=b@b", "-c", "user.name=b", "commit", "-qm", "init"]):
            subprocess.run(["git", *args], cwd=self.project, check=True)
        for name, text in (("script.yaml", SCRIPT), ("slow.yaml", SLOW)):
            with open(os.path.join(self.project, name), "w") as f:
                f.write(text)
        self.env = dict(os.environ, LOOP_STATE_DIR=os.path.join(self.dir, "state"))
        self.procs = []
        self.db = None
        if mode != "sqlite":
            self.db = f"loop_bench_{os.getpid()}_{int(time.time())}"
            psql_admin(f"CREATE DATABASE {self.db}")
            base = os.environ["LOOP_TEST_POSTGRES_URL"].rsplit("/", 1)[0]
            self.env["LOOP_STORE_URL"] = f"{base}/{self.db}"
            port = free_port()
            rdir = os.path.join(self.dir, "redis")
            os.makedirs(rdir)
            self.procs.append(subprocess.Popen(
                ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                 "--appendonly", "yes", "--appendfsync", "always", "--dir", rdir],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            for _ in range(200):
                try:
                    socket.create_connection(("127.0.0.1", port)).close()
                    break
                except OSError:
                    time.sleep(0.02)
            self.env["LOOP_QUEUE_URL"] = f"redis://127.0.0.1:{port}"
        out = subprocess.run([loop, "tokens", "create", "--owner", "bench", "--json", "--project", self.project],
                             env=self.env, check=True, capture_output=True, text=True).stdout
        self.token = json.loads(out)["token"]
        server = subprocess.Popen([loop, "serve", "--addr", "127.0.0.1:0", "--jobs", "32", "--project", self.project],
                                  env=self.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.procs.append(server)
        line = server.stdout.readline()
        self.url = next(w for w in line.split() if w.startswith("http://"))

    def worker(self, jobs):
        p = subprocess.Popen([self.loop, "worker", "--jobs", str(jobs), "--project", self.project],
                             env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def post(self, model):
        body = json.dumps({"instruction": "write a.txt and b.txt", "contract": CONTRACT, "model": model}).encode()
        req = urllib.request.Request(f"{self.url}/api/v1/tasks", data=body, method="POST",
                                     headers={"Authorization": f"Bearer {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req) as r:
            return json.load(r)["id"]

    def tasks(self):
        out = subprocess.run([self.loop, "list", "--json", "--project", self.project],
                             env=self.env, check=True, capture_output=True, text=True).stdout
        return [json.loads(l) for l in out.splitlines() if l.strip()]

    def close(self):
        for p in self.procs:
            p.kill()
            p.wait()
        if self.db:
            psql_admin(f"DROP DATABASE IF EXISTS {self.db} WITH (FORCE)")
        shutil.rmtree(self.dir, ignore_errors=True)


def ms(rfc3339):
    from datetime import datetime
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() * 1000


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def run(loop, n, mode):
    env = Env(loop, mode)
    try:
        if mode.startswith("workers:"):
            for _ in range(int(mode.split(":")[1])):
                env.worker(2)
        start = time.time()
        ids = [env.post("scripted:script.yaml") for _ in range(n)]
        while True:
            tasks = [t for t in env.tasks() if t["id"] in ids]
            if len(tasks) == n and all(t["state"] == "terminal" for t in tasks):
                break
            if time.time() - start > 1800:
                raise SystemExit(f"{mode}: not done after 30 minutes")
            time.sleep(0.5)
        wall = time.time() - start
        verified = sum(1 for t in tasks if t.get("outcome", "") == "verified")
        lat = [ms(t["updated"]) - ms(t["created"]) for t in tasks]
        return {"mode": mode, "tasks": n, "verified": verified, "rate": n / wall,
                "p50": statistics.median(lat) / 1000, "p99": pct(lat, 99) / 1000}
    finally:
        env.close()


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def memory(loop):
    env = Env(loop, "memory")
    try:
        w = env.worker(16)
        time.sleep(3)  # connected to the store and the queue, waiting

        def running():
            return sum(1 for t in env.tasks() if t.get("running"))

        def settle(k):
            t0 = time.time()
            while running() < k:
                if time.time() - t0 > 120:
                    raise SystemExit(f"memory: {k} tasks never ran at once")
                time.sleep(0.3)
            time.sleep(2)
            return rss_kib(w.pid)

        idle = rss_kib(w.pid)
        env.post("scripted:slow.yaml")
        one = settle(1)
        for _ in range(15):
            env.post("scripted:slow.yaml")
        sixteen = settle(16)
        return {"idle_mib": idle / 1024, "one_mib": one / 1024, "sixteen_mib": sixteen / 1024,
                "per_task_mib": (sixteen - one) / 15 / 1024}
    finally:
        env.close()


def main():
    loop, n, modes = os.path.realpath(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    print(f"- {time.strftime('%Y-%m-%d', time.gmtime())}, {os.uname().sysname} {os.uname().release}, {os.cpu_count()} cores, {n} tasks per mode")
    print()
    if any(m != "memory" for m in modes):
        print("| mode | tasks | verified | tasks/s | p50 latency s | p99 latency s |")
        print("| --- | --- | --- | --- | --- | --- |")
    for m in modes:
        if m == "memory":
            print()
            print("| process | idle | one task | sixteen tasks | per task |")
            print("| --- | --- | --- | --- | --- |")
            r = memory(loop)
            print(f"| worker, --jobs 16 | idle {r['idle_mib']:.1f} MiB | 1 running {r['one_mib']:.1f} MiB "
                  f"| 16 running {r['sixteen_mib']:.1f} MiB | {r['per_task_mib']:.2f} MiB per task beyond the first |",
                  flush=True)
        else:
            r = run(loop, n, m)
            print(f"| {m} | {n} | {r['verified']} | {r['rate']:.2f} | {r['p50']:.2f} | {r['p99']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
