import unittest
import shop


def was_total(items):
    return round(sum(p * q for p, q in items), 2)


def was_tax(items, rate):
    return round(sum(p * q for p, q in items) * (1 + rate), 2)


class Oracle(unittest.TestCase):
    def test_same_results(self):
        carts = [[], [(0.1, 3)], [(19.99, 2), (0.01, 7)], [(3.333, 3), (1, 0)]]
        for c in carts:
            self.assertEqual(shop.total(c), was_total(c), c)
            for r in (0, 0.075, 0.2):
                self.assertEqual(shop.total_with_tax(c, r), was_tax(c, r), (c, r))
        self.assertTrue(callable(shop.line_sum))
