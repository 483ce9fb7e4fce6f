"""Built-in converters, one module per edge of the graph (see edgekit.registry.MANIFEST)."""
