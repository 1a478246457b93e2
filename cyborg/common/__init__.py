"""Pieces shared by every cyborg service."""
