import unittest
import calc

class Oracle(unittest.TestCase):
    def test_add_everywhere(self):
        for a, b in [(2, 3), (-1, 1), (0.5, 0.25), (10**20, 1), (-7, -8)]:
            self.assertEqual(calc.add(a, b), a + b)

if __name__ == "__main__":
    unittest.main()
