"""Functional tests of the database layer against real databases."""
