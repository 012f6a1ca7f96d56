"""Plain data, no Spark and no Redis: the workflow model, configuration properties, the graph,
recovery synthesis, drawings, RunSpec; xml/ reads, checks and writes workflow files."""
