"""Prometheus alert rules and a Grafana dashboard over cyborg's metrics,
installed with the package (see doc/source/admin/operating.rst)."""
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
# A Prometheus rule file (rule_files in prometheus.yml).
RULES = HERE / 'cyborg.rules.yml'
# A Grafana dashboard, to import (Dashboards > New > Import).
DASHBOARD = HERE / 'cyborg-dashboard.json'
