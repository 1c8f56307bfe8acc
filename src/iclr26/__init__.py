"""iclr26: 19 ICLR 2026 papers as tested, reproducible library code.

Each paper lives in its own sub-package (``iclr26.<slug>``) and builds only on ``iclr26.core``.
``iclr26 list`` shows the registered reproductions; ``iclr26 run SLUG --scale small`` runs one.
"""

__version__ = "0.1.0"
