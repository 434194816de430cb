"""The embedded demo (``nlg-demo``): tritonserver, the autoscaler and a Poisson load on one machine.

:mod:`autoscaler.demo.run` runs it, :mod:`autoscaler.demo.load` generates the Table 4.2 load,
:mod:`autoscaler.demo.plot` draws the result.
"""

from autoscaler.demo.run import main

__all__ = ["main"]
