"""How slow a page may get while the site is under load, for the tests that load it."""


def page_bound_under_load(alone_p95: float, floor: float = 1.0) -> float:
    """Seconds a page's p95 may take under load: under `floor` (a second), or, on a CPU slow enough
    that the page alone takes longer (a login's password hash), at most twice its time alone and
    a quarter second. On a machine where a login alone takes under 0.375 s the bound is the second."""
    return max(floor, 2 * alone_p95 + 0.25)
