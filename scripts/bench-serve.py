#!/usr/bin/env python3
"""Load on `loop serve` over 127.0.0.1, with nothing but the standard library.

    scripts/bench-serve.py LOOP [--phase watch|submit|memory|all]
        [--clients 1000] [--tasks 10] [--steps 8] [--submissions 10000]
        [--concurrency 32] [--held 200] [--jobs 32]

watch   CLIENTS event streams spread over TASKS running scripted tasks (each
        STEPS commands of `sleep 0.2`), joined while the tasks start. Every
        stream must deliver every event once, in order, and end with `end`.
        Latency is the time from an event's `at` in the ledger to its
        arrival, for events recorded after the stream opened.
submit  SUBMISSIONS POSTs of a one-step scripted task, CONCURRENCY at a time
        on keep-alive connections; every answer must be 201 (the task kept,
        its preparation to follow). Meanwhile one more client reads the
        status of a task just answered, again and again (GET latency under
        the same load). Then waits for every task to end and counts the
        outcomes.
memory  the server's resident memory with one running task, then with HELD
        more, each waiting for a person's approval (so each holds its
        thread, its Director and its store handle).

Prints Markdown tables. Each phase starts its own server on a fresh project
under a temporary HOME; LOOP is the binary to measure.
"""

import argparse
import asyncio
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))
    return xs[k]


def parse_at(at):
    return datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()


class Server:
    """`loop serve` on a fresh project, on a free port of 127.0.0.1."""

    def __init__(self, loop_bin, files, jobs):
        self.home = tempfile.mkdtemp(prefix="loop-bench-serve-")
        self.project = os.path.join(self.home, "project")
        os.makedirs(self.project)
        for name, text in files.items():
            with open(os.path.join(self.project, name), "w") as f:
                f.write(text)
        self.env = dict(os.environ, HOME=self.home)
        made = subprocess.run(
            [loop_bin, "tokens", "create", "--owner", "bench", "--scope", "admin",
             "--project", self.project],
            env=self.env, capture_output=True, text=True, check=True)
        self.token = next(w for w in made.stdout.split() if w.startswith("loop_"))
        args = [loop_bin, "serve", "--addr", "127.0.0.1:0", "--rate", "100000000",
                "--project", self.project]
        # An older build has no --jobs (it ran every task at once).
        takes_jobs = "--jobs" in subprocess.run([loop_bin, "serve", "--help"], env=self.env,
                                                capture_output=True, text=True).stdout
        if jobs and takes_jobs:
            args += ["--jobs", str(jobs)]
        self.proc = subprocess.Popen(args, env=self.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        url = next(w for w in line.split() if w.startswith("http://"))
        host_port = url[len("http://"):]
        self.host, port = host_port.rsplit(":", 1)
        self.port = int(port)

    def cpu_secs(self):
        """The server's user + system CPU time so far."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / tick

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.home, ignore_errors=True)


class Conn:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, server):
        self.s = server
        self.r = self.w = None

    async def open(self):
        self.r, self.w = await asyncio.open_connection(self.s.host, self.s.port)

    async def request(self, method, path, body=None, extra=None):
        if self.w is None:
            await self.open()
        data = json.dumps(body).encode() if body is not None else b""
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.s.host}",
                f"Authorization: Bearer {self.s.token}", f"Content-Length: {len(data)}"]
        if body is not None:
            head.append("Content-Type: application/json")
        head += extra or []
        self.w.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
        await self.w.drain()
        status, headers = await read_head(self.r)
        if headers.get("transfer-encoding") == "chunked":
            out = b"".join([c async for c in chunks(self.r)])
        else:
            out = await self.r.readexactly(int(headers.get("content-length", "0")))
        return status, out

    def close(self):
        if self.w is not None:
            self.w.close()


async def read_head(r):
    line = await r.readline()
    if not line:
        raise ConnectionError("the server closed the connection")
    status = int(line.split()[1])
    headers = {}
    while True:
        line = await r.readline()
        if line in (b"\r\n", b""):
            break
        k, v = line.decode().split(":", 1)
        headers[k.strip().lower()] = v.strip()
    return status, headers


async def chunks(r):
    while True:
        size = int((await r.readline()).split(b";")[0], 16)
        if size == 0:
            await r.readline()
            return
        data = await r.readexactly(size)
        await r.readline()
        yield data


async def json_call(server, method, path, body=None):
    c = Conn(server)
    try:
        status, out = await c.request(method, path, body)
        return status, json.loads(out) if out else None
    finally:
        c.close()


async def wait_all_ended(server, ids, timeout):
    """Poll until every task has an outcome; the outcomes by count."""
    end = time.monotonic() + timeout
    left = set(ids)
    outcomes = {}
    c = Conn(server)
    while left and time.monotonic() < end:
        before = None
        while True:
            q = "/api/v1/tasks?limit=1000" + (f"&before={before}" if before else "")
            _, out = await c.request("GET", q)
            page = json.loads(out)
            for t in page["tasks"]:
                if t["id"] in left and t.get("outcome") and t.get("receipt"):
                    left.discard(t["id"])
                    kind = t["outcome"].split("{")[0]
                    outcomes[kind] = outcomes.get(kind, 0) + 1
            before = page["next"]
            if not before:
                break
        if left:
            await asyncio.sleep(0.5)
    c.close()
    return outcomes, left


# ---- watch -------------------------------------------------------------

async def watcher(server, task_id, opened, got):
    """One event stream read to its end: (open time, [(seq, arrival)], ended)."""
    r, w = await asyncio.open_connection(server.host, server.port)
    w.write((f"GET /api/v1/tasks/{task_id}/stream HTTP/1.1\r\nHost: {server.host}\r\n"
             f"Authorization: Bearer {server.token}\r\n\r\n").encode())
    await w.drain()
    t_ask = time.time()
    status, headers = await read_head(r)
    t0 = time.time()
    opened.append(t0 - t_ask)
    if status != 200:
        w.close()
        return t0, [], False, f"status {status}"
    seen = []
    ended = False
    buf = b""
    seq = None
    async for data in chunks(r):
        now = time.time()
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.startswith(b"id: "):
                seq = int(line[4:])
            elif line.startswith(b"event: end"):
                ended = True
            elif line == b"" and seq is not None:
                seen.append((seq, now))
                seq = None
        if ended:
            break
    w.close()
    got.append(len(seen))
    return t0, seen, ended, None


async def phase_watch(loop_bin, clients, tasks, steps, jobs):
    # The first command gives every stream time to open; the events after
    # it are the ones measured.
    script = "turns:\n  - calls:\n      - {tool: run_command, args: {command: \"sleep 6\"}}\n" + "".join(
        "  - calls:\n      - {tool: run_command, args: {command: \"sleep 0.2\"}}\n"
        for _ in range(steps)) + "  - calls:\n      - {tool: finish, args: {summary: done}}\n"
    s = Server(loop_bin, {"README.md": "hi\n", "slow.yaml": script}, jobs)
    try:
        ids = []
        for _ in range(tasks):
            status, out = await json_call(s, "POST", "/api/v1/tasks", {
                "instruction": "sleep a while", "checks": ["test -f README.md"], "allow_vacuous": True,
                "model": "scripted:slow.yaml", "max_steps": steps + 6})
            assert status == 201, (status, out)
            ids.append(out["id"])
        opened, got = [], []
        t0 = time.monotonic()
        cpu0, mine0 = s.cpu_secs(), time.process_time()
        results = await asyncio.gather(
            *[watcher(s, ids[i % tasks], opened, got) for i in range(clients)],
            return_exceptions=True)
        wall = time.monotonic() - t0
        server_cpu, client_cpu = s.cpu_secs() - cpu0, time.process_time() - mine0
        # When each event was recorded, from the store itself (so a build
        # whose API does not say `at` is measured the same way).
        db = sqlite3.connect(f"file:{s.project}/.loop/loop.db?mode=ro", uri=True)
        ats = {tid: [parse_at(at) for (at,) in db.execute(
            "SELECT at FROM entries WHERE task_id = ? ORDER BY seq", (tid,))] for tid in ids}
        db.close()
        errors, lat, delivered = 0, [], 0
        for i, res in enumerate(results):
            tid = ids[i % tasks]
            if isinstance(res, Exception) or res[3] is not None or not res[2]:
                errors += 1
                continue
            t_open, seen, _, _ = res
            seqs = [q for q, _ in seen]
            if seqs != list(range(len(ats[tid]))):
                errors += 1
                continue
            delivered += len(seen)
            for q, arrival in seen:
                # Only what was recorded after the stream opened: history
                # replayed on connect is not delivery latency.
                if ats[tid][q] > t_open:
                    lat.append((arrival - ats[tid][q]) * 1000)
        rss = s.rss_kib()
    finally:
        s.stop()
    return {"clients": clients, "tasks": tasks, "errors": errors, "delivered": delivered,
            "open_p50": pct(opened, 50) * 1000, "open_p99": pct(opened, 99) * 1000,
            "live": len(lat), "p50": pct(lat, 50), "p99": pct(lat, 99), "max": max(lat or [0]),
            "wall": wall, "rss_mib": rss / 1024, "server_cpu": server_cpu,
            "client_cpu": client_cpu}


# ---- submit ------------------------------------------------------------

async def phase_submit(loop_bin, n, concurrency, jobs):
    script = "turns:\n  - calls:\n      - {tool: finish, args: {summary: done}}\n"
    s = Server(loop_bin, {"README.md": "hi\n", "done.yaml": script}, jobs)
    try:
        lat, errors, ids = [], [], []
        counter = iter(range(n))

        async def client():
            c = Conn(s)
            for _ in counter:
                t = time.monotonic()
                try:
                    status, out = await c.request("POST", "/api/v1/tasks", {
                        "instruction": "nothing to do", "checks": ["test -f README.md"], "allow_vacuous": True,
                        "model": "scripted:done.yaml"})
                except (ConnectionError, asyncio.IncompleteReadError) as e:
                    errors.append(str(e))
                    c.close()
                    c = Conn(s)
                    continue
                lat.append((time.monotonic() - t) * 1000)
                if status != 201:
                    errors.append(f"{status} {out[:200]!r}")
                else:
                    ids.append(json.loads(out)["id"])
                    own.newest(ids[-1])
            c.close()

        gets, posting = [], [True]
        # The same reads from a process of its own: in the posting clients'
        # event loop a read also waits for their work (parsing 32 answers,
        # writing 32 requests) on a busy machine; this one times only the
        # request and its answer.
        own = OwnReader(s)

        async def reader():
            c = Conn(s)
            while posting[0]:
                if not ids:
                    await asyncio.sleep(0.01)
                    continue
                t = time.monotonic()
                status, out = await c.request("GET", f"/api/v1/tasks/{ids[-1]}")
                gets.append((time.monotonic() - t) * 1000)
                if status != 200:
                    errors.append(f"GET {status} {out[:200]!r}")
                await asyncio.sleep(0.01)
            c.close()

        async def clients():
            await asyncio.gather(*[client() for _ in range(concurrency)])
            posting[0] = False

        t0 = time.monotonic()
        await asyncio.gather(clients(), reader())
        submit_wall = time.monotonic() - t0
        own_gets, own_errors = own.finish()
        errors += own_errors
        outcomes, left = await wait_all_ended(s, ids, timeout=7200)
        drain_wall = time.monotonic() - t0
        rss = s.rss_kib()
    finally:
        s.stop()
    return {"n": n, "concurrency": concurrency, "errors": len(errors),
            "first_errors": errors[:3], "p50": pct(lat, 50), "p99": pct(lat, 99),
            "gets": len(gets), "get_p50": pct(gets, 50), "get_p99": pct(gets, 99),
            "own_gets": len(own_gets), "own_get_p50": pct(own_gets, 50),
            "own_get_p99": pct(own_gets, 99),
            "rate": n / submit_wall, "submit_wall": submit_wall, "drain_wall": drain_wall,
            "outcomes": outcomes, "unfinished": len(left), "rss_mib": rss / 1024}


class OwnReader:
    """A process that reads the status of the newest task answered, every
    5 ms, on one keep-alive connection, until told to stop; its latencies
    come back at the end."""

    def __init__(self, server):
        import multiprocessing
        self.ours, theirs = multiprocessing.Pipe()
        self.proc = multiprocessing.Process(target=own_reader, args=(server.host, server.port,
                                                                     server.token, theirs))
        self.proc.start()

    def newest(self, task_id):
        self.ours.send(task_id)

    def finish(self):
        self.ours.send(None)
        gets, errors = self.ours.recv()
        self.proc.join()
        return gets, errors


def own_reader(host, port, token, pipe):
    import http.client
    conn = http.client.HTTPConnection(host, port)
    newest, gets, errors = None, [], []
    while True:
        stop = False
        while pipe.poll():
            got = pipe.recv()
            if got is None:
                stop = True
            else:
                newest = got
        if stop:
            break
        if newest is None:
            time.sleep(0.01)
            continue
        t = time.monotonic()
        conn.request("GET", f"/api/v1/tasks/{newest}", headers={"Authorization": f"Bearer {token}"})
        r = conn.getresponse()
        body = r.read()
        gets.append((time.monotonic() - t) * 1000)
        if r.status != 200:
            errors.append(f"GET {r.status} {body[:200]!r}")
        # Every 5 ms: the load lasts about a second, and a p99 needs a couple of hundred reads to be more
        # than the single worst one.
        time.sleep(0.005)
    conn.close()
    pipe.send((gets, errors))


# ---- memory ------------------------------------------------------------

async def phase_memory(loop_bin, held):
    script = ("turns:\n  - calls:\n      - {tool: run_command, args: {command: \"touch a.txt\"}}\n"
              "  - calls:\n      - {tool: finish, args: {summary: done}}\n")
    loopfile = ("exec:\n  approval_timeout_secs: 3600\n  rules:\n    - prefix: touch\n"
                "      decision: prompt\n      examples: [\"touch a.txt\"]\n")
    s = Server(loop_bin, {"README.md": "hi\n", "asks.yaml": script,
                          "Loopfile.yaml": loopfile}, held + 10)
    try:
        async def start(k):
            ids = []
            for _ in range(k):
                status, out = await json_call(s, "POST", "/api/v1/tasks", {
                    "instruction": "touch a", "checks": ["test -f a.txt"],
                    "model": "scripted:asks.yaml"})
                assert status == 201, (status, out)
                ids.append(out["id"])
            return ids

        async def all_waiting(ids):
            end = time.monotonic() + 600
            left = set(ids)
            while left and time.monotonic() < end:
                for tid in list(left):
                    _, out = await json_call(s, "GET", f"/api/v1/tasks/{tid}")
                    if out.get("state") == "awaiting_approval":
                        left.discard(tid)
                await asyncio.sleep(0.2)
            assert not left, f"{len(left)} never asked"

        await all_waiting(await start(1))
        await asyncio.sleep(2)
        one = s.rss_kib()
        await all_waiting(await start(held))
        await asyncio.sleep(2)
        many = s.rss_kib()
        threads = len(os.listdir(f"/proc/{s.proc.pid}/task"))
    finally:
        s.stop()
    return {"held": held, "one_mib": one / 1024, "many_mib": many / 1024,
            "per_task_kib": (many - one) / held, "threads": threads}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("loop")
    ap.add_argument("--phase", default="all", choices=["watch", "submit", "memory", "all"])
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--submissions", type=int, default=10000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--held", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=0, help="--jobs for the server (0: its default)")
    a = ap.parse_args()
    loop_bin = os.path.realpath(a.loop)
    if a.phase in ("watch", "all"):
        r = asyncio.run(phase_watch(loop_bin, a.clients, a.tasks, a.steps, a.jobs))
        print(f"| {r['clients']} streams over {r['tasks']} tasks | {r['errors']} | "
              f"{r['open_p50']:.0f} / {r['open_p99']:.0f} ms | "
              f"{r['delivered']} ({r['live']} live) | {r['p50']:.1f} ms | {r['p99']:.1f} ms | "
              f"{r['max']:.1f} ms | {r['wall']:.1f} s | {r['server_cpu']:.1f} s / {r['client_cpu']:.1f} s | "
              f"{r['rss_mib']:.1f} MiB |", flush=True)
    if a.phase in ("submit", "all"):
        r = asyncio.run(phase_submit(loop_bin, a.submissions, a.concurrency, a.jobs))
        print(f"| {r['n']} POSTs, {r['concurrency']} at a time | {r['errors']} "
              f"{r['first_errors'] or ''} | {r['rate']:.1f}/s | {r['p50']:.1f} ms | {r['p99']:.1f} ms | "
              f"GET {r['own_get_p50']:.1f} / {r['own_get_p99']:.1f} ms (in the posting loop "
              f"{r['get_p50']:.1f} / {r['get_p99']:.1f}) | "
              f"{r['submit_wall']:.0f} s | {r['drain_wall']:.0f} s | {r['outcomes']} "
              f"({r['unfinished']} unfinished) | {r['rss_mib']:.1f} MiB |", flush=True)
    if a.phase in ("memory", "all"):
        r = asyncio.run(phase_memory(loop_bin, a.held))
        print(f"| 1 task, then {r['held']} more waiting for approval | {r['one_mib']:.1f} MiB | "
              f"{r['many_mib']:.1f} MiB | {r['per_task_kib']:.0f} KiB | {r['threads']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
