"""Sphinx configuration of the cyborg documentation."""

project = 'cyborg'
copyright = 'cyborg contributors'
author = 'cyborg contributors'

extensions: list[str] = []

source_suffix = {'.rst': 'restructuredtext'}
root_doc = 'index'
exclude_patterns: list[str] = []
pygments_style = 'sphinx'

# No intersphinx or other network look-ups: the build works offline.
html_theme = 'alabaster'
html_static_path: list[str] = []
html_theme_options = {
    'description': 'Accelerator management for OpenStack clouds',
}
