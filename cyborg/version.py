"""The installed cyborg version."""
from importlib import metadata


def version_string() -> str:
    try:
        return metadata.version('cyborg')
    except metadata.PackageNotFoundError:
        return 'unknown'


# What oslo.reports' Guru Meditation Report shows in its Package section
# (oslo_reports.generators.version.PackageReportGenerator reads these).
def vendor_string() -> str:
    return 'OpenStack'


def product_string() -> str:
    return 'cyborg'


def version_string_with_package() -> str:
    return version_string()
