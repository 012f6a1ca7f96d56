"""Scripts that start the command line from another program's process: `spark_submit.py`,
the main file spark-submit runs (`recovery launcher` prints its path)."""
