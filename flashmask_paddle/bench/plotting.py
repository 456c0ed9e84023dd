"""matplotlib set-up shared by the benchmark charts: headless backend, one way to write a PNG."""
from __future__ import annotations


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (benchmarks run without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path, dpi: int) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
