"""Invoice lines and totals."""

from moneyfmt import format_cents


def line_total(quantity, unit_cents):
    return quantity * unit_cents


def invoice_total(lines):
    """Sum of quantity times unit price over (name, quantity, unit_cents) lines."""
    return sum(line_total(quantity, cents) for _, quantity, cents in lines)


def render(lines):
    rows = [name + ": " + format_cents(line_total(q, c)) for name, q, c in lines]
    rows.append("total: " + format_cents(invoice_total(lines)))
    return "\n".join(rows)
