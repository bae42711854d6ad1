import subprocess, sys, unittest


class T(unittest.TestCase):
    def greet(self, name):
        return subprocess.run([sys.executable, "greet.py", name], capture_output=True, text=True).stdout.strip()

    def test_one_word(self):
        self.assertEqual(self.greet("Ada"), "hello, Ada")

    def test_two_words(self):
        self.assertEqual(self.greet("Grace Hopper"), "hello, Grace Hopper")
