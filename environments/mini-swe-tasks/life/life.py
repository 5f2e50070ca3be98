"""Conway's Game of Life on a bounded grid of 0/1 cells."""

from gridutil import neighbours


def live_neighbours(grid, row, col):
    height, width = len(grid), len(grid[0])
    return sum(grid[r][c] for r, c in neighbours(row, col, height, width))


def step(grid):
    new = []
    for row in range(len(grid)):
        new_row = []
        for col in range(len(grid[0])):
            n = live_neighbours(grid, row, col)
            alive = n == 3 or (grid[row][col] == 1 and n == 2)
            new_row.append(1 if alive else 0)
        new.append(new_row)
    return new
