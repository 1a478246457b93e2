"""Project-specific flake8 checks, run by ``tox -e pep8``."""
