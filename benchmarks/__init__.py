"""The measurements behind the reports in this folder (each report names its machine and command).

Each module is a command run from the repository root, ``python -m benchmarks.<name>``;
:mod:`benchmarks.harness` holds what their command lines share. The package is not installed: the
benchmarks read and write the repository's files (model_repository/, benchmarks/results/).
"""
