"""Workflow XML: parse (safe parse, schema, model building), check (graph checks with file and
line), write (model to XML). The schema, workflow.xsd, is package data here."""
