def total(items):
    s = 0
    for price, qty in items:
        s += price * qty
    return round(s, 2)


def total_with_tax(items, rate):
    s = 0
    for price, qty in items:
        s += price * qty
    return round(s * (1 + rate), 2)
