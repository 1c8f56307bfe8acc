"""Generic building blocks shared by two or more papers (nothing paper-specific lives here)."""
