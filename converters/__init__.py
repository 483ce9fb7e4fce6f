"""Built-in converters, one module per edge of the graph (see edgekit.converters.base.MANIFEST)."""
