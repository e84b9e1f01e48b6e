"""kraftwerk's PySpark pipeline over the metadata logs of a fleet of clusters."""
