"""Tests for invoice."""
from invoice import invoice_total, render


def test_invoice_total():
    assert invoice_total([("pen", 3, 150), ("book", 1, 1299)]) == 1749


def test_render():
    assert render([("pen", 3, 150)]) == "pen: $4.50\ntotal: $4.50"
    assert render([("tv", 1, 99900)]) == "tv: $999.00\ntotal: $999.00"
    assert render([("car", 1, 2500000)]) == "car: $25,000.00\ntotal: $25,000.00"
    assert render([]) == "total: $0.00"
    assert render([("refund", 1, -5)]) == "refund: -$0.05\ntotal: -$0.05"
