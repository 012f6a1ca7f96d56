"""Workflow XML: parse (reading a workflow file: the safe parse and schema in document, the
model in build, its graph checks with file and line in check), write (model to XML). The
schema, workflow.xsd, is package data here."""
