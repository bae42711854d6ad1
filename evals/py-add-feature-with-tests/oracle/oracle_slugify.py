import re, unittest
from text import slugify

class Oracle(unittest.TestCase):
    def test_shape(self):
        for s in ["Hello World", "Ünïcode stays out", "--Lead and trail--", "MiXeD 42 Numbers", "", "!!!"]:
            out = slugify(s)
            self.assertRegex(out, r"^([a-z0-9]+(-[a-z0-9]+)*)?$", s)
        self.assertEqual(slugify("MiXeD 42 Numbers"), "mixed-42-numbers")
        self.assertEqual(slugify("--Lead and trail--"), "lead-and-trail")
        self.assertEqual(slugify("!!!"), "")
