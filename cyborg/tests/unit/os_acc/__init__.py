"""Tests of cyborg.os_acc."""
