"""SPU: run the Science Prediction Universe benchmark.

Importing ``spu`` stays light: no ray, mlflow or docker at import time. Each stage
lives in its own subpackage (tasks, sandbox, harness, grading, tracking, cost, stats,
report) and imports only the stages before it and :mod:`spu.schema`.
"""

__version__ = "0.1.0"
