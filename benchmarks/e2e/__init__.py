"""End-to-end serving harness (issue 11): model directories, intermediate trees, the H200
runner, and the report. The model shapes it serves are records of ``benchmarks/shapes.py``;
see README.md beside this file for what each module does."""
