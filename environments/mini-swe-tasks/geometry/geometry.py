"""Points in the plane: distances, nearest points, centroids."""

from vecmath import add, norm_sq, scale, sub


def distance_sq(p, q):
    return norm_sq(sub(p, q))


def closest(points, target):
    """The point nearest to target (the first one on ties)."""
    best = None
    for point in points:
        if best is None or distance_sq(point, target) < distance_sq(best, target):
            best = point
    return best


def centroid(points):
    total = (0, 0)
    for point in points:
        total = add(total, point)
    return scale(total, 1 / len(points))
