import sys, unittest
sys.path.insert(0, ".")
import shop


class T(unittest.TestCase):
    def test_total(self):
        self.assertEqual(shop.total([(2.5, 2), (1, 3)]), 8)

    def test_tax(self):
        self.assertEqual(shop.total_with_tax([(10, 1)], 0.2), 12)
