"""Setuptools shim: all metadata lives in pyproject.toml and setup.cfg."""
import setuptools

setuptools.setup()
