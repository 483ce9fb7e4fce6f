"""The ptl target: its runner, inspector, latency opener (named in edgekit.targets.TARGETS)."""
