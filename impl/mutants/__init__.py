"""Deliberately broken implementations: each must be caught by the suite (the kill matrix)."""
