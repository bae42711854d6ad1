"""Unit tests for todo.py. Protected: the agent may read them, never edit them."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TODO = os.path.join(ROOT, "todo.py")


def run(*args, cwd):
    return subprocess.run(
        [sys.executable, TODO, *args], cwd=cwd, capture_output=True, text=True
    )


class TodoTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def test_add_then_list(self):
        self.assertEqual(run("add", "buy milk", cwd=self.dir).returncode, 0)
        self.assertIn("1. [ ] buy milk", run("list", cwd=self.dir).stdout)

    def test_done_marks_the_right_task(self):
        run("add", "first", cwd=self.dir)
        run("add", "second", cwd=self.dir)
        self.assertEqual(run("done", "2", cwd=self.dir).returncode, 0)
        out = run("list", cwd=self.dir).stdout
        self.assertIn("1. [ ] first", out)
        self.assertIn("2. [x] second", out)

    def test_tasks_persist_as_json(self):
        run("add", "write report", cwd=self.dir)
        with open(os.path.join(self.dir, "tasks.json")) as f:
            self.assertEqual(json.load(f), [{"text": "write report", "done": False}])

    def test_done_out_of_range_fails_cleanly(self):
        result = run("done", "5", cwd=self.dir)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("no task 5", result.stderr)


if __name__ == "__main__":
    unittest.main()
