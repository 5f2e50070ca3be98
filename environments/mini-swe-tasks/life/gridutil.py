"""Neighbourhoods in rectangular grids."""


def in_bounds(row, col, height, width):
    return 0 <= row < height and 0 <= col < width


def neighbours(row, col, height, width):
    """The up to 8 cells around (row, col) inside the grid, row by row."""
    cells = []
    for dr in (-1, 0, 1):
        for dc in (-1, 0, 1):
            if (dr or dc) and in_bounds(row + dr, col + dc, height, width):
                cells.append((row + dr, col + dc))
    return cells
