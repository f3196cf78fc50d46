"""End-to-end serving harness (issue 11): model directories, intermediate trees, the H200
runner, and the report. Each module is also a script; see README.md beside this file."""
