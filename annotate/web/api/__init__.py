"""The labeling side's REST API: pool, annotations, imports and exports, with object-level permissions."""
