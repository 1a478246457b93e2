"""The installed cyborg version."""
from importlib import metadata


def version_string() -> str:
    try:
        return metadata.version('cyborg')
    except metadata.PackageNotFoundError:
        return 'unknown'
