"""The fan-out / join example of Storm's acker (workflows/fanout.xml; docs/references.md)."""
