"""What runs inside a Spark task: the task driver (task.py), its collector, routing by grouping,
the message timeout, and the factory that builds a component."""
