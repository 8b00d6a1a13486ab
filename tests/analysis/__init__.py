"""Tests of analysis/: probes, statistics, interventions."""
