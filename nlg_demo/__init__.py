"""The embedded demo (``nlg-demo``): tritonserver, the autoscaler and a Poisson load on one machine.

A package of its own, above the parts it puts together: it imports the autoscaler, the engine's
launcher and client, and the simulator's queries; none of them imports it.

:mod:`nlg_demo.run` runs it, :mod:`nlg_demo.load` generates the Table 4.2 load,
:mod:`nlg_demo.plot` draws the result.
"""

from nlg_demo.run import main

__all__ = ["main"]
