"""Sphinx configuration of the cyborg release notes (built with reno)."""

project = 'cyborg release notes'
copyright = 'cyborg contributors'
author = 'cyborg contributors'

extensions = ['reno.sphinxext']

source_suffix = {'.rst': 'restructuredtext'}
root_doc = 'index'
exclude_patterns: list[str] = []
pygments_style = 'sphinx'

# No intersphinx or other network look-ups: the build works offline.
html_theme = 'alabaster'
html_static_path: list[str] = []
